"""Stored messages as the pages show them: who said it, the text, the tool calls, its items, and where it sits.

The pages never show a system prompt or foldgate's private fields; a compaction summary is shown
as such (foldgate's own flag, never its text, says what one is), a tool's output under its tool.
Long texts are cut on the page with a link to the whole message. A message's photos, documents
and voice (its ``_items`` refs) are shown as :class:`ItemView`: an image as a thumbnail of the
stored bytes, anything else by its name and size, and the reason when it could not be taken in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent import json_codec
from agent.messages import duration_text, is_sendable_image, is_summary, item_refs, text_of, tool_names_by_call_id
from gateway.media.units import size_text
from gateway.platforms.base import IncomingMessage, MediaItem
from gateway.web.live_adapter import uploaded
from gateway.web.media_files import SHOWN_TYPES

#: Characters of one message shown inline; the message's own page shows all of it.
INLINE_CHARS = 4_000
#: Characters of a tool call's arguments shown beside its name.
ARGUMENT_CHARS = 160


@dataclass(frozen=True)
class ItemView:
    """One photo, document or voice message of a message, as its page shows it."""

    kind: str
    name: str
    #: "3.1 MB", and what else is known ("2 pages", "0:12").
    about: str
    #: The stored image the page shows as a thumbnail ("" for none: not an image, or not stored).
    sha: str = ""
    width: int = 0
    height: int = 0
    error: str = ""


def item_view(ref: Mapping[str, Any]) -> ItemView:
    """A ref under ``_items`` as shown."""
    facts = [size_text(int(ref.get("bytes") or 0))] if ref.get("bytes") else []
    if ref.get("pages"):
        facts.append(f"{ref['pages']} page{'s' if ref['pages'] != 1 else ''}")
    if ref.get("seconds"):
        facts.append(duration_text(float(ref["seconds"])))
    shown = is_sendable_image(ref) and str(ref.get("mime") or "") in SHOWN_TYPES
    return ItemView(
        kind=str(ref.get("kind") or "document"),
        name=str(ref.get("name") or ""),
        about=", ".join(facts),
        sha=str(ref["sha"]) if shown else "",
        width=int(ref.get("w") or 0),
        height=int(ref.get("h") or 0),
        error=str(ref.get("error") or ""),
    )


def sent_item_view(item: MediaItem) -> ItemView:
    """An item of a message still waiting for its turn: a file sent from the page is shown from its upload."""
    named = uploaded(item.file_id)
    shown = named is not None and item.kind == "image" and item.mime in SHOWN_TYPES
    return ItemView(
        kind=item.kind,
        name=item.name,
        about=size_text(item.size) if item.size else "",
        sha=named[1] if shown and named else "",
    )


@dataclass(frozen=True)
class Bubble:
    """One message on a page."""

    message_id: str
    #: ``user``, ``assistant``, ``tool``, ``summary`` or ``waiting`` (sent, not answered yet).
    role: str
    text: str
    ts: float = 0.0
    tool_calls: list[str] = field(default_factory=list)
    tool_name: str = ""
    cut: bool = False  # the text is longer than the page shows
    items: list[ItemView] = field(default_factory=list)


def _call_line(call: Mapping[str, Any]) -> str:
    function = call.get("function") or {}
    arguments = str(function.get("arguments") or "")
    try:
        arguments = json_codec.dumps_text(json_codec.loads(arguments)) if arguments else ""
    except ValueError:
        pass
    if len(arguments) > ARGUMENT_CHARS:
        arguments = arguments[:ARGUMENT_CHARS] + "…"
    return f"{function.get('name') or '?'}({arguments})"


def bubble(
    message: Mapping[str, Any], tool_names: Mapping[str, str], *, inline_chars: int = INLINE_CHARS
) -> Bubble | None:
    """The message as shown, or None for what the pages never show (system prompts)."""
    role = str(message.get("role"))
    if role == "system":
        return None
    text = text_of(message)
    cut = len(text) > inline_chars
    shown_role = "summary" if is_summary(message) else role
    return Bubble(
        message_id=str(message.get("_id", "")),
        role=shown_role,
        text=text[:inline_chars] + ("…" if cut else ""),
        ts=float(message.get("_ts") or 0.0),
        tool_calls=[_call_line(c) for c in message.get("tool_calls") or ()],
        tool_name=tool_names.get(str(message.get("tool_call_id")), "") if role == "tool" else "",
        cut=cut,
        items=[item_view(ref) for ref in item_refs(message)],
    )


def bubbles(messages: Sequence[Mapping[str, Any]], *, inline_chars: int = INLINE_CHARS) -> list[Bubble]:
    names = tool_names_by_call_id(messages)
    shown = (bubble(message, names, inline_chars=inline_chars) for message in messages)
    return [b for b in shown if b is not None]


def waiting(entries: Iterable[str]) -> list[Bubble]:
    """Inbox entries (raw JSON) not answered yet, as the person's messages waiting for their turn."""
    shown = []
    for raw in entries:
        try:
            message = IncomingMessage.model_validate_json(raw)
        except ValueError:
            continue
        cut = len(message.text) > INLINE_CHARS
        shown.append(
            Bubble(
                message_id=message.update_id,
                role="waiting",
                text=message.text[:INLINE_CHARS] + ("…" if cut else ""),
                ts=message.ts,
                cut=cut,
                items=[sent_item_view(item) for item in message.items],
            )
        )
    return shown


def around(messages: Sequence[Mapping[str, Any]], message_id: str, radius: int) -> tuple[list[Bubble], int] | None:
    """The message ``message_id`` with up to ``radius`` shown messages before and after it, and its
    position in that list; None when the conversation has no such message."""
    shown = bubbles(messages, inline_chars=1_000_000)
    position = next((i for i, b in enumerate(shown) if b.message_id == message_id), None)
    if position is None:
        return None
    start = max(0, position - radius)
    return shown[start : position + radius + 1], position - start
