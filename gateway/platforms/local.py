"""The local platform: a chat in the terminal, so ``foldgate run`` works with no bot tokens at all.

``/attach PATH [caption]`` sends a file from this machine (:mod:`gateway.platforms.local_files`).
An image or file the bot sends is saved in a folder (``files_dir``; a ``foldgate-files`` folder in
the system's temporary directory unless given) and its path printed: a terminal shows no pictures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TextIO

from gateway.platforms.base import (
    ApprovalPrompt,
    IncomingMessage,
    Intake,
    Journal,
    MediaItem,
    OutgoingFile,
    PlatformAdapter,
    SendGate,
    approval_command,
)
from gateway.platforms.local_files import AttachError, is_attach, parse_attach, read_file
from gateway.progress import is_terminal

#: What answers a question the bot asked before running a tool.
YES_NO = {"y": True, "yes": True, "n": False, "no": False}
#: Lines that end the terminal chat (besides Ctrl-D, Ctrl-C and SIGTERM).
QUIT_WORDS = frozenset({"/quit", "/exit"})


class TerminalAdapter(PlatformAdapter):
    """Reads lines from a stream as messages of one local chat and prints the replies."""

    platform = "local"
    max_message_length = 1_000_000

    def __init__(
        self,
        *,
        chat_id: str = "terminal",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        files_dir: Path | None = None,
    ) -> None:
        self.chat_id = chat_id
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        #: Where the images and files the bot sends are saved.
        self.files_dir = files_dir or Path(tempfile.gettempdir()) / "foldgate-files"
        self._task: asyncio.Task[None] | None = None
        self._ids = itertools.count(int(time.time() * 1000))
        self.closed = asyncio.Event()
        self._reading = False
        self._status_shown = False  # a "working" status is on the current terminal line
        self._asking: list[str] = []  # the questions waiting for y or n, newest last

    async def start(self, intake: Intake) -> None:
        self._task = asyncio.create_task(self._read(intake), name="terminal-input")

    async def _read(self, intake: Intake) -> None:
        self._reading = True
        self._prompt()
        while True:
            line = await self._read_line()
            text = line.strip()
            if not line or text in QUIT_WORDS:  # end of input (Ctrl-D) or /quit: the user closed the chat
                self.closed.set()
                return
            if not text:
                self._prompt()
                continue
            message = self._message(text)
            if message is not None:
                await intake(message)

    def _message(self, text: str) -> IncomingMessage | None:
        """The message a line makes; None (and the reason shown) for an ``/attach`` of no readable file. While
        the bot waits for a yes or no, ``y`` or ``n`` answers it."""
        items: tuple[MediaItem, ...] = ()
        if self._asking and text.lower() in YES_NO:
            text = approval_command(self._asking[-1], YES_NO[text.lower()])
        elif is_attach(text):
            try:
                attachment = parse_attach(text)
            except AttachError as error:
                self.stdout.write(f"{error}\n")
                self._prompt()
                return None
            text, items = attachment.caption, (attachment.item,)
        return IncomingMessage(
            platform=self.platform,
            chat_id=self.chat_id,
            user_id="local",
            user_name="you",
            update_id=str(next(self._ids)),
            text=text,
            items=items,
        )

    async def _read_line(self) -> str:
        """One line of input, read in a daemon thread: a thread of the loop's executor would keep the
        process waiting for Enter after Ctrl-C, where a daemon thread ends with the process."""
        loop = asyncio.get_running_loop()
        line: asyncio.Future[str] = loop.create_future()

        def hand_over(result: str | BaseException) -> None:
            if line.done():
                return
            if isinstance(result, BaseException):
                line.set_exception(result)
            else:
                line.set_result(result)

        def read() -> None:
            try:
                result: str | BaseException = self.stdin.readline()
            except Exception as error:  # a closed or broken stdin ends the chat like Ctrl-D
                result = error
            with contextlib.suppress(RuntimeError):  # the loop is gone: the process is ending anyway
                loop.call_soon_threadsafe(hand_over, result)

        threading.Thread(target=read, name="terminal-input", daemon=True).start()
        try:
            return await line
        except (OSError, ValueError):
            return ""

    def _prompt(self) -> None:
        self.stdout.write("you> ")
        self.stdout.flush()

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        self.begin_reply()
        self.stdout.write(f"{text}\n")
        if self._reading:
            self._prompt()

    async def send_file(self, chat_id: str, file: OutgoingFile, *, reply_to: str | None = None) -> None:
        """Save the file (a new name when one of that name is there already) and print where it is."""
        path = await asyncio.to_thread(_save, self.files_dir, file)
        await self.send(chat_id, f"[{file.kind} saved: {path}]", reply_to=reply_to)

    async def ask_approval(self, chat_id: str, prompt: ApprovalPrompt, *, reply_to: str | None = None) -> str | None:
        """The question, answered with ``y`` or ``n`` on the next line."""
        self._asking.append(prompt.approval_id)
        await self.send(chat_id, f"{prompt.question} [y/n]")
        return prompt.approval_id

    async def settle_approval(self, chat_id: str, message_id: str | None, prompt: ApprovalPrompt, outcome: str) -> None:
        if prompt.approval_id in self._asking:
            self._asking.remove(prompt.approval_id)
        await self.send(chat_id, f"→ {outcome}")

    async def fetch(self, item: MediaItem, limit: int) -> bytes:
        """An attached file's bytes, read from disk now, at most ``limit`` of them."""
        return await read_file(item, limit)

    async def typing(self, chat_id: str) -> None:
        """Show that the model is working: on a terminal a status the reply then overwrites, in a pipe one line."""
        if is_terminal(self.stdout):
            self.stdout.write("\nbot> ⋯ working")
            self._status_shown = True
        else:
            self.stdout.write("\n⋯ working on a reply\n")
        self.stdout.flush()

    def begin_reply(self) -> None:
        """Start the reply's line, over the working status when one is shown."""
        self.stdout.write("\r\033[K" if self._status_shown else "\n")
        self.stdout.write("bot> ")
        self._status_shown = False

    def reply_surface(
        self, chat_id: str, gate: SendGate, *, reply_to: str | None = None, journal: Journal | None = None
    ) -> TerminalReply:
        return TerminalReply(self)


