"""The one search over messages: exact identifiers first, BM25 for words, bounded snippets."""

from __future__ import annotations

import json
import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.search import STOPWORDS, SearchError, SearchHit, search_messages


def user(text: str, ident: str) -> dict:
    return {"_id": ident, "role": "user", "content": text}


def tool_call(ident: str, call_id: str, name: str, arguments: dict) -> dict:
    return {
        "_id": ident,
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        ],
    }


def tool_result(ident: str, call_id: str, text: str) -> dict:
    return {"_id": ident, "role": "tool", "tool_call_id": call_id, "content": text}


def noise(rng: random.Random, chars: int) -> str:
    words = ["retry", "commit", "worker", "session", "timeout", "cache", "fix", "deploy", "queue", "lock", "error"]
    out: list[str] = []
    size = 0
    while size < chars:
        line = " ".join(rng.choice(words) for _ in range(8)) + f" {rng.randrange(10**6)}"
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)


def test_exact_sha_ranks_first_among_messages_full_of_the_query_words() -> None:
    rng = random.Random(1)
    git_log = "\n".join(
        [f"{''.join(rng.choice('0123456789abcdef') for _ in range(7))} fix retry in worker {n}" for n in range(30)]
        + ["6eba7f4 fix: session lock renewal"]
    )
    messages = [
        user("the commit that fixed the retry in the worker lock", "m1"),
        user("fix commit retry worker lock session fix commit retry", "m2"),
        tool_call("m3", "c1", "terminal", {"command": "git log --oneline"}),
        tool_result("m4", "c1", git_log),
        user("which commit 6eba7f4 fixed the worker lock retry?", "m5"),
    ]
    hits = search_messages(messages[:4], "commit 6eba7f4 worker lock retry")
    assert hits[0].message_id == "m4"
    assert "6eba7f4 fix: session lock renewal" in hits[0].snippet


def test_short_sha_finds_the_full_hash_but_not_a_longer_unrelated_token() -> None:
    full = "commit 6eba7f4c1d2e3f405162738495a6b7c8d9e0f1a2\nAuthor: x"
    messages = [user(full, "full"), user("token x6eba7f4c is not it", "other")]
    assert [hit.message_id for hit in search_messages(messages, "6eba7f4")] == ["full"]


def test_pr_numbers_match_with_or_without_hash_and_never_inside_other_numbers() -> None:
    messages = [
        user("Opened PR #4821 for the backoff", "pr"),
        user("see pull/4821 on github", "url"),
        user("latency 4821ms and id 14821 and v1.4821", "noise"),
    ]
    assert {hit.message_id for hit in search_messages(messages, "#4821")} == {"pr", "url"}
    assert {hit.message_id for hit in search_messages(messages, "PR 4821")} >= {"pr", "url"}
    assert "noise" not in {hit.message_id for hit in search_messages(messages, "4821")}


def test_a_path_matches_exactly_and_outranks_messages_that_only_share_its_words() -> None:
    messages = [
        user("the webhook signature check lives somewhere in src, check the webhook file", "words"),
        user("moved it to src/tally/webhook/signature_check.py yesterday", "path"),
        user("src/tally/webhook/signature_check.pyc is a stale artifact", "artifact"),
    ]
    hits = search_messages(messages, "src/tally/webhook/signature_check.py")
    assert hits[0].message_id == "path"
    assert "artifact" not in {hit.message_id for hit in hits}


def test_a_short_precise_message_beats_a_huge_log_that_repeats_one_word() -> None:
    rng = random.Random(2)
    log = noise(rng, 60_000)
    messages = [
        tool_result("log", "c1", log),
        user("decision: the invoice rounding uses banker's rounding", "decision"),
    ]
    assert log.count("retry") > 500
    hits = search_messages(messages, "invoice rounding retry")
    assert hits[0].message_id == "decision"


def test_neighbouring_query_words_rank_the_message_where_they_stand_together() -> None:
    messages = [
        user("checkout is slow; separately the grace period for refunds changed", "apart"),
        user("fix(checkout): speed up the checkout grace period job", "together"),
        user("grace notes, period; checkout later", "shuffled"),
    ]
    assert search_messages(messages, "checkout grace period")[0].message_id == "together"


def test_tool_call_arguments_are_searchable_and_hits_name_the_tool() -> None:
    messages = [
        tool_call("a1", "call_1", "read_file", {"path": "deploy/staging/values.yaml"}),
        tool_result("t1", "call_1", "listen_port: 23409\nreplicas: 2"),
    ]
    by_id = {hit.message_id: hit for hit in search_messages(messages, "deploy/staging/values.yaml")}
    assert "a1" in by_id
    port = search_messages(messages, "23409")
    assert port[0].message_id == "t1" and port[0].tool_name == "read_file" and port[0].role == "tool"


