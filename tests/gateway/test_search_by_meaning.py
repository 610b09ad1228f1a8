"""session_search by meaning, through a running gateway: with memory.embeddings on (a loopback endpoint of OpenAI's
``/v1/embeddings`` shape), the model's search finds a paraphrase that shares no word with what was said; with the
endpoint away, the same search answers by keywords, without an error; with embeddings off it is the keyword
search it always was."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.embeddings_server import FakeEmbeddingsServer
from tests.fakes.gateway import make_settings, message, running_gateway, wait_for
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.tool_model import agent_for, last_tool_result

CHAT = "local:a"
SAID = (
    "I signed up for a ceramics class on Tuesdays",
    "I've been carving out me-time on Sundays",
    "we saw a great gig downtown last night",
)
#: A word of the person's message picks the search the model makes.
SEARCHES = {
    "wellbeing": ("session_search", {"query": "how do I practise self-care?"}),
    "pottery": ("session_search", {"query": "ceramics class"}),
    "unwinding": ("session_search", {"query": "ways to relax and pamper myself"}),
}


def settings_for(redis_url: str, key_prefix: str, llm: FakeLLMServer, server: FakeEmbeddingsServer | None) -> Any:
    memory = {}
    if server is not None:
        memory = {"embeddings": {"provider": "custom", "model": "text-embedding-3-small", "base_url": server.base_url}}
    return make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=16_000, memory=memory)


async def search_result(runner: Any, llm: FakeLLMServer, asking: str, number: int) -> dict[str, Any]:
    """What ``session_search`` handed the model when the person's message made it search."""
    await runner.intake(message("a", str(number), asking))
    await runner.wait_idle()
    results = [last_tool_result(request) for request in llm.requests]
    return json.loads([result for result in results if result][-1])


def texts_of(result: dict[str, Any]) -> list[str]:
    return [hit["snippet"] for hit in result["hits"]]


async def tell(runner: Any) -> None:
    for number, line in enumerate(SAID, 1):
        await runner.intake(message("a", str(number), line))
        await runner.wait_idle()


async def test_the_model_finds_a_paraphrase_by_meaning_and_by_keywords_once_the_endpoint_is_away(
    redis, redis_url, key_prefix
):
    server = FakeEmbeddingsServer()
    await server.start()
    try:
        async with FakeLLMServer(handler=agent_for(SEARCHES)) as llm:
            async with running_gateway(settings_for(redis_url, key_prefix, llm, server), redis) as (runner, _a, _e):
                await tell(runner)
                embedder = runner.embedder
                assert embedder is not None
                await wait_for(lambda: _all_embedded(runner), what="what was said embedded")
                by_meaning = await search_result(runner, llm, "a wellbeing question", 10)
                await server.stop()
                # A query asked before is answered from the ones held; a new one cannot be embedded now.
                away_meaning = await search_result(runner, llm, "an unwinding question", 11)
                away_words = await search_result(runner, llm, "my pottery again", 12)
    finally:
        await server.stop()
    assert "me-time" in texts_of(by_meaning)[0]  # no word of "how do I practise self-care?" is in it
    assert all("ways to relax and pamper myself" not in batch for batch in server.batches)
    assert "error" not in away_meaning and all("me-time" not in text for text in texts_of(away_meaning))
    assert "ceramics class" in texts_of(away_words)[0]


async def test_with_embeddings_off_the_search_is_by_keywords_alone(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=agent_for(SEARCHES)) as llm:
        async with running_gateway(settings_for(redis_url, key_prefix, llm, None), redis) as (runner, _a, _e):
            await tell(runner)
            assert runner.embedder is None and runner.meanings is None
            by_meaning = await search_result(runner, llm, "a wellbeing question", 10)
            by_words = await search_result(runner, llm, "my pottery", 11)
    assert all("me-time" not in text for text in texts_of(by_meaning))
    assert "ceramics class" in texts_of(by_words)[0]


async def _all_embedded(runner: Any) -> bool:
    """Nothing of the chat waits to be embedded and something was (the turns' messages are committed first)."""
    from gateway.store.embeddings import EmbeddingStore

    store = runner.store
    vectors = EmbeddingStore(store.redis, store.channel, store.prefix)
    return await vectors.waiting(CHAT) == 0 and (await vectors.where(CHAT)).count >= 2 * len(SAID)
