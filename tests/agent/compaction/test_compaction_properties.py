"""Compaction invariants over random histories (hypothesis).

Histories mix user and assistant text (including empty and CJK), tool calls answered by
0..n results, orphan results, huge tool outputs, synthetic lines and earlier summaries,
sometimes ending on a call still in flight. Whatever comes in, what comes out must be
acceptable to a provider and lose nothing without saying so.
"""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agent.context_compressor import ContextCompressor
from agent.messages import SUMMARY_PREFIX, api_problems, pair_problems
from agent.settings import CompressionSettings

TEXT = st.one_of(
    st.just(""),
    st.text(alphabet="abcdefghij klmnop/._-#0123456789", min_size=1, max_size=120),
    st.text(alphabet="日本語のテキスト設定を確認してください。", min_size=1, max_size=60),
    st.builds(lambda n, c: c * n, st.integers(300, 6000), st.sampled_from(["x", "データ", "log line 12 ms\n"])),
)


@st.composite
def histories(draw):
    ids = iter(range(1, 10_000))
    next_id = lambda: f"m-{next(ids)}"  # noqa: E731
    calls = iter(range(1, 10_000))
    messages = [
        {"role": "system", "content": "You are terse.", "_id": next_id()},
        {"role": "user", "content": "start", "_id": next_id()},
    ]
    for _ in range(draw(st.integers(2, 40))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "calls", "orphan", "synthetic", "summary"]))
        if kind == "user":
            messages.append({"role": "user", "content": draw(TEXT), "_id": next_id()})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": draw(TEXT), "_id": next_id()})
        elif kind == "calls":
            call_ids = [f"call_{next(calls)}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(st.sampled_from(["", "checking"])),
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": "run", "arguments": json.dumps({"i": i})}}
                        for i in call_ids
                    ],
                    "_id": next_id(),
                }
            )
            answered = draw(st.lists(st.sampled_from(call_ids), unique=True, max_size=len(call_ids)))
            for call_id in answered:
                messages.append({"role": "tool", "tool_call_id": call_id, "content": draw(TEXT), "_id": next_id()})
        elif kind == "orphan":
            messages.append(
                {"role": "tool", "tool_call_id": f"ghost_{next(calls)}", "content": draw(TEXT), "_id": next_id()}
            )
        elif kind == "synthetic":
            messages.append({"role": "user", "content": "continue", "_synthetic": True, "_id": next_id()})
        else:
            messages.append(
                {
                    "role": "user",
                    "content": f"{SUMMARY_PREFIX} earlier notes",
                    "_compressed_summary": True,
                    "_id": next_id(),
                }
            )
    return messages


def trailing_pending(messages):
    """Whether the list ends on a call still waiting for some of its results."""
    index = len(messages) - 1
    answered = set()
    while index >= 0 and messages[index]["role"] == "tool":
        answered.add(messages[index]["tool_call_id"])
        index -= 1
    if index < 0 or messages[index]["role"] != "assistant" or not messages[index].get("tool_calls"):
        return False
    return any(call["id"] not in answered for call in messages[index]["tool_calls"])


def key(message):
    return message.get("_id") or message.get("_orig_id")


SETTINGS = st.builds(
    CompressionSettings,
    tail_mode=st.sampled_from(["lean", "legacy"]),
    target_ratio=st.sampled_from([0.1, 0.2]),
    protect_last_n=st.integers(1, 6),
    min_tail_user_messages=st.integers(1, 2),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(history=histories(), config=SETTINGS, context_length=st.sampled_from([4_000, 12_000, 60_000]))
async def test_compaction_invariants(history, config, context_length):
    before = copy.deepcopy(history)
    compressor = ContextCompressor("test-model", context_length, config)
    out = await compressor.compress(history, force=True)
    stats = compressor.last_compaction
    event(f"outcome: {stats.outcome}")

    # the caller's list and messages are never mutated (cached _tok counts aside)
    strip = lambda ms: [{k: v for k, v in m.items() if k != "_tok"} for m in ms]  # noqa: E731
    assert strip(history) == strip(before)

    if stats.outcome == "stubbed":  # nothing to summarize over the threshold: only older tool results shrank
        assert len(out) == len(history) and stats.replaced_ids
        for original, kept in zip(history, out):
            if kept is not original:
                assert original["role"] == "tool" and kept["_orig_id"] == original["_id"] in stats.replaced_ids
                assert kept["tool_call_id"] == original["tool_call_id"] and "session_fetch" in kept["content"]
        return
    if stats.outcome != "compacted":
        assert out == history  # skipped: the transcript is returned as it was
        return

    # provider-valid: every result answers a call, every kept call is answered (a call still in
    # flight at the very end is the agent's to complete), shapes are valid
    problems = pair_problems(out)
    if trailing_pending(history):
        assert all(problem.startswith("end:") for problem in problems), problems
    else:
        assert problems == []
    assert [p for p in api_problems(out) if "no result" not in p and "no preceding" not in p] == []

    # Anthropic accepts it: the first message after the system prompt is the user's
    assert out[0]["role"] == "system" and out[1]["role"] == "user"

    # nothing lost silently: every input id is kept (the same dict) or reported as replaced
    by_id = {m["_id"]: m for m in history}
    kept = {m["_id"] for m in out if "_id" in m}
    assert kept.isdisjoint(stats.replaced_ids)
    assert kept | set(stats.replaced_ids) == set(by_id)
    for message in out:
        if "_id" in message:
            assert message is by_id[message["_id"]]
        elif "_orig_id" in message:
            assert "_tok" not in message or message["_tok"] is not None
            assert message["_orig_id"] in stats.replaced_ids

    # no two neighbours share a role unless two of that role met there before (ignoring dropped results);
    # the summary only shares a role with the message after it where the transcript already had two
    # messages of that role meeting at the cut (it takes the first one's place)
    position = {m["_id"]: i for i, m in enumerate(history)}
    for left, right in zip(out, out[1:]):
        if left["role"] != right["role"] or left["role"] == "tool":
            continue
        assert not right.get("_compressed_summary") or "_id" in right, (left, right)
        if left.get("_compressed_summary") and "_id" not in left:
            before = [m for m in history[: position[key(right)]] if m["role"] != "tool"]
            assert before and before[-1]["role"] == right["role"], (left, right)
            continue
        a, b = key(left), key(right)
        assert a in position and b in position, (left, right)
        between = history[position[a] + 1 : position[b]]
        assert all(m["role"] == "tool" for m in between), (left, right, between)

    summaries = [m for m in out if m.get("_compressed_summary") and "_id" not in m]
    assert len(summaries) == 1
    assert summaries[0]["content"].startswith(SUMMARY_PREFIX)
    assert stats.summarizer == "deterministic"
