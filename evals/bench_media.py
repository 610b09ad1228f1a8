"""``foldgate bench media``: a gateway process's peak memory under a flood of documents, and what images cost in tokens.

*Flood.* One gateway process (``foldgate run``'s wiring, :func:`gateway.run.assembly.open_gateway`, with
the real Telegram adapter polling the fake Bot API of tests/fakes/bot_api.py, the offline ``local``
model, real Redis) runs as a child process, so its memory is its own. Every chat first sends a
text message and a small document (the warm-up: sessions created, every code path imported and
run once); the child's resident set is then read and its high-water mark reset (``/proc/self/clear_refs``).
Then every chat sends a 20 MB document at the same moment — served by the fake as zeros made as
they are sent, so the fake holds none of them — and the child's peak resident set (the kernel's
``VmHWM``, plus a 20 ms sampler as a cross-check) is read once every chat was answered. The same
flood runs in a fresh child for each ``media.max_bytes_in_flight`` compared, side by side: the
default (4 × ``media.max_bytes``) and one raised so far it never binds. The documents are
``.zip`` files, which are stored and described but not read, so what is measured is the
download and the store, not a parser. Each variant's chats are deleted from Redis afterwards.

*Image tokens.* What ten image sizes cost by each provider's published rule, as
:mod:`agent.tokens` computes it (``openai_image_tokens``: high detail, 170 per 512 px tile + 85
after fitting into 2048 and scaling the short side to 768; ``anthropic_image_tokens``:
``w × h / 750`` after fitting the long side to 1568, about 1,600 at most), beside the figures the
providers publish for the sizes they give examples of.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.child_process import MeasuredChild
from evals.report import progress, publish

MB = 1024 * 1024
CHATS = 100
DOCUMENT_BYTES = 20 * MB
WARM_DOCUMENT_BYTES = 256 * 1024
#: ``media.max_bytes_in_flight`` values compared; None is the default (4 × media.max_bytes).
BOUNDS: tuple[int | None, ...] = (None, 100 * 20 * MB)
TOKEN = "123456789:bench-media-token"
FIRST_CHAT = 7_000_000
SAMPLE_SECONDS = 0.02
FLOOD_TIMEOUT = 900.0

#: Image sizes and the token figures the providers publish for them (None: no published example).
#: OpenAI: platform.openai.com/docs/guides/images-vision ("calculating costs", high detail).
#: Anthropic: docs.anthropic.com/en/docs/build-with-claude/vision ("calculate image costs": its table
#: of approximate tokens, and the largest sizes per aspect ratio that are not resized, ~1,600 each).
IMAGE_SIZES: tuple[tuple[int, int, int | None, int | None], ...] = (
    (200, 200, None, 54),
    (512, 512, None, None),
    (1000, 1000, None, 1334),
    (1024, 1024, 765, None),
    (1092, 1092, None, 1590),
    (951, 1268, None, 1600),
    (784, 1568, None, 1600),
    (1920, 1080, None, None),
    (4032, 3024, None, None),
    (2048, 4096, 1105, None),
)
#: Anthropic publishes "approximately": a computed figure within this share of its published one agrees.
ANTHROPIC_TOLERANCE = 0.01


# --------------------------------------------------------------------------- image tokens


def image_token_rows() -> list[dict[str, Any]]:
    """Each size's tokens by both rules, the published figure beside it and whether they agree."""
    from agent.tokens import anthropic_image_tokens, openai_image_tokens

    rows = []
    for width, height, openai_published, anthropic_published in IMAGE_SIZES:
        openai, anthropic = openai_image_tokens(width, height), anthropic_image_tokens(width, height)
        rows.append(
            {
                "width": width,
                "height": height,
                "openai": openai,
                "openai_published": openai_published,
                "openai_agrees": None if openai_published is None else openai == openai_published,
                "anthropic": anthropic,
                "anthropic_published": anthropic_published,
                "anthropic_agrees": (
                    None
                    if anthropic_published is None
                    else abs(anthropic - anthropic_published) <= ANTHROPIC_TOLERANCE * anthropic_published
                ),
            }
        )
    return rows


# --------------------------------------------------------------------------- the gateway child


def _memory_kb(field: str) -> int:
    """One ``/proc/self/status`` figure in kB (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class RssSampler:
    """The process's resident set every ``SAMPLE_SECONDS`` in a thread: a cross-check of the kernel's mark."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> None:
        self.peak_kb = _memory_kb("VmRSS")
        self._thread.start()

    def reset(self) -> None:
        self.peak_kb = _memory_kb("VmRSS")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.peak_kb = max(self.peak_kb, _memory_kb("VmRSS"))


