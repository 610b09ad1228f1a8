"""Telegram through aiogram 3: updates in by long polling or a webhook, plain-text replies out.

One concern a module: :mod:`.checks` (the configuration, before anything is sent), :mod:`.answers` (a
Bot API answer foldgate cannot read), :mod:`.identify` (getMe), :mod:`.polling` and :mod:`.webhook` (updates
in), :mod:`.errors` (what the adapter raises), :mod:`.updates` (which updates are recorded, and as what),
:mod:`.albums` (an album's parts as one message), :mod:`.media` (photos, files and voice: as items, and their
bytes), :mod:`.receiving` (an update handed to the intake), :mod:`.calls` (the retry policy of final sends),
:mod:`.moves` (groups upgraded to supergroups), :mod:`.replies` (streamed replies), :mod:`.indicator`
(typing), :mod:`.approvals` (asking before a tool runs, with buttons), and :mod:`.adapter`, which wires
them together.
"""

from gateway.platforms.telegram.adapter import TelegramAdapter
from gateway.platforms.telegram.answers import DEFAULT_API_SERVER
from gateway.platforms.telegram.errors import PollingConflict, TelegramAdapterError
from gateway.platforms.telegram.replies import TELEGRAM_MESSAGE_LIMIT
from gateway.platforms.telegram.webhook import SECRET_HEADER

__all__ = [
    "DEFAULT_API_SERVER",
    "SECRET_HEADER",
    "TELEGRAM_MESSAGE_LIMIT",
    "PollingConflict",
    "TelegramAdapter",
    "TelegramAdapterError",
]
