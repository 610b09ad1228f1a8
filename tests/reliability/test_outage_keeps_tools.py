"""A provider that goes away after the model called a tool: the retried turn continues from the tool's result.

The tool already ran (and may not be safe to run twice, or cost money): its result is stored with the
person's message when the provider fails, and the turn that runs once the provider is back starts from
there — the tool is not called again, the reply comes once, and the session holds each message once.
A provider that never comes back ends in the final notice without storing the message twice.
"""

from __future__ import annotations

from gateway.store import SessionStore
from tests.fakes.gateway import message, running_gateway, settings_for
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

QUESTION = "what did we decide about the login timeout?"


class ToolThenOutage:
    """The model asks for ``session_search`` once; the next ``failures`` requests find the provider down (None:
    it never comes back). Counted in requests, not seconds: the outage lasts as many tries as the test says,
    however fast the machine runs them."""

    def __init__(self, failures: int | None) -> None:
        self.failures = failures
        self.refused = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        if request.last_user_text != QUESTION:
            return Reply.answer("noted")
        if request.messages[-1].get("role") == "user":
            return Reply.tool_call("session_search", {"query": "login timeout"}, call_id="call_search_1")
        if self.failures is None or self.refused < self.failures:
            self.refused += 1
            return Reply.error(503, "upstream overloaded", kind="server_error")
        return Reply.answer("We decided to ship the fix in PR #4821.")


def tool_results(messages: list[dict]) -> list[dict]:
    return [m for m in messages if m.get("role") == "tool"]


async def test_tool_results_survive_an_outage_and_the_tool_is_not_run_again(redis, redis_url, key_prefix):
    model = ToolThenOutage(failures=2)
    async with FakeLLMServer(handler=model) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=30)
        async with running_gateway(settings, redis) as (runner, adapter, _):
            await runner.intake(message("t", "1", "the fix for the login timeout ships in PR #4821"))
            await runner.wait_idle(timeout=20)
            await runner.intake(message("t", "2", QUESTION))
            await runner.wait_idle(timeout=30)
        store = SessionStore(redis, key_prefix)
        sid = await store.current_session("local:t")
        active = await store.active("local:t", sid)
    asked = [r for r in server.requests if any(m.get("content") == QUESTION for m in r.messages)]
    calls = [r for r in asked if r.messages[-1].get("role") == "user"]
    assert len(calls) == 1, "the model was asked to pick its tool again: the tool ran twice"
    retried = [r for r in asked if r.messages[-1].get("role") == "tool"]
    assert len(retried) == 3 and len({r.messages[-1]["tool_call_id"] for r in retried}) == 1  # the same result
    replies = [text for chat, text in adapter.sent if chat == "t" and "PR #4821" in text]
    assert replies == ["We decided to ship the fix in PR #4821."]
    assert [m["content"] for m in active if m["role"] == "user"].count(QUESTION) == 1
    assert len(tool_results(active)) == 1


async def test_a_kept_turn_whose_provider_never_returns_ends_in_one_notice_and_one_stored_message(
    redis, redis_url, key_prefix
):
    model = ToolThenOutage(failures=None)
    async with FakeLLMServer(handler=model) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=1.0)
        async with running_gateway(settings, redis) as (runner, adapter, _):
            await runner.intake(message("n", "1", QUESTION))
            await runner.wait_idle(timeout=30)
        store = SessionStore(redis, key_prefix)
        sid = await store.current_session("local:n")
        active = await store.active("local:n", sid)
        meta = await store.meta("local:n", sid)
    assert [m["content"] for m in active if m["role"] == "user"] == [QUESTION]
    assert len(tool_results(active)) == 1
    assert meta.partial_entry_id is None and meta.last_entry_id == "local:1"
    assert sum(1 for r in server.requests if r.messages[-1].get("role") == "user") == 1
    assert any("kept" in text or "could not" in text for _, text in adapter.sent)
