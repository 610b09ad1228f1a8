"""A model turn's commit: its messages (or the in-loop compaction) stored with its reply, fenced by the chat's
lock; and what a turn the provider cut short had done, kept for its retry.

Exactly-once replies start here: the turn's messages, its reply text and the items it made are
committed together with the inbox entry's id (``last_entry_id``), so a worker that finds the
entry committed only sends the recorded reply again (see :mod:`gateway.worker.turn`).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from agent.loop import TurnResult
from agent.tokens import count_message
from gateway.store import CompactionCommit, reply_meta
from gateway.worker.chat_turn import Answer, ChatTurn, Prepared
from gateway.worker.hygiene import estimate_session_tokens
from gateway.worker.parts import TurnParts

log = logging.getLogger(__name__)


async def commit(parts: TurnParts, turn: ChatTurn, prepared: Prepared, answer: Answer) -> None:
    """Commit the turn with its reply and the items it made for the person, fenced by the chat's lock; the
    answer is left with the reply and items to send (an earlier call's, when that call already committed
    this turn) and the context's size."""
    result, reply = answer.result, answer.reply
    # what the attempt the provider cut short had made for the person goes with this reply
    items = [*(turn.meta.partial_items if turn.meta.partial_entry_id else ()), *result.outgoing]
    fields = _commit_fields(turn, prepared, result, reply, items)
    if turn.meta.partial_entry_id:
        fields["partial_entry_id"] = fields["partial_items"] = None
    done = await _store(parts, turn, prepared, result, fields, compaction_id=f"{turn.entry_id}:turn")
    answer.context_tokens = _context_after(fields)
    answer.items = items
    if done is None:
        return
    # the size the agent compacted at (its count; the session's estimate where the engine gives none)
    stats = prepared.engine.last_compaction
    before = (stats.tokens_before if stats is not None else 0) or estimate_session_tokens(turn.meta)[0]
    turn.session_id = done.session_id
    if done.replayed:  # an earlier call of this holder committed the turn: the reply is the one it recorded
        turn.meta = recorded = await parts.store.meta(turn.chat, done.session_id)
        answer.reply, answer.items = recorded.last_reply or reply, recorded.last_reply_items
        await parts.compactions.publish(turn)
        return
    after = cast(int, fields["tokens_at_report"])  # the count _store set
    await parts.compactions.announce(turn, prepared.engine, done, result.messages, "in_loop", before, after)
    turn.meta = await parts.store.meta(turn.chat, done.session_id)
    await parts.compactions.publish(turn)


async def keep_partial(parts: TurnParts, turn: ChatTurn, prepared: Prepared, partial: TurnResult) -> None:
    """Store what a turn the provider failed had done — its messages, tool calls and results, an in-loop
    compaction — without a reply, marked so that its retry continues from there
    (:func:`gateway.worker.preparing.prepare`). A turn that ran no tool keeps nothing: its retry is the same
    turn again."""
    if not partial.compacted and not any(m.get("role") == "tool" for m in partial.new_messages):
        return
    fields = _commit_fields(turn, prepared, partial, "", [])
    ids = [turn.entry_id, *(m.entry_id for _, m in prepared.batch)]
    del fields["last_entry_id"], fields["last_reply"], fields["last_reply_items"]
    fields["partial_entry_id"] = ids[-1]
    # sent with the reply of the retry, which continues from here (a second cut keeps both)
    kept = [*(turn.meta.partial_items if turn.meta.partial_entry_id else ()), *partial.outgoing]
    fields["partial_items"] = kept or None
    fields["batch_entry_ids"] = "\n".join(ids[:-1]) or None  # a retry lets these go silently, as taken in
    await _store(parts, turn, prepared, partial, fields, compaction_id=f"{turn.entry_id}:partial")
    log.info(
        "%s: the provider went away mid-turn; its %d tool results are kept for the retry",
        turn.chat,
        sum(m.get("role") == "tool" for m in partial.messages[len(prepared.history) :]),
    )


async def _store(
    parts: TurnParts,
    turn: ChatTurn,
    prepared: Prepared,
    result: TurnResult,
    fields: dict[str, object],
    *,
    compaction_id: str,
) -> CompactionCommit | None:
    """Write the turn's messages with ``fields``, fenced: appended, or the whole live list when the agent
    compacted (then the commit, else None). A lost lock raises StaleLock, and nothing is delivered then."""
    store = parts.store
    if not result.compacted:
        new_messages = prepared.earlier + result.new_messages
        fields["tokens_at_report"] = turn.meta.tokens + sum(count_message(m) for m in new_messages)
        await store.append(turn.chat, turn.session_id, new_messages, lock=turn.lock, meta=fields)
        return None
    fields["tokens_at_report"] = sum(count_message(m) for m in result.messages)
    fields |= parts.compactions.memory_fields(turn, prepared.history, result.messages, result.folded)
    return await store.commit_compaction(
        turn.chat,
        turn.session_id,
        result.messages,
        lock=turn.lock,
        in_place=parts.compactions.compression.in_place,
        compaction_id=compaction_id,
        meta=fields,
        archive_new=result.folded,
    )


def _commit_fields(
    turn: ChatTurn, prepared: Prepared, result: TurnResult, reply: str, items: list[dict[str, Any]]
) -> dict[str, object]:
    meta = turn.meta
    totals = dict(meta.usage_totals)
    for name, value in result.usage.as_dict().items():
        totals[name] = int(totals.get(name, 0)) + value
    totals["turns"] = int(totals.get("turns", 0)) + 1
    batch_ids = [turn.entry_id, *(m.entry_id for _, m in prepared.batch)]
    fields: dict[str, object] = {
        "last_entry_id": batch_ids[-1],
        "batch_entry_ids": "\n".join(batch_ids) if prepared.batch else None,
        **reply_meta(reply, items),
        "usage_totals": totals,
        "last_prompt_tokens": result.last_usage.prompt_tokens + result.last_usage.completion_tokens or None,
    }
    engine_state = prepared.engine.export_state()
    if engine_state != meta.engine_state:  # unchanged most turns; a summary in it can be kilobytes
        fields["engine_state"] = engine_state
    if prepared.memory.view is not None:  # the memory block chosen for this session (an in-loop compaction clears it)
        fields["memory_view"] = prepared.memory.view
    return fields


def _context_after(fields: dict[str, object]) -> int:
    """The context's size as a commit's meta fields leave it: what hygiene will judge (the provider's
    report, else the stored count)."""
    # Both are ints (or None) as _commit_fields and _store set them; the dict holds other values too.
    return int(fields["last_prompt_tokens"] or fields["tokens_at_report"])  # type: ignore[call-overload]
