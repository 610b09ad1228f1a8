"""``foldgate run`` on a machine with nothing configured: embedded Redis, the overnight demo through the real
pipeline, and a history that survives a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.run.signals import TERM_GRACE_SECONDS
from tests.fakes.paths import REPO

ROOT = REPO
#: Seconds a chat that was quit may take to end before the test gives it up as hung. No stopwatch: a busy
#: machine takes what it takes. Half the SIGTERM grace, and under the 60 s foldgate waits for a last answer,
#: so an end within it waited for neither; a chat waiting for an Enter that never comes does not end at all.
PATIENCE = TERM_GRACE_SECONDS / 2


def foldgate(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FOLDGATE_", "REDIS"))}
    env.update(FOLDGATE_HOME=str(home), FOLDGATE_CONFIG=str(ROOT / "config.yaml"))
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=home.parent,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_run_shows_hygiene_and_archive_recovery_then_keeps_the_history_across_a_restart(tmp_path):
    home = tmp_path / "home"
    first = foldgate(home, "run", stdin="what did aiko decide about the rollback?\n")
    assert first.returncode == 0, first.stderr
    assert "embedded Redis" in first.stdout
    assert "⋯ working on a reply" in first.stdout and "\r" not in first.stdout  # a pipe gets plain lines
    assert "hygiene compaction" in first.stdout  # the overnight backlog crossed 85%
    replies = [block.split("you>")[0] for block in first.stdout.split("bot> ")[1:]]
    assert "9f3c2ab71d" in replies[0]  # the morning answer came back out of the archive
    assert (
        "🔧 session_search" in replies[1] and "fix forward" in replies[1]
    )  # the terminal chat streams: the tool, then the answer

    second = foldgate(home, "run")  # stdin at its end: the chat opens, says where it stands, and closes
    assert second.returncode == 0, second.stderr
    assert "Replaying" not in second.stdout  # the stored history is kept, so the demo is not replayed over it
    assert "Resumed this chat's conversation: session" in second.stdout and "last activity 20" in second.stdout
    found = foldgate(home, "search", "local:terminal", "rollback billing columns")
    assert found.returncode == 0 and "fix forward" in found.stdout


def test_the_demo_plays_in_full_every_time_and_leaves_the_users_gateway_alone(tmp_path):
    """``./dev run --demo`` twice in a row, as the README has a newcomer do it."""
    home = tmp_path / "home"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FOLDGATE_", "REDIS"))}
    for _ in range(2):
        demo = subprocess.run(
            ["./dev", "run", "--demo"],
            cwd=ROOT,
            env={**env, "FOLDGATE_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert demo.returncode == 0, demo.stderr
        assert "Replaying an overnight team chat" in demo.stdout and "hygiene compaction" in demo.stdout
        assert "9f3c2ab71d" in demo.stdout.split("bot> ")[1]
        assert "the demo ran in a throwaway gateway, now removed" in demo.stdout
    assert not (home / "redis").exists()  # the user's home never got a server or data


def test_dev_passes_any_other_subcommand_to_foldgate():
    done = subprocess.run(
        ["./dev", "config", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("FOLDGATE_")},
    )
    assert done.returncode == 0, done.stderr
    assert "config OK" in done.stdout
    bare = subprocess.run(["./dev"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and "./dev <any foldgate command>" in bare.stderr


@pytest.mark.parametrize("how", ["Ctrl-C", "SIGTERM", "/quit", "Ctrl-D"])
def test_the_terminal_chat_ends_at_once_however_it_is_quit(tmp_path, how):
    """Driven in a pseudo-terminal, as a person uses it: each way out ends foldgate, exit code 0, without an Enter
    and without a grace period (nothing was being written)."""
    import signal

    import pexpect

    home = tmp_path / "home"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FOLDGATE_", "REDIS"))}
    env.update(FOLDGATE_HOME=str(home), FOLDGATE_CONFIG=str(ROOT / "config.yaml"))
    chat = pexpect.spawn(
        sys.executable,
        ["-m", "gateway.cli", "run"],
        cwd=str(tmp_path),
        env=env,
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 200),
    )
    try:
        chat.expect_exact("you> ")  # the demo has played and the chat waits for input
        if how == "/quit":
            chat.sendline("which PR holds the login timeout fix?")
            chat.expect_exact("⋯ working")  # the terminal shows that the model works, then the reply over it
            chat.expect_exact("#4821")
            chat.expect_exact("you> ")
        if how == "Ctrl-C":
            chat.sendintr()
        elif how == "SIGTERM":
            chat.kill(signal.SIGTERM)
        elif how == "/quit":
            chat.sendline("/quit")
        else:
            chat.sendeof()
        chat.expect(pexpect.EOF, timeout=PATIENCE)  # no Enter pressed: a read left waiting for one would hang here
        chat.wait()
        assert chat.exitstatus == 0, chat.before
        assert "waiting up to" not in chat.before  # no turn in flight, so no grace period was announced or waited
    finally:
        if chat.isalive():
            chat.terminate(force=True)


def test_under_an_interactive_terminal_chat_log_lines_go_to_a_file_not_into_the_chat(tmp_path):
    import io
    import logging

    from gateway.config import Settings
    from gateway.run.logging_setup import log_where

    class Keyboard(io.StringIO):
        def isatty(self) -> bool:
            return True

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        settings = Settings(gateway={"home": str(tmp_path / "home")}, platforms={"local": {"enabled": True}})
        path = log_where(settings, Keyboard())
        assert path == tmp_path / "home" / "foldgate.log"
        logging.getLogger("agent.llm.client").warning("retry 1 of 2")
        for handler in root.handlers:
            handler.flush()
        assert "WARNING agent.llm.client: retry 1 of 2" in path.read_text()
        assert log_where(settings, io.StringIO()) is None  # piped: the log stays on stderr
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            if handler not in saved[0]:
                handler.close()
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
