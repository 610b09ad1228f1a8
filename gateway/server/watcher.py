"""The watcher between foldgate and the embedded Valkey, so the server never outlives its foldgate.

Valkey is not started directly but under this script, whose stdin is a pipe; the write end of
that pipe exists only in the foldgate that started it (pipes are close-on-exec, so other
children of foldgate do not inherit it). When that foldgate ends — a clean stop, an exception,
SIGHUP from a closed terminal, even SIGKILL — the kernel closes the write end, the watcher
reads EOF, sends Valkey SIGTERM (so the AOF is flushed and fsynced), waits for it and exits.
This works the same on Linux and macOS and needs nothing from foldgate's threads or event
loop. On Linux Valkey is also started with the parent-death signal (``PR_SET_PDEATHSIG`` =
SIGTERM) set towards the single-threaded watcher, so even a SIGKILLed watcher takes Valkey
down cleanly. The watcher runs in its own session (foldgate starts it so), so Ctrl-C in the
terminal reaches foldgate only: foldgate finishes its turns first and then stops the server.

Run by its file path as ``python -I .../watcher.py VALKEY ARGS...`` (:data:`PATH`):
stdlib only and with nothing of foldgate imported, so it starts in a few tens of
milliseconds, and it is found however foldgate itself was put on the path. argv[1:] is
Valkey's command line; stdout/stderr go to the server log, which Valkey inherits. Its exit
code is Valkey's, so a failed start reads the same as a failed Valkey.
"""

import os
import select
import signal
import subprocess
import sys

#: This file, which foldgate runs as the watcher (a str: pathlib would slow the watcher's start).
PATH: str = os.path.realpath(__file__)
_PR_SET_PDEATHSIG = 1
_EX_SOFTWARE = 70


def main(command: list[str]) -> int:
    """Run ``command`` until it exits or stdin reaches EOF (then SIGTERM it); its exit code, shell-style."""
    watcher = os.getpid()

    def tie_to_watcher() -> None:
        if sys.platform.startswith("linux"):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != watcher:  # the watcher died before the signal was set
                os._exit(_EX_SOFTWARE)

    server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, preexec_fn=tie_to_watcher)

    def stop(*_: object) -> None:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while server.poll() is None:
        readable, _, _ = select.select([0], [], [], 0.2)
        if readable and not os.read(0, 4096):
            stop()
            break
    code = server.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
