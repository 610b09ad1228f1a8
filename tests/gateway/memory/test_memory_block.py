"""The memory block on its own: bounded by ``memory.max_tokens`` and by a tenth of a small window, its size known
without the tokenizer (never under what it really is), its choice kept until the session's view is cleared."""

from __future__ import annotations

from agent.tokens import count_text
from gateway.memory.block import MemoryReader
from gateway.platforms.base import IncomingMessage
from gateway.store.memory import PRIVATE, MemoryStore, group_scope
from gateway.store.meta import SessionMeta


def message(chat: str, user: str = "7") -> IncomingMessage:
    return IncomingMessage(platform="tg", chat_id=chat, user_id=user, user_name="Robin", update_id="1", text="hi")


async def test_the_block_is_bounded_sized_honestly_and_kept_until_cleared(channel, key_prefix) -> None:
    store = MemoryStore(channel, key_prefix)
    for n in range(60):
        text = f"fact number {n}: the flat has {n} plants and a cat called Miso number {n}"
        await store.add("tg:7", PRIVATE, text, source="remember", chat="tg:7", message_id=str(n))
    reader = MemoryReader(store, max_tokens=1_000)
    big = await reader.block(message("7"), SessionMeta(session_id="s"), 128_000)
    small = await reader.block(message("7"), SessionMeta(session_id="s"), 2_048)
    for block, bound in ((big, 1_000), (small, 204)):
        real = count_text(block.system) + (count_text(block.note) if block.note else 0)
        assert real <= block.tokens <= bound  # the estimate is never under the truth, and within the bound
        assert block.left_out > 0 and "fact number 59" in block.system  # the newest first
    assert small.tokens < big.tokens
    # a later request of the session shows the same entries, even once a newer one is kept
    await store.add("tg:7", PRIVATE, "moved to Leeds", source="tool", chat="tg:7", message_id="99")
    later = await reader.block(message("7"), SessionMeta(session_id="s", memory_view=big.view or {}), 128_000)
    assert later.system == big.system and later.view is None and "moved to Leeds" in later.note
    fresh = await reader.block(message("7"), SessionMeta(session_id="s"), 128_000)  # the view cleared: chosen again
    assert "moved to Leeds" in fresh.system


async def test_in_a_group_the_block_is_the_groups_and_the_speakers_alone(channel, key_prefix) -> None:
    store, group = MemoryStore(channel, key_prefix), group_scope("tg:-5")
    await store.add("", group, "standup is at nine", source="tool", chat="tg:-5", message_id="1")
    await store.add("tg:7", group, "Robin runs the standup", source="remember", chat="tg:-5", message_id="2")
    await store.add("tg:8", group, "Sam is on leave", source="remember", chat="tg:-5", message_id="3")
    await store.add("tg:7", PRIVATE, "Robin's private note", source="remember", chat="tg:7", message_id="4")
    block = await MemoryReader(store, 1_000).block(message("-5"), SessionMeta(session_id="s"), 128_000)
    assert "standup is at nine" in block.system and "Robin runs the standup" in block.note
    assert "Sam is on leave" not in block.system + block.note and "private note" not in block.system + block.note
