"""How a foldgate transcript records its codex thread, and what of it the thread has not seen.

The app-server keeps the conversation; foldgate's store keeps the visible history. The
two are tied by :data:`THREAD_KEY` on each assistant message (written by
:class:`AppServerCompletion`, read by :func:`thread_of` and :func:`pending_input`), so the
engine and the chat model read the same record and the store persists it like any ``_`` key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agent.llm.types import Completion
from agent.messages import Message
from agent.tokens import content_text

#: Assistant-message key recording the codex thread and what happened to it during that turn.
THREAD_KEY: Final = "_codex"


def thread_of(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The codex thread this conversation lives on: the newest assistant message that names one."""
    for message in reversed(messages):
        record = message.get(THREAD_KEY)
        if message.get("role") == "assistant" and isinstance(record, Mapping) and record.get("thread"):
            return str(record["thread"])
    return None


def pending_input(messages: Sequence[Mapping[str, Any]]) -> str:
    """What the thread has not seen yet: the messages after its last reply, or the whole conversation for a new thread.

    A new thread for a conversation that already has history (the chat moved to this route)
    gets that history as context, since codex cannot read foldgate's store.
    """
    last = max(
        (i for i, m in enumerate(messages) if m.get("role") == "assistant" and isinstance(m.get(THREAD_KEY), Mapping)),
        default=None,
    )
    if last is not None:
        fresh = [m for m in messages[last + 1 :] if m.get("role") == "user"]
        return "\n\n".join(content_text(m.get("content")) for m in fresh)
    return _whole_conversation(messages)


def _whole_conversation(messages: Sequence[Mapping[str, Any]]) -> str:
    """The conversation as one first message for a new thread: the instructions, what was said so far, and the
    newest user message last (alone when there is nothing before it, so a fresh chat reads as itself)."""
    system = [content_text(m.get("content")) for m in messages if m.get("role") == "system"]
    others = [m for m in messages if m.get("role") in ("user", "assistant")]
    newest = others[-1] if others and others[-1].get("role") == "user" else None
    earlier = others[:-1] if newest is not None else others
    parts = []
    if system:
        parts.append("Instructions:\n" + "\n\n".join(system))
    if earlier:
        parts.append(
            "Conversation so far:\n" + "\n".join(f"{m['role']}: {content_text(m.get('content'))}" for m in earlier)
        )
    if newest is not None:
        parts.append(
            content_text(newest.get("content")) if not parts else "New message:\n" + content_text(newest.get("content"))
        )
    return "\n\n".join(parts)


@dataclass(frozen=True)
class AppServerCompletion(Completion):
    """A turn's reply, recording its thread and any compaction on the assistant message."""

    thread: dict[str, Any] = field(default_factory=dict)

    @property
    def native_compactions(self) -> int:
        """The app-server's compactions of the thread during the turn, on its own or at foldgate's threshold."""
        return sum(int(count) for count in (self.thread.get("compactions") or {}).values())

    def as_message(self) -> Message:
        message = super().as_message()
        message[THREAD_KEY] = dict(self.thread)
        return message
