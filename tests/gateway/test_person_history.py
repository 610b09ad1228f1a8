"""session_search with scope "my chats": what a person said in their private chat, in a group, or before a /new
is found from their other chats, and fetched back by the id the search gave; another person's private chat is
never read, not even when they share groups; a private chat is never pulled into a group; "this chat" searches
as it always did."""

from __future__ import annotations

import json
from typing import Any

from redis.crc import key_slot

from agent.tools import recovery_tools
from agent.tools.recovery import SEARCH_PARAMETERS
from gateway.person_history import PersonHistory, own_private_chat
from gateway.session_source import ChatHistory
from gateway.store import SessionStore
from gateway.store.memory import MemoryStore
from gateway.store.person_chats import PersonChats

ANN, BOB = "tg:42", "tg:7"
ANN_PRIVATE, BOB_PRIVATE, TEAM, BOOK_CLUB = "tg:42", "tg:7", "tg:-100", "tg:-200"
LOCKER = "my gym locker code is 4471, do not tell anyone"
OFFSITE = "the offsite is in Lisbon on June 3rd, flights are booked"
NOVEL = "next month we read The Dispossessed by Le Guin"
BOB_SECRET = "my bank PIN reminder word is zanzibarquokka"
BOB_IN_GROUP = "the build server password rotates every Friday"


async def say(store: SessionStore, chats: PersonChats, chat: str, person: str, text: str, private: bool) -> str:
    """``person``'s message and the bot's answer stored in ``chat`` as a turn stores them; the person's chats noted."""
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    assert lock is not None
    try:
        name = "Ann" if person == ANN else "Bob"
        stored = [
            {"role": "user", "content": text, "_user": person, "_from": name},
            {"role": "assistant", "content": "noted"},
        ]
        await store.append(chat, sid, stored, lock=lock)
    finally:
        await store.release_lock(lock)
    await chats.note(person, chat, private=private, when=float(stored[0]["_ts"]))
    return str(stored[0]["_id"])


async def new_conversation(store: SessionStore, chat: str) -> str:
    lock = await store.acquire_lock(chat, 30)
    assert lock is not None
    try:
        return await store.new_session(chat, lock=lock)
    finally:
        await store.release_lock(lock)


async def compact(store: SessionStore, chat: str) -> None:
    """Fold all but the last two messages of the chat's session into its archive, as a compaction does."""
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    assert lock is not None
    try:
        active = await store.active(chat, sid)
        summary = {"role": "user", "content": "[summary] earlier talk", "_synthetic": "summary"}
        await store.commit_compaction(chat, sid, [summary, *active[-2:]], lock=lock, in_place=True, compaction_id="c1")
    finally:
        await store.release_lock(lock)


async def world(store: SessionStore, chats: PersonChats) -> dict[str, Any]:
    """Ann's private chat (two conversations), two groups with Ann and Bob, and Bob's private chat."""
    first = await store.current_session(ANN_PRIVATE)
    locker = await say(store, chats, ANN_PRIVATE, ANN, LOCKER, True)
    await new_conversation(store, ANN_PRIVATE)
    await say(store, chats, ANN_PRIVATE, ANN, "let us plan the weekend instead", True)
    team = await store.current_session(TEAM)
    offsite = await say(store, chats, TEAM, ANN, OFFSITE, False)
    await say(store, chats, TEAM, BOB, BOB_IN_GROUP, False)
    for number in range(4):
        await say(store, chats, TEAM, BOB, f"standup note number {number}", False)
    await compact(store, TEAM)  # the offsite line now lives in the group's archive
    await say(store, chats, BOOK_CLUB, ANN, NOVEL, False)
    await say(store, chats, BOOK_CLUB, BOB, "I will bring snacks", False)
    await say(store, chats, BOB_PRIVATE, BOB, BOB_SECRET, True)
    return {"first": first, "locker": locker, "team": team, "offsite": offsite}


def tools_for(store: SessionStore, chats: PersonChats, person: str, chat: str, sid: str, **options: Any) -> Any:
    here = ChatHistory(store, chat, sid, every_session=True)
    search, fetch = recovery_tools(here, everywhere=PersonHistory(store, chats, person, chat, sid, **options))
    return search, fetch


async def call(tool: Any, **args: Any) -> dict[str, Any]:
    return json.loads(await tool.handler(args))


def snippets(result: dict[str, Any]) -> str:
    return "\n".join(hit["snippet"] for hit in result["hits"])


