"""The memory store on its own: one person's entries by scope, newest and most used first; the same text kept
once a scope; replace and remove by number or text; a group's own memory under its chat's tag; every call's keys
on one Redis Cluster slot."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from gateway.store.memory import PRIVATE, MemoryStore, group_scope

GROUP = group_scope("tg:-100")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


async def test_entries_by_scope_in_order_with_duplicates_kept_once(channel, key_prefix) -> None:
    store = MemoryStore(channel, key_prefix, max_entry_chars=50, clock=Clock())
    first = await store.add("tg:1", PRIVATE, "likes tea", source="remember", chat="tg:1", message_id="7")
    again = await store.add("tg:1", PRIVATE, " likes tea ", source="tool", chat="tg:1", message_id="8")
    assert first.changed and not again.changed and again.entry == first.entry
    await store.add("tg:1", PRIVATE, "lives in Oslo", source="compaction", chat="tg:1", message_id="9")
    await store.add("tg:1", GROUP, "likes tea", source="remember", chat="tg:-100", message_id="3")  # another scope
    assert [e.text for e in await store.entries("tg:1", PRIVATE)] == ["lives in Oslo", "likes tea"]
    await store.touch("tg:1", [1])  # used now: it moves up
    listed = await store.entries("tg:1", PRIVATE)
    assert [(e.number, e.text, e.uses) for e in listed] == [(1, "likes tea", 1), (2, "lives in Oslo", 0)]
    assert (listed[1].source, listed[1].chat, listed[1].message_id) == ("compaction", "tg:1", "9")
    assert [e.number for e in await store.entries("tg:1", GROUP)] == [3]
    assert await store.count("tg:1") == 3 and await store.count("tg:1", PRIVATE) == 2
    assert await store.entries("tg:2") == []


async def test_replace_remove_and_forget(channel, key_prefix) -> None:
    store = MemoryStore(channel, key_prefix, clock=Clock())
    for text in ("a", "b", "c"):
        await store.add("tg:1", PRIVATE, text, source="tool", chat="tg:1", message_id=text)
    replaced = await store.replace("tg:1", PRIVATE, "a", "A")
    assert replaced.changed and replaced.entry is not None and (replaced.entry.number, replaced.entry.text) == (1, "A")
    assert not (await store.replace("tg:1", PRIVATE, "A", "b")).changed  # "b" is kept already: nothing changes
    assert (await store.replace("tg:1", PRIVATE, "zzz", "y")).entry is None
    assert (await store.add("tg:1", PRIVATE, "a", source="tool", chat="tg:1", message_id="x")).changed  # "a" is free
    removed = await store.remove("tg:1", "b")
    assert removed is not None and removed.number == 2
    assert await store.remove("tg:1", 2) is None and await store.remove("tg:1", "nothing") is None
    assert sorted(e.text for e in await store.entries("tg:1")) == ["A", "a", "c"]
    await store.add("tg:1", GROUP, "g", source="tool", chat="tg:-100", message_id="1")
    assert await store.forget_all("tg:1", GROUP) == 1
    assert await store.forget_all("tg:1") == 3
    assert await store.entries("tg:1") == []


async def test_a_groups_own_memory_sits_with_the_group(channel, key_prefix) -> None:
    store = MemoryStore(channel, key_prefix, clock=Clock())
    rule = await store.add("", GROUP, "English only here", source="tool", chat="tg:-100", message_id="5")
    assert rule.entry is not None and rule.entry.number == 1
    assert [e.text for e in await store.entries("", GROUP)] == ["English only here"]
    assert await store.entries("tg:1") == []  # no person's
    assert all("{tg:-100}" in key for key in store.keys("", GROUP))
    with pytest.raises(ValueError):
        store.keys("", PRIVATE)


async def test_a_process_reading_again_sees_every_change_another_made(channel, key_prefix) -> None:
    """Each process keeps the entries it parsed; whatever another process changes is read at its next call."""
    reader, writer = MemoryStore(channel, key_prefix), MemoryStore(channel, key_prefix)
    await writer.add("tg:1", PRIVATE, "likes tea", source="remember", chat="tg:1", message_id="1")
    assert [e.text for e in await reader.entries("tg:1")] == ["likes tea"]
    assert (await reader.entries("tg:1"))[0].tokens == 2  # counted once, when written
    changes = [
        writer.add("tg:1", PRIVATE, "lives in Oslo", source="tool", chat="tg:1", message_id="2"),
        writer.replace("tg:1", PRIVATE, "likes tea", "likes green tea"),
        writer.touch("tg:1", [1]),
        writer.remove("tg:1", "lives in Oslo"),
    ]
    seen = []
    for change in changes:
        await change
        seen.append([(e.text, e.uses) for e in await reader.entries("tg:1")])
    assert seen == [
        [("lives in Oslo", 0), ("likes tea", 0)],
        [("lives in Oslo", 0), ("likes green tea", 0)],
        [("likes green tea", 1), ("lives in Oslo", 0)],
        [("likes green tea", 1)],
    ]
    await writer.forget_all("tg:1")
    assert await reader.entries("tg:1") == []  # emptied: not the list read before


async def test_what_was_said_before_it_was_forgotten_is_not_kept_again(channel, key_prefix) -> None:
    """A fold of older messages must not bring back what the person forgot: an entry learned from a message said
    before the person forgot it (that entry, that scope, or everything) is not kept; what they say after is."""
    clock = Clock()
    store = MemoryStore(channel, key_prefix, clock=clock)

    async def folded(text: str, said_at: float, scope: str = PRIVATE) -> bool:
        added = await store.add("tg:1", scope, text, source="compaction", chat="tg:1", message_id="1", said_at=said_at)
        return added.entry is not None

    first = await store.add("tg:1", PRIVATE, "likes tea", source="remember", chat="tg:1", message_id="1")
    assert first.entry is not None
    await store.remove("tg:1", first.entry.number)
    forgot_tea = clock.now
    assert not await folded("likes tea", forgot_tea - 10)  # said before it was forgotten
    assert await folded("lives in Oslo", forgot_tea - 10)  # another text: that one was never forgotten
    assert await folded("likes tea", forgot_tea + 10)  # said again afterwards: kept again
    await store.forget_all("tg:1", GROUP)  # one scope
    assert not await folded("leads the standup", clock.now - 1, GROUP)
    assert await folded("plays chess", clock.now - 1)  # the private scope was not forgotten
    await store.forget_all("tg:1")
    everything = clock.now
    assert not await folded("plays chess", everything - 1) and not await folded("swims", everything - 1, GROUP)
    assert await folded("swims", everything + 1)
    assert [e.text for e in await store.entries("tg:1")] == ["swims"]


def test_every_call_stays_on_one_slot_and_bad_input_is_refused() -> None:
    store = MemoryStore(channel=None, prefix="fg", max_entry_chars=10)  # type: ignore[arg-type]
    for person, scope in (("tg:1", PRIVATE), ("tg:1", GROUP), ("", GROUP)):
        assert len({key_slot(key.encode()) for key in store.keys(person, scope)}) == 1
    assert store.refusal("   ") == "empty"
    assert store.refusal("x" * 11) == "11 characters, over the limit of 10 (memory.max_entry_chars)"
    assert store.refusal("fine") is None
    with pytest.raises(ValueError):
        store.keys("tg:{1}", PRIVATE)
    with pytest.raises(ValueError):
        group_scope("")
