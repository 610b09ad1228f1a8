"""The embedded Redis never outlives its foldgate: a killed or hung-up ``foldgate run`` takes its server
down cleanly, a server some earlier foldgate left behind is stopped with its data intact, and a second
foldgate on the same home shares the running server instead of being refused."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gateway.server.lifecycle import EmbeddedRedis, connect_or_embed
from tests.fakes.paths import REPO
from tests.fakes.waiting import wait_for_sync

ROOT = REPO
STARTUP_SECONDS = 180  # a loaded two-core machine can take long to import and start everything
GONE_SECONDS = 2.0  # the requirement: the server is gone this soon after its foldgate

#: Starts Valkey the way a foldgate without the watcher did, records it, writes a key, and exits without
#: stopping it: the server is left running with no owner. Prints the server's pid and the dead owner's pid.
PLANT = r"""
import json, os, subprocess, sys
from pathlib import Path
import redis
from gateway.server.lifecycle import EmbeddedRedis, _start_time
from tests.fakes.waiting import wait_for_sync
server = EmbeddedRedis(Path(sys.argv[1]))
server.data_dir.mkdir(parents=True, exist_ok=True)
os.chmod(server.data_dir, 0o700)
valkey = subprocess.Popen(server._arguments(None), stdin=subprocess.DEVNULL, stdout=open(server.log_path, "ab"),
                          stderr=subprocess.STDOUT, cwd=server.data_dir, start_new_session=True)
url = f"unix://{server.socket_path}"
client = redis.Redis.from_url(url, socket_timeout=2)

def answers():
    try:
        return client.ping()
    except redis.exceptions.RedisError:
        return False

wait_for_sync(answers, 120, what="the planted server to answer PING")
client.set("left:behind", "still here")
if sys.argv[2] == "legacy":
    server.url_path.write_text(url + "\n")
else:
    record = {"url": url, "pid": valkey.pid, "started": _start_time(valkey.pid),
              "owner_pid": os.getpid(), "owner_started": _start_time(os.getpid())}
    server.record_path.write_text(json.dumps(record))