async def test_a_person_finds_what_they_said_in_another_chat_and_conversation_and_fetches_it(
    store, channel, key_prefix
):
    chats = PersonChats(channel, key_prefix)
    made = await world(store, chats)
    sid = await store.current_session(ANN_PRIVATE)
    search, fetch = tools_for(store, chats, ANN, ANN_PRIVATE, sid)

    offsite = await call(search, query="offsite Lisbon", scope="my chats")
    hit = offsite["hits"][0]
    assert OFFSITE in hit["snippet"] and hit["chat"] == TEAM and hit["session"] == made["team"]
    assert hit["message_id"] == f"{TEAM}|{made['team']}:{made['offsite']}"
    assert hit["after"]["text"] == "noted"  # the turn around it comes from its own chat

    locker = await call(search, query="locker code", scope="my chats")
    assert (
        locker["hits"][0]["message_id"] == f"{made['first']}:{made['locker']}"
    )  # this chat's id, as "this chat" gives it
    assert locker["hits"][0]["chat"] == ANN_PRIVATE and LOCKER in locker["hits"][0]["snippet"]
    assert NOVEL in snippets(await call(search, query="Dispossessed", scope="my chats"))

    fetched = await call(fetch, ids=[hit["message_id"], locker["hits"][0]["message_id"], f"{TEAM}|nosuch:1"])
    assert [m["content"] for m in fetched["messages"]] == [OFFSITE, LOCKER]
    assert fetched["messages"][0]["chat"] == TEAM and fetched["missing"] == [f"{TEAM}|nosuch:1"]

    # What the group says after the search was made ready is found too (its archive kept, its live list read).
    await say(store, chats, TEAM, BOB, "the offsite hotel is the Lisbon Marriott", False)
    again = await call(search, query="offsite hotel Lisbon", scope="my chats")
    assert "Marriott" in again["hits"][0]["snippet"] and OFFSITE in snippets(again)


async def test_another_persons_private_chat_is_never_read_even_when_they_share_groups(store, channel, key_prefix):
    chats = PersonChats(channel, key_prefix)
    await world(store, chats)
    bob_sid = await store.current_session(BOB_PRIVATE)
    bob_search, _ = tools_for(store, chats, BOB, BOB_PRIVATE, bob_sid)
    assert BOB_SECRET in snippets(await call(bob_search, query="zanzibarquokka", scope="my chats"))  # it is there

    # Even an index that wrongly lists Bob's private chat as Ann's does not open it.
    await chats.note(ANN, BOB_PRIVATE, private=True, when=1.0)
    sid = await store.current_session(ANN_PRIVATE)
    search, fetch = tools_for(store, chats, ANN, ANN_PRIVATE, sid)
    assert (await call(search, query="zanzibarquokka", scope="my chats"))["hits"] == []
    assert (await call(search, query="bank PIN reminder", scope="my chats"))["hits"] == []
    assert BOB_IN_GROUP in snippets(await call(search, query="build server password", scope="my chats"))
    fetched = await call(fetch, ids=[f"{BOB_PRIVATE}|{bob_sid}:1"])
    assert fetched["messages"] == [] and fetched["missing"] == [f"{BOB_PRIVATE}|{bob_sid}:1"]
    # Nor does asking from a group they share.
    group_sid = await store.current_session(BOOK_CLUB)
    search, _ = tools_for(store, chats, ANN, BOOK_CLUB, group_sid)
    assert (await call(search, query="zanzibarquokka", scope="my chats"))["hits"] == []


async def test_from_a_group_the_persons_private_chats_stay_out_and_other_groups_are_found(store, channel, key_prefix):
    chats = PersonChats(channel, key_prefix)
    await world(store, chats)
    sid = await store.current_session(BOOK_CLUB)
    search, fetch = tools_for(store, chats, ANN, BOOK_CLUB, sid)
    assert (await call(search, query="locker code", scope="my chats"))["hits"] == []
    first = await store.indexed_sessions(ANN_PRIVATE)
    assert (await call(fetch, ids=[f"{ANN_PRIVATE}|{first[0][0]}:1"]))["messages"] == []
    found = await call(search, query="offsite Lisbon", scope="my chats")
    assert found["hits"][0]["chat"] == TEAM and OFFSITE in found["hits"][0]["snippet"]


async def test_this_chat_is_searched_as_before_and_an_unknown_scope_is_refused(store, channel, key_prefix):
    chats = PersonChats(channel, key_prefix)
    made = await world(store, chats)
    sid = await store.current_session(ANN_PRIVATE)
    search, _ = tools_for(store, chats, ANN, ANN_PRIVATE, sid)
    plain_search, plain_fetch = recovery_tools(ChatHistory(store, ANN_PRIVATE, sid, every_session=True))
    assert plain_search.parameters == SEARCH_PARAMETERS and "scope" not in json.dumps(plain_search.parameters)
    assert "my chats" not in plain_search.description + plain_fetch.description
    assert search.parameters["properties"]["scope"]["enum"] == ["this chat", "my chats"]

    before = await call(plain_search, query="locker code")
    assert before["hits"][0]["message_id"] == f"{made['first']}:{made['locker']}" and "chat" not in before["hits"][0]
    assert await call(search, query="locker code") == before
    assert await call(search, query="locker code", scope="this chat") == before
    assert (await call(search, query="offsite Lisbon", scope="this chat"))["hits"] == []

    unknown = await call(search, query="locker", scope="everywhere")
    assert set(unknown) == {"error"} and "'this chat' or 'my chats'" in unknown["error"]
    assert "not offered" in (await call(plain_search, query="locker", scope="my chats"))["error"]


