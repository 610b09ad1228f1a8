"""``foldgate`` on its real command line, in a child process, as a person at a terminal runs it: the config files
it is given, the environment it starts in, and what it leaves running afterwards.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

#: Runs the real CLI with discord.py's REST base pointed elsewhere (as the ``discord_api`` fixture does in-process).
DISCORD_AT = (
    "import sys, discord.http; discord.http.Route.BASE = sys.argv.pop(1); "
    "from gateway.cli import main; sys.exit(main())"
)
#: Variables of the machine running the tests that would change what the child reads.
FOREIGN = ("FOLDGATE_", "REDIS", "TELEGRAM_", "DISCORD_", "OPENAI_", "ANTHROPIC_", "OPENROUTER_")


def closed_port() -> int:
    """A loopback port nothing listens on (bound once to pick it, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def foldgate(
    tmp_path: Path,
    config: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    discord_base: str | None = None,
    stdin: str | None = "",
    timeout: float = 120,
) -> tuple[int, str]:
    """Run ``foldgate <args> --config <file with config>`` in a child; (exit status, stdout + stderr).

    ``stdin`` is written and then closed (the terminal chat reads EOF); None keeps it open and empty,
    as a person at the terminal who has not typed yet."""
    path = tmp_path / "config.yaml"
    path.write_text(config)
    environ = {key: value for key, value in os.environ.items() if not key.startswith(FOREIGN)}
    environ.update(FOLDGATE_HOME=str(tmp_path / "home"), **(env or {}))
    command = (
        [sys.executable, "-m", "gateway.cli"]
        if discord_base is None
        else [sys.executable, "-c", DISCORD_AT, discord_base]
    )
    child = await asyncio.create_subprocess_exec(
        *command,
        *args,
        "--config",
        str(path),
        cwd=tmp_path,
        env=environ,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        if stdin is None:
            assert child.stdout is not None and child.stderr is not None
            out, err, _ = await asyncio.wait_for(
                asyncio.gather(child.stdout.read(), child.stderr.read(), child.wait()), timeout
            )
        else:
            out, err = await asyncio.wait_for(child.communicate(stdin.encode()), timeout)
    except TimeoutError:
        child.kill()
        await child.wait()
        raise
    finally:
        if child.stdin is not None and not child.stdin.is_closing():
            child.stdin.close()
    assert child.returncode is not None
    return child.returncode, out.decode() + err.decode()


def leftover_servers(home: Path) -> list[str]:
    """Command lines of processes still running with files under ``home`` (an embedded Redis left behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(home) in command:
                found.append(command)
    return found


TELEGRAM = """\
platforms:
  local: {{enabled: false}}
  telegram: {{enabled: true, api_server: "{api}"}}
"""
DISCORD = """\
platforms:
  local: {enabled: false}
  discord: {enabled: true}
"""
#: The terminal chat on as well: none of it (the banner, the demo or "Resumed…", the prompt) may come before
#: a platform's failure, nor may a retry's log line.
TELEGRAM_AND_TERMINAL = TELEGRAM.replace("local: {{enabled: false}}", "local: {{enabled: true}}")
DISCORD_AND_TERMINAL = DISCORD.replace("local: {enabled: false}", "local: {enabled: true}")
#: Seconds a child that must fail at start may run before the test gives it up as hung: far past the 8 s the
#: platforms allow themselves, so a busy machine never reaches it, and short of the minutes a connect to a
#: silent address takes when nothing bounds it.
PATIENCE = 60.0


def config_file(tmp_path: Path, redis_url: str = "", prefix: str = "fg") -> Path:
    """A ``config.yaml`` in ``tmp_path`` for the offline commands: the Redis to use and a home of the test's own."""
    path = tmp_path / "config.yaml"
    path.write_text(f"redis:\n  url: '{redis_url}'\n  key_prefix: {prefix}\ngateway:\n  home: {tmp_path / 'home'}\n")
    return path
