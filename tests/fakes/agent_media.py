"""The agent's media on the fake providers: an in-memory store speaking the agent's ``MediaSource`` protocol
(:class:`Shelf`), and one turn run on each provider route with every request body checked against the
official SDK types (``tests.fakes.sdk_shapes``)."""

from __future__ import annotations

import hashlib
from typing import Any

from agent.context_compressor import ContextCompressor
from agent.llm.client import ChatClient
from agent.llm.responses import ResponsesClient
from agent.loop import Agent
from agent.tools import ToolRegistry
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.responses_server import FakeResponsesServer
from tests.fakes.sdk_shapes import validate_anthropic_messages, validate_chat_completions, validate_responses


class Shelf:
    """Item bytes by sha256, as the agent reads them (``agent.items.MediaSource``); counts its reads."""

    def __init__(self) -> None:
        self.blobs: dict[str, tuple[bytes, str]] = {}
        self.reads: list[str] = []
        self.failing = False

    def put(self, data: bytes, mime: str) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.blobs[sha] = (data, mime)
        return sha

    async def read(self, sha: str) -> tuple[bytes, str] | None:
        self.reads.append(sha)
        if self.failing:
            raise ConnectionError("the store is away")
        return self.blobs.get(sha)

    async def keep(self, data: bytes, *, mime: str, name: str) -> dict[str, Any]:
        return {
            "kind": "image" if mime.startswith("image/") else "document",
            "sha": self.put(data, mime),
            "name": name,
            "mime": mime,
            "bytes": len(data),
        }


#: The provider routes the agent speaks, each on its loopback fake.
ROUTES = ["openai", "openrouter", "anthropic", "responses"]


async def run_route(
    route: str,
    history: list[dict[str, Any]],
    user: dict[str, Any],
    shelf: Shelf,
    tools: ToolRegistry | None = None,
    handler=None,
) -> tuple[list[RecordedRequest], Any]:
    """One turn of the agent on ``route``'s fake provider, its media read from ``shelf``; the requests the
    provider received and the turn's result."""
    handler = handler or (lambda request: Reply.answer("a red square"))
    engine = ContextCompressor(model="m", context_length=200_000)
    if route == "responses":
        async with FakeResponsesServer(handler=handler) as server:
            async with ResponsesClient(server.responses_base_url, api_key="sk-test", route="openai") as client:
                agent = Agent(client, engine, model="gpt-4.1", tools=tools, media=shelf)
                result = await agent.run_turn(history, user)
            return list(server.requests), result
    flavor = "openrouter" if route == "openrouter" else "openai"
    async with FakeLLMServer(handler=handler, flavor=flavor) as server:
        if route == "anthropic":
            client = ChatClient(server.anthropic_base_url, api_key="k", dialect="anthropic", route="anthropic")
            model = "claude-sonnet-4-5"
        else:
            client = ChatClient(server.openai_base_url, api_key="k", route=route)
            model = "gpt-4o"
        async with client:
            agent = Agent(client, engine, model=model, tools=tools, media=shelf)
            result = await agent.run_turn(history, user)
        return list(server.requests), result


def validate(route: str, body: dict[str, Any]) -> None:
    """Check ``body`` against the official SDK types of ``route``'s API."""
    {
        "openai": validate_chat_completions,
        "openrouter": validate_chat_completions,
        "anthropic": validate_anthropic_messages,
        "responses": validate_responses,
    }[route](body)
