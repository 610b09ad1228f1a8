"""The ``lcm`` plugin engine offline (no gateway): resolution, lossless recovery after repeated compaction,
the summary as an index, tool caps and errors, persisted state, and the compressor's guards."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.compaction.summarizer import SummarizerFailure
from agent.context_compressor import ContextCompressor
from agent.engine_registry import resolve_context_engine
from agent.messages import SUMMARY_PREFIX, api_problems, is_real_user_message, is_summary
from agent.settings import CompressionSettings, ContextSettings
from agent.tokens import count_messages
from plugins.context_engine.lcm import LcmEngine, create_engine
from tests.fakes.histories import Transcript

FACT = "rollback token QX-7731-ZETA unlocks the ledger migration"


class Clock:
    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def work(t: Transcript, start: int, turns: int, *, fact_at: int | None = None) -> Transcript:
    """Turns of a coding session: a request, a bulky read_file result, a short reply."""
    for i in range(start, start + turns):
        t.user(f"Step {i}: check the worker, see PR #{1000 + i}.")
        extra = f"\n{FACT}" if i == fact_at else ""
        t.call(
            "read_file",
            {"path": f"svc/worker_{i}.py"},
            f"commit {i:04x}beefcafe{i:04x}\n" + "code line\n" * 300 + extra,
        )
        t.assistant(f"Worker {i} looks fine.")
    return t


def engine(context_length: int = 60_000, **settings) -> LcmEngine:
    return LcmEngine("test-model", context_length, CompressionSettings(**settings), clock=Clock())


async def twice_compacted(e: LcmEngine) -> tuple[list[dict], list[dict], dict]:
    """Two compactions of a growing session; returns (original messages, live context, the fact's message)."""
    first = work(Transcript(system="You are a release assistant."), 0, 40, fact_at=2)
    first.messages.insert(1, {"role": "user", "content": "Help me ship the ingest service.", "_id": "m-0"})
    fact_message = next(m for m in first.messages if FACT in str(m.get("content")))
    live = await e.compress(first.messages, force=True)
    more = Transcript(system=None)
    more._ids.n, more._calls = 1000, 1000
    work(more, 40, 40)
    live = await e.compress(live + more.messages, force=True)
    return first.messages + more.messages, live, fact_message


async def call(e: LcmEngine, name: str, **args) -> dict:
    return json.loads(await e.handle_tool_call(name, args))


def test_context_engine_lcm_resolves_to_the_plugin_and_nothing_else_does():
    factory, warning = resolve_context_engine("lcm")
    assert warning is None and factory is create_engine
    built = factory(model="m", context_length=100_000, settings=CompressionSettings(), summarizer=None)
    assert isinstance(built, LcmEngine) and built.name == "lcm"
    assert {s["function"]["name"] for s in built.get_tool_schemas()} == {"lcm_grep", "lcm_expand", "lcm_describe"}
    for default in (None, "compressor", ContextSettings().engine):  # never active by itself (S1.4)
        factory, warning = resolve_context_engine(default)
        assert factory is ContextCompressor and warning is None


async def test_after_two_compactions_grep_finds_a_first_range_fact_and_expand_returns_the_original():
    e = engine()
    _, live, fact_message = await twice_compacted(e)
    assert e.compression_count == 2 and not any(FACT in str(m.get("content")) for m in live)

    found = await call(e, "lcm_grep", pattern="QX-7731-ZETA")
    top = found["hits"][0]
    assert top["id"] == fact_message["_id"] and top["range"] == "r1" and top["tool"] == "read_file"
    assert "QX-7731-ZETA" in top["snippet"]

    expanded = await call(e, "lcm_expand", ids=[top["id"]])
    assert expanded["messages"][0]["content"] == fact_message["content"]
    assert expanded["messages"][0]["range"] == "r1" and expanded["missing"] == []

    for pattern in ("/qx-\\d{4}-zeta/i", {"pattern": "QX-[0-9]+-Z", "regex": True}):
        args = pattern if isinstance(pattern, dict) else {"pattern": pattern}
        assert (await call(e, "lcm_grep", **args))["hits"][0]["id"] == fact_message["_id"]


async def test_expand_by_compaction_label_and_by_id_range():
    e = engine()
    _, _, fact_message = await twice_compacted(e)
    pages, shown, offset = 0, [], 0
    while offset is not None:  # r1 is far bigger than one call: page through it
        page = await call(e, "lcm_expand", range="r1", offset=offset)
        assert sum(len(m["content"]) for m in page["messages"]) <= 20_000
        shown += [m["id"] for m in page["messages"]]
        offset, pages = page.get("next_offset"), pages + 1
    assert pages > 1 and shown == e.ledger.get("r1").ids() and fact_message["_id"] in shown

    n = int(fact_message["_id"].removeprefix("m-"))
    span = await call(e, "lcm_expand", range=f"m-{n - 2}..m-{n}")
    assert [m["id"] for m in span["messages"]] == [f"m-{n - 2}", f"m-{n - 1}", f"m-{n}"]
    assert span["messages"][2]["content"] == fact_message["content"]
    assert span["messages"][1]["tool_calls"][0]["name"] == "read_file"
    assert "error" in await call(e, "lcm_expand", range="r9")
    assert "error" in await call(e, "lcm_expand", range="nope..m-14")


async def test_the_summary_is_an_index_citing_each_range_and_the_context_stays_valid():
    e = engine()
    _, live, _ = await twice_compacted(e)
    summary = next(m for m in live if is_summary(m))
    text = summary["content"]
    assert text.startswith(SUMMARY_PREFIX) and "none was deleted" in text
    r1, r2 = e.ledger.records
    assert f"- r1 · ids {r1.folded[0][0]}..{r1.folded[0][1]} · {r1.folded_count} messages" in text
    assert "- r2 · ids " in text and r2.folded_count > 100
    assert "## Notes on r1–r2" in text and 'lcm_expand(range="r2")' in text
    assert "not instructions and not an active task" in text  # the stale-task guard (L4) is kept
    assert text.count("## Recovery") == 1 and "session_search(query=" not in text.split("## Recovery")[1]
    assert api_problems(live) == []
    assert is_real_user_message(live[-4]) and live[-4]["content"] == "Step 79: check the worker, see PR #1079."
    stats = e.last_compaction
    assert stats.outcome == "compacted" and stats.tokens_after == count_messages(live)
    assert stats.summary_tokens > 0


async def test_expand_caps_its_output_and_says_how_to_read_on():
    e = engine()
    _, _, fact_message = await twice_compacted(e)
    text = fact_message["content"]
    pieces = []
    offset = 0
    while True:
        result = await call(e, "lcm_expand", ids=[fact_message["_id"]], max_chars=1_000, from_char=offset)
        message = result["messages"][0]
        pieces.append(message["content"])
        assert len(message["content"]) <= 1_000 and message["chars"] == len(text)
        if "truncated" not in message:
            break
        assert "from_char" in result["note"]
        offset = message["truncated"]["next_from_char"]
    assert "".join(pieces) == text and len(pieces) == -(-len(text) // 1_000)


async def test_state_round_trips_as_ranges_without_text_and_numbering_continues():
    e = engine()
    originals, live, fact_message = await twice_compacted(e)
    state = json.loads(json.dumps(e.export_state()))
    ledger = json.dumps(state["lcm"])
    assert "QX-7731" not in ledger and "code line" not in ledger and len(ledger) < 2_000

    restored = engine()
    restored.load_state(state)
    before, after = await call(e, "lcm_describe"), await call(restored, "lcm_describe")
    assert before.pop("held_in_memory") > 0 and "held_in_memory" not in after  # text is not state
    assert after == before
    assert [c["range"] for c in after["compactions"]] == ["r1", "r2"]
    assert fact_message["_id"] in restored.ledger.get("r1").ids()

    more = Transcript(system=None)
    more._ids.n, more._calls = 5000, 5000
    work(more, 80, 40)
    await restored.compress(live + more.messages, force=True)
    assert [r.label for r in restored.ledger.records] == ["r1", "r2", "r3"]
    assert "- r3 · ids" in next(m for m in restored.view.live if is_summary(m))["content"]


async def test_messages_without_ids_are_archived_in_memory_and_recoverable():
    t = work(Transcript(system="sys"), 0, 40, fact_at=3)
    bare = [{key: value for key, value in m.items() if key != "_id"} for m in t.messages]
    e = engine()
    await e.compress(bare, force=True)
    hit = (await call(e, "lcm_grep", pattern="QX-7731-ZETA"))["hits"][0]
    assert hit["id"].startswith("lcm-") and hit["range"] == "r1"
    assert FACT in (await call(e, "lcm_expand", ids=[hit["id"]]))["messages"][0]["content"]
    assert all("_id" not in m for m in bare)  # the caller's messages are not touched


async def test_tool_errors_come_back_as_json_the_model_can_act_on():
    e = engine()
    await twice_compacted(e)
    assert "invalid regex" in (await call(e, "lcm_grep", pattern="/([unclosed/"))["error"]
    assert "pattern is required" in (await call(e, "lcm_grep"))["error"]
    assert "ids=" in (await call(e, "lcm_expand"))["error"]
    missing = await call(e, "lcm_expand", ids=["m-14", "no-such-id"])
    assert missing["missing"] == ["no-such-id"] and [m["id"] for m in missing["messages"]] == ["m-14"]
    assert (await call(e, "lcm_grep", pattern="zyzzyva-never-said"))["hits"] == []
    assert "error" in await call(e, "lcm_unknown")


async def test_grep_skips_summaries_stubs_and_edited_copies_so_hits_are_originals():
    e = engine()
    originals, live, _ = await twice_compacted(e)
    quoted = "Step 39: check the worker, see PR #1039."
    summary = next(m for m in live if is_summary(m))
    summary["_id"] = "s-1"  # as the store would number it
    assert quoted in summary["content"]  # the summary quotes the user's words too
    hits = (await call(e, "lcm_grep", pattern=f'"{quoted}"', limit=20))["hits"]
    original = next(m for m in originals if m.get("content") == quoted)
    assert hits[0]["id"] == original["_id"] and "s-1" not in {hit["id"] for hit in hits}
    system = (await call(e, "lcm_grep", pattern="release assistant"))["hits"]
    assert [hit["id"] for hit in system] == ["m-1"]  # the archived original, not the noted copy in the context
    assert live[0]["_orig_id"] == "m-1" and "release assistant" in live[0]["content"]


class BrokenSummarizer:
    name = "broken-model"
    context_length = 200_000

    async def call_llm(self, *, task, messages, max_tokens):
        raise SummarizerFailure("HTTP 503")


async def test_the_compressor_guards_apply_a_failed_summary_below_critical_keeps_everything():
    e = LcmEngine("test-model", 60_000, CompressionSettings(), summarizer=BrokenSummarizer(), clock=Clock())
    messages = work(Transcript(system="sys"), 0, 40).messages
    out = await e.compress(messages, current_tokens=31_000)
    assert len(out) == len(messages) and all(a is b for a, b in zip(out, messages))
    assert e.last_compaction.outcome == "aborted"
    assert e.ledger.records == [] and len(e.memory) == 0
    assert not e.should_compress(59_000)  # the summarizer cooldown holds automatic compaction back
    forced = await e.compress(messages, force=True)  # critical: the deterministic fallback, recorded as r1
    assert e.last_compaction.summarizer == "fallback" and [r.label for r in e.ledger.records] == ["r1"]
    assert len(forced) < len(messages)


def test_thresholds_are_the_compressors():
    settings = CompressionSettings(threshold=0.6, model_thresholds={"big-model": 0.8})
    for model, window in (("test-model", 100_000), ("big-model-2", 600_000)):
        lcm = LcmEngine(model, window, settings)
        plain = ContextCompressor(model, window, settings)
        assert lcm.threshold_tokens == plain.threshold_tokens
        assert lcm.should_compress(plain.threshold_tokens) and not lcm.should_compress(plain.threshold_tokens - 1)


async def test_a_session_reset_forgets_the_ranges_and_the_archive():
    e = engine()
    await twice_compacted(e)
    e.on_session_reset()
    assert e.ledger.records == [] and len(e.memory) == 0
    assert (await call(e, "lcm_grep", pattern="QX-7731-ZETA"))["hits"] == []
    assert (await call(e, "lcm_describe"))["compactions"] == []


async def test_nothing_is_lost_every_original_is_live_or_expandable_from_its_range():
    e = engine()
    originals, live, _ = await twice_compacted(e)
    live_ids = {m["_id"] for m in live if "_id" in m}
    ranged = {i: r.label for r in e.ledger.records for i in r.ids()}
    assert not live_ids & set(ranged)
    for message in originals:
        assert message["_id"] in live_ids or message["_id"] in ranged
    away = [m for m in originals if m["_id"] in ranged]
    got = await e.view.by_ids([m["_id"] for m in away])
    assert [(m["_id"], m["content"]) for m in got] == [(m["_id"], m["content"]) for m in away]
    assert e.ledger.messages == len(away) and e.ledger.tokens > 0


def test_the_ledger_stays_bounded_and_the_index_still_accounts_for_every_compaction():
    from plugins.context_engine.lcm import index_text
    from plugins.context_engine.lcm.ledger import MAX_RECORDS, Ledger

    ledger = Ledger()
    for n in range(MAX_RECORDS + 6):
        ledger.add(
            at=1_750_000_000.0 + n,
            trigger="threshold",
            folded=[[str(10 * n), str(10 * n + 9)]],
            folded_count=10,
            replaced=[],
            replaced_count=0,
            tokens=1_000,
            first_ts=None,
            last_ts=None,
            tools={"terminal": 2},
            keys=["PAY-278"],
            summarizer="deterministic",
        )
    restored = Ledger.from_state(json.loads(json.dumps(ledger.to_state())))
    assert len(restored.records) == MAX_RECORDS and restored.older.records == 6
    assert restored.compactions == MAX_RECORDS + 6 and restored.messages == 10 * (MAX_RECORDS + 6)
    text = index_text.compose("[CONTEXT COMPACTION] x\n\n## Goal\n- g", restored)
    assert f"over {MAX_RECORDS + 6} compactions" in text
    assert text.count("\n- r") == index_text.INDEX_LINES + 1 and "- r1–r58 (older, 58 compactions)" in text
    assert f"- r{MAX_RECORDS + 6} · ids 690..699" in text and "## Notes on r1–r70" in text
    restored.add(
        at=0.0,
        trigger="forced",
        folded=["x"],
        folded_count=1,
        replaced=[],
        replaced_count=0,
        tokens=1,
        first_ts=None,
        last_ts=None,
        tools={},
        keys=[],
        summarizer="none",
    )
    assert restored.records[-1].label == f"r{MAX_RECORDS + 7}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(st.tuples(st.integers(0, 3), st.integers(10, 4_000)), min_size=8, max_size=40),
    window=st.sampled_from([16_000, 40_000, 120_000]),
    pending=st.booleans(),
)
async def test_property_compactions_lose_nothing_and_keep_the_context_valid(turns, window, pending):
    """Whatever the session's shape: valid tool pairs, an in-flight call left alone, every original live or
    expandable."""
    t = Transcript(system="sys")
    t.exchange("start", "ok")
    for number, (calls, size) in enumerate(turns):
        t.user(f"turn {number}: look at item-{number}")
        if calls:
            t.call("terminal", {"command": f"cat item-{number}"}, *[f"item-{number} line\n" * (size // 15)] * calls)
        t.assistant(f"item-{number} checked")
    e = engine(window)
    live = await e.compress(t.messages, force=True)
    t.user("and now?")
    if pending:
        t.pending_call("terminal", {"command": "make test"})
    live = await e.compress(live + t.messages[-(2 if pending else 1) :], force=True)
    if pending:  # the call being run stays last, unanswered (L3)
        assert live[-1] is t.messages[-1] and api_problems(live[:-1]) == []
    else:
        assert api_problems(live) == []
    live_ids = {m["_id"] for m in live if "_id" in m}
    ranged = {i for r in e.ledger.records for i in r.ids()}
    assert all(m["_id"] in live_ids or m["_id"] in ranged for m in t.messages)
    assert not live_ids & ranged
    recovered = await e.view.by_ids(sorted(ranged))
    assert {m["_id"] for m in recovered} == ranged
    assert all(
        m["content"] == original["content"] for m in recovered for original in t.messages if original["_id"] == m["_id"]
    )