class Meanings:
    """A meaning index that knows a few chats and finds, in each, one given message (whatever the query)."""

    def __init__(self, store: SessionStore, found: dict[str, str]) -> None:
        self.store = store
        self.found = found  # chat -> text of the message "closest in meaning"

    async def similar(self, chat: str, query: str, limit: int) -> list[tuple[str, str]] | None:
        if chat not in self.found:
            return None
        sid = await self.store.current_session(chat)
        for message in await self.store.active(chat, sid):
            if message.get("content") == self.found[chat]:
                return [(sid, str(message["_id"]))]
        return []


async def test_search_by_meaning_takes_each_readable_chats_closest_messages(store, channel, key_prefix):
    chats = PersonChats(channel, key_prefix)
    await world(store, chats)
    meanings = Meanings(
        store, {BOOK_CLUB: NOVEL, BOB_PRIVATE: BOB_SECRET, ANN_PRIVATE: "let us plan the weekend instead"}
    )
    sid = await store.current_session(ANN_PRIVATE)
    history = PersonHistory(store, chats, ANN, ANN_PRIVATE, sid, meaning=meanings)
    ids = await history.similar("something to read", 10)
    assert ids is not None and len(ids) == 2  # Bob's private chat is never asked
    assert ids[0] == "1" and ids[1].startswith(f"{BOOK_CLUB}|")  # the chat asked in first
    assert [m["content"] for m in await history.messages_by_id(ids)] == ["let us plan the weekend instead", NOVEL]
    search, _ = tools_for(store, chats, ANN, ANN_PRIVATE, sid, meaning=meanings)
    assert NOVEL in snippets(await call(search, query="a classic of science fiction", scope="my chats"))


async def test_a_persons_chats_keep_their_kind_and_newest_time_beside_their_memory(channel, key_prefix):
    chats = PersonChats(channel, key_prefix)
    await chats.note(ANN, ANN_PRIVATE, private=True, when=100.0)
    await chats.note(ANN, TEAM, private=False, when=200.0)
    await chats.note(ANN, ANN_PRIVATE, private=False, when=400.0)  # a private chat stays private
    await chats.note(ANN, TEAM, private=True, when=50.0)  # a group stays a group; its time does not go back
    await chats.note(ANN, ANN_PRIVATE, private=True, when=430.0)  # within the minute: not written again
    listed = await chats.chats(ANN)
    assert [(c.chat, c.private, c.last) for c in listed] == [(ANN_PRIVATE, True, 400.0), (TEAM, False, 200.0)]
    assert await chats.chats(BOB) == []
    memory_keys = MemoryStore(channel, key_prefix).keys(ANN, "private")
    assert len({key_slot(key.encode()) for key in (*chats.keys(ANN), *memory_keys)}) == 1
    await chats.forget(ANN)
    assert await chats.chats(ANN) == []


def test_a_private_chat_is_a_persons_own_only_where_its_key_says_so():
    assert own_private_chat("tg:42", "tg:42") and not own_private_chat("tg:42", "tg:7")
    assert not own_private_chat("tg:42", "tg:-100") and not own_private_chat("dc:42", "dc:42")
    assert own_private_chat("web:abc", "web:abc") and not own_private_chat("web:abc", "web:abd")
    assert own_private_chat("api:key1", "api:key1/s1") and not own_private_chat("api:key1", "api:key10/s1")
    assert own_private_chat("local:local", "local:terminal") and not own_private_chat("tg:42", "web:42")


async def test_a_question_about_the_asker_finds_their_own_words_before_another_persons_in_a_group(
    store, channel, key_prefix
):
    chats = PersonChats(channel, key_prefix)
    await say(store, chats, TEAM, ANN, "I'm allergic to shellfish, so the seafood place is out for the dinner", False)
    for number in range(3):
        await say(store, chats, TEAM, BOB, f"the dinner booking is at seven, table {number}", False)
    tofu = await say(store, chats, TEAM, BOB, "Am I allergic to tofu, do you think?", False)
    await say(store, chats, ANN_PRIVATE, ANN, "Hi Amara, quick catch-up?", True)
    sid = await store.current_session(ANN_PRIVATE)
    search, _ = tools_for(store, chats, ANN, ANN_PRIVATE, sid)

    hits = (await call(search, query="What am I allergic to?", scope="my chats"))["hits"]
    assert "shellfish" in hits[0]["snippet"] and hits[0]["chat"] == TEAM
    assert "tofu" in hits[1]["snippet"] and not any("Amara" in hit["snippet"] for hit in hits)
    # Bob asking the same finds his own line first; a question about no one keeps the words' order.
    bob_search, _ = tools_for(store, chats, BOB, TEAM, await store.current_session(TEAM))
    assert (await call(bob_search, query="what am I allergic to?", scope="my chats"))["hits"][0]["message_id"] == tofu
    assert "tofu" in (await call(search, query="who is allergic?", scope="my chats"))["hits"][0]["snippet"]
