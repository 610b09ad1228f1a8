"""Replies in a Discord channel: one message posted early, edited as text arrives, continued past the limit.

Every post carries a nonce derived from the reply and the chunk, so a post repeated after a
dropped connection (or by an attempt after a crash) is not posted twice. Replies never ping anyone.

A post or an edit Discord took but whose answer cannot be read (:mod:`gateway.platforms.discord_answers`)
is not made again; a message so posted keeps the id its answer still shows, and when even that cannot
be read its key is empty and its next text is posted anew, since there is nothing to edit.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging

import discord

from gateway.platforms.base import PlatformRateLimited
from gateway.platforms.discord_answers import Reader, UnreadableDiscordAnswer, accepted

log = logging.getLogger("gateway.platforms.discord")  # the adapter's log

#: Replies may quote names but must never notify anyone.
NO_PINGS = discord.AllowedMentions.none()

#: A channel the bot posts replies in and edits them in, by id alone when it is not cached.
ReplyChannel = (
    discord.TextChannel
    | discord.Thread
    | discord.DMChannel
    | discord.VoiceChannel
    | discord.StageChannel
    | discord.PartialMessageable
)
#: The cached channels a reply can go to as they are (any other is reached by id, as a partial messageable).
REPLY_CHANNELS = (discord.TextChannel, discord.Thread, discord.DMChannel, discord.VoiceChannel, discord.StageChannel)


def chunk_nonce(anchor: str, index: int, chunk: str) -> str:
    """Discord's message nonce (≤ 25 characters) for one chunk: the same chunk of the same reply
    always gets the same nonce, so with ``enforce_nonce`` a repeated send is not posted twice."""
    return hashlib.sha256(f"{anchor}\x00{index}\x00{chunk}".encode()).hexdigest()[:25]


class DiscordMessenger:
    """One channel's message primitives for :class:`gateway.delivery.edited.EditedReply`."""

    def __init__(
        self, channel: ReplyChannel, anchor: str, reference: discord.MessageReference | None, *, reader: Reader
    ) -> None:
        self.channel = channel
        self.anchor = anchor
        self.reference = reference
        self.reader = reader
        self._sent: dict[str, discord.Message] = {}
        #: Key of a message whose id could not be read -> the message that carries its text on.
        self._reposted: dict[str, str] = {}

    async def post(self, text: str, *, index: int) -> str:
        return await self._post(text, chunk_nonce(self.anchor, index, "reply"), self.reference if index == 0 else None)

    async def _post(self, text: str, nonce: str, reference: discord.MessageReference | None) -> str:
        send = functools.partial(self.channel.send, text, nonce=nonce, reference=reference, allowed_mentions=NO_PINGS)
        try:
            message = await self.reader.read(send, where=f"/channels/{self.channel.id}/")
        except discord.HTTPException as error:
            limited = _rate_limited(error)
            if limited is None:
                raise
            raise limited from error
        except UnreadableDiscordAnswer as error:
            if not accepted(log, error, f"a message to {self.channel.id}"):
                raise
            return error.message_id
        self._sent[str(message.id)] = message
        return str(message.id)

    async def edit(self, message_id: str, text: str) -> None:
        key = self._reposted.get(message_id, message_id)
        if not key:  # posted, but its id could not be read: nothing to edit
            self._reposted[message_id] = await self._post(text, chunk_nonce(self.anchor, -1, text), None)
            return
        # A message an earlier attempt posted (known only by its id) is edited through a partial message.
        target = self._sent.get(key) or self.channel.get_partial_message(int(key))
        try:
            edited = await self.reader.read(
                functools.partial(target.edit, content=text, allowed_mentions=NO_PINGS),
                where=f"/channels/{self.channel.id}/",
            )
        except discord.HTTPException as error:
            limited = _rate_limited(error)
            if limited is None:
                raise
            raise limited from error
        except UnreadableDiscordAnswer as error:
            if not accepted(log, error, f"an edit in {self.channel.id}"):
                raise
            return
        self._sent[key] = edited

    async def delete(self, message_id: str) -> None:
        key = self._reposted.pop(message_id, message_id)
        if not key:  # its id could not be read: it stays
            return
        # A message an earlier attempt posted is known only by its id: it is deleted through a partial message.
        message = self._sent.pop(key, None) or self.channel.get_partial_message(int(key))
        with contextlib.suppress(discord.HTTPException):
            await message.delete()


def _rate_limited(error: discord.HTTPException) -> PlatformRateLimited | None:
    """A 429 discord.py did not wait out itself, as the budget's pause; None for any other failure."""
    if error.status != 429:
        return None
    retry_after = float(error.response.headers.get("Retry-After", 1) or 1) if error.response is not None else 1.0
    return PlatformRateLimited(retry_after or 1.0, "Discord")
