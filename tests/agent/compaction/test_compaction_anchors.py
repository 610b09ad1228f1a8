"""The anchor index: verbatim identifiers by regex, ranked so the ones that stand out survive a small budget."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.compaction.anchor_context import MAX_CONTEXT_CHARS, context_words, producer
from agent.compaction.anchor_index import MAX_SEEN_CHARS, AnchorIndex, render_index
from agent.compaction.anchors import anchors_in, scan
from agent.tokens import count_text

SAMPLE = """Fixed in PR #4821 (see issue #77); also JIRA-1234 and MR-12.
commit 3f8a4b2c9d1e and request a1b2c3d4-1234-5678-9abc-def012345678 landed.
Edited src/agent/tokens.py, ./dev, ~/notes/todo.md, .github/workflows/ci.yml and config.yaml.
ConnectionResetError: [Errno 104] Connection reset by peer
Upgraded httpx to 0.28.1, python v3.11, redis at 10.0.0.12:6379.
Docs: https://github.com/org/repo/pull/12.
It took 350 ms and costs $4,500 a month; MAX_RETRIES is `resolve_model_threshold`.
error: failed to push some refs to origin"""


@pytest.mark.parametrize(
    ("kind", "anchor"),
    [
        ("ref", "PR #4821"),
        ("ref", "issue #77"),
        ("ref", "JIRA-1234"),
        ("ref", "MR-12"),
        ("commit", "3f8a4b2c9d1e"),
        ("commit", "a1b2c3d4-1234-5678-9abc-def012345678"),
        ("path", "src/agent/tokens.py"),
        ("path", "./dev"),
        ("path", "~/notes/todo.md"),
        ("path", ".github/workflows/ci.yml"),
        ("path", "config.yaml"),
        ("error", "ConnectionResetError: [Errno 104] Connection reset by peer"),
        ("error", "error: failed to push some refs to origin"),
        ("version", "0.28.1"),
        ("version", "v3.11"),
        ("identifier", "10.0.0.12:6379"),
        ("url", "https://github.com/org/repo/pull/12"),
        ("quantity", "350 ms"),
        ("quantity", "$4,500"),
        ("identifier", "MAX_RETRIES"),
        ("identifier", "resolve_model_threshold"),
    ],
)
def test_each_kind_is_extracted_verbatim(kind, anchor):
    found = scan(SAMPLE, conversation=True)
    assert (kind, anchor) in found
    assert anchor in SAMPLE


def test_people_handles_and_emails():
    text = (
        "Beatriz Zhao owns the migration; the CODEOWNERS entry is @makena-raman and mail goes to "
        "ops.team@example.com. The Loyalty code is fine."
    )
    found = scan(text, conversation=True)
    assert ("name", "Beatriz Zhao") in found
    assert ("name", "@makena-raman") in found
    assert ("name", "ops.team@example.com") in found
    assert ("name", "The Loyalty") not in found and ("name", "@example.com") not in found
    assert ("name", "@makena-raman") in scan("/src/checkout/ @makena-raman", conversation=False)


def test_prose_and_code_are_not_taken_for_anchors():
    text = (
        "input and/or output w/o changes on 12/05/2024 in the deadbeef facade\n"
        "    raise ValueError('bad')\n"
        "except KeyError:\n"
        "+    except IntegrityError as exc:"
    )
    kinds = {kind for kind, _ in scan(text, conversation=True)}
    assert "path" not in kinds and "commit" not in kinds and "error" not in kinds


def test_code_in_a_numbered_file_listing_is_not_an_error():
    text = (
        "  27\t    except ValueError as exc:\n"
        "  28\t        raise KeyError(key)\n"
        "12: raise TypeError\n"
        "ValueError: bad row 7"
    )
    assert [anchor for kind, anchor in scan(text, conversation=False) if kind == "error"] == ["ValueError: bad row 7"]


def test_tool_output_does_not_yield_numbers_or_constants_but_keeps_identifiers():
    text = "GET /healthz took 12 ms\nMAX_WORKERS=4\ncommit 9c1d2e3f4a5b6c7d\nValueError: boom"
    found = scan(text, conversation=False)
    kinds = {kind for kind, _ in found}
    assert "quantity" not in kinds and ("identifier", "MAX_WORKERS") not in found
    assert ("commit", "9c1d2e3f4a5b6c7d") in found and ("error", "ValueError: boom") in found


def test_cjk_text_keeps_its_identifiers():
    text = "設定ファイル config/settings.yaml を修正しました。PR #88 を見てください。エラー: ValueError: 不正な値"
    found = scan(text, conversation=True)
    assert ("path", "config/settings.yaml") in found
    assert ("ref", "PR #88") in found


def test_memoized_results_match_a_fresh_scan():
    assert anchors_in(SAMPLE, True) == scan(SAMPLE, True)
    assert anchors_in(SAMPLE, True) is anchors_in(SAMPLE, True)


def test_a_lone_identifier_outranks_one_of_a_crowded_listing():
    index = AnchorIndex()
    listing = [("commit", f"{i:07x}a") for i in range(50)]
    index.add_all(listing, seq=1)
    index.add_all([("commit", "feedface1234")], seq=0)
    assert index.ranked("commit")[0] == "feedface1234"


def test_adding_a_text_weighs_its_anchors_like_adding_them_one_by_one():
    by_text, by_list = AnchorIndex(), AnchorIndex()
    by_text.add_text(SAMPLE, seq=3, conversation=True)
    by_text.add_text(SAMPLE, seq=5, conversation=True)
    by_list.add_all(scan(SAMPLE, True), seq=3, conversation=True)
    by_list.add_all(scan(SAMPLE, True), seq=5, conversation=True)
    assert by_text.entries == by_list.entries


def test_conversation_and_repeated_mentions_rank_higher():
    index = AnchorIndex()
    index.add_all([("path", "a/tool_only.py")], seq=5)
    index.add_all([("path", "b/said_by_user.py")], seq=1, conversation=True)
    index.add_all([("path", "c/twice.py")], seq=2)
    index.add_all([("path", "c/twice.py")], seq=3)
    index.add_all([("path", "c/twice.py")], seq=4)
    index.add_all([("path", "c/twice.py")], seq=6)
    assert index.ranked("path") == ["c/twice.py", "b/said_by_user.py", "a/tool_only.py"]


def test_render_index_respects_the_budget_and_keeps_rare_kinds():
    index = AnchorIndex()
    for i in range(400):
        index.add("commit", f"{i:08x}{i:032x}"[:40] + "a", seq=i)
    index.add("error", "IngestError: checksum mismatch for batch 7", seq=3)
    text, used = render_index(index, 300)
    assert used <= 300
    assert count_text(text) <= 320
    assert "IngestError: checksum mismatch for batch 7" in text


def test_render_index_skips_retained_and_contained_anchors():
    index = AnchorIndex()
    index.add("ref", "PR #12", seq=1, weight=5000)
    index.add("ref", "#12", seq=2)
    index.add("path", "kept/in_tail.py", seq=3)
    text, _ = render_index(index, 500, skip=lambda anchor: anchor == "kept/in_tail.py")
    assert "PR #12" in text
    assert text.count("#12") == 1
    assert "kept/in_tail.py" not in text


def test_index_state_round_trips():
    index = AnchorIndex()
    index.add_all(scan(SAMPLE, True), seq=4, conversation=True)
    restored = AnchorIndex.from_state(index.to_state())
    assert restored.entries == {kind: bucket for kind, bucket in index.entries.items()}


# --- where an anchor was seen: context words and error producers ---------------------------------

CRASH_LOG = """2025-03-24T23:10:01.000Z INFO    [app.http] GET /healthz 200 3ms
2025-03-24T23:10:02.000Z ERROR   [celery.task] billing settle job settle_nightly crashed (attempt 3/3)
Traceback (most recent call last):
  File "/app/src/billing/tasks.py", line 40, in run
    settle(batch)
  File "/app/src/billing/worker.py", line 88, in settle
    ref = row.meta["customer_ref"]
