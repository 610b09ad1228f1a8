"""OpenAI-format chat messages: roles, tool-call pairs, and what a provider will accept.

Messages on the hot path are plain dicts, typed as the :class:`Message` TypedDict so that
every key code reads or writes is named and checked. Keys starting with ``_`` are foldgate's
own metadata (``_id``, ``_tok``, ``_ts``, ``_compressed_summary`` …, each listed on
:class:`Message`) and are stripped by :func:`to_api` before any request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypedDict, Unpack, cast

from agent.tokens import ITEMS_KEY, content_text

ROLES = frozenset({"system", "user", "assistant", "tool"})

#: Text that opens every compaction summary message (for the model to read; never how one is recognised).
SUMMARY_PREFIX = "[CONTEXT COMPACTION]"
#: Metadata flag on a compaction summary foldgate wrote: the only thing that makes a message one.
SUMMARY_KEY: Final = "_compressed_summary"
#: Metadata flag on messages foldgate synthesised (summaries, stand-in results, continuations).
SYNTHETIC_KEY: Final = "_synthetic"


class Message(TypedDict, total=False):
    """One chat message: the OpenAI fields a provider reads, then foldgate's own ``_`` metadata.

    Every key is optional to the type checker, because messages arrive from stores, tests and
    plugins in every state of completeness; :func:`validate_message` is what checks a message's
    shape at run time. Keys named by a constant elsewhere (``ITEMS_KEY``, ``REPLAY_KEY`` …) are
    ``Final`` literals there, so each read or write through them is checked against this list.
    """

    role: str
    content: str | list[Any] | None
    name: str
    tool_calls: list[dict[str, Any]]
    tool_call_id: str
    cache_control: dict[str, Any]  # Anthropic prompt-cache marker, set on request copies only

    _id: str  # the id the store gave this version of the message
    _ts: float  # when the message was stored or arrived, in Unix seconds
    _from: str  # a person's message: the sender's display name as their platform gave it (who said it, in notes)
    _user: str  # a person's message: who sent it, ``<platform>:<user id>`` (whose memory it may feed)
    _tok: int  # this message's cached token count (agent.tokens); dropped by every edit
    _orig_id: str  # on a copy standing in for a stored original (an edit, an excerpt): that original's ``_id``
    _session: str  # the session a message was read from, where a search spans a chat's conversations
    _compressed_summary: bool  # SUMMARY_KEY: a compaction summary foldgate wrote
    _synthetic: bool  # SYNTHETIC_KEY: foldgate wrote it (summary, stand-in result, continuation)
    _pruned_chars: int  # agent.compaction.prune: a tool result cleared for the summarizer, and how long it was
    _stubbed_chars: int  # agent.compaction.lean.STUBBED_KEY: a result cut to a stub, and how long it was
    _items: list[dict[str, Any]]  # agent.tokens.ITEMS_KEY: refs (see ItemRef) of the photos, files, voice it carries
    _responses_items: dict[str, Any]  # agent.llm.responses.REPLAY_KEY: opaque output items to replay (issuer, model)
    _codex: dict[str, Any]  # agent.llm.codex_transcript.THREAD_KEY: the codex thread and its compactions


class InvalidMessage(ValueError):
    """A message that cannot be stored or sent: names what is wrong with it."""


def validate_message(message: Any) -> Message:
    """Check one message's shape and return it; raise :class:`InvalidMessage` naming the fault."""
    checked: Message = message  # what the checks below establish, typed before isinstance narrows it to a bare dict
    if not isinstance(message, dict):
        raise InvalidMessage(f"message must be an object, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise InvalidMessage(f"role must be one of {sorted(ROLES)}, got {role!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise InvalidMessage(f"content must be a string, a list of parts or null, got {type(content).__name__}")
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise InvalidMessage("tool message needs a string tool_call_id")
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise InvalidMessage("tool_calls must be a list on an assistant message")
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                raise InvalidMessage("every tool call needs a string id")
            if not isinstance(call.get("function"), dict):
                raise InvalidMessage(f"tool call {call.get('id')!r} has no function")
    return checked


# --------------------------------------------------------------------------- items a message carries

ItemKind = Literal["image", "document", "audio", "voice"]


class ItemRef(TypedDict, total=False):
    """One photo, document or voice message a message carries, under its ``_items`` (never its bytes).

    The bytes are kept by content hash (``sha``) in the chat's media store. ``w``/``h`` are the stored
    image's pixels, ``pages`` a PDF's, ``seconds`` audio's length; ``error`` says why an item could not
    be taken in. ``origin`` is foldgate's own: the id of the message an item was sent with, on a ref
    that another message carries (a ``session_fetch`` result, a compaction summary).
    """

    kind: ItemKind
    sha: str
    name: str
    mime: str
    bytes: int
    file_id: str
    w: int
    h: int
    pages: int
    seconds: float
    error: str
    origin: str


#: Longest item name a stand-in line shows.
MAX_ITEM_NAME_CHARS = 80


def item_refs(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The refs under a message's ``_items`` (empty for a message without items)."""
    refs = message.get(ITEMS_KEY)
    if not refs or not isinstance(refs, list):
        return []
    return [ref for ref in refs if isinstance(ref, Mapping)]


def is_sendable_image(ref: Mapping[str, Any]) -> bool:
    """An image that was taken in and stored: one the model can be shown."""
    return ref.get("kind") == "image" and not ref.get("error") and bool(ref.get("sha"))


def _clean_name(name: Any) -> str:
    text = " ".join(str(name or "").split()).replace("[", "(").replace("]", ")")
    return text if len(text) <= MAX_ITEM_NAME_CHARS else text[: MAX_ITEM_NAME_CHARS - 1] + "…"


def duration_text(seconds: float) -> str:
    """``0:12``, ``3:05``, ``1:02:03``: a length as people read it."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def stand_in(message_id: Any, ref: Mapping[str, Any], *, speaker: str = "") -> str:
    """The one line the model sees for an item not shown inline, and that a summary keeps when the item's
    message is folded away: ``[image m231: photo.jpg, 1280×960, from Ada]``, ``[document m240: invoice.pdf,
    3 pages]``, ``[voice m250: 0:12]``. It names the message id, so ``session_fetch`` can give the item back."""
    kind = str(ref.get("kind") or "file")
    ident = str(ref.get("origin") or message_id or "")
    details = [_clean_name(ref.get("name")), *_measures(kind, ref)]
    if speaker.strip():
        details.append(f"from {_clean_name(speaker)}")
    if ref.get("error"):
        details.append(f"not taken in: {' '.join(str(ref['error']).split())}")
    shown = ", ".join(detail for detail in details if detail)
    head = f"{kind} {ident}" if ident else kind
    return f"[{head}: {shown}]" if shown else f"[{head}]"


def _measures(kind: str, ref: Mapping[str, Any]) -> list[str]:
    """How big the item is, as far as its ref says: an image's size, a document's pages, a recording's length."""
    measures = []
    width, height = _count(ref.get("w")), _count(ref.get("h"))
    if kind == "image" and width and height:
        measures.append(f"{width}×{height}")
    if _count(ref.get("pages")):
        pages = ref["pages"]
        measures.append(f"{pages} page" + ("" if pages == 1 else "s"))
    seconds = ref.get("seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0:
        measures.append(duration_text(float(seconds)))
    return measures


def speaker_of(message: Mapping[str, Any]) -> str:
    """Who sent a message, where the message names them (a user message's ``name``)."""
    name = message.get("name")
    return name if isinstance(name, str) else ""


def stand_in_lines(message: Mapping[str, Any]) -> list[str]:
    """A :func:`stand_in` line for each item the message carries."""
    speaker = speaker_of(message)
    ident = message.get("_id") or message.get("_orig_id")  # an edited copy's items are its original's
    return [stand_in(ident, ref, speaker=speaker) for ref in item_refs(message)]


def carried_images(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Copies of a message's sendable image refs for another message to carry, each naming (``origin``) the
    message it came with, so its stand-in still points there."""
    ident = message.get("_id") or message.get("_orig_id")
    out = []
    for ref in item_refs(message):
        if is_sendable_image(ref):
            origin = ref.get("origin") or ident
            out.append({**ref, "origin": str(origin)} if origin else dict(ref))
    return out


def text_of(message: Mapping[str, Any]) -> str:
    """The message's text content (list parts joined)."""
    return content_text(message.get("content"))


def with_content(message: Message, content: Any, /, **extra: Unpack[Message]) -> Message:
    """A copy of ``message`` with new content: a new version, so it loses the stored id and token count
    (``_id`` and ``_tok`` describe one stored version and must not survive an edit).

    The original keeps its ``_id`` and goes to the archive when the edited copy replaces it;
    the copy records where it came from in ``_orig_id``. ``extra`` sets further keys on the copy.
    """
    copy = message.copy()
    copy.pop("_tok", None)
    copy.pop("_id", None)
    if "_id" in message:
        copy["_orig_id"] = message["_id"]
    copy["content"] = content
    copy.update(extra)
    return copy


def tool_call_ids(message: Mapping[str, Any]) -> list[str]:
    """Ids of the tool calls an assistant message makes (empty for other messages)."""
    if message.get("role") != "assistant":
        return []
    return [call["id"] for call in message.get("tool_calls") or () if isinstance(call, Mapping) and "id" in call]


def tool_names_by_call_id(messages: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``tool_call_id -> function name`` for the calls the messages make (a tool result names no tool itself)."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                names[call["id"]] = str((call.get("function") or {}).get("name") or "tool")
    return names


def is_tool_result(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "tool"


def is_summary(message: Mapping[str, Any]) -> bool:
    """A compaction summary foldgate wrote: marked so in its stored metadata.

    Never recognised by its text: a person can type the prefix, and a message taken for the
    notes would be handed to the summarizer as the notes to update and left out of the quotes.
    """
    return bool(message.get(SUMMARY_KEY))


def is_real_user_message(message: Mapping[str, Any]) -> bool:
    """A message a person typed: user role, non-empty, not a summary, handoff or synthetic line."""
    if message.get("role") != "user" or message.get(SYNTHETIC_KEY):
        return False
    text = text_of(message).strip()
    return bool(text) and not is_summary(message)


def to_api(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Copies of the messages without foldgate's ``_`` metadata, ready for a provider."""
    return [_api_copy(message) for message in messages]


def _api_copy(message: Mapping[str, Any]) -> Message:
    # Copy and delete (most keys stay) rather than rebuild key by key: it runs over the whole
    # prompt before every request. Any ``_`` key goes, named on Message or not, so the keys
    # deleted are not literals the type checker could follow: the copy is typed once, here.
    copy = dict(message)
    for key in message:
        if key[:1] == "_":
            del copy[key]
    return cast(Message, copy)


class _Pairing:
    """Follows the tool-call pairing rules message by message (see :func:`pair_problems`)."""

    __slots__ = ("problems", "pending", "open_calls")

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.pending: set[str] = set()
        self.open_calls: set[str] = set()

    def see(self, index: int, message: Mapping[str, Any]) -> None:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id in self.pending:
                self.pending.discard(call_id)
            else:
                self.problems.append(f"message {index}: tool result {call_id!r} has no preceding call")
            return
        if self.pending:
            self.problems.append(f"message {index}: tool calls {sorted(self.pending)} have no result")
            self.pending = set()
        calls = message.get("tool_calls")
        if role == "assistant" and calls and isinstance(calls, list):
            ids = [call_id for call_id in tool_call_ids(message) if isinstance(call_id, str)]
            duplicates = self.open_calls.intersection(ids)
            if duplicates:
                self.problems.append(f"message {index}: tool call ids reused {sorted(duplicates)}")
            self.pending = set(ids)
            self.open_calls.update(ids)

    def end(self) -> list[str]:
        if self.pending:
            self.problems.append(f"end: tool calls {sorted(self.pending)} have no result")
        return self.problems


def pair_problems(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every way the list breaks the tool-call pairing rules providers enforce (empty = valid).

    Each assistant tool call must be answered by a tool message with its id before the
    next non-tool message, and every tool message must answer a call made just before it.
    """
    pairing = _Pairing()
    for index, message in enumerate(messages):
        pairing.see(index, message)
    return pairing.end()


def checked_api_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[list[Message], list[str]]:
    """The messages as a provider takes them (:func:`to_api`) and every problem that would make a
    provider refuse them (shapes, then tool pairing): the one check run before every API request,
    in a single pass over the prompt."""
    api: list[Message] = []
    shapes: list[str] = []
    pairing = _Pairing()
    for index, message in enumerate(messages):
        try:
            validate_message(message)
        except InvalidMessage as error:
            shapes.append(f"message {index}: {error}")
            if isinstance(message, Mapping):
                pairing.see(index, message)  # its pairs still count, or whole pairs around it would look broken
            continue
        api.append(_api_copy(message))
        pairing.see(index, message)
    return api, shapes + pairing.end()


def api_problems(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Shape problems plus pairing problems (see :func:`checked_api_messages`)."""
    return checked_api_messages(messages)[1]


def with_note(message: Message, note: str) -> Message:
    """A copy of ``message`` whose content starts with ``note`` (its own text or parts after it)."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": note}, *content]}
    text = content if isinstance(content, str) else ""
    return {**message, "content": f"{note}\n\n{text}" if text else note}
