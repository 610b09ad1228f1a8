"""``foldgate run`` on a machine with nothing configured: embedded Redis, the overnight demo through the real
pipeline, and a history that survives a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
