"""The memory a turn's requests carry (:mod:`gateway.memory.block`): chosen after any compaction before the turn,
its choice kept in the session's meta, its entries marked used, and the person told once when theirs is full;
and the chats each person took part in, for ``session_search`` over their chats."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.memory.block import FULL_NOTICE, MemoryBlock
from gateway.memory.scopes import is_private, person_of
from gateway.platforms.base import IncomingMessage
from gateway.worker.chat_turn import ChatTurn
from gateway.worker.parts import TurnParts

#: How long a person told their memory is full is not told again in the same chat.
FULL_NOTICE_SECONDS = 180 * 86_400


async def memory_block(parts: TurnParts, turn: ChatTurn, notes: list[str], window: int) -> MemoryBlock:
    """The block of this turn's requests; a first choice this session is stored (fenced by the turn's lock)."""
    block = await parts.memory.block(turn.message, turn.meta, window)
    if block.view is not None:
        await parts.store.update_meta(turn.chat, turn.session_id, lock=turn.lock, memory_view=block.view)
        turn.meta = await parts.store.meta(turn.chat, turn.session_id)
        await parts.memory.used(block)
    if block.left_out and await parts.told.first_for(
        turn.chat, f"memory-full:{turn.message.user_id}", FULL_NOTICE_SECONDS
    ):
        notes.append(FULL_NOTICE.format(count=block.left_out))
    return block


async def took_part(parts: TurnParts, chat: str, messages: Sequence[IncomingMessage]) -> None:
    """Note that the senders of ``messages`` took part in ``chat`` (what ``session_search``'s ``my chats`` reads);
    before the turn's tools are offered, so a first message's chat is one of the person's already."""
    senders = {person_of(m): m for m in messages if m.user_id}
    for person, message in senders.items():
        await parts.person_chats.note(person, chat, private=is_private(message), when=message.ts)
