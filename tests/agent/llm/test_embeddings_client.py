"""The embeddings client against a real loopback server speaking OpenAI's /v1/embeddings: vectors in the order of
the texts, usage read, failures typed and retried as every provider call is; and the fake itself, which the official
SDK reads and whose vectors make paraphrases close."""

from __future__ import annotations

import math

import pytest
from openai import AsyncOpenAI

from agent.llm.embeddings import EmbeddingClient, embedding_usd, parse_response
from agent.llm.errors import BadResponse, ProviderRejected, ProviderUnavailable
from agent.llm.retry import RetryPolicy
from tests.fakes.embeddings_server import FakeEmbeddingsServer, vector_of


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b)) / (math.hypot(*a) * math.hypot(*b))


async def no_wait(_seconds: float) -> None:
    return None


async def test_texts_come_back_as_vectors_in_order_with_the_usage_reported():
    async with FakeEmbeddingsServer(api_key="sk-test") as server:
        client = EmbeddingClient(server.base_url, model="text-embedding-3-small", api_key="sk-test", dimensions=32)
        async with client:
            answer = await client.embed(["I love pottery", "we went to a gig", "my puppy chewed a shoe"])
    assert [len(vector) for vector in answer.vectors] == [32, 32, 32]
    assert answer.vectors[0] == pytest.approx(vector_of("I love pottery", 32))
    assert answer.vectors[2] == pytest.approx(vector_of("my puppy chewed a shoe", 32))
    assert answer.usage.prompt_tokens == 3 + 5 + 5
    assert server.requests == 1 and server.inputs == 3


async def test_no_texts_send_no_request():
    async with FakeEmbeddingsServer() as server:
        async with EmbeddingClient(server.base_url, model="m") as client:
            answer = await client.embed([])
    assert answer.vectors == [] and server.requests == 0


async def test_the_official_sdk_reads_the_fake_s_answer():
    async with FakeEmbeddingsServer() as server:
        sdk = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        try:
            answer = await sdk.embeddings.create(model="text-embedding-3-small", input=["clay and kilns"])
        finally:
            await sdk.close()
    assert answer.data[0].index == 0 and len(answer.data[0].embedding) == 64
    assert answer.usage.prompt_tokens == 3


def test_paraphrases_are_closer_than_unrelated_lines():
    question = vector_of("how do I practise self-care?")
    assert cosine(question, vector_of("I've been carving out me-time on Sundays")) > 0.5
    assert cosine(question, vector_of("I signed up for a ceramics class")) < 0.2
    assert cosine(vector_of("any good hiking trails?"), vector_of("we did a trek last spring")) > 0.5


async def test_an_endpoint_that_is_away_is_a_retryable_provider_failure():
    server = FakeEmbeddingsServer()
    await server.start()
    url = server.base_url
    await server.stop()
    async with EmbeddingClient(url, model="m", retry=RetryPolicy(max_retries=0)) as client:
        with pytest.raises(ProviderUnavailable) as away:
            await client.embed(["hello"])
    assert away.value.retryable


async def test_a_5xx_is_tried_again_and_a_401_is_not():
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    async with FakeEmbeddingsServer(api_key="right") as server:
        retry = RetryPolicy(max_retries=1, sleep=record, jitter=lambda low, high: high)
        async with EmbeddingClient(server.base_url, model="m", api_key="right", retry=retry) as client:
            server.fail(503)
            answer = await client.embed(["once more"])
        async with EmbeddingClient(server.base_url, model="m", api_key="wrong", retry=retry) as refused:
            with pytest.raises(ProviderRejected) as error:
                await refused.embed(["no"])
    assert len(answer.vectors) == 1 and len(waits) == 1
    assert "memory.embeddings" in str(error.value)


def test_an_answer_without_one_vector_per_text_is_a_bad_response():
    with pytest.raises(BadResponse):
        parse_response({"data": [{"index": 0, "embedding": [0.1, 0.2]}]}, 2)
    with pytest.raises(BadResponse):
        parse_response({"data": [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": [0.1, 0.2]}]}, 2)
    with pytest.raises(BadResponse):
        parse_response({"data": [{"index": 0, "embedding": ["x"]}]}, 1)
    vectors, usage = parse_response(
        {"data": [{"index": 1, "embedding": [1, 0]}, {"index": 0, "embedding": [0, 1]}], "usage": {"prompt_tokens": 7}},
        2,
    )
    assert vectors == [[0.0, 1.0], [1.0, 0.0]] and usage.prompt_tokens == 7


def test_embedding_prices():
    assert embedding_usd("text-embedding-3-small", 1_000_000) == pytest.approx(0.02)
    assert embedding_usd("openai/text-embedding-3-large", 500_000) == pytest.approx(0.065)
    assert embedding_usd("nomic-embed-text", 1_000_000) == 0.0
