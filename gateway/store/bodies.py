"""Message bodies: how a message is validated and encoded for storage, and decoded when read back.

``_id`` is assigned by the scripts from the session's counter (``meta.next_id``); a session
created by rotation continues its parent's counter, so ids stay unique along the
``parent_session_id`` chain. ``_ts`` is the unix time of the write unless the message already
carries one. ``_tok`` is :func:`agent.tokens.count_message`; meta ``tokens`` is the running sum of
``_tok`` over the active list (a request costs that plus :data:`agent.tokens.REQUEST_OVERHEAD`),
so the per-message path reads a counter and never the transcript: its cost does not grow with the session.

A stored body that cannot be read never raises: it is reported as ``(id, raw, reason)`` for the
quarantine (or skipped with a warning where a read cannot quarantine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent import json_codec
from agent.messages import InvalidMessage, Message, validate_message
from agent.tokens import count_message

#: An unreadable stored entry: its id, the raw body (None when missing) and why it cannot be used.
Unreadable = tuple[str, str | None, str]


def body_tail(body: Mapping[str, Any], index: int) -> bytes:
    """The message's JSON without the opening brace (the script puts ``{"_id":…,`` in front)."""
    try:
        text = json_codec.dumps(body)
    except json_codec.EncodeError as error:
        raise InvalidMessage(f"message {index} cannot be stored as JSON: {error}") from error
    return text[1:]


def prepare_new(message: Any, index: int, now: float) -> tuple[Message, bytes]:
    """Validate a message the store has not seen and build the body it will store (sans ``_id``)."""
    try:
        checked = validate_message(message)
    except InvalidMessage as error:
        raise InvalidMessage(f"message {index}: {error}") from error
    body = checked.copy()
    body.pop("_id", None)  # the script gives the stored message its id
    if not isinstance(body.get("_ts"), (int, float)) or isinstance(body.get("_ts"), bool):
        body["_ts"] = now
    body["_tok"] = count_message(body)
    return body, body_tail(body, index)


def decode_stored(message_id: str, raw: str | None) -> tuple[Message | None, str]:
    """A stored body as a message, or ``(None, reason)`` when it cannot be used."""
    if raw is None:
        return None, "message body is missing"
    try:
        message = json_codec.loads(raw)
    except ValueError as error:
        return None, f"body is not valid JSON: {error}"
    try:
        validate_message(message)
    except InvalidMessage as error:
        return None, f"body is not a valid message: {error}"
    message["_id"] = message_id
    return message, ""


def decode_entries(ids: Sequence[str], bodies: Sequence[str | None]) -> tuple[list[Message], list[Unreadable]]:
    """Stored bodies as messages, and the unreadable ones as (id, raw, reason) for quarantine."""
    good: list[Message] = []
    bad: list[Unreadable] = []
    for message_id, raw in zip(ids, bodies):
        message, reason = decode_stored(message_id, raw)
        if message is None:
            bad.append((message_id, raw, reason))
        else:
            good.append(message)
    return good, bad


def in_order(
    ids: Sequence[str], found: Mapping[str, Message], known: Mapping[str, Message]
) -> tuple[list[Message], list[str]]:
    """The messages of ``ids`` in order from what was just read or is held, and the ids in neither."""
    messages: list[Message] = []
    missing: list[str] = []
    for message_id in ids:
        message = found.get(message_id) or known.get(message_id)
        if message is None:
            missing.append(message_id)
        else:
            messages.append(message)
    return messages, missing
