"""Why the Telegram adapter cannot start or go on, each error naming the setting to fix."""

from __future__ import annotations

from gateway.startup_errors import StartupError


class TelegramAdapterError(StartupError):
    """The adapter cannot go on (rejected token, another poller); the message says how to fix it.

    ``setting`` is the configuration key to look at, so start-up can print one line that names it.
    """

    def __init__(self, message: str, *, setting: str = "platforms.telegram") -> None:
        super().__init__(message, setting=setting)


class PollingConflict(TelegramAdapterError):
    """Telegram answered getUpdates with 409 Conflict: this process stopped polling."""
