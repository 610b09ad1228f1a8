"""What a Discord bot token must look like: checked before it is sent, so a wrong paste gets a clear sentence."""

from __future__ import annotations

import base64
import binascii
import re

#: One part of a bot token: base64url without padding.
_TOKEN_PART = re.compile(r"[A-Za-z0-9_-]+")
#: Where to get a bot token, for messages about a wrong one.
TOKEN_HINT = (
    "copy the token from the Discord developer portal (your application → Bot → Reset Token) into "
    "platforms.discord.token or DISCORD_BOT_TOKEN"
)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bot token as pasted (it could not even be sent), or None when it may be one."""
    token = token.strip()
    if token.lower().startswith("bot "):
        return "it starts with 'Bot '; give the token alone"
    if any(char.isspace() for char in token):
        return "it contains a space or a line break"
    if not (token.isascii() and token.isprintable()):
        return "it contains characters a token never has"
    return None


def token_shape_problem(token: str) -> str | None:
    """Why ``token`` is not shaped like a bot token, or None when it may be one.

    A bot token is three base64url parts joined by dots: the bot's user id, a timestamp and an
    HMAC. Only that shape is checked (never lengths or content beyond it), so a plausible token is
    never refused here; what Discord thinks of it is the login's business. The point is a clear
    sentence for a pasted client secret, application id or placeholder, instead of a 401 or a
    network error.
    """
    parts = token.strip().split(".")
    if len(parts) != 3:
        return f"a bot token is three parts joined by dots, this one has {len(parts)}"
    if not all(parts):
        return "a bot token is three parts joined by dots, and one of these is empty"
    if not all(_TOKEN_PART.fullmatch(part) for part in parts):
        return "it has characters other than letters, digits, '-' and '_' between the dots"
    try:
        user_id = base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        user_id = ""
    if not user_id.isdigit():
        return "its first part is not a user id in base64, as a bot token's is"
    return None
