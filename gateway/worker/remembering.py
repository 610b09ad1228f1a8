"""The memory a turn's requests carry (:mod:`gateway.memory.block`): chosen before the turn (again when a
compaction before it cleared the session's choice), its choice kept in the session's meta by the turn's own commit,
its entries marked used, and the person told once when theirs is full; and the chats each person took part in, for
``session_search`` over their chats."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.access.roles import person_of
from gateway.memory.block import FULL_NOTICE, MemoryBlock
from gateway.memory.scopes import is_private
from gateway.platforms.base import IncomingMessage
from gateway.worker.chat_turn import ChatTurn
from gateway.worker.parts import TurnParts

#: How long a person told their memory is full is not told again in the same chat.
FULL_NOTICE_SECONDS = 180 * 86_400


async def memory_block(
    parts: TurnParts, turn: ChatTurn, notes: list[str], window: int, chosen: MemoryBlock | None
) -> MemoryBlock:
    """The block of this turn's requests: ``chosen`` before the turn's compactions, unless one of them cleared the
    session's choice; a first choice this session goes into the session's meta with the turn's commit
    (:func:`gateway.worker.committing.commit`)."""
    block = chosen if chosen is not None else await parts.memory.block(turn.message, turn.meta, window)
    if block.view is not None:
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
