"""Repair a live transcript, read for a turn, into one a provider accepts — message by message.

Reading a transcript checks each stored message's shape (the store quarantines bad ones), but a
provider also checks how the messages fit together: every tool result must answer a tool call of
the assistant message just before it, and every call must be answered before the next non-tool
message. One stored message that breaks those rules (a tool result whose call was lost, a call
whose result never got stored) would make every later request of the chat fail with
``InvalidRequest``. So the turn's copy is repaired here instead:

- a tool result that answers no pending call is taken out (the caller moves it to the chat's
  quarantine: it stays retrievable, never deleted);
- a tool call still unanswered when the next non-tool message (or the end) comes gets a
  synthetic "result missing" tool message; the stored call itself is left as it is;
- a tool call id used a second time is dropped from the copy sent (its result then reads as an
  orphan), since providers refuse reused ids.

:func:`repair_transcript` is pure; :func:`repair_for_turn` applies it for the gateway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.messages import SYNTHETIC_KEY, Message, tool_call_ids, with_content

log = logging.getLogger(__name__)

#: What the model reads in place of a tool result that was never stored.
MISSING_RESULT = "[tool result missing: this call's result was not recorded; run it again if it is still needed]"
#: The reason recorded with a tool result moved out of the live transcript.
ORPHAN_REASON = "tool result answers no preceding tool call"


@dataclass
class Repair:
    """The turn's transcript and what was changed to get it (all empty when nothing was wrong)."""

    messages: list[Message]
    #: tool results taken out of the transcript, as they were read
    orphans: list[Message] = field(default_factory=list)
    #: ids of tool calls given a synthetic result
    unanswered: list[str] = field(default_factory=list)
    #: ids of tool calls dropped from the copy because the id was used before
    reused: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.orphans or self.unanswered or self.reused)

    def describe(self) -> str:
        """One line for the operator's log."""
        parts = []
        if self.orphans:
            ids = [str(m.get("_id", "?")) for m in self.orphans]
            parts.append(f"{len(self.orphans)} orphan tool result(s) moved out (message ids {', '.join(ids)})")
        if self.unanswered:
            parts.append(f"{len(self.unanswered)} unanswered tool call(s) given a stand-in ({', '.join(self.unanswered)})")
        if self.reused:
            parts.append(f"{len(self.reused)} reused tool call id(s) left out of the request ({', '.join(self.reused)})")
        return "; ".join(parts)


def missing_result(call_id: str) -> Message:
    """The stand-in for a call's result that was never stored (not stored itself: rebuilt each read)."""
    return {"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT, SYNTHETIC_KEY: True}


def repair_transcript(messages: Sequence[Mapping[str, Any]]) -> Repair:
    """``messages`` with tool pairing a provider accepts; untouched messages are the same objects.

    A call left pending at the very end is answered too: a turn appends the user's message next,
    and a call pending before it is exactly what the provider refuses.
    """
    out: list[Message] = []
    repair = Repair(out)
    pending: list[str] = []
    used: set[str] = set()

    def close_pending() -> None:
        for call_id in pending:
            out.append(missing_result(call_id))
            repair.unanswered.append(call_id)
        pending.clear()

    for message in messages:
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id in pending:
                pending.remove(call_id)
                out.append(message)  # type: ignore[arg-type]
            else:
                repair.orphans.append(message)  # type: ignore[arg-type]
            continue
        close_pending()
        ids = tool_call_ids(message)
        if ids:
            kept: list[Any] = []
            for call in message.get("tool_calls") or ():
                call_id = call.get("id") if isinstance(call, Mapping) else None
                if call_id in used:
                    repair.reused.append(str(call_id))
                    continue
                used.add(call_id)  # type: ignore[arg-type]
                kept.append(call)
                pending.append(call_id)  # type: ignore[arg-type]
            if len(kept) != len(message.get("tool_calls") or ()):
                message = with_content(message, message.get("content"), tool_calls=kept)
                message.pop("_orig_id", None)  # a copy for this request only; the stored one stays as it is
                if not kept:
                    message.pop("tool_calls")
        out.append(message)  # type: ignore[arg-type]
    close_pending()
    return repair


class QuarantineStore(Protocol):
    """What :func:`repair_for_turn` needs of ``gateway.store.SessionStore``."""

    async def quarantine_messages(
        self, chat: str, sid: str, version: int, keep: Sequence[Message], moved: Sequence[Message], reason: str
    ) -> bool: ...


async def repair_for_turn(store: QuarantineStore, chat: str, sid: str, version: int,
                          history: list[Message]) -> list[Message]:
    """The history a turn sends, repaired; stored orphans are moved to the chat's quarantine.

    A move that loses a race with another write is left for the next turn's read: this turn's copy
    is repaired either way, so no turn fails on a broken transcript.
    """
    repair = repair_transcript(history)
    if not repair.changed:
        return history
    stored = [message for message in repair.orphans if "_id" in message]
    moved = False
    if stored:
        keep = [message for message in history if not any(message is orphan for orphan in stored)]
        moved = await store.quarantine_messages(chat, sid, version, keep, stored, ORPHAN_REASON)
    log.warning("%s/%s: repaired the transcript for this turn: %s%s", chat, sid, repair.describe(),
                "" if moved or not stored else " (the move to quarantine waits for the next turn)")
    return repair.messages