KeyError: 'customer_ref' [E7139]
2025-03-24T23:10:03.000Z WARNING [celery.task] job settle_nightly moved to the dead-letter queue"""


def _context_of(text, kind, anchor, conversation=True):
    index = AnchorIndex()
    index.add_text(text, seq=1, conversation=conversation, message_id="m-1", origin='run_tests "pytest tests/billing"')
    return index.context(kind, anchor)


def test_an_identifier_keeps_the_words_of_its_clause():
    text = "Checked the logs. We keep ENABLE_FAST_SETTLE off for the billing retry rollout until Friday. Done."
    words = _context_of(text, "identifier", "ENABLE_FAST_SETTLE")
    assert words == "keep … off billing retry"
    assert "Checked" not in words and "Done" not in words  # other sentences are not its context


def test_a_log_line_code_keeps_what_was_rejected_without_stamp_level_or_glued_key():
    line = (
        "2025-03-24T22:20:53.403Z WARNING [app.http] upstream rejected dunning throttling request "
        "code=EDUN-5169 status=422"
    )
    words = _context_of(line, "ref", "EDUN-5169", conversation=False)
    assert words == "app.http upstream rejected dunning throttling request … status=422"
    assert "2025" not in words and "WARNING" not in words and "code=" not in words


def test_context_words_are_few_and_bounded():
    text = "one two three four five six seven eight FLAG_X nine ten eleven twelve"
    start = text.index("FLAG_X")
    assert context_words(text, start, start + len("FLAG_X")) == "three four five six seven eight … nine ten eleven"
    long = "word " * 100 + "FLAG_X " + "averyveryverylongwordthatisdatanotprose" * 3
    start = long.index("FLAG_X")
    assert len(context_words(long, start, start + 6)) <= MAX_CONTEXT_CHARS
    assert context_words("commit 3f8a4b2c9d1e", 7, 19) == ""  # one plain word tells nothing
    assert context_words("/src/checkout/ @noor", 15, 20) == "src/checkout"  # one path does


def test_a_traceback_error_keeps_its_last_frame_and_the_job_it_was_logged_under():
    start = CRASH_LOG.index("KeyError")
    made_by = producer(CRASH_LOG, start, "KeyError: 'customer_ref' [E7139]")
    assert made_by.startswith('from billing/worker.py:88 in settle; under "[celery.task] billing settle job')
    assert "2025" not in made_by and "ERROR" not in made_by
    described = _described(CRASH_LOG, "error", "KeyError: 'customer_ref' [E7139]")
    assert described == f"KeyError: 'customer_ref' [E7139] — {made_by}"  # the job it names says more than the call


def test_an_error_without_a_log_record_keeps_the_call_that_printed_it():
    text = (
        "Traceback (most recent call last):\n"
        '  File "billing/worker.py", line 88, in settle\n'
        "    x = 1\n"
        "KeyError: 'customer_ref' [E7139]"
    )
    assert _described(text, "error", "KeyError: 'customer_ref' [E7139]") == (
        "KeyError: 'customer_ref' [E7139] — from billing/worker.py:88 in settle (run_tests \"pytest tests/billing\")"
    )
    assert _described("fatal: not a git repository", "error", "fatal: not a git repository") == (
        'fatal: not a git repository — (run_tests "pytest tests/billing")'
    )


def _described(text, kind, anchor, conversation=False):
    index = AnchorIndex()
    index.add_text(text, seq=1, conversation=conversation, origin='run_tests "pytest tests/billing"')
    return index.described(kind, anchor)


def test_a_pasted_traceback_keeps_the_sentence_that_introduced_it():
    text = (
        "I get this when I run the settle job by hand:\n"
        "```\n"
        "Traceback (most recent call last):\n"
        '  File "billing/worker.py", line 88, in settle\n'
        "    x = 1\n"
        "KeyError: 'customer_ref'\n"
        "```"
    )
    start = text.index("KeyError")
    assert producer(text, start, "KeyError: 'customer_ref'").startswith(
        'from billing/worker.py:88 in settle; under "I get this when I run the settle job'
    )


def test_pytest_javascript_and_rust_errors_name_their_test_or_location():
    pytest_out = (
        "____ test_totals ____\n"
        "\n"
        "    def test_totals():\n"
        ">       assert total == 3\n"
        "E       AssertionError: assert 4 == 3\n"
        "\n"
        "tests/test_invoice.py:12: AssertionError"
    )
    start = pytest_out.index("E       AssertionError")
    assert (
        producer(pytest_out, start, "E       AssertionError: assert 4 == 3")
        == "from tests/test_invoice.py:12 in test_totals"
    )
    location = pytest_out.index("tests/test_invoice.py:12: AssertionError")
    assert producer(pytest_out, location, "tests/test_invoice.py:12: AssertionError") == "in test_totals"
    node = "TypeError: x is undefined\n    at settle (src/billing/worker.js:88:13)\n    at main (src/index.js:3:1)"
    assert producer(node, 0, "TypeError: x is undefined") == "from src/billing/worker.js:88 in settle"
    rust = "error[E0308]: mismatched types\n --> src/main.rs:4:5"
    assert producer(rust, 0, "error[E0308]: mismatched types") == "from src/main.rs:4"
    assert producer("fatal: not a git repository", 0, "fatal: not a git repository") == ""


def test_index_entries_show_their_context_on_their_own_line_and_the_tail_bare():
    index = AnchorIndex()
    index.add(
        "identifier", "ENABLE_FAST_SETTLE", seq=1, weight=5000, context="billing retry rollout", message_id="m812"
    )
    index.add("identifier", "PLAIN_FLAG", seq=2)
    index.add("error", "KeyError: 'customer_ref' [E7139]", seq=3, context="from billing/worker.py:88 in settle")
    text, _ = render_index(index, 500)
    lines = text.splitlines()
    assert "  - ENABLE_FAST_SETTLE (billing retry rollout)" in lines
    assert "  - PLAIN_FLAG" in lines
    assert "  - KeyError: 'customer_ref' [E7139] — from billing/worker.py:88 in settle" in lines


def test_a_binding_budget_tells_the_best_entries_and_lists_the_tail_bare():
    index = AnchorIndex()
    for i in range(300):
        index.add(
            "path",
            f"src/module_{i:03d}.py",
            seq=i,
            weight=10_000 - i,
            context=f"the {i} module handles refunds and payouts",
        )
    text, used = render_index(index, 600)
    assert used <= 600
    assert "src/module_000.py (the 0 module handles refunds and payouts)" in text
    tail = text.splitlines()[-1]
    assert "(" not in tail and tail.count(", ") > 10  # the long tail: verbatim, bare, many
    bare, _ = render_index(AnchorIndex(entries={"path": dict(index.entries["path"])}), 600)
    assert text.count(".py") < bare.count(".py")  # contexts cost entries


def test_when_everything_fits_bare_contexts_leave_half_the_rest_unused():
    index = AnchorIndex()
    for i in range(20):
        index.add("ref", f"PR #{100 + i}", seq=i, context="a rather long description of what this pull request changed")
    bare, bare_used = render_index(AnchorIndex(entries={"ref": dict(index.entries["ref"])}), 1_000)
    text, used = render_index(index, 1_000)
    assert all(f"PR #{100 + i}" in text for i in range(20))  # nothing is dropped for a context
    assert used - bare_used <= (1_000 - bare_used) / 2 + 1
    assert "(a rather long description" in text


def test_the_heaviest_mention_gives_the_context_and_merges_keep_it():
    newer, older = AnchorIndex(), AnchorIndex()
    newer.add_text("grep hit: settle.py uses FLAG_A here and FLAG_B there", seq=9, conversation=False)
    older.add_text("We turned FLAG_A on for the billing rollout", seq=2, conversation=True, message_id="m-2")
    newer.merge(older)
    assert newer.context("identifier", "FLAG_A") == "turned … on billing rollout"
    assert newer.seen["identifier"]["FLAG_A"][1] == "m-2"


def test_index_state_round_trips_with_contexts_and_old_state_loads():
    index = AnchorIndex()
    index.add_text(CRASH_LOG, seq=4, conversation=False, message_id="m-4", origin='terminal "kubectl logs"')
    index.add_text(SAMPLE, seq=5, conversation=True, message_id="m-5")
    state = json.loads(json.dumps(index.to_state()))
    restored = AnchorIndex.from_state(state)
    nonempty = lambda buckets: {kind: bucket for kind, bucket in buckets.items() if bucket}  # noqa: E731
    assert nonempty(restored.entries) == nonempty(index.entries)
    assert nonempty(restored.seen) == nonempty(index.seen)
    assert restored.described("error", "KeyError: 'customer_ref' [E7139]") == index.described(
        "error", "KeyError: 'customer_ref' [E7139]"
    )
    assert "in settle" in restored.described("error", "KeyError: 'customer_ref' [E7139]")
    old = AnchorIndex.from_state({"ref": [["PR #7", 1000, 3]], "path": [["a/b.py", 5, 1, "junk"]]})
    assert old.entries["ref"] == {"PR #7": [1000, 3]} and old.context("ref", "PR #7") == ""
    assert old.entries["path"] == {"a/b.py": [5, 1]} and old.seen == {}


seen_rows = st.lists(
    st.tuples(
        st.sampled_from(["ref", "path", "error", "identifier"]),
        st.text(min_size=1, max_size=30),
        st.integers(0, 10**6),
        st.integers(0, 10**6),
        st.text(max_size=300),
        st.one_of(st.none(), st.text(max_size=12)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(rows=seen_rows)
def test_any_index_state_survives_json_and_stays_bounded(rows):
    index = AnchorIndex()
    for kind, anchor, weight, seq, context, message_id in rows:
        index.add(kind, anchor, seq, weight, context=context, message_id=message_id)
    once = AnchorIndex.from_state(json.loads(json.dumps(index.to_state())))
    twice = AnchorIndex.from_state(json.loads(json.dumps(once.to_state())))
    assert once.to_state() == twice.to_state()
    assert all(len(seen[0]) <= MAX_SEEN_CHARS for bucket in once.seen.values() for seen in bucket.values())
    assert all(set(seen) <= set(once.entries[kind]) for kind, seen in once.seen.items())
