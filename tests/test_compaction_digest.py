"""The digest: what is taken mechanically from the ORIGINAL compacted turns and carried between compactions."""

import json

from agent.compaction.digest import Digest, build_digest
from agent.tokens import count_message
from tests.fakes.histories import Transcript


def digest_of(messages, seq_start=0):
    return build_digest(messages, [count_message(m) for m in messages], seq_start=seq_start)


def sample():
    t = Transcript(system=None)
    t.user("Please always use tabs. We decided to ship PR #31 on Friday.")
    t.call("read_file", {"path": "svc/ingest/worker.py"}, "def run():\n    pass\n" * 40)
    t.assistant("Fixed the retry loop in svc/ingest/worker.py. Next I will run the tests.")
    t.user("", _note="service echo")
    t.user("continue", _synthetic=True)
    t.call("run_tests", {"path": "tests/"}, "E   AssertionError: expected 3 got 4\n" + "." * 500)
    t.user("Also bump the timeout to 45 seconds.")
    return t.messages


def test_user_messages_are_quoted_verbatim_newest_first_without_echoes_or_synthetic_lines():
    digest, _ = digest_of(sample())
    assert [quote.text for quote in digest.quotes] == [
        "Also bump the timeout to 45 seconds.",
        "Please always use tabs. We decided to ship PR #31 on Friday.",
    ]
    assert digest.quotes[0].id == "m-9"
    assert digest.first_request.text.startswith("Please always use tabs")


def test_anchors_come_from_the_original_tool_output():
    digest, _ = digest_of(sample())
    assert "E   AssertionError: expected 3 got 4" in digest.anchors.entries["error"]
    assert "PR #31" in digest.anchors.entries["ref"]
    assert "45 seconds" in digest.anchors.entries["quantity"]


def test_tool_calls_files_and_sentences():
    digest, _ = digest_of(sample())
    assert digest.tool_calls == {"read_file": 1, "run_tests": 1}
    assert "svc/ingest/worker.py" in digest.files
    kinds = {line.text: line.kind for line in digest.sentences}
    assert kinds["Please always use tabs."] == "preference"
    assert kinds["We decided to ship PR #31 on Friday."] == "decision"
    assert kinds["Fixed the retry loop in svc/ingest/worker.py."] == "progress"
    assert digest.last_assistant.text.startswith("Fixed the retry loop")


def test_an_earlier_summary_is_returned_not_digested():
    t = Transcript(system=None)
    t.assistant("[CONTEXT COMPACTION] old notes mention PR #999", _compressed_summary=True)
    t.user("new question about PR #5")
    digest, earlier = digest_of(t.messages)
    assert earlier.startswith("[CONTEXT COMPACTION]")
    assert "PR #999" not in digest.anchors.entries["ref"]
    assert [q.text for q in digest.quotes] == ["new question about PR #5"]


def test_merge_keeps_older_facts_behind_newer_ones():
    first, _ = digest_of(sample())
    t = Transcript(system=None)
    t.user("Now look at PR #40 please.")
    second, _ = digest_of(t.messages, seq_start=first.seq)
    merged = second.merge(first)
    assert merged.quotes[0].text == "Now look at PR #40 please."
    assert merged.quotes[-1].text.startswith("Please always use tabs")
    assert merged.first_request.text.startswith("Please always use tabs")
    assert merged.messages == first.messages + 1
    assert {"PR #31", "PR #40"} <= set(merged.anchors.entries["ref"])


def test_routine_sentences_that_differ_only_in_numbers_collapse():
    t = Transcript(system=None)
    for passed in (6, 21, 31):
        t.assistant(f"Tests are green now ({passed} passed).")
    digest, _ = digest_of(t.messages)
    assert [line.text for line in digest.sentences] == ["Tests are green now (31 passed)."]


def test_state_round_trip_is_json_safe():
    digest, _ = digest_of(sample())
    state = json.loads(json.dumps(digest.to_state()))
    restored = Digest.from_state(state)
    assert restored.to_state() == digest.to_state()
    assert Digest.from_state(None) is None


def listing_session():
    t = Transcript(system=None)
    t.user("Which commit touched the refunds?")
    log = [f"{0xA000000 + i:07x} chore(core): tidy the worker module" for i in range(25)]
    log.insert(11, "abc1234 fix(billing): refunds double counted on retries")
    t.call("terminal", {"command": "git log --oneline -n 26"}, "\n".join(log))
    t.call("search_files", {"pattern": "listen_port"}, "deploy/values.yaml:14:  listen_port: 23409\ndeploy/values.yaml:15:  replicas: 3")
    t.call("read_file", {"path": "deploy/values.yaml"}, "escrow:\n  enabled: true\n  listen_port: 23409\n  owner: ops\n")
    return t.messages


def test_listing_lines_are_taken_with_their_context_and_carried():
    digest, _ = digest_of(listing_session())
    lines = {line.text: line for line in digest.listings}
    assert "abc1234 fix(billing): refunds double counted on retries" in lines
    assert "escrow.listen_port: 23409" in lines
    assert "deploy/values.yaml:14:  listen_port: 23409" in lines
    assert lines["abc1234 fix(billing): refunds double counted on retries"].id == "m-3"
    later, _ = digest_of([{"role": "user", "content": "thanks", "_id": "x-1"}], seq_start=digest.seq)
    merged = later.merge(digest)
    restored = Digest.from_state(json.loads(json.dumps(merged.to_state())))
    assert [line.text for line in restored.listings] == [line.text for line in digest.listings]


def test_stubbed_tail_results_give_anchors_and_listing_lines():
    middle = Transcript(system=None)
    middle.user("start")
    tail_result = {"role": "tool", "tool_call_id": "call_9", "_id": "t-2", "content": "src/pay/settle.py:40:def settle(batch):\nsrc/pay/other.py:3:x = 1"}
    digest, _ = build_digest(
        middle.messages,
        [count_message(m) for m in middle.messages],
        stubbed=[(5, tail_result)],
        queries={"call_9": "def settle"},
    )
    assert "src/pay/settle.py" in digest.anchors.entries["path"]
    best = digest.listings[0]
    assert best.text == "src/pay/settle.py:40:def settle(batch):" and best.id == "t-2" and best.seq == 5