print(valkey.pid, os.getpid(), flush=True)
os._exit(0)
"""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def gone(pid: int) -> bool:
    """A pid that no longer runs; a zombie waiting for its reaper counts as gone."""
    fields = _stat_fields(pid)
    if fields is not None:
        return fields[0] in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def parent_of(pid: int) -> int:
    fields = _stat_fields(pid)
    if fields is not None:
        return int(fields[1])
    return int(subprocess.run(["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True, text=True).stdout)


def wait_until_gone(pids: list[int], seconds: float) -> None:
    """Return once every one of ``pids`` is gone; fail if one is still there after ``seconds``."""
    wait_for_sync(lambda: all(gone(pid) for pid in pids), seconds, what=f"processes {pids} to be gone")


def answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(client.ping())
    except (redis.exceptions.RedisError, OSError):
        return False
    finally:
        client.close()


class Processes:
    """Every process a test starts, killed at teardown whatever happened."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []
        self.files: list[Path] = []

    def track(self, pid: int) -> int:
        self.pids.append(pid)
        return pid

    def cleanup(self) -> None:
        for process in self.popens:
            if process.poll() is None:
                process.kill()
            process.wait()
        for pid in self.pids:
            if not gone(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def processes() -> Iterator[Processes]:
    tracked = Processes()
    try:
        yield tracked
    finally:
        tracked.cleanup()


@pytest.fixture
def home() -> Iterator[Path]:
    # A short path, so the unix socket fits (pytest's tmp_path can be long on some machines).
    with tempfile.TemporaryDirectory(prefix="fg-") as directory:
        yield Path(directory) / "home"


def environment(home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FOLDGATE_", "REDIS"))}
    env.update(FOLDGATE_HOME=str(home), FOLDGATE_CONFIG=str(ROOT / "config.yaml"))  # redis.url empty, local model
    return env


def _as_a_terminal_job() -> None:
    """A hang-up ends a terminal's job even when the suite itself runs under nohup (which ignores SIGHUP)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def start_run(home: Path, processes: Processes) -> subprocess.Popen[bytes]:
    """``foldgate run`` with the terminal chat open (stdin kept open), in its own session like a terminal's job."""
    home.mkdir(parents=True, exist_ok=True)
    out, err = home.parent / "run.out", home.parent / "run.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "run"],
            cwd=home.parent,
            env=environment(home),
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            preexec_fn=_as_a_terminal_job,
        )
    processes.popens.append(process)
    return process


def wait_for_server(home: Path, process: subprocess.Popen[bytes], processes: Processes) -> dict[str, object]:
    """The server record once the embedded server it names answers PING."""
    record_path = home / "redis" / "server.json"

    def answering() -> dict[str, object] | None:
        assert process.poll() is None, (home.parent / "run.err").read_text()
        with contextlib.suppress(FileNotFoundError, ValueError):
            record = json.loads(record_path.read_text())
            processes.track(int(record["pid"]))
            if answers(str(record["url"])):
                return record
        return None

    return wait_for_sync(answering, STARTUP_SECONDS, what="the embedded server to come up", interval=0.1)


def foldgate(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=home.parent,
        env=environment(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=STARTUP_SECONDS,
    )


@pytest.mark.parametrize("how", ["SIGKILL", "SIGHUP"])
def test_the_server_is_gone_within_two_seconds_of_a_killed_or_hung_up_foldgate(home, processes, how):
    run = start_run(home, processes)
    record = wait_for_server(home, run, processes)
    server = int(record["pid"])
    watcher = processes.track(parent_of(server))
    assert watcher != run.pid and parent_of(watcher) == run.pid  # foldgate → watcher → valkey

    if how == "SIGKILL":
        run.kill()
    else:  # a closed terminal hangs up its foreground process group
        os.killpg(run.pid, signal.SIGHUP)
    run.wait(timeout=60)
    wait_until_gone([server, watcher], GONE_SECONDS)  # the embedded server does not outlive its foldgate
    log = (home / "redis" / "server.log").read_text()
    assert "Received SIGTERM" in log.rsplit("Server initialized", 1)[1]  # a clean stop: the AOF was flushed

    after = foldgate(home, "doctor")  # the next foldgate simply starts its server (and stops it again)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "Traceback" not in after.stdout + after.stderr and "left running" not in after.stdout + after.stderr


@pytest.mark.parametrize("style", ["legacy", "record"])
async def test_a_server_left_behind_is_stopped_once_with_its_data_kept(home, processes, style):
    planted = subprocess.run(
        [sys.executable, "-c", PLANT, str(home), style],
        capture_output=True,
        text=True,
        timeout=STARTUP_SECONDS,
        cwd=ROOT,
    )
    assert planted.returncode == 0, planted.stderr
    server, owner = (int(word) for word in planted.stdout.split())
    processes.track(server)
    assert not gone(server) and gone(owner)

    lines: list[str] = []
    client, embedded = await connect_or_embed(None, home, notice=lines.append)
    try:
        assert embedded is not None and embedded.owns_server
        by = f"an earlier foldgate (pid {owner})" if style == "record" else "an earlier foldgate"
        assert lines == [
            f"foldgate: stopped an embedded Redis (pid {server}) left running by {by} on {home.resolve() / 'redis'}"
        ]
        assert embedded.notice == lines[0] and gone(server)
        assert await client.get("left:behind") == "still here"  # the AOF was complete before the new server read it
    finally:
        await client.aclose()
        if embedded is not None:
            await embedded.stop()


def test_a_foldgate_command_recovers_a_left_behind_server_in_one_line(home, processes):
    planted = subprocess.run(
        [sys.executable, "-c", PLANT, str(home), "legacy"],
        capture_output=True,
        text=True,
        timeout=STARTUP_SECONDS,
        cwd=ROOT,
    )
    assert planted.returncode == 0, planted.stderr
    server = processes.track(int(planted.stdout.split()[0]))

    found = foldgate(home, "doctor")
    output = found.stdout + found.stderr
    assert found.returncode == 0, output
    assert "Traceback" not in output
    said = [line for line in output.splitlines() if "foldgate: stopped an embedded Redis" in line]
    assert len(said) == 1 and f"(pid {server}) left running by an earlier foldgate" in said[0]
    assert gone(server) and not (home / "redis" / "server.url").exists()


async def test_a_second_foldgate_shares_the_running_server_and_only_the_owner_stops_it(home, processes):
    run = start_run(home, processes)
    record = wait_for_server(home, run, processes)
    server = int(record["pid"])

    shared = foldgate(home, "search", "local:terminal", "rollback")  # while `foldgate run` is open
    assert shared.returncode == 0, shared.stderr
    assert "Traceback" not in shared.stderr and "already serves" not in shared.stderr
    said = [line for line in shared.stderr.splitlines() if "using the embedded Redis" in line]
    assert len(said) == 1 and f"of foldgate pid {run.pid}" in said[0]
    assert not gone(server) and answers(str(record["url"]))  # the sharer left it running

    lines: list[str] = []
    client, sharer = await connect_or_embed(None, home, notice=lines.append)
    try:
        assert sharer is not None and not sharer.owns_server and sharer.owner_pid == run.pid and len(lines) == 1
        assert await client.ping()
    finally:
        await client.aclose()
        if sharer is not None:
            await sharer.stop()
    assert not gone(server)

    second = foldgate(home, "run")  # a second gateway would lose its server when the first quits: refused
    output = (second.stdout + second.stderr).strip()
    assert second.returncode == 1 and "Traceback" not in output and len(output.splitlines()) == 1, output
    assert f"another foldgate (pid {run.pid}) runs a gateway on" in output and "FOLDGATE_HOME" in output
    assert not gone(server) and run.poll() is None  # the first gateway carries on

    assert run.stdin is not None
    run.stdin.close()  # Ctrl-D: the owner ends its chat and stops the server
    assert run.wait(timeout=STARTUP_SECONDS) == 0, (home.parent / "run.err").read_text()
    wait_until_gone([server], GONE_SECONDS)
    assert not (home / "redis" / "server.json").exists()


async def test_a_killed_owner_leaves_nothing_for_the_next_start(home, processes):
    """The same guarantee without the CLI: an EmbeddedRedis owner in a process that is SIGKILLed."""
    owner_code = (
        "import asyncio, sys\nfrom pathlib import Path\nfrom gateway.server.lifecycle import EmbeddedRedis\n"
        "async def main():\n    server = EmbeddedRedis(Path(sys.argv[1]))\n    await server.start()\n"
        "    print('up', flush=True)\n    await asyncio.sleep(3600)\nasyncio.run(main())\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", owner_code, str(home)], cwd=ROOT, stdout=subprocess.PIPE)
    processes.popens.append(owner)
    assert owner.stdout is not None and owner.stdout.readline() == b"up\n"
    server = processes.track(int(json.loads((home / "redis" / "server.json").read_text())["pid"]))
    owner.kill()
    owner.wait()
    wait_until_gone([server], GONE_SECONDS)

    async with EmbeddedRedis(home) as again:
        assert again.owns_server and again.notice is None  # a stale record, nothing left running: no notice