def test_snippet_is_centred_on_a_match_deep_inside_a_huge_tool_output() -> None:
    rng = random.Random(3)
    text = (
        noise(rng, 50_000) + "\nERROR payout cutoff crashed: PayoutCutoffError: cutoff drift 41s\n" + noise(rng, 50_000)
    )
    messages = [tool_result("big", "c9", text)]
    hit = search_messages(messages, "payout cutoff error", snippet_chars=2_500)[0]
    assert len(hit.snippet) <= 2_500
    assert "PayoutCutoffError: cutoff drift 41s" in hit.snippet
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")


def test_snippet_limit_is_respected_even_when_tiny() -> None:
    messages = [user("x" * 500 + " needle " + "y" * 500, "m")]
    for limit in (1, 2, 3, 10, 57, 400):
        hit = search_messages(messages, "needle", snippet_chars=limit)[0]
        assert len(hit.snippet) <= limit


def test_regex_queries_and_their_errors() -> None:
    messages = [user("upstream said code=EPAY-4471 again", "code"), user("nothing to see", "none")]
    hits = search_messages(messages, r"/E[A-Z]{3}-\d{4}/")
    assert [hit.message_id for hit in hits] == ["code"]
    assert "EPAY-4471" in hits[0].snippet
    assert search_messages(messages, "/epay-4471/i")[0].message_id == "code"
    with pytest.raises(SearchError):
        search_messages(messages, "/unclosed(group/")


def test_limit_order_and_empty_queries() -> None:
    messages = [user(f"deploy note {n}: the canary deploy", f"m{n}") for n in range(10)]
    hits = search_messages(messages, "canary deploy", limit=3)
    assert len(hits) == 3
    assert all(isinstance(hit, SearchHit) for hit in hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert hits[0].message_id == "m9"  # equal scores: the newest message first
    assert search_messages(messages, "   ") == []
    assert search_messages(messages, "the a of") == []
    assert search_messages(messages, "canary", limit=0) == []


def test_list_content_parts_are_searched() -> None:
    messages = [
        {"_id": "parts", "role": "user", "content": [{"type": "text", "text": "the ledger sweeper owner is Priya"}]}
    ]
    assert search_messages(messages, "ledger sweeper owner")[0].message_id == "parts"


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(
        st.text(alphabet=string.ascii_letters + string.digits + " \n_-./#İß", max_size=3_000), min_size=1, max_size=6
    ),
    word=st.text(alphabet=string.ascii_lowercase, min_size=3, max_size=8).filter(lambda w: w not in STOPWORDS),
    limit=st.integers(min_value=1, max_value=600),
)
def test_every_snippet_fits_the_limit_and_every_hit_contains_the_word(texts: list[str], word: str, limit: int) -> None:
    messages = [user(f"{text} {word} {text}", f"m{n}") for n, text in enumerate(texts)]
    hits = search_messages(messages, word, limit=10, snippet_chars=limit)
    assert len(hits) == len(messages)
    for hit in hits:
        assert len(hit.snippet) <= limit
        if limit >= 3 * len(word) + 200:
            assert word in hit.snippet.lower()


def test_am_is_grammar_and_finds_no_name_that_starts_with_it() -> None:
    messages = [
        user("I'm allergic to shellfish, so keep seafood off the list for the trip next month", "1"),
        user("Hi Amara, quick catch-up?", "2"),
    ]
    assert [hit.message_id for hit in search_messages(messages, "What am I allergic to?")] == ["1"]


def test_the_messages_a_search_is_told_to_put_first_lead_in_the_words_order() -> None:
    mine = {"_id": "1", "role": "user", "content": "I'm allergic to shellfish, so skip the seafood place", "_user": "a"}
    theirs = {"_id": "2", "role": "user", "content": "Am I allergic to tofu?", "_user": "b"}
    also = {"_id": "3", "role": "user", "content": "allergic to dust, I guess", "_user": "b"}
    messages = [mine, theirs, also]
    plain = [hit.message_id for hit in search_messages(messages, "allergic tofu")]
    assert plain[0] == "2" and set(plain) == {"1", "2", "3"}
    first = search_messages(messages, "allergic tofu", first=lambda message: message.get("_user") == "a")
    assert [hit.message_id for hit in first] == ["1", *(i for i in plain if i != "1")]
