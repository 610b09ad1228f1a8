"""Replies in a Discord channel: one message posted early, edited as text arrives, continued past the limit.

Every post carries a nonce derived from the reply and the chunk, so a post repeated after a
dropped connection (or by an attempt after a crash) is not posted twice. Replies never ping anyone.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Optional, Union

import discord

from gateway.platforms.base import PlatformRateLimited

#: Replies may quote names but must never notify anyone.
NO_PINGS = discord.AllowedMentions.none()

#: A channel the bot posts replies in and edits them in, by id alone when it is not cached.
ReplyChannel = Union[discord.TextChannel, discord.Thread, discord.DMChannel, discord.VoiceChannel,
                     discord.StageChannel, discord.PartialMessageable]
#: The cached channels a reply can go to as they are (any other is reached by id, as a partial messageable).
REPLY_CHANNELS = (discord.TextChannel, discord.Thread, discord.DMChannel, discord.VoiceChannel, discord.StageChannel)


def chunk_nonce(anchor: str, index: int, chunk: str) -> str:
    """Discord's message nonce (≤ 25 characters) for one chunk: the same chunk of the same reply
    always gets the same nonce, so with ``enforce_nonce`` a repeated send is not posted twice."""
    return hashlib.sha256(f"{anchor}\x00{index}\x00{chunk}".encode()).hexdigest()[:25]


class DiscordMessenger:
    """One channel's message primitives for :class:`gateway.delivery.edited.EditedReply`."""

    def __init__(self, channel: ReplyChannel, anchor: str,
                 reference: Optional[discord.MessageReference]) -> None:
        self.channel = channel
        self.anchor = anchor
        self.reference = reference
        self._sent: dict[str, discord.Message] = {}

    async def post(self, text: str, *, index: int) -> str:
        try:
            message = await self.channel.send(text, nonce=chunk_nonce(self.anchor, index, "reply"),
                                              reference=self.reference if index == 0 else None,
                                              allowed_mentions=NO_PINGS)
        except discord.HTTPException as error:
            raise _rate_limited(error) or error
        self._sent[str(message.id)] = message
        return str(message.id)

    async def edit(self, message_id: str, text: str) -> None:
        # A message an earlier attempt posted (known only by its id) is edited through a partial message.
        target = self._sent.get(message_id) or self.channel.get_partial_message(int(message_id))
        try:
            self._sent[message_id] = await target.edit(content=text, allowed_mentions=NO_PINGS)
        except discord.HTTPException as error:
            raise _rate_limited(error) or error

    async def delete(self, message_id: str) -> None:
        # A message an earlier attempt posted is known only by its id: it is deleted through a partial message.
        message = self._sent.pop(message_id, None) or self.channel.get_partial_message(int(message_id))
        with contextlib.suppress(discord.HTTPException):
            await message.delete()


def _rate_limited(error: discord.HTTPException) -> PlatformRateLimited | None:
    """A 429 discord.py did not wait out itself, as the budget's pause; None for any other failure."""
    if error.status != 429:
        return None
    retry_after = float(error.response.headers.get("Retry-After", 1) or 1) if error.response is not None else 1.0
    return PlatformRateLimited(retry_after or 1.0, "Discord")
