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
    t.call(
        "search_files",
        {"pattern": "listen_port"},
        "deploy/values.yaml:14:  listen_port: 23409\ndeploy/values.yaml:15:  replicas: 3",
    )
    t.call(
        "read_file", {"path": "deploy/values.yaml"}, "escrow:\n  enabled: true\n  listen_port: 23409\n  owner: ops\n"
    )
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
    tail_result = {
        "role": "tool",
        "tool_call_id": "call_9",
        "_id": "t-2",
        "content": "src/pay/settle.py:40:def settle(batch):\nsrc/pay/other.py:3:x = 1",
    }
    digest, _ = build_digest(
        middle.messages,
        [count_message(m) for m in middle.messages],
        stubbed=[(5, tail_result)],
        queries={"call_9": "def settle"},
    )
    assert "src/pay/settle.py" in digest.anchors.entries["path"]
    best = digest.listings[0]
    assert best.text == "src/pay/settle.py:40:def settle(batch):" and best.id == "t-2" and best.seq == 5


def crash_session():
    t = Transcript(system=None)
    t.user("Why does the nightly settle keep failing?")
    log = (
        "2025-03-24T23:10:02.000Z ERROR   [celery.task] billing settle job settle_nightly crashed\n"
        "Traceback (most recent call last):\n"
        '  File "/app/src/billing/worker.py", line 88, in settle\n'
        '    ref = row.meta["customer_ref"]\n'
        "KeyError: 'customer_ref' [E7139]\n"
        "2025-03-24T23:10:03.000Z WARNING [app.http] upstream rejected billing settle request "
        "code=EBIL-5169 status=422\n"
        "FAILED tests/billing/test_settle.py::test_refund - AssertionError: 3 != 4"
    )
    t.call("run_tests", {"command": "pytest tests/billing"}, log)
    t.assistant("We keep ENABLE_FAST_SETTLE off for the billing retry rollout.")
    return t.messages


def test_an_error_line_is_kept_with_its_frame_and_job_or_the_command_that_printed_it():
    digest, _ = digest_of(crash_session())
    entry = digest.anchors.described("error", "KeyError: 'customer_ref' [E7139]")
    assert entry.startswith(
        "KeyError: 'customer_ref' [E7139] — from billing/worker.py:88 in settle; under \"[celery.task] billing"
    )
    failed = digest.anchors.described(
        "error", "FAILED tests/billing/test_settle.py::test_refund - AssertionError: 3 != 4"
    )
    assert failed.endswith('— (run_tests "pytest tests/billing")')
    assert (
        digest.anchors.context("ref", "EBIL-5169") == "app.http upstream rejected billing settle request … status=422"
    )
    assert digest.anchors.context("identifier", "ENABLE_FAST_SETTLE") == "keep … off billing retry"
    assert digest.anchors.seen["identifier"]["ENABLE_FAST_SETTLE"][1] == crash_session()[-1]["_id"]


def test_a_result_gets_the_label_of_the_latest_call_with_its_id_and_a_stub_gives_no_context():
    t = Transcript(system=None)
    t.call("run_tests", {"path": "tests/a.py"}, "FAILED tests/a.py - ValueError: one")
    t._calls = 0  # a later turn reusing call ids, as some providers do
    t.call("run_tests", {"path": "tests/b.py"}, "FAILED tests/b.py - ValueError: two")
    stub = {
        "role": "tool",
        "tool_call_id": "call_1",
        "_id": "s-1",
        "_stubbed_chars": 900,
        "content": "[Old terminal output stubbed: 900 chars, 'FAILED x'; the FLAG_ZED was set in the stub]",
    }
    digest, _ = digest_of([*t.messages, stub])
    assert digest.anchors.context("error", "FAILED tests/b.py - ValueError: two") == '(run_tests "tests/b.py")'
    assert digest.anchors.context("error", "FAILED tests/a.py - ValueError: one") == '(run_tests "tests/a.py")'
    assert digest.anchors.context("identifier", "FLAG_ZED") == ""


def test_contexts_survive_merges_and_state_and_an_old_state_still_loads():
    first, _ = digest_of(crash_session())
    later, _ = digest_of([{"role": "user", "content": "and ENABLE_FAST_SETTLE?", "_id": "x-1"}], seq_start=first.seq)
    merged = later.merge(first)
    restored = Digest.from_state(json.loads(json.dumps(merged.to_state())))
    assert (
        restored.anchors.described("identifier", "ENABLE_FAST_SETTLE")
        == "ENABLE_FAST_SETTLE (keep … off billing retry)"
    )
    assert restored.anchors.described("error", "KeyError: 'customer_ref' [E7139]") == merged.anchors.described(
        "error", "KeyError: 'customer_ref' [E7139]"
    )
    old_state = merged.to_state()
    old_state["anchors"] = {kind: [row[:3] for row in rows] for kind, rows in old_state["anchors"].items()}
    old = Digest.from_state(json.loads(json.dumps(old_state)))
    assert "ENABLE_FAST_SETTLE" in old.anchors.entries["identifier"] and old.anchors.seen == {}


def test_a_stubbed_result_takes_its_origin_from_the_labels_given():
    middle = Transcript(system=None)
    middle.user("start")
    result = {
        "role": "tool",
        "tool_call_id": "call_7",
        "_id": "t-1",
        "content": "error: failed to push some refs to origin",
    }
    digest, _ = build_digest(middle.messages, [1], stubbed=[(3, result)], calls={"call_7": 'terminal "git push"'})
    assert digest.anchors.described("error", "error: failed to push some refs to origin") == (
        'error: failed to push some refs to origin — (terminal "git push")'
    )
