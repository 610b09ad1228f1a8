"""After /new nothing said is out of reach: /sessions lists every conversation of a chat, /resume goes back
to one, and session_search, session_fetch and ``foldgate search`` read all of them — never another chat's."""

from __future__ import annotations

import asyncio
import json
import re

from agent.search import search_messages
from agent.tools import searchable
from gateway.cli import main as cli_main
from gateway.session_source import ChatHistory, conversations
from gateway.store import SessionStore
from tests.fakes.cli import config_file
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

KEY_LINE = "the deploy key for the canary is PLUM-7731, keep it out of the wiki"
SECRET_OF_B = "chat B only: the vault word is zanzibarquokka"


def tool_results(request: RecordedRequest) -> list[dict]:
    """The tool results of the request's own turn (after its newest user message)."""
    messages = request.messages
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return [json.loads(m["content"]) for m in messages[last_user + 1 :] if m.get("role") == "tool"]


def researcher(request: RecordedRequest) -> Reply:
    """Notes statements; for a question it searches, fetches the best hit, then quotes what it fetched."""
    results = tool_results(request)
    if not request.last_user_text.endswith("?"):
        return Reply.answer("noted")
    if not results:
        query = "deploy key" if "deploy key" in request.last_user_text else "zanzibarquokka"
        return Reply.tool_call("session_search", {"query": query}, call_id="search_1")
    if len(results) == 1:
        hits = results[0]["hits"]
        if not hits:
            return Reply.answer("nothing found")
        return Reply.tool_call("session_fetch", {"ids": [hits[0]["message_id"]]}, call_id="fetch_1")
    fetched = results[1]["messages"]
    return Reply.answer("fetched: " + (fetched[0]["content"] if fetched else "nothing"))


async def say(runner, chat: str, update: str, text: str) -> str:
    await runner.intake(message(chat, update, text))
    await runner.wait_idle()
    return [t for c, t in runner.adapters["local"].sent if c == chat][-1]


async def test_sessions_lists_every_conversation_and_resume_continues_the_chosen_one(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=researcher) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, _adapter, _events):
            store = SessionStore(redis, key_prefix)
            await say(runner, "a", "1", KEY_LINE)
            first = await store.current_session("local:a")
            started = await say(runner, "a", "2", "/new")
            second = await store.current_session("local:a")
            await say(runner, "a", "3", "let us plan the offsite instead")
            listing = await say(runner, "a", "4", "/sessions")
            resumed = await say(runner, "a", "5", "/resume 2")
            await say(runner, "a", "6", "back to the canary: roll it to 50%")
            after = await say(runner, "a", "7", "/sessions")
            again = await say(runner, "a", "8", "/resume 1")
            bad = await say(runner, "a", "9", "/resume 7")
            pointer = await store.current_session("local:a")
            first_active = [m["content"] for m in await store.active("local:a", first)]
            second_active = [m["content"] for m in await store.active("local:a", second)]
    assert first != second and "/sessions" in started
    rows = [line for line in listing.splitlines() if re.match(r"^[▶ ] \d+\. ", line)]
    assert len(rows) == 2
    assert rows[0].startswith("▶ 1. “let us plan the offsite instead”") and f"session {second}" in rows[0]
    assert rows[1].startswith("  2. “the deploy key for the canary is PLUM-7731") and f"session {first}" in rows[1]
    assert "2 messages (2 live, 0 archived)" in rows[1] and "last active" in rows[1]
    assert resumed.startswith("Resumed conversation 2") and first in resumed and second in resumed
    # The next message landed in the resumed conversation; the one left keeps what it had.
    assert first_active == [KEY_LINE, "noted", "back to the canary: roll it to 50%", "noted"]
    assert "back to the canary: roll it to 50%" not in second_active
    after_rows = [line for line in after.splitlines() if re.match(r"^[▶ ] \d+\. ", line)]
    assert len(after_rows) == 2 and after_rows[1].startswith("▶ 2. ") and after_rows[0].startswith("  1. ")
    assert "4 messages (4 live" in after_rows[1]
    assert again.startswith("Resumed conversation 1") and pointer == second
    assert "1 to 2" in bad


