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
  synthetic "result missing" tool message; the stored call itself is left as it is, and the
  caller stores the stand-in right after it, so later reads find the pair whole (calls at the end
  that the turn's client brings the results of are the exception: they are left to pair with those);
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
    #: each stand-in result with the index, in the messages repaired, of the kept message it follows
    placed: list[tuple[int, Message]] = field(default_factory=list)

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
            parts.append(
                f"{len(self.unanswered)} unanswered tool call(s) given a stand-in ({', '.join(self.unanswered)})"
            )
        if self.reused:
            parts.append(
                f"{len(self.reused)} reused tool call id(s) left out of the request ({', '.join(self.reused)})"
            )
        return "; ".join(parts)


def missing_result(call_id: str) -> Message:
    """The stand-in for a call's result that was never stored."""
    return {"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT, SYNTHETIC_KEY: True}


def repair_transcript(messages: Sequence[Message], *, keep_trailing_pending: bool = False) -> Repair:
    """``messages`` with tool pairing a provider accepts; untouched messages are the same objects.

    A call left pending at the very end is answered too: a turn appends the user's message next,
    and a call pending before it is exactly what the provider refuses. With ``keep_trailing_pending``
    (the turn starts from the client's results for those calls) they are left for those results.
    """
    out: list[Message] = []
    repair = Repair(out)
    pending: list[str] = []
    used: set[str] = set()
    last_kept = -1  # index of the last message read that the repaired list keeps

    def close_pending() -> None:
        for call_id in pending:
            stand_in = missing_result(call_id)
            out.append(stand_in)
            repair.unanswered.append(call_id)
            repair.placed.append((last_kept, stand_in))
        pending.clear()

    # Messages kept unchanged go on uncopied.
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id in pending:
                pending.remove(call_id)
                out.append(message)
                last_kept = index
            else:
                repair.orphans.append(message)
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
                # A call without an id is kept as it is (its id None, answered like any other).
                used.add(call_id)  # type: ignore[arg-type]
                kept.append(call)
                pending.append(call_id)  # type: ignore[arg-type]
            if len(kept) != len(message.get("tool_calls") or ()):
                message = with_content(message, message.get("content"), tool_calls=kept)
                message.pop("_orig_id", None)  # a copy for this request only; the stored one stays as it is
                if not kept:
                    message.pop("tool_calls")
        out.append(message)
        last_kept = index
    if not keep_trailing_pending:
        close_pending()
    return repair


#: Stand-ins to store after one stored message: its id, the id read right after it (None when it was
#: the last) and the stand-ins in order.
Placement = tuple[str, str | None, Sequence[Message]]


class RepairStore(Protocol):
    """What :func:`repair_for_turn` needs of ``gateway.store.SessionStore``."""

    async def store_repair(
        self,
        chat: str,
        sid: str,
        version: int,
        keep: Sequence[Message],
        moved: Sequence[Message],
        reason: str,
        placements: Sequence[Placement],
    ) -> bool: ...


def placements(history: Sequence[Message], repair: Repair) -> list[Placement]:
    """The repair's stand-ins grouped by the stored message each goes right after.

    A stand-in whose neighbours are not both stored (a message added to the turn's copy only) has
    no place in the stored list to name, and stays in the turn's copy alone.
    """
    groups: dict[int, list[Message]] = {}
    for index, stand_in in repair.placed:
        groups.setdefault(index, []).append(stand_in)
    found: list[Placement] = []
    for index, stand_ins in groups.items():
        after = history[index].get("_id") if index >= 0 else None
        following = history[index + 1] if index + 1 < len(history) else None
        before = following.get("_id") if following is not None else None
        if after is None or (following is not None and before is None):
            continue
        for stand_in in stand_ins:  # dated with the call, so listings by time show it there
            if isinstance(history[index].get("_ts"), (int, float)):
                stand_in["_ts"] = history[index]["_ts"]
        found.append((str(after), None if before is None else str(before), stand_ins))
    return found


async def repair_for_turn(
    store: RepairStore,
    chat: str,
    sid: str,
    version: int,
    history: list[Message],
    *,
    keep_trailing_pending: bool = False,
) -> list[Message]:
    """The history a turn sends, repaired; what can be stored of the repair is stored once. With
    ``keep_trailing_pending`` the calls the history ends with await the turn's tool results (the client's).

    Stand-ins for unanswered calls are written into the stored transcript at their places and
    stored orphans are moved to the chat's quarantine, in one step fenced by ``version``, so the
    next turn reads a whole transcript and repairs (and logs) nothing. A step that loses a race
    with another write is left for the next turn's read: this turn's copy is repaired either way,
    so no turn fails on a broken transcript.
    """
    repair = repair_transcript(history, keep_trailing_pending=keep_trailing_pending)
    if not repair.changed:
        return history
    stored = [message for message in repair.orphans if "_id" in message]
    placed = placements(history, repair)
    applied = False
    if stored or placed:
        keep = [message for message in history if not any(message is orphan for orphan in stored)]
        applied = await store.store_repair(chat, sid, version, keep, stored, ORPHAN_REASON, placed)
    log.warning("%s/%s: %s: %s", chat, sid, _outcome(repair, stored, placed, applied), repair.describe())
    return repair.messages


def _outcome(repair: Repair, stored: Sequence[Message], placed: Sequence[Placement], applied: bool) -> str:
    """What became of the repair, for the log line: an operator sees whether it will come back."""
    if not (stored or placed):
        return "repaired the transcript for this turn only"
    if not applied:
        return "repaired the transcript for this turn (storing the repair waits for the next turn)"
    whole = (
        len(stored) == len(repair.orphans)
        and not repair.reused
        and sum(len(stand_ins) for _after, _before, stand_ins in placed) == len(repair.unanswered)
    )
    if whole:
        return "stored the transcript's repair"
    return "stored part of the transcript's repair (the rest is for this turn only)"
