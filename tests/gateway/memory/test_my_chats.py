"""``session_search`` with scope ``my chats`` through a running gateway: what a person said in a group and in an
earlier session comes back in their private chat; another person's private chat never does."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.people import people_settings, process, said

GROUP = "-1001"


async def test_my_chats_finds_the_persons_words_elsewhere_and_never_anothers_private_chat(
    redis, redis_url, key_prefix
) -> None:
    results: list[dict[str, Any]] = []

    def model(request: RecordedRequest) -> Reply:
        last = request.messages[-1]
        if last.get("role") == "tool":
            results.append(json.loads(last["content"]))
            return Reply.answer("found")
        if request.last_user_text.startswith("search my chats for "):
            query = request.last_user_text.removeprefix("search my chats for ")
            return Reply.tool_call("session_search", {"query": query, "scope": "my chats"})
        return Reply.answer("ok")

    async with FakeLLMServer(handler=model) as llm:
        async with process(people_settings(redis_url, key_prefix, llm), redis) as bot:
            await bot.ask(said("1", "my bike is locked at the Westgate garage", GROUP))
            await bot.ask(said("2", "my kayak is stored at the Riverside boathouse"))  # Lee, in private
            await bot.ask(said("1", "the spare key sits under the blue flowerpot"))  # Dana, in private
            await bot.ask(said("1", "/new"))
            assert await bot.ask(said("1", "search my chats for garage")) == "found"
            assert await bot.ask(said("1", "search my chats for flowerpot")) == "found"
            assert await bot.ask(said("1", "search my chats for boathouse")) == "found"
            assert await bot.ask(said("2", "search my chats for flowerpot")) == "found"
    in_group, before_new, lees, from_lee = (result["hits"] for result in results)
    assert in_group[0]["chat"] == f"tg:{GROUP}" and "Westgate garage" in in_group[0]["snippet"]
    assert "blue flowerpot" in before_new[0]["snippet"]  # an earlier session of this very chat
    assert lees == [] and from_lee == []  # Dana never reads Lee's private chat, nor Lee hers
