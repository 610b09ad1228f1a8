"""The Telegram configuration checked before anything is sent: the token's shape, what webhook mode needs.

A wrong paste gets one sentence naming the setting, not a 404 from the Bot API later.
"""

from __future__ import annotations

from aiogram import Bot
from aiogram.utils.token import TokenValidationError

from gateway.platforms.telegram.answers import ReadingSession
from gateway.platforms.telegram.errors import TelegramAdapterError


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bot token (BotFather's are ``<digits>:<secret>``), or None when it may be one."""
    if any(char.isspace() for char in token):
        return "it contains a space or a line break"
    bot_id, colon, secret = token.partition(":")
    if not colon or not bot_id.isdigit() or not secret:
        return "a bot token is the bot's number, a colon, then the secret, e.g. 123456789:AAH…"
    return None


def check_webhook(mode: str, secret: str | None, set_webhook: bool, url: str | None) -> None:
    """Webhook mode needs its secret (anyone who finds the URL could post updates) and, to register, its URL."""
    if mode == "webhook" and not secret:
        raise TelegramAdapterError(
            "webhook mode needs platforms.telegram.webhook_secret: without it anyone who finds the URL "
            "could post fake updates",
            setting="platforms.telegram.webhook_secret",
        )
    if mode == "webhook" and set_webhook and not url:
        raise TelegramAdapterError(
            "webhook mode needs platforms.telegram.webhook_url to register the webhook",
            setting="platforms.telegram.webhook_url",
        )


def bot_for(token: str, api_server: str | None) -> Bot:
    """The aiogram bot for ``token``, refused with the setting named when the token is not one; an answer it cannot
    read is one line naming the setting (see :mod:`.answers`)."""
    problem = token_problem(token)
    if problem:
        raise TelegramAdapterError(
            f"not a Telegram bot token ({problem}) — copy the whole token @BotFather gave you into "
            "platforms.telegram.token or TELEGRAM_BOT_TOKEN",
            setting="platforms.telegram.token",
        )
    session = ReadingSession(api_server)
    try:
        return Bot(token, session=session)
    except TokenValidationError as error:  # aiogram's own check, should it ever be stricter than ours
        raise TelegramAdapterError(
            f"not a Telegram bot token ({error}) — copy the whole token @BotFather gave "
            "you into platforms.telegram.token or TELEGRAM_BOT_TOKEN",
            setting="platforms.telegram.token",
        ) from None
