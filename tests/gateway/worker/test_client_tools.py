"""A client's own tools through the gateway on real Redis with a fake provider: the reply ends with the client's
calls (told to the adapter ahead of the reply's text), the client's next inbox entry brings their results, and
the session holds the call, its result and the answer once each; results that answer nothing are refused."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.platforms.recording import RecordingAdapter
from gateway.store import SessionStore
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, looked up by the client.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


class ClientAdapter(RecordingAdapter):
    """The recording platform, also keeping what an API front hears of client calls and refusals, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.heard: list[tuple[str, Any]] = []

    async def client_tool_calls(
        self, chat_id: str, calls: Sequence[Mapping[str, Any]], *, reply_to: str | None = None
    ) -> None:
        self.heard.append(("calls", (reply_to, [dict(call) for call in calls], len(self.sent))))

    async def client_request_refused(
        self, chat_id: str, param: str, reason: str, *, reply_to: str | None = None
    ) -> None:
        self.heard.append(("refused", (reply_to, param, reason)))


def model(request: RecordedRequest) -> Reply:
    """Calls the client's weather tool when offered it, answers with the tool's result once it has one."""
    last = request.messages[-1]
    if last.get("role") == "tool":
        return Reply.answer(f"the client says: {last['content']}")
    offered = [tool["function"]["name"] for tool in request.body.get("tools") or ()]
    if "get_weather" in offered:
        return Reply.tool_call("get_weather", {"city": "Oslo"}, call_id="call_weather", text="Looking it up.")
    return Reply.answer("no tools")


async def test_a_client_tool_round_trip_across_two_entries_commits_call_result_and_answer_once(
    redis, redis_url, key_prefix
):
    async with FakeLLMServer(handler=model) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=32_000)
        adapter = ClientAdapter()
        async with running_gateway(settings, redis, adapter=adapter) as (runner, _adapter, _events):
            await runner.intake(message("api", "r1", "weather in Oslo?", client_tools=(WEATHER,)))
            await runner.wait_idle()
            assert [kind for kind, _ in adapter.heard] == ["calls"]
            reply_to, calls, sent_before = adapter.heard[0][1]
            assert reply_to == "r1" and sent_before == 0  # told ahead of the reply's text
            assert calls[0]["id"] == "call_weather" and json.loads(calls[0]["function"]["arguments"]) == {
                "city": "Oslo"
            }
            assert adapter.sent == [("api", "Looking it up.")]

            results = ({"tool_call_id": "call_weather", "content": "sunny"},)
            await runner.intake(message("api", "r2", "", client_tools=(WEATHER,), tool_results=results))
            await runner.intake(message("api", "r2", "", client_tools=(WEATHER,), tool_results=results))  # a resend
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            sid = await store.current_session("local:api")
            active = await store.active("local:api", sid)
            meta = await store.meta("local:api", sid)
    assert adapter.sent[-1] == ("api", "the client says: sunny") and len(adapter.sent) == 2
    assert len(adapter.heard) == 1  # the answer ends with no calls
    assert [(m["role"], m.get("tool_call_id")) for m in active] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_weather"),
        ("assistant", None),
    ]
    assert [c["id"] for c in active[1]["tool_calls"]] == ["call_weather"]
    assert (active[2]["content"], active[3]["content"]) == ("sunny", "the client says: sunny")
    assert meta.last_entry_id == meta.replied_entry_id == "local:r2"
    continued = server.requests[-1]
    assert [m["role"] for m in continued.messages] == ["user", "assistant", "tool"]
    assert len(server.requests) == 2


async def test_results_for_no_pending_call_are_refused_naming_tool_call_id_and_nothing_is_stored(
    redis, redis_url, key_prefix
):
    async with FakeLLMServer(handler=model) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=32_000)
        adapter = ClientAdapter()
        async with running_gateway(settings, redis, adapter=adapter) as (runner, _adapter, _events):
            await runner.intake(message("api", "r1", "weather in Oslo?", client_tools=(WEATHER,)))
            await runner.wait_idle()
            wrong = ({"tool_call_id": "call_nobody_made", "content": "sunny"},)
            await runner.intake(message("api", "r2", "", client_tools=(WEATHER,), tool_results=wrong))
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            active = await store.active("local:api", await store.current_session("local:api"))
            waiting = await runner.inbox.waiting("local:api", 10)
    kind, (reply_to, param, reason) = adapter.heard[-1]
    assert (kind, reply_to, param) == ("refused", "r2", "tool_call_id") and "call_nobody_made" in reason
    assert adapter.sent[-1][1].startswith("⚠️") and "call_nobody_made" in adapter.sent[-1][1]
    assert [m["role"] for m in active] == ["user", "assistant"]  # the call still awaits its result
    assert waiting == [] and len(server.requests) == 1
