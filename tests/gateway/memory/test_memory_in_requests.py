"""What the provider receives of a person's memory, through real gateways on one Redis and the fake provider.

Each request carries the memory of the person whose message it answers: in a private chat their private entries
after the system prompt, in a group the group's own there and the speaker's group entries with their message,
never anyone else's. The chat's part stays the same request after request (the prompt cache's prefix) until a
compaction; a ``/remember`` is used at once; a ``/forget all`` takes everything out of the next request. The
model's ``memory`` tool answers with what is kept, and every write is counted by source.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.people import people_settings, process, said

GROUP = "-1001"


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer("ok")  # never repeats what it was told: what a request carries is the gateway's doing


def carried(request: RecordedRequest) -> str:
    """Every word of a request the model reads: system prompt and messages."""
    return json.dumps(request.body.get("messages"), ensure_ascii=False)


async def test_a_private_entry_reaches_every_request_of_that_person_and_a_new_session(
    redis, redis_url, key_prefix
) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        async with process(people_settings(redis_url, key_prefix, llm), redis) as bot:
            await bot.ask(said("1", "hello there"))
            assert "vegetarian" not in carried(llm.requests[-1])
            await bot.ask(said("1", "/remember I am vegetarian"))
            await bot.ask(said("1", "what should I cook?"))
            first = llm.requests[-1]
            # added after the session's block was chosen: it comes with the message, not into the cached prefix
            assert "I am vegetarian" in first.last_user_text and "I am vegetarian" not in first.system
            await bot.ask(said("1", "/new"))
            await bot.ask(said("1", "and for dinner?"))
            fresh = llm.requests[-1]
            assert "I am vegetarian" in fresh.system  # a new session chooses its block: the chat's part
            assert "I am vegetarian" not in fresh.last_user_text
            await bot.ask(said("1", "and tomorrow?"))
            assert llm.requests[-1].system == fresh.system  # the prefix stays as it was
            # the stored transcript never holds the block: the person's messages are theirs alone
            transcript = json.dumps(await bot.runner.parts.store.snapshot("tg:1"), default=str)
            assert "vegetarian" not in transcript.replace("/remember I am vegetarian", "")
            await bot.ask(said("1", "/forget all"))
            await bot.ask(said("1", "anything?"))
            assert "vegetarian" not in carried(llm.requests[-1])


async def test_in_a_group_a_request_carries_the_speakers_entries_and_the_groups_never_anothers(
    redis, redis_url, key_prefix
) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        async with process(people_settings(redis_url, key_prefix, llm), redis) as bot:
            await bot.ask(said("1", "/remember Dana's private note: allergic to peanuts"))
            await bot.ask(said("1", "/remember Dana in the group: call me Dee", GROUP))
            await bot.ask(said("2", "/remember Lee in the group: prefers tea", GROUP))
            await bot.ask(said("2", "/remember Lee's private note: works nights"))
            await bot.ask(said("1", "hi all", GROUP))
            for_dana = carried(llm.requests[-1])
            assert "call me Dee" in for_dana
            assert not {"peanuts", "prefers tea", "works nights"} & set(_found(for_dana))
            await bot.ask(said("2", "what do you remember about Dana?", GROUP))
            for_lee = carried(llm.requests[-1])
            assert "prefers tea" in for_lee
            assert not {"peanuts", "call me Dee", "works nights"} & set(_found(for_lee))


def _found(text: str) -> list[str]:
    return [word for word in ("peanuts", "call me Dee", "prefers tea", "works nights") if word in text]


async def test_the_memory_tool_says_what_it_kept_and_each_write_is_counted(redis, redis_url, key_prefix) -> None:
    replies = iter(
        [
            Reply.tool_call("memory", {"action": "add", "text": "Prefers answers in metric units"}),
            Reply.answer("Noted."),
            Reply.tool_call("memory", {"action": "remove", "old_text": "something never kept"}),
            Reply.answer("Nothing to remove."),
            Reply.tool_call("memory", {"action": "add", "text": "long " * 120}),
            Reply.answer("Too long."),
        ]
    )
    results: list[dict[str, Any]] = []

    def model(request: RecordedRequest) -> Reply:
        last = request.messages[-1]
        if last.get("role") == "tool":
            results.append(json.loads(last["content"]))
        return next(replies)

    async with FakeLLMServer(handler=model) as llm:
        async with process(people_settings(redis_url, key_prefix, llm), redis) as bot:
            assert await bot.ask(said("5", "please use metric units from now on")) == "Noted."
            assert results[0] == {
                "saved": True,
                "action": "add",
                "kept": {"number": 1, "text": "Prefers answers in metric units", "whose": "person"},
            }
            listed = await bot.ask(said("5", "/memory"))
            assert "1. Prefers answers in metric units — tool, from tg:5, message " in listed
            await bot.ask(said("5", "forget the inches thing"))
            assert results[1]["saved"] is False and results[1]["reason"] == "no kept entry has that text"
            await bot.ask(said("5", "remember all of this at once"))
            assert results[2] == {
                "saved": False,
                "action": "add",
                "reason": "the text is 599 characters, over the limit of 500 (memory.max_entry_chars)",
            }
            await bot.ask(said("5", "/remember my cat is called Miso"))
            counters = bot.runner.parts.events.counters
            assert counters["memory_writes_tool"] == 1 and counters["memory_writes_remember"] == 1
            assert counters["tool_calls"] == 3  # every call audited, the refused ones too
            logged = [event.name for event in await bot.activity.history("tg:5")]
            assert logged.count("memory:write") == 2 and logged.count("tool:call") == 3
            assert [e.text for e in await bot.runner.parts.memory.store.entries("tg:5")] == [
                "my cat is called Miso",
                "Prefers answers in metric units",
            ]  # the refused ones changed nothing


async def test_past_memory_max_tokens_entries_stay_findable_and_the_person_is_told_once(
    redis, redis_url, key_prefix
) -> None:
    found: list[dict[str, Any]] = []

    def model(request: RecordedRequest) -> Reply:
        last = request.messages[-1]
        if last.get("role") == "tool":
            found.append(json.loads(last["content"]))
            return Reply.answer("found it")
        if "where do I keep my bike" in request.last_user_text:
            return Reply.tool_call("memory_search", {"query": "bike"})
        return Reply.answer("ok")

    async with FakeLLMServer(handler=model) as llm:
        settings = people_settings(redis_url, key_prefix, llm, memory={"max_tokens": 150})
        async with process(settings, redis) as bot:
            await bot.ask(said("3", "/remember I keep my bike in the cellar of the blue house"))
            for n in range(8):
                await bot.ask(said("3", f"/remember standing fact number {n} about my week"))
            await bot.ask(said("3", "/new"))
            first = await bot.ask(said("3", "hello"))
            block = llm.requests[-1]
            assert "standing fact number 7" in block.system  # the newest first
            assert "cellar" not in block.system and "cellar" not in block.last_user_text  # no room for the oldest
            assert "had no room here: memory_search finds them" in block.last_user_text
            assert first.startswith("ℹ️ I keep more about you here than fits in one request (memory.max_tokens)")
            assert not (await bot.ask(said("3", "hello again"))).startswith("ℹ️")  # told once
            assert await bot.ask(said("3", "where do I keep my bike?")) == "found it"
            assert found[0]["entries"][0]["text"] == "I keep my bike in the cellar of the blue house"
