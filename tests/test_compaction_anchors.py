"""The anchor index: verbatim identifiers by regex, ranked so the ones that stand out survive a small budget."""

import pytest

from agent.compaction.anchors import AnchorIndex, anchors_in, render_index, scan
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
    text = "Beatriz Zhao owns the migration; the CODEOWNERS entry is @makena-raman and mail goes to ops.team@example.com. The Loyalty code is fine."
    found = scan(text, conversation=True)
    assert ("name", "Beatriz Zhao") in found
    assert ("name", "@makena-raman") in found
    assert ("name", "ops.team@example.com") in found
    assert ("name", "The Loyalty") not in found and ("name", "@example.com") not in found
    assert ("name", "@makena-raman") in scan("/src/checkout/ @makena-raman", conversation=False)


def test_prose_and_code_are_not_taken_for_anchors():
    text = "input and/or output w/o changes on 12/05/2024 in the deadbeef facade\n    raise ValueError('bad')\nexcept KeyError:\n+    except IntegrityError as exc:"
    kinds = {kind for kind, _ in scan(text, conversation=True)}
    assert "path" not in kinds and "commit" not in kinds and "error" not in kinds


def test_code_in_a_numbered_file_listing_is_not_an_error():
    text = "  27\t    except ValueError as exc:\n  28\t        raise KeyError(key)\n12: raise TypeError\nValueError: bad row 7"
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
