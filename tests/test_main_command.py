"""``foldgate run`` on a machine with nothing configured: embedded Redis, the overnight demo through the real
pipeline, and a history that survives a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def foldgate(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FOLDGATE_", "REDIS"))}
    env.update(FOLDGATE_HOME=str(home), FOLDGATE_CONFIG=str(ROOT / "config.yaml"))
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], cwd=home.parent, env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_run_shows_hygiene_and_archive_recovery_then_keeps_the_history_across_a_restart(tmp_path):
    home = tmp_path / "home"
    first = foldgate(home, "run", stdin="what did aiko decide about the rollback?\n")
    assert first.returncode == 0, first.stderr
    assert "embedded Redis" in first.stdout
    assert "hygiene compaction" in first.stdout  # the overnight backlog crossed 85%
    replies = [block.split("you>")[0] for block in first.stdout.split("bot> ")[1:]]
    assert "9f3c2ab71d" in replies[0]  # the morning answer came back out of the archive
    assert "🔧 session_search" in replies[1] and "fix forward" in replies[1]  # the terminal chat streams: the tool, then the answer

    second = foldgate(home, "run", "--demo")
    assert second.returncode == 0, second.stderr
    assert "Replaying" not in second.stdout  # the stored history is still there, so the demo is not replayed
    found = foldgate(home, "search", "local:terminal", "rollback billing columns")
    assert found.returncode == 0 and "fix forward" in found.stdout


def test_dev_passes_any_other_subcommand_to_foldgate():
    done = subprocess.run(["./dev", "config", "check"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("FOLDGATE_")})
    assert done.returncode == 0, done.stderr
    assert "config OK" in done.stdout
    bare = subprocess.run(["./dev"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and "./dev <any foldgate command>" in bare.stderr


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "/quit", "Ctrl-D"])
def test_the_terminal_chat_ends_at_once_however_it_is_quit(tmp_path, how):
    import signal
    import time

    home = tmp_path / "home"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FOLDGATE_", "REDIS"))}
    env.update(FOLDGATE_HOME=str(home), FOLDGATE_CONFIG=str(ROOT / "config.yaml"))
    process = subprocess.Popen([sys.executable, "-m", "gateway.cli", "run"], cwd=tmp_path, env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = ""
        while "you> " not in seen:  # the demo has played and the chat waits for input
            chunk = process.stdout.read(1)
            assert chunk, process.stderr.read()
            seen += chunk
        asked = time.monotonic()
        if how in ("SIGINT", "SIGTERM"):
            process.send_signal(getattr(signal, how))
        elif how == "/quit":
            process.stdin.write("/quit\n")
            process.stdin.flush()
        else:
            process.stdin.close()
        process.wait(timeout=10)
        assert time.monotonic() - asked < 5  # no Enter needed, nothing left hanging
        assert process.returncode == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
