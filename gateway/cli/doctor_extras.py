"""The doctor's rows that appear only when configured: the transcription endpoint (voice is transcribed) and
each enabled MCP server.

Each reaches its service the way a turn would — the same transcription client, the same MCP server start —
within the doctor's deadlines, and says in its row what a person sending messages would get of it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.cli.doctor_check import PROVIDER_TIMEOUT, Check
from gateway.config import PROVIDER_KEY_ENV, Settings
from gateway.startup_errors import one_line, setting_label

if TYPE_CHECKING:
    from agent.tools.mcp import Listed

#: The clip the transcription check sends: half a second of silence (OpenAI refuses clips under 0.1 s).
PROBE_SECONDS = 0.5
PROBE_RATE = 8000


def silent_wav(seconds: float = PROBE_SECONDS, rate: int = PROBE_RATE) -> bytes:
    """A mono 16-bit WAV of silence: audio every transcription server reads, a few kilobytes long."""
    import io
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(rate)
        clip.writeframes(bytes(2 * int(rate * seconds)))
    return out.getvalue()


def _transcription_setting(status: int | None, said: str) -> str:
    """The key a failed transcription check points at: the model it names, the key it refused, else the URL."""
    if status is not None and "model" in said.lower():
        return "media.transcription.model"
    if status in (401, 403):
        return "media.transcription.api_key"
    return "media.transcription.base_url"


async def check_transcription(settings: Settings) -> Check:
    """Transcribe half a second of silence through the same client a voice message takes: the endpoint is
    reachable, takes the key and knows the model (it costs the provider's price of half a second)."""
    import httpx

    from gateway.media.errors import TranscriptionError
    from gateway.media.transcribe import Transcriber

    configured = settings.media.transcription
    if configured.provider == "off":
        return Check("transcription", "skipped", "media.transcription.provider is off")
    probe = configured.model_copy(update={"timeout_seconds": min(configured.timeout_seconds, PROVIDER_TIMEOUT)})
    statuses: list[int] = []

    async def seen(response: httpx.Response) -> None:
        statuses.append(response.status_code)

    where = probe.endpoint
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(probe.timeout_seconds), event_hooks={"response": [seen]}
    ) as client:
        transcriber = Transcriber(probe, client=client)
        try:
            async with asyncio.timeout(PROVIDER_TIMEOUT + 1):
                await transcriber.transcribe(silent_wav(), name="foldgate-doctor.wav", mime="audio/wav")
        except TranscriptionError as error:
            status = statuses[-1] if statuses else None
            key = _transcription_setting(status, str(error))
            label = setting_label(key)
            conventional = PROVIDER_KEY_ENV.get(configured.provider, "")
            if key.endswith("api_key") and label == key and conventional and os.environ.get(conventional):
                label = f"{key} (from {conventional})"
            hint = (
                ""
                if status is not None
                else " — check media.transcription.base_url, the network, and HTTPS_PROXY if this network needs a proxy"
            )
            return Check("transcription", "FAIL", f"{label}: {one_line(error)} ({where}){hint}")
        except TimeoutError:
            return Check(
                "transcription",
                "FAIL",
                f"{setting_label('media.transcription.base_url')}: no answer from "
                f"{where} within {PROVIDER_TIMEOUT:g} s",
            )
    return Check("transcription", "ok", f"{probe.model} at {where} transcribed a {PROBE_SECONDS:g} s test clip")


#: Tool names one server's row shows before it says how many more there are.
MCP_TOOLS_SHOWN = 8


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MCP_TOOLS_SHOWN])
    return shown + (f" and {len(names) - MCP_TOOLS_SHOWN} more" if len(names) > MCP_TOOLS_SHOWN else "")


async def check_mcp_server(name: str, settings: Settings) -> Check:
    """Start one MCP server as a turn would, list its tools, and stop it: what the model is offered of it, and
    what is held back (by policy, or for a schema no provider takes)."""
    from agent.tools.mcp import CONNECT_TIMEOUT, McpServer, ServerDown

    row, key = f"mcp {name}", f"tools.mcp_servers.{name}"
    server = McpServer(settings.tools.mcp_servers[name].spec(name, os.environ))
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT + 5):
            listed = await server.tools()
    except ServerDown:
        return Check(row, "FAIL", f"{setting_label(key)}: {server.failure}")
    except TimeoutError:
        return Check(row, "FAIL", f"{setting_label(key)}: no answer within {CONNECT_TIMEOUT + 5:g} s")
    finally:
        await server.aclose()
    parts = _tool_lines(key, _by_kind(listed))
    if not any(name in rule.servers for rule in settings.tools.allow):
        parts.append("no chat may use it yet (tools.allow)")
    return Check(row, "ok", "; ".join(parts))


#: What the row says of each kind of tool held back from the model, after those offered (``{key}``: the server's).
HELD_BACK = {
    "asking": "asking the person first: {names}",
    "denied": "denied by policy (set {key}.tools to allow): {names}",
    "broken": "left out, input schema unusable: {names}",
}


def _kind(listed: Listed) -> str | None:
    """How a listed tool reaches the model: offered, asking first, denied by policy, or broken (a schema no
    provider takes; a denied tool is denied whatever its schema)."""
    if listed.policy == "deny":
        return "denied"
    if listed.problem:
        return "broken"
    return {"auto": "offered", "ask": "asking"}.get(listed.policy)


def _by_kind(listed: Sequence[Listed]) -> dict[str, list[str]]:
    """The tool names of each kind, in the listing's order (every kind present, perhaps empty)."""
    kinds: dict[str, list[str]] = {"offered": [], **{kind: [] for kind in HELD_BACK}}
    for each in listed:
        kind = _kind(each)
        if kind is not None:
            kinds[kind].append(each.tool.name)
    return kinds


def _tool_lines(key: str, kinds: dict[str, list[str]]) -> list[str]:
    """How many tools are offered (and which), then each kind held back that has any."""
    offered = kinds["offered"]
    lines = [
        f"{len(offered)} tool{'s' if len(offered) != 1 else ''} offered" + (f": {_names(offered)}" if offered else "")
    ]
    lines += [line.format(key=key, names=_names(kinds[kind])) for kind, line in HELD_BACK.items() if kinds[kind]]
    return lines
