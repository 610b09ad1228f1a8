"""A platform that keeps the replies it is asked to send, in order: replays of recorded conversations, tests."""

from __future__ import annotations

from gateway.platforms.base import Intake, OutgoingFile, PlatformAdapter


class RecordingAdapter(PlatformAdapter):
    """Receives nothing by itself; every reply is kept as ``(chat_id, text)`` in :attr:`sent`, every file
    as ``(chat_id, file)`` in :attr:`files`."""

    max_message_length = 1_000_000

    def __init__(self, platform: str = "local") -> None:
        self.platform = platform
        self.sent: list[tuple[str, str]] = []
        self.files: list[tuple[str, OutgoingFile]] = []

    async def start(self, intake: Intake) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        self.sent.append((chat_id, text))

    async def send_file(self, chat_id: str, file: OutgoingFile, *, reply_to: str | None = None) -> None:
        self.files.append((chat_id, file))