class TerminalReply:
    """A streamed reply in the terminal: printed as it arrives, what was printed is never taken back.

    A preview that only extends what is on screen prints the new part; one that changes it (a
    tool line replaced by text, a retried request) continues on a new line. The final reply is
    printed after what is on screen unless the screen already ends with it.
    """

    interval = 0.05

    def __init__(self, adapter: TerminalAdapter) -> None:
        self.adapter = adapter
        self.printed = ""

    async def preview(self, text: str) -> bool:
        out = self.adapter.stdout
        if not self.printed:
            self.adapter.begin_reply()
        if text.startswith(self.printed):
            out.write(text[len(self.printed) :])
        else:
            common = len(os.path.commonprefix([self.printed, text]))
            out.write("\n" + text[common:].lstrip("\n"))
        out.flush()
        self.printed = text
        return True

    async def finish(self, text: str) -> None:
        if not self.printed:
            await self.adapter.send(self.adapter.chat_id, text)
            return
        if text.startswith(self.printed):
            self.adapter.stdout.write(text[len(self.printed) :] + "\n")
        elif self.printed.endswith(text.strip()):
            self.adapter.stdout.write("\n")
        else:  # the screen shows earlier steps (a tool line, text before a tool call): the answer follows them
            self.adapter.stdout.write(f"\n{text}\n")
        self.printed = text
        if self.adapter._reading:
            self.adapter._prompt()


def _save(folder: Path, file: OutgoingFile) -> Path:
    """Write ``file`` into ``folder`` under its own name, numbered when that name is taken, readable by this user
    only; its path."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # what the bot sends this person is theirs alone
    name = Path(file.name or file.kind).name or file.kind
    path = folder / name
    for number in itertools.count(2):
        try:
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(file.data)
            return path
        except FileExistsError:
            path = folder / f"{Path(name).stem}-{number}{Path(name).suffix}"
    raise AssertionError("unreachable")
