"""The ``lcm`` engine through the whole gateway: real Redis, the fake provider on loopback, two compactions,
then the model recovers a fact from the FIRST compacted range with lcm_grep and lcm_expand."""

from __future__ import annotations

import json
import random

from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT
from agent.messages import is_summary
from gateway.agents import AgentBuilder
from gateway.events import CompressEvent
from gateway.session_source import ChatHistory
from gateway.store import SessionStore
from plugins.context_engine.lcm import LcmEngine
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

NOTES = "\n".join(f"{heading}\n- noted" for heading in SECTION_HEADINGS)
FACT = "note: the staging port is 8443 and the prod port is 443"
SERVICES = ("billing-api", "auth-gateway", "search-indexer", "notifier", "ledger")


def is_summary_request(request: RecordedRequest) -> bool:
    return SYSTEM_PROMPT[:40] in request.system


def chatter(rng: random.Random, index: int) -> str:
    service = rng.choice(SERVICES)
    return (
        f"{index}: {service} p99 went from {rng.randint(20, 900)}ms to {rng.randint(20, 900)}ms in "
        f"{rng.choice(('eu-west', 'us-east', 'ap-south'))}; queue depth {rng.randint(2, 9000)}, "
        f"restarted {rng.randint(1, 40)} pods, canary at {rng.choice((5, 25, 50))}%"
    )


class ArchiveReader:
    """The scripted model: asks lcm_grep for the staging port, expands the best hit, answers with its text."""

    def __init__(self) -> None:
        self.tool_results: list[dict] = []
        self.offered_tools: list[list[str]] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return Reply.answer(NOTES)
        self.offered_tools.append([tool["function"]["name"] for tool in request.body.get("tools") or ()])
        last = request.messages[-1]
        if last.get("role") == "tool":
            result = json.loads(last["content"])
            self.tool_results.append(result)
            if "hits" in result:
                return Reply.tool_call("lcm_expand", {"ids": [result["hits"][0]["id"]]}, call_id="expand_1")
            return Reply.answer("From the archive: " + result["messages"][0]["content"])
        if "which port" in request.last_user_text:
            return Reply.tool_call("lcm_grep", {"pattern": "staging port"}, call_id="grep_1")
        return Reply.answer("ok")


async def test_after_two_compactions_the_model_recovers_a_first_range_fact_with_lcm_tools(redis, redis_url, key_prefix):
    window = 16_000
    rng = random.Random(21)
    model = ArchiveReader()
    chat = "local:ops"
    async with FakeLLMServer(context_limit=window, handler=model) as server:
        settings = make_settings(
            redis_url, key_prefix, server.openai_base_url, context_length=window, context={"engine": "lcm"}
        )
        async with running_gateway(settings, redis) as (runner, adapter, events):
            store = SessionStore(redis, key_prefix)
            await runner.intake(message("ops", "hello", "hello"))
            await runner.wait_idle()
            for round_ in range(2):  # each night's backlog fills 85% of the window: hygiene compacts once per round
                for index in range(380):
                    text = FACT if (round_, index) == (0, 30) else chatter(rng, index)
                    await runner.intake(message("ops", f"{round_}-{index}", text, respond=False))
                await runner.wait_idle()
                await runner.intake(message("ops", f"q{round_}", f"morning {round_}: status?"))
                await runner.wait_idle()
            await runner.intake(message("ops", "ask", "which port does staging use?"))
            await runner.wait_idle()
            sid = await store.current_session(chat)
            meta = await store.meta(chat, sid)
            active = await store.active(chat, sid)
            archived = await store.archive(chat, sid)

    compactions = [e for e in events if isinstance(e, CompressEvent)]
    assert len(compactions) == 2 and all(e.in_place for e in compactions)
    original = [m for m in archived if m.get("content") == FACT]
    assert len(original) == 1 and original[0]["_id"] not in {m["_id"] for m in active}

    grep_result, expand_result = model.tool_results
    assert grep_result["hits"][0]["id"] == original[0]["_id"]
    assert grep_result["hits"][0]["range"] == "r1"  # it left the context in the FIRST compaction
    assert "8443" in grep_result["hits"][0]["snippet"]
    assert expand_result["messages"][0]["content"] == FACT and expand_result["messages"][0]["range"] == "r1"
    assert adapter.sent[-1] == ("ops", "From the archive: " + FACT)
    assert {"lcm_grep", "lcm_expand", "lcm_describe"} <= set(model.offered_tools[-1])

    # The live summary is an index citing both ranges; the persisted state holds ranges, not text.
    summary = next(m for m in active if is_summary(m))
    assert "r1 · ids" in summary["content"] and "r2 · ids" in summary["content"] and "lcm_grep" in summary["content"]
    assert summary["_id"] not in {hit["id"] for hit in grep_result["hits"]}  # hits are originals, not the index
    ledger = meta.engine_state["lcm"]
    assert [record["n"] for record in ledger["records"]] == [1, 2]
    assert "8443" not in json.dumps(ledger)


async def test_the_gateway_builds_lcm_only_when_configured_and_attaches_the_chat_history(redis, redis_url, key_prefix):
    store = SessionStore(redis, key_prefix)
    history = ChatHistory(store, "local:x", await store.current_session("local:x"))
    chosen = make_settings(
        redis_url, key_prefix, "http://127.0.0.1:9/v1", context_length=32_000, context={"engine": "lcm"}
    )
    default = make_settings(redis_url, key_prefix, "http://127.0.0.1:9/v1", context_length=32_000)
    builders = [AgentBuilder(chosen), AgentBuilder(default)]
    try:
        lcm = builders[0].build_engine("test-model", {}, history)
        plain = builders[1].build_engine("test-model", {}, history)
    finally:
        for builder in builders:
            await builder.aclose()
    assert isinstance(lcm, LcmEngine) and lcm.view.history is history
    assert not isinstance(plain, LcmEngine) and plain.get_tool_schemas() == []
