"""Which stored session a stateless client's request extends, told by content alone (no I/O here).

A client without the session header resends the whole conversation on every call. Each message gets a
canonical digest of what the client sees and may send back (:func:`digest`), and the request a chain over
them, ``h_i = H(h_{i-1} ‖ digest(m_i))`` (:func:`chain`): ``h_i`` stands for the first ``i`` messages, so
two requests agree on ``h_i`` exactly when they agree on everything up to message ``i``, and an edit at
message ``j`` changes every ``h_i`` from ``i = j + 1`` on. After a turn is answered the gateway records the
chain of the conversation as the client will resend it (:func:`extended`: the request plus the reply);
:class:`Conversation` names the points of a new request to look up (:mod:`gateway.store.api_sessions`).

The digest forgives what clients do to a conversation they keep: runs of whitespace count as one space
(clients trim and re-wrap our replies), ``None`` content is empty text, text parts count as their joined
text (a string and the same text as parts match), an image part as a digest of its URL, a tool call as its
name and arguments (ids are not compared), a tool result by its ``tool_call_id`` and text. Anything else
on a message (``name``, ``refusal``, foldgate's ``_`` keys) is not part of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, cast

from agent.messages import Message, validate_message

#: Bytes of every digest and chain hash.
DIGEST_SIZE = 16
#: The chain before any message: what a request of no messages (or position 0) stands for.
ROOT = bytes(DIGEST_SIZE)
#: Domain tags (blake2b's ``person``), so a message digest is never taken for a chain hash; a change to the
#: canonical form must change them, or old index entries would match requests they no longer describe.
_MESSAGE_TAG = b"fg-api-msg-v1"
_CHAIN_TAG = b"fg-api-chain-v1"
#: Hashers set up once and copied per use: a copy costs about two thirds of a new one with these options.
_MESSAGE_HASH = blake2b(digest_size=DIGEST_SIZE, person=_MESSAGE_TAG)
_CHAIN_HASH = blake2b(digest_size=DIGEST_SIZE, person=_CHAIN_TAG)
#: What stands for "no tool call, tool result or image" in a message's digest (the common case).
_NO_EXTRAS = bytes(DIGEST_SIZE)
_ROLE_HEADS = {role: f"{role}\x00".encode() for role in ("system", "developer", "user", "assistant", "tool")}
_IMAGE_PART_TYPES = ("image_url", "input_image")


def normalised(text: str) -> str:
    """``text`` with every run of whitespace one space and none at either end.

    Most messages are already so, and telling costs less than splitting them: every character
    ``str.split`` takes for whitespace, but the plain space, is unprintable (checked over all of Unicode in
    the tests), so printable text without a double, leading or trailing space is its own normal form.
    """
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())


def _field(tag: bytes, value: str | bytes) -> bytes:
    """One length-prefixed field: no value can run into the next one."""
    data = value.encode() if isinstance(value, str) else value
    return tag + len(data).to_bytes(4, "big") + data


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _image_url(part: Mapping[str, Any]) -> str:
    image = part.get("image_url")
    if isinstance(image, Mapping):
        image = image.get("url")
    return normalised(image) if isinstance(image, str) else _canonical_json(image)


def _parts(content: Sequence[Any]) -> tuple[str, list[bytes]]:
    """The joined text of a list of content parts, and a field for each part that is not text."""
    texts: list[str] = []
    others: list[bytes] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str) and part.get("type") in ("text", None):
            texts.append(part["text"])
        elif isinstance(part, Mapping) and part.get("type") in _IMAGE_PART_TYPES:
            others.append(_field(b"m", blake2b(_image_url(part).encode(), digest_size=DIGEST_SIZE).digest()))
        else:
            others.append(_field(b"p", _canonical_json(part)))
    return "\n".join(texts), others


def _tool_call(call: Any) -> bytes:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        return _field(b"c", _canonical_json(call))
    arguments = function.get("arguments")
    arguments = normalised(arguments) if isinstance(arguments, str) else _canonical_json(arguments)
    return _field(b"c", str(function.get("name") or "")) + _field(b"a", arguments)


def _extras(message: Mapping[str, Any], others: list[bytes]) -> bytes:
    """A digest of what a message carries besides its role and text (tool calls, a tool result's call, images)."""
    fields = list(others)
    for call in message.get("tool_calls") or ():
        fields.append(_tool_call(call))
    call_id = message.get("tool_call_id")
    if call_id is not None:
        fields.append(_field(b"i", normalised(str(call_id))))
    return blake2b(b"".join(fields), digest_size=DIGEST_SIZE).digest()


def _fields(message: Any) -> Mapping[str, Any]:
    """The message as a mapping: a plain dict as it is, a pydantic model (the API's parsed body) as its dump."""
    if type(message) is dict or isinstance(message, Mapping):  # the exact type first: an ABC check costs more
        return message
    return cast(Mapping[str, Any], message.model_dump(exclude_none=True))


def digest(message: Any) -> bytes:
    """The canonical 16-byte digest of one client-visible message (see the module docstring for what counts)."""
    message = _fields(message)
    role = message.get("role")
    head = _ROLE_HEADS.get(role) if isinstance(role, str) else None
    if head is None:
        head = _field(b"r", str(role)) + b"\x00"
    content = message.get("content")
    others: list[bytes] = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text, others = _parts(content)
    else:
        text = "" if content is None else _canonical_json(content)
    extras = _NO_EXTRAS
    if others or message.get("tool_calls") or message.get("tool_call_id") is not None:
        extras = _extras(message, others)
    hasher = _MESSAGE_HASH.copy()
    hasher.update(head + extras + normalised(text).encode())
    return hasher.digest()


def chained(previous: bytes, message_digest: bytes) -> bytes:
    """One step of the chain: the hash of the conversation ``previous`` stands for, then that message."""
    hasher = _CHAIN_HASH.copy()
    hasher.update(previous + message_digest)
    return hasher.digest()


def chain(messages: Sequence[Any]) -> list[bytes]:
    """The prefix chain of ``messages``: item ``i - 1`` is ``h_i``, the hash of ``messages[:i]``."""
    hashes: list[bytes] = []
    append = hashes.append
    previous = ROOT
    copy = _CHAIN_HASH.copy
    for message in messages:  # chained() inlined: this loop runs once per message of every request
        hasher = copy()
        hasher.update(previous + digest(message))
        previous = hasher.digest()
        append(previous)
    return hashes


def extended(chain_tail: bytes | None, reply: Any) -> bytes:
    """The hash of the conversation ``chain_tail`` stands for (None: no messages) followed by ``reply``."""
    return chained(chain_tail or ROOT, digest(reply))


def history_end(messages: Sequence[Any]) -> int:
    """How many leading messages a stored session holds if the request continues it: everything up to and
    including the last assistant message (0 when there is none); the rest is the request's new turn."""
    for index in range(len(messages) - 1, -1, -1):
        if _fields(messages[index]).get("role") == "assistant":
            return index + 1
    return 0


@dataclass(frozen=True)
class Conversation:
    """A request's messages as the index sees them: its chain and the points where an answered turn ends.

    Index entries are only ever recorded right after an assistant message, so those are the only
    positions worth looking up: :attr:`prefix` (the whole history before the new turn, the fast path)
    and :meth:`earlier` (every shorter one, for an edited or regenerated conversation).
    """

    hashes: list[bytes]
    #: Positions ``i`` (ascending) where ``messages[i - 1]`` is an assistant message.
    answered: list[int]

    @property
    def end(self) -> int:
        """Where the history ends and the new turn starts (see :func:`history_end`)."""
        return self.answered[-1] if self.answered else 0

    def at(self, position: int) -> bytes:
        """``h_position``: the hash of the first ``position`` messages."""
        return self.hashes[position - 1] if position else ROOT

    @property
    def prefix(self) -> tuple[int, bytes]:
        """The history before the new turn, as ``(position, hash)``."""
        return self.end, self.at(self.end)

    def earlier(self) -> list[tuple[int, bytes]]:
        """The answered points before :attr:`prefix`, newest first, as ``(position, hash)``."""
        return [(position, self.hashes[position - 1]) for position in reversed(self.answered[:-1])]

    def after_reply(self, reply: Any) -> tuple[int, bytes]:
        """``(position, hash)`` of the conversation as the client will resend it once ``reply`` answers it."""
        return len(self.hashes) + 1, extended(self.hashes[-1] if self.hashes else None, reply)


def conversation(messages: Sequence[Any]) -> Conversation:
    """The request's :class:`Conversation`."""
    answered = [index + 1 for index, message in enumerate(messages) if _fields(message).get("role") == "assistant"]
    return Conversation(chain(messages), answered)


# --------------------------------------------------------------------------- a new session's history

#: The fields of a message the client sent that a stored message keeps (never a ``_`` key: those are
#: foldgate's own metadata, and a client must not be able to mark a message a summary or give it an id).
_KEPT_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")


def seed_message(message: Any) -> Message:
    """One message the client sent as foldgate stores it: OpenAI fields only, ``developer`` as ``system``
    (the same instruction under its older name, which every route takes), checked by
    :func:`agent.messages.validate_message` (which raises :class:`~agent.messages.InvalidMessage`)."""
    fields = _fields(message)
    seeded: dict[str, Any] = {key: fields[key] for key in _KEPT_FIELDS if fields.get(key) is not None}
    if seeded.get("role") == "developer":
        seeded["role"] = "system"
    if "content" not in seeded and seeded.get("role") == "assistant":
        seeded["content"] = None  # a tool-call message without text, as providers send it
    return validate_message(seeded)


def seed_messages(messages: Sequence[Any], end: int) -> list[Message]:
    """The history a new session starts with: the client's own ``messages[:end]`` (usually
    :attr:`Conversation.end`), not a copy of the session the request forked from — it is exactly what the
    client believes was said, and reading it costs nothing the request did not already carry."""
    return [seed_message(message) for message in messages[:end]]
