"""The summarizer against a real fake provider: the fault matrix, cooldowns, strikes, iterative updates, pieces.

Whatever the provider does, the middle of the conversation is never dropped silently
(L1, B1): below the critical level a failed compaction leaves the transcript exactly as
it was and rests the summarizer; when forced (hygiene, /compress) or at ≥ 85% of the
window it falls back to the deterministic summary built from the transcript.
"""

import json

import pytest

from agent.compaction.guard import COOLDOWN_START
from agent.compaction.summary_prompt import SECTION_HEADINGS, UPDATE_INSTRUCTION
from agent.http_options import HttpOptions
from agent.llm import ChatClient
from agent.llm.retry import RetryPolicy
from agent.messages import api_problems, is_summary
from tests.fakes.histories import history
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.summarizer import NOTES, Clock, make


@pytest.fixture
async def server():
    async with FakeLLMServer(default=Reply.answer(NOTES)) as fake:
        yield fake


@pytest.fixture
async def client(server):
    # One try per summarizer request: each fault below is one failed request, as the compactor sees it.
    async with ChatClient(
        server.openai_base_url, options=HttpOptions(timeout_seconds=0.5), retry=RetryPolicy(max_retries=0)
    ) as chat:
        yield chat


FAULTS = {
    "timeout": Reply.slow(3),
    "server_error": Reply.server_error(503),
    "rate_limited": Reply.rate_limited(retry_after=90),
    "context_length": Reply.context_too_long(),
    "empty": Reply.empty(),
    "truncated": Reply.truncated(),
    "malformed_json": Reply.malformed_json(),
    "connection_drop": Reply.drop_connection(),
    "missing_sections": Reply.answer("The user worked on the ingest service."),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_below_the_critical_level_a_failure_keeps_the_transcript_and_starts_a_cooldown(server, client, fault):
    server.enqueue(FAULTS[fault])
    clock = Clock()
    compressor = make(client, clock)
    messages = history()
    out = await compressor.compress(messages, current_tokens=31_000)
    stats = compressor.last_compaction
    assert out == messages and all(a is b for a, b in zip(out, messages))
    assert stats.outcome == "aborted" and stats.error and stats.calls == 1
    assert compressor.compression_count == 0
    # resting: no automatic compaction and no summarizer call until the cooldown ends
    wait = 90 if fault == "rate_limited" else COOLDOWN_START
    assert not compressor.should_compress(40_000)
    requests = len(server.requests)
    assert await compressor.compress(messages, current_tokens=31_000) == messages
    assert len(server.requests) == requests and "cooldown" in compressor.last_compaction.reason
    clock.now += wait - 1
    assert not compressor.should_compress(40_000)
    clock.now += 1
    assert compressor.should_compress(40_000)


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("how", ["forced", "critical"])
async def test_forced_or_critical_compaction_falls_back_to_the_deterministic_summary(server, client, fault, how):
    server.enqueue(FAULTS[fault])
    compressor = make(client, Clock())
    messages = history()
    if how == "forced":
        out = await compressor.compress(messages, force=True)
    else:
        out = await compressor.compress(messages, current_tokens=52_000)  # ≥ 85% of 60K
    stats = compressor.last_compaction
    assert stats.outcome == "compacted" and stats.summarizer == "fallback" and stats.error
    summary = next(m["content"] for m in out if is_summary(m))
    assert all(heading in summary for heading in SECTION_HEADINGS)
    # built from the transcript: the user's words, errors only seen in tool output, tool calls
    assert "Step 20: check PR #1020 please." in summary
    assert "FAILED test_7 - IngestError: code E007" in summary
    assert "run_tests ×" in summary
    assert api_problems(out) == []
    assert set(stats.replaced_ids) == {m["_id"] for m in messages} - {m.get("_id") for m in out}


@pytest.mark.parametrize("tail_mode", ["lean", "legacy"])
async def test_a_working_summarizer_adds_its_notes_to_the_digest_and_replaces_none_of_it(server, client, tail_mode):
    compressor = make(client, Clock(), tail_mode=tail_mode)
    out = await compressor.compress(history(), current_tokens=31_000)
    stats = compressor.last_compaction
    assert stats.outcome == "compacted" and stats.summarizer == "aux-model" and stats.calls == 1
    summary = next(m["content"] for m in out if is_summary(m))
    assert summary.index("- noted by the model") < summary.index("## Notes Taken Verbatim")
    assert "## User Messages (verbatim, newest first)" in summary and "## Anchor Index" in summary
    assert "Step 20: check PR #1020 please." in summary  # the person's own words, whatever the model wrote
    assert "IngestError: code E007" in summary  # from tool output, not from the model
    assert "run_tests ×" in summary  # the deterministic notes are there too
    request = server.requests[0]
    assert request.body["model"] == "aux-model"
    turns = request.messages[1]["content"]
    assert "Step 7: check PR #1007 please." in turns
    assert "[Old tool output cleared to save context space]" in turns  # the summarizer reads the pruned middle
    assert "log line\nlog line" not in turns


async def test_second_compaction_asks_the_model_to_update_the_previous_notes(server, client):
    server.enqueue(Reply.answer(NOTES.replace("noted by the model", "first notes")))
    compressor = make(client, Clock())
    first = await compressor.compress(history(), current_tokens=31_000)
    second_input = first + history(turns=40, start=40, ids_from=1000)
    await compressor.compress(second_input, current_tokens=31_000)
    request = server.requests[1].messages[1]["content"]
    assert "<previous_notes>" in request and "- first notes" in request
    assert UPDATE_INSTRUCTION in request
    assert "[CONTEXT COMPACTION]" not in request  # the old summary is passed as notes, not as a turn
    assert compressor.compression_count == 2


async def test_a_middle_larger_than_the_summarizers_window_is_summarized_in_pieces(server, client):
    server.context_limit = 9_000
    compressor = make(client, Clock(), context_length=200_000, summarizer_window=9_000)
    messages = history(turns=120)
    out = await compressor.compress(messages, force=True)
    stats = compressor.last_compaction
    assert stats.summarizer == "aux-model" and stats.calls == len(server.requests) > 1
    for later in server.requests[1:]:
        assert "<previous_notes>" in later.messages[1]["content"]
    assert api_problems(out) == []


async def test_cooldown_doubles_on_repeated_failures_and_resets_on_success(server, client):
    clock = Clock()
    compressor = make(client, clock)
    messages = history()
    server.enqueue(Reply.server_error(), Reply.server_error())
    await compressor.compress(messages, current_tokens=31_000)
    clock.now += 60
    await compressor.compress(messages, current_tokens=31_000)
    clock.now += 119
    assert not compressor.should_compress(40_000)
    clock.now += 1
    assert compressor.should_compress(40_000)
    await compressor.compress(messages, current_tokens=31_000)
    assert compressor.last_compaction.summarizer == "aux-model"
    assert compressor.guard.next_cooldown == COOLDOWN_START


async def test_two_ineffective_compactions_stop_automatic_compaction_until_the_backoff_ends(server, client):
    clock = Clock()
    compressor = make(client, clock)
    threshold = compressor.threshold_tokens
    await compressor.compress(history(), current_tokens=31_000)
    compressor.update_from_response(
        {"prompt_tokens": threshold + 500, "completion_tokens": 5, "total_tokens": threshold + 505}
    )
    assert compressor.should_compress()  # one strike: still trying
    await compressor.compress(history(), current_tokens=31_000)
    compressor.update_from_response(
        {"prompt_tokens": threshold + 400, "completion_tokens": 5, "total_tokens": threshold + 405}
    )
    assert not compressor.should_compress()
    state = json.loads(json.dumps(compressor.export_state()))
    restarted = make(client, clock)
    restarted.load_state(state)
    assert not restarted.should_compress(threshold + 1000)  # a restart does not reset the backoff
    clock.now += 10 * 60
    assert restarted.should_compress(threshold + 1000)  # probe
    await restarted.compress(history(), current_tokens=31_000)
    restarted.update_from_response({"prompt_tokens": 9_000, "completion_tokens": 5, "total_tokens": 9_005})
    assert restarted.guard.strikes == 0


async def test_cooldown_survives_a_restart(server, client):
    clock = Clock()
    compressor = make(client, clock)
    server.enqueue(Reply.rate_limited(retry_after=600))
    await compressor.compress(history(), current_tokens=31_000)
    restarted = make(client, clock)
    restarted.load_state(json.loads(json.dumps(compressor.export_state())))
    assert not restarted.should_compress(40_000)
    clock.now += 600
    assert restarted.should_compress(40_000)


async def test_anthropic_summarizer_route(server):
    async with ChatClient(server.anthropic_base_url, api_key="k", dialect="anthropic") as chat:
        compressor = make(chat, Clock())
        await compressor.compress(history(), current_tokens=31_000)
    assert compressor.last_compaction.summarizer == "aux-model"
    request = server.requests[0]
    assert request.path == "/v1/messages" and "compaction notes" in request.body["system"]
