"""memory.embeddings: what a chat says is embedded in the background, in batches, never in a turn's way; the
search by meaning finds a paraphrase that shares no word; an endpoint that is away delays it and loses nothing;
the chat's budget pays for it; and with the provider off nothing at all changes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from agent.llm.embeddings import EmbeddingClient, embedding_usd
from gateway.config import ConfigError, load_settings
from gateway.config.access import BudgetSettings, period_bounds
from gateway.events import TurnEvent
from gateway.store import SessionStore
from gateway.store.embeddings import EmbeddingStore
from gateway.store.spend import SpendStore
from gateway.worker.embedding import Embedder
from gateway.worker.parts import Spending
from tests.fakes.embeddings_server import FakeEmbeddingsServer
from tests.fakes.gateway import make_settings, message, running_gateway, wait_for
from tests.fakes.llm_server import FakeLLMServer, Reply

MODEL = "text-embedding-3-small"
CHAT = "local:a"
LINES = (
    "I signed up for a ceramics class on Tuesdays",
    "I've been carving out me-time on Sundays",
    "we saw a great gig downtown last night",
    "the puppy learned to sit this week",
)


def noted(_request) -> Reply:
    return Reply.answer("noted")


def embeddings(server: FakeEmbeddingsServer, **more) -> dict:
    return {"embeddings": {"provider": "custom", "model": MODEL, "base_url": server.base_url, **more}}


async def say_all(runner, lines=LINES) -> None:
    for number, line in enumerate(lines, 1):
        await runner.intake(message("a", str(number), line))
        await runner.wait_idle()


def problems(tmp_path, text: str, env: dict[str, str] | None = None) -> list[str]:
    path = tmp_path / "config.yaml"
    path.write_text("platforms: {local: {enabled: true}}\n" + text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env=env or {})
    return caught.value.problems


def test_config_errors_name_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("EMBED_KEY_NOT_SET", raising=False)
    custom = problems(tmp_path, "memory: {embeddings: {provider: custom}}")
    assert any(line.startswith("memory.embeddings.base_url") for line in custom)
    assert any(line.startswith("memory.embeddings.model") for line in custom)
    keyless = problems(tmp_path, f"memory: {{embeddings: {{provider: openai, model: {MODEL}}}}}")
    assert any(line.startswith("memory.embeddings.api_key") and "OPENAI_API_KEY" in line for line in keyless)
    unset = problems(tmp_path, "memory: {embeddings: {provider: openai, model: m, api_key: '${EMBED_KEY_NOT_SET}'}}")
    assert any("memory.embeddings.api_key" in line and "EMBED_KEY_NOT_SET" in line for line in unset)
    assert any(
        "memory.embeddings.batch_size" in line for line in problems(tmp_path, "memory: {embeddings: {batch_size: 0}}")
    )
    assert any("memory.embedings" in line for line in problems(tmp_path, "memory: {embedings: {}}"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    path = tmp_path / "ok.yaml"
    path.write_text(f"memory: {{embeddings: {{provider: openai, model: {MODEL}}}}}\n", encoding="utf-8")
    settings = load_settings(path, env={}).memory.embeddings
    assert settings.key() == "sk-from-env" and settings.endpoint == "https://api.openai.com/v1"
    assert settings.batch_size == 64 and load_settings(None, env={}).memory.embeddings.provider == "off"


async def test_messages_are_embedded_in_batches_and_a_paraphrase_is_found(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=noted) as llm, FakeEmbeddingsServer() as server:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=16_000,
            memory=embeddings(server, batch_size=3),
            access={"budgets": {"per_chat": {"tokens": 1_000_000}}},
        )
        async with running_gateway(settings, redis) as (runner, adapter, events):
            await say_all(runner)
            vectors = EmbeddingStore(redis, runner.store.channel, key_prefix)
            await wait_for(lambda: _count(vectors, CHAT, 8), what="the 8 messages embedded")
            sid = await runner.store.current_session(CHAT)
            me_time = next(m["_id"] for m in await runner.store.active(CHAT, sid) if "me-time" in m["content"])
            found = await runner.meanings.similar(CHAT, "how do I practise self-care?", 3)
            again = await runner.meanings.similar(CHAT, "how do I practise self-care?", 3)
            other_chat = await runner.meanings.similar("local:b", "how do I practise self-care?", 3)
            period = period_bounds(datetime.now(UTC), "day", "UTC")[0]
            spent = await SpendStore(runner.store.channel, key_prefix).spent(f"chat:{CHAT}", period)
    assert len(adapter.sent) == 4  # every turn answered
    assert found[0] == (sid, me_time) and len(found) == 3 and again == found
    assert other_chat == []  # nothing of another chat
    assert all(len(batch) <= 3 for batch in server.batches[:-1]) and server.inputs == 8 + 1  # the query once
    assert sorted(
        text for batch in server.batches for text in batch if text != "how do I practise self-care?"
    ) == sorted([*LINES, *["noted"] * 4])
    turn_tokens = sum(e.prompt_tokens + e.completion_tokens for e in events if isinstance(e, TurnEvent))
    embedded_tokens = sum(len(text.split()) for batch in server.batches for text in batch)
    assert spent.tokens == turn_tokens + embedded_tokens
    assert spent.usd == pytest.approx(embedding_usd(MODEL, embedded_tokens), abs=2e-6)


async def test_with_the_endpoint_away_turns_go_on_messages_wait_and_are_embedded_once_it_is_back(
    redis, redis_url, key_prefix
):
    server = FakeEmbeddingsServer()
    await server.start()
    await server.stop()  # away from the start, on a port it will come back to
    try:
        async with FakeLLMServer(handler=noted) as llm:
            settings = make_settings(
                redis_url, key_prefix, llm.openai_base_url, context_length=16_000, memory=embeddings(server)
            )
            async with running_gateway(settings, redis) as (runner, adapter, _events):
                await say_all(runner, LINES[:2])
                vectors = EmbeddingStore(redis, runner.store.channel, key_prefix)
                await wait_for(lambda: _waiting(vectors, CHAT, 4), what="4 messages waiting")
                away = await runner.meanings.similar(CHAT, "self-care", 2)
                assert len(adapter.sent) == 2 and away is None
                assert await vectors.where(CHAT) == await vectors.where(CHAT) and (await vectors.where(CHAT)).count == 0
                await server.start()
                await wait_for(lambda: _count(vectors, CHAT, 4), what="the waiting messages embedded")
                back = await runner.meanings.similar(CHAT, "self-care", 2)
                assert await vectors.waiting(CHAT) == 0
    finally:
        await server.stop()
    assert back is not None and back[0][1] == "3"  # the user's second line (ids 1, 2 are the first turn)
    assert server.inputs == 4 + 1


async def test_with_the_provider_off_there_is_no_embedder_and_no_key(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=noted) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await say_all(runner, LINES[:1])
            assert runner.embedder is None and runner.meanings is None
    keys = [key async for key in redis.scan_iter(match=f"{key_prefix}*emb*")]
    assert adapter.sent and keys == []


async def test_two_processes_never_send_one_message_twice_and_a_model_change_embeds_again(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=noted) as llm, FakeEmbeddingsServer() as server:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, _adapter, _events):
            await say_all(runner)  # stored while embeddings were off: nothing marked, looked at directly
        store = SessionStore(redis, key_prefix)
        vectors = EmbeddingStore(redis, store.channel, key_prefix)
        spend = Spending(SpendStore(store.channel, key_prefix), settings.access.budgets, "5m")

        def embedder(model: str) -> Embedder:
            return Embedder(store, vectors, EmbeddingClient(server.base_url, model=model), spend, batch_size=2)

        first, second = embedder(MODEL), embedder(MODEL)
        try:
            while (await vectors.where(CHAT)).count < 8:
                await asyncio.gather(first.embed_chat(CHAT), second.embed_chat(CHAT))
            sent_once = server.inputs
            changed = embedder("other-model")
            while (await vectors.where(CHAT)).model != "other-model@" or (await vectors.where(CHAT)).count < 8:
                await changed.embed_chat(CHAT)
            await changed.client.aclose()
        finally:
            await first.client.aclose()
            await second.client.aclose()
    assert sent_once == 8 and server.inputs == 16
    assert all(len(batch) <= 2 for batch in server.batches)


async def _count(vectors: EmbeddingStore, chat: str, wanted: int) -> bool:
    return (await vectors.where(chat)).count >= wanted


async def _waiting(vectors: EmbeddingStore, chat: str, wanted: int) -> bool:
    return await vectors.waiting(chat) >= wanted


async def test_only_people_s_and_the_bot_s_words_are_embedded_and_a_rotation_s_copies_once(
    store: SessionStore, redis, key_prefix
):
    chat = "tg:7"
    first = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    call = {"id": "c1", "type": "function", "function": {"name": "session_search", "arguments": "{}"}}
    await store.append(
        chat,
        first,
        [
            {"role": "user", "content": "we booked a trek in the alps"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "no hits"},
            {"role": "assistant", "content": "sounds like a great trip"},
            {"role": "user", "content": "   "},
        ],
        lock=lock,
    )
    kept = (await store.active(chat, first))[0]
    summary = {"role": "user", "content": "[CONTEXT COMPACTION] a trek", "_compressed_summary": True}
    rotated = await store.commit_compaction(chat, first, [kept, summary], lock=lock, in_place=False, compaction_id="r1")
    await store.append(chat, rotated.session_id, [{"role": "user", "content": "my pup hates rain"}], lock=lock)
    other = await store.new_session(chat, lock=lock)
    await store.append(chat, other, [{"role": "user", "content": "pottery on friday"}], lock=lock)
    vectors = EmbeddingStore(redis, store.channel, key_prefix)
    spend = Spending(SpendStore(store.channel, key_prefix), BudgetSettings(), "5m")
    async with FakeEmbeddingsServer() as server:
        embedder = Embedder(store, vectors, EmbeddingClient(server.base_url, model=MODEL), spend, batch_size=64)
        try:
            while await embedder.embed_chat(chat) or await vectors.waiting(chat):
                pass
        finally:
            await embedder.client.aclose()
        embedded = await vectors.ids_from(chat, 0)
    new_id = (await store.active(chat, rotated.session_id))[-1]["_id"]
    assert sorted(embedded) == sorted([f"{first}:1", f"{first}:4", f"{rotated.session_id}:{new_id}", f"{other}:1"])
    assert sorted(text for batch in server.batches for text in batch) == sorted(
        ["we booked a trek in the alps", "sounds like a great trip", "my pup hates rain", "pottery on friday"]
    )


async def test_what_was_said_before_embeddings_were_on_is_embedded_at_the_first_start(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=noted) as llm, FakeEmbeddingsServer() as server:
        off = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=16_000)
        async with running_gateway(off, redis) as (runner, _adapter, _events):
            await say_all(runner, LINES[:3])
        on = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=16_000, memory=embeddings(server))
        async with running_gateway(on, redis) as (runner, _adapter, _events):
            vectors = EmbeddingStore(redis, runner.store.channel, key_prefix)
            await wait_for(lambda: _count(vectors, CHAT, 6), what="the 6 earlier messages embedded, with no new turn")
            found = await runner.meanings.similar(CHAT, "any pottery plans?", 1)
        async with running_gateway(on, redis) as (runner, _adapter, _events):
            await runner.intake(message("a", "9", "a trek next week"))
            await runner.wait_idle()
            vectors = EmbeddingStore(redis, runner.store.channel, key_prefix)
            await wait_for(lambda: _count(vectors, CHAT, 8), what="the new turn embedded")
    assert found is not None and found[0][1] == "1"  # the ceramics line
    assert server.inputs == 6 + 1 + 2  # nothing sent twice across the restart


async def test_the_key_the_vector_length_and_the_timeout_come_from_the_settings(
    redis, redis_url, key_prefix, monkeypatch
):
    monkeypatch.setenv("FG_TEST_EMBEDDINGS_KEY", "sk-embed-from-env")
    async with FakeLLMServer(handler=noted) as llm, FakeEmbeddingsServer(api_key="sk-embed-from-env") as server:
        memory = embeddings(server, api_key="${FG_TEST_EMBEDDINGS_KEY}", dimensions=24, timeout_seconds=0.5)
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=16_000, memory=memory)
        async with running_gateway(settings, redis) as (runner, _adapter, _events):
            await say_all(runner, LINES[:2])
            vectors = EmbeddingStore(redis, runner.store.channel, key_prefix)
            await wait_for(lambda: _count(vectors, CHAT, 4), what="the 4 messages embedded")
            at = await vectors.where(CHAT)
            sid = await runner.store.current_session(CHAT)
            (stored,) = await vectors.vectors(CHAT, [f"{sid}:1"])
            server.stalled = True  # it never answers: memory.embeddings.timeout_seconds must end the wait
            slow = await runner.meanings.similar(CHAT, "a query never asked before", 2)
    assert server.requests >= 1  # the key from the environment was taken: a wrong one is refused (401)
    assert at.model == f"{MODEL}@24" and stored is not None and len(stored) == 24 * 4  # float32
    assert slow is None  # cut short at the timeout: the search goes by keywords