def _reset_peak() -> bool:
    """Reset the kernel's high-water mark of this process's resident set; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def _gateway_child(config: Mapping[str, Any]) -> None:
    """The measured process: a gateway on the fake Bot API; answers ``mark``, ``report`` and ``stop`` on stdin."""
    from gateway.config import Settings
    from gateway.platforms.telegram import TelegramAdapter
    from gateway.run.assembly import open_gateway

    settings = Settings(
        redis={"url": config["redis_url"], "key_prefix": config["prefix"]},
        model={"provider": "local"},
        platforms={
            "local": {"enabled": False},
            "telegram": {"enabled": True, "token": TOKEN, "api_server": config["api_server"]},
        },
        gateway={"home": config["home"]},
        delivery={"stream_replies": False},
        media={"max_bytes_in_flight": config["bound"]},
    )
    adapter = TelegramAdapter.from_settings(settings)
    gateway = await open_gateway(settings, {"tg": adapter})
    sampler = RssSampler()
    loop = asyncio.get_running_loop()
    try:
        await adapter.start(gateway.runner.intake)
        sampler.start()
        _say(
            ready=True,
            rss_kb=_memory_kb("VmRSS"),
            max_concurrent_chats=settings.gateway.max_concurrent_chats,
            max_bytes=settings.media.max_bytes,
            bytes_in_flight=settings.media.bytes_in_flight,
        )
        while (command := (await loop.run_in_executor(None, sys.stdin.readline)).strip()) != "stop":
            if command == "mark":
                await gateway.runner.wait_idle(timeout=60)
                reset = _reset_peak()
                sampler.reset()
                _say(marked=True, rss_kb=_memory_kb("VmRSS"), hwm_reset=reset)
            elif command == "report":
                _say(
                    reported=True,
                    rss_kb=_memory_kb("VmRSS"),
                    hwm_kb=_memory_kb("VmHWM"),
                    sampled_peak_kb=sampler.peak_kb,
                )
            elif not command:  # the parent went away
                break
    finally:
        sampler.stop()
        await gateway.close(grace_seconds=5)


# --------------------------------------------------------------------------- the flood


def _sent_counts(api: Any) -> dict[str, int]:
    """Messages the bot sent, by chat."""
    return Counter(sent.chat_id for sent in api.sent)


def _answered(api: Any, chats: Sequence[int], before: Mapping[str, int]) -> bool:
    """Whether every chat got a message since ``before`` was counted."""
    counts = _sent_counts(api)
    return all(counts.get(str(chat), 0) > before.get(str(chat), 0) for chat in chats)


async def flood_once(redis_url: str, bound: int | None, chats: int, size: int, warm_size: int) -> dict[str, Any]:
    """One child gateway, warmed up, then every chat sending a ``size``-byte document at once."""
    from tests.fakes.bot_api import FakeBotAPI

    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    ids = [FIRST_CHAT + number for number in range(chats)]
    with tempfile.TemporaryDirectory(prefix="fg-bench-", ignore_cleanup_errors=True) as home:
        async with FakeBotAPI(TOKEN) as api:
            child = MeasuredChild(
                "evals.bench_media",
                "--gateway",
                {"redis_url": redis_url, "prefix": prefix, "api_server": api.base_url, "home": home, "bound": bound},
            )
            try:
                ready = await child.ask()
                api.push(*(api.private_message(chat, "hello, files are coming") for chat in ids))
                await api.wait_until(lambda: _answered(api, ids, {}), timeout=FLOOD_TIMEOUT)
                before = _sent_counts(api)
                api.push(
                    *(
                        api.document_message(
                            chat, chat, size=warm_size, file_name=f"warm-{chat}.zip", mime_type="application/zip"
                        )
                        for chat in ids
                    )
                )
                await api.wait_until(lambda: _answered(api, ids, before), timeout=FLOOD_TIMEOUT)
                marked = await child.ask("mark")
                before = _sent_counts(api)
                started = time.perf_counter()
                api.push(
                    *(
                        api.document_message(
                            chat, chat, size=size, file_name=f"logs-{chat}.zip", mime_type="application/zip"
                        )
                        for chat in ids
                    )
                )
                await api.wait_until(lambda: _answered(api, ids, before), timeout=FLOOD_TIMEOUT)
                seconds = time.perf_counter() - started
                report = await child.ask("report")
                downloads = len(api.downloads)
            finally:
                child.stop()
            await _drop_prefix(redis_url, prefix)
    warm_kb, peak_kb = marked["rss_kb"], report["hwm_kb"] if marked["hwm_reset"] else report["sampled_peak_kb"]
    return {
        "max_bytes_in_flight": ready["bytes_in_flight"],
        "configured": "default, 4 × media.max_bytes" if bound is None else "raised",
        "max_bytes": ready["max_bytes"],
        "max_concurrent_chats": ready["max_concurrent_chats"],
        "chats": chats,
        "document_bytes": size,
        "downloads": downloads,
        "rss_at_start_mb": round(ready["rss_kb"] / 1024, 1),
        "warm_rss_mb": round(warm_kb / 1024, 1),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "peak_over_warm_mb": round((peak_kb - warm_kb) / 1024, 1),
        "sampled_peak_over_warm_mb": round((report["sampled_peak_kb"] - warm_kb) / 1024, 1),
        "peak_measured_by": "VmHWM (reset after warm-up)" if marked["hwm_reset"] else "20 ms sampler",
        "rss_after_mb": round(report["rss_kb"] / 1024, 1),
        "seconds_to_answer_all": round(seconds, 2),
    }


async def _drop_prefix(redis_url: str, prefix: str) -> None:
    from redis.asyncio import Redis

    from gateway.store.keys import every_key_pattern

    client = Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=every_key_pattern(prefix), count=1000)]
        for start in range(0, len(keys), 200):
            await client.delete(*keys[start : start + 200])
    finally:
        await client.aclose()


async def measure(
    chats: int = CHATS,
    size: int = DOCUMENT_BYTES,
    bounds: Sequence[int | None] = BOUNDS,
    warm_size: int = WARM_DOCUMENT_BYTES,
    redis_url: str | None = None,
) -> dict[str, Any]:
    """The flood for each bound, then the image tokens; ``redis_url`` None picks 127.0.0.1:6379 when it
    answers, else (and for "") an embedded server started here for the run."""
    from evals.bench_throughput import describe_redis, local_redis_url
    from gateway.server.lifecycle import connect_or_embed

    url = await local_redis_url() if redis_url is None else redis_url
    with tempfile.TemporaryDirectory(prefix="fg-bench-redis-", ignore_cleanup_errors=True) as home:
        client, embedded = (None, None) if url else await connect_or_embed(None, Path(home))
        try:
            serving = url or (embedded.url if embedded is not None else "")
            floods = []
            with progress(len(bounds), "variant", "bench media") as bar:
                for bound in bounds:
                    bar.update(len(floods), note=f"max_bytes_in_flight {bound or 'default'}")
                    floods.append(await flood_once(serving, bound, chats, size, warm_size))
                bar.update(len(floods), note="")
        finally:
            if client is not None:
                await client.aclose()
            if embedded is not None:
                await embedded.stop()
    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "redis": describe_redis(url),
        "flood": floods,
        "image_tokens": image_token_rows(),
    }


# --------------------------------------------------------------------------- the report


def _published(value: int | None, agrees: bool | None) -> str:
    return "—" if value is None else f"{value:,} ({'agrees' if agrees else 'DIFFERS'})"


def markdown(result: Mapping[str, Any]) -> str:
    floods = result["flood"]
    first = floods[0]
    lines = [
        f"Peak memory of one gateway process while {first['chats']} Telegram chats each send a "
        f"{first['document_bytes'] / MB:g} MB document at once (real Telegram adapter on the fake Bot API, offline "
        f"model, Redis {result['redis']}; gateway.max_concurrent_chats {first['max_concurrent_chats']}; "
        f"{result['measured_at']}, {result['machine']['cpus']} CPUs, Python {result['machine']['python']}).",
        "",
        "| media.max_bytes_in_flight | warmed-up RSS | peak RSS | peak over warm | (20 ms sampler) | all answered in |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for flood in floods:
        lines.append(
            f"| {flood['max_bytes_in_flight'] / MB:,.0f} MB ({flood['configured']}) | {flood['warm_rss_mb']:,.1f} MB | "
            f"{flood['peak_rss_mb']:,.1f} MB | **{flood['peak_over_warm_mb']:,.1f} MB** | "
            f"{flood['sampled_peak_over_warm_mb']:,.1f} MB | {flood['seconds_to_answer_all']:,.1f} s |"
        )
    lines += [
        "",
        f"Peak: {first['peak_measured_by']}. Warm-up: every chat sent a text and a small document first.",
        "",
        "Image tokens by each provider's published rule (agent.tokens), beside the figures the providers publish.",
        "",
        "| image | OpenAI (high detail) | OpenAI published | Anthropic | Anthropic published (approx.) |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in result["image_tokens"]:
        lines.append(
            f"| {row['width']}×{row['height']} | {row['openai']:,} | "
            f"{_published(row['openai_published'], row['openai_agrees'])} | {row['anthropic']:,} | "
            f"{_published(row['anthropic_published'], row['anthropic_agrees'])} |"
        )
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    publish(out_dir, "bench_media", result, markdown(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--gateway":
        asyncio.run(_gateway_child(json.loads(sys.argv[2])))
        sys.exit(0)
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
