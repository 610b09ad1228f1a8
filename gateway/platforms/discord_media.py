"""Discord attachments as :class:`~gateway.platforms.base.MediaItem`, and their bytes from Discord's CDN.

An attachment is an image when its content type says so, a voice message when Discord marks it
as one (the message's ``IS_VOICE_MESSAGE`` flag, or the attachment's waveform) or it is Ogg
audio, other audio is audio, anything else a document. The item's ``file_id`` is the attachment's
URL, ``size`` the size Discord reports (attachments are at most 25 MB for most bots), so a file
over the limit is refused before it is downloaded.
"""

from __future__ import annotations

import discord

from gateway.platforms.base import MediaItem


def attachment_items(message: discord.Message) -> tuple[MediaItem, ...]:
    """One item per attachment of ``message``, in order."""
    return tuple(_item(attachment, voice_message=message.flags.voice) for attachment in message.attachments)


def _item(attachment: discord.Attachment, *, voice_message: bool) -> MediaItem:
    mime = (attachment.content_type or "").split(";")[0].strip().lower()
    if mime.startswith("image/"):
        kind = "image"
    elif voice_message or attachment.is_voice_message() or mime == "audio/ogg":
        kind = "voice"
    elif mime.startswith("audio/"):
        kind = "audio"
    else:
        kind = "document"
    return MediaItem(
        kind=kind,
        file_id=attachment.url,
        name=attachment.filename,
        mime=mime,
        size=attachment.size,
        width=attachment.width or 0,
        height=attachment.height or 0,
        duration=float(attachment.duration or 0.0),
    )