async def test_session_search_and_fetch_reach_the_conversation_before_new_and_never_another_chat(
    redis, redis_url, key_prefix, tmp_path, capsys
):
    async with FakeLLMServer(handler=researcher) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, _adapter, _events):
            store = SessionStore(redis, key_prefix)
            await say(runner, "b", "1", SECRET_OF_B)
            await say(runner, "a", "1", KEY_LINE)
            old = await store.current_session("local:a")
            await say(runner, "a", "2", "/new")
            for index in range(3):  # the new conversation reuses the old one's message ids
                await say(runner, "a", f"n{index}", f"unrelated chatter number {index}")
            answer = await say(runner, "a", "3", "what was the deploy key?")
            search = tool_results(server.requests[-1])[0]
            from_a = await say(runner, "a", "4", "what is the vault word zanzibarquokka?")
            search_a = [r for r in server.requests if "vault word" in r.last_user_text][-1]
            from_b = await say(runner, "b", "2", "what is the vault word zanzibarquokka?")
    hit = search["hits"][0]
    assert hit["message_id"] == f"{old}:1" and hit["session"] == old  # qualified: id 1 exists in both conversations
    assert answer == f"fetched: {KEY_LINE}"
    # Chat A holds no such word (its question is not stored before its turn ends): chat B's line never shows.
    assert tool_results(search_a)[0]["hits"] == [] and from_a == "nothing found"
    assert from_b == f"fetched: {SECRET_OF_B}"  # chat B finds its own word, so the search itself works

    config = config_file(tmp_path, redis_url, key_prefix)
    capsys.readouterr()
    assert await asyncio.to_thread(cli_main, ["--config", str(config), "search", "local:a", "PLUM-7731"]) == 0
    out = capsys.readouterr().out
    assert KEY_LINE in out and f"[{old}:1] user, session {old}" in out
    assert await asyncio.to_thread(cli_main, ["--config", str(config), "search", "local:a", "zanzibarquokka"]) == 0
    out = capsys.readouterr().out
    assert "chat B only" not in out and "zanzibarquokka?" in out  # only chat A's own question matches
    assert await asyncio.to_thread(cli_main, ["--config", str(config), "search", "local:b", "PLUM-7731"]) == 0
    assert "no matches" in capsys.readouterr().out
    assert await asyncio.to_thread(cli_main, ["--config", str(config), "search", "local:typo", "PLUM-7731"]) == 2
    assert "nothing is stored for chat 'local:typo'" in capsys.readouterr().err
    assert await SessionStore(redis, key_prefix).stored_session("local:typo") is None  # the search created nothing


def test_a_search_skips_the_recovery_tools_own_calls_and_results():
    """Earlier searches for the same words are echoes; the message that holds the answer comes first."""
    messages = [
        {"_id": "1", "role": "user", "content": "emeka: found the login timeout, the fix is PR #4821"},
        {"_id": "2", "role": "user", "content": "what fixed the login timeout?"},
        {
            "_id": "3",
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "session_search", "arguments": '{"query": "login timeout"}'},
                }
            ],
        },
        {
            "_id": "4",
            "role": "tool",
            "tool_call_id": "c1",
            "content": '{"hits": [{"snippet": "login timeout login timeout"}]}',
        },
        {"_id": "5", "role": "assistant", "content": "The login timeout was fixed by PR #4821."},
    ]
    kept = searchable(messages)
    assert [m["_id"] for m in kept] == ["1", "2", "5"]
    hits = [hit.message_id for hit in search_messages(kept, "login timeout", limit=5)]
    assert sorted(hits) == ["1", "2", "5"]  # the question itself still matches; no echo of a search does


async def test_history_ids_stay_apart_per_conversation_and_foreign_sessions_are_not_read(store: SessionStore):
    chat, other = "tg:1", "tg:2"
    first = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    await store.append(chat, first, [{"role": "user", "content": "old conversation line"}], lock=lock)
    second = await store.new_session(chat, lock=lock)
    await store.append(chat, second, [{"role": "user", "content": "new conversation line"}], lock=lock)
    foreign = await store.current_session(other)
    other_lock = await store.acquire_lock(other, 30)
    await store.append(other, foreign, [{"role": "user", "content": "someone else's line"}], lock=other_lock)

    history = ChatHistory(store, chat, second, every_session=True)
    got = await history.messages_by_id(["1", f"{first}:1", f"{second}:1", f"{foreign}:1", "nope:1"])
    assert [(m["_id"], m["content"]) for m in got] == [
        ("1", "new conversation line"),
        (f"{first}:1", "old conversation line"),
        (f"{second}:1", "new conversation line"),
    ]
    everything = {m["content"]: m["_session"] for m in await history.all_messages()}
    assert everything == {"old conversation line": first, "new conversation line": second}
    engine_view = await ChatHistory(store, chat, second).all_messages()  # context engines see the current one only
    assert [m["content"] for m in engine_view] == ["new conversation line"]


async def test_a_chat_stored_before_the_index_gets_one_and_rotation_stays_one_conversation(store: SessionStore, redis):
    chat = "tg:7"
    first = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    await store.append(
        chat, first, [{"role": "user", "content": "first words"}, {"role": "assistant", "content": "ok"}], lock=lock
    )
    rotated = await store.commit_compaction(
        chat,
        first,
        [{"role": "user", "content": "[CONTEXT COMPACTION] first words"}],
        lock=lock,
        in_place=False,
        compaction_id="r1",
    )
    second = await store.new_session(chat, lock=lock)
    await redis.delete(store.keys(chat).sessions)  # as a chat stored by a foldgate without the index
    third = await store.new_session(chat, lock=lock)  # started while there is no index: not indexed yet

    found = await conversations(store, chat, third)
    assert [c.sessions for c in found] == [(first, rotated.session_id), (second,), (third,)]
    assert {sid for sid, _ in await store.indexed_sessions(chat)} == {first, second, third}  # built once, whole
    # /resume of the rotated conversation goes to the session it continues in; the old one refuses writes.
    await store.switch_session(chat, found[0].head, lock=lock)
    assert await store.current_session(chat) == rotated.session_id
    history = ChatHistory(store, chat, third, every_session=True)
    assert "first words" in {m["content"] for m in await history.all_messages()}
