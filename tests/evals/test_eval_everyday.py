"""The everyday conversation generator, the everyday eval and the search benchmark, run small.

The generator must be a fair yardstick: the same seed gives the same chat, a chat is long
enough to need compaction, and every ground-truth answer id points at a turn that really
says the fact (a question never counts its own asking turn as the answer). The eval and
the benchmark must run end to end and write the figures the README promises; no timing
is asserted.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from agent.tokens import count_messages
from evals import bench_search, everyday_eval
from evals.cli import available_benchmarks
from tests.fakes.everyday import TOKENS_MAX, TOKENS_MIN, content_words, conversation, date_renderings


@pytest.fixture(scope="module")
def chat():
    return conversation(3)


def test_the_same_seed_gives_the_same_conversation_and_another_seed_another(chat):
    again = conversation(3)
    assert again.messages == chat.messages
    assert [q.as_dict() for q in again.questions] == [q.as_dict() for q in chat.questions]
    assert conversation(4).messages != chat.messages


def test_a_conversation_is_months_of_alternating_sessions_within_the_token_range(chat):
    assert TOKENS_MIN <= count_messages(chat.messages) <= TOKENS_MAX
    assert [m["_id"] for m in chat.messages] == [str(n) for n in range(1, len(chat.messages) + 1)]
    assert all(a["role"] != b["role"] for a, b in zip(chat.messages, chat.messages[1:]))
    assert {m["_from"] for m in chat.messages if m["role"] == "user"} == {chat.narrator}
    times = [m["_ts"] for m in chat.messages]
    assert times == sorted(times)
    days = {dt.datetime.fromtimestamp(t, dt.UTC).date() for t in times}
    assert len(days) >= 10 and (max(days) - min(days)).days >= 60
    texts = [m["content"] for m in chat.messages]
    assert len(set(texts)) >= 0.97 * len(texts)  # small talk, not one sentence over and over


def test_every_answer_id_points_at_a_turn_that_says_the_fact(chat):
    by_id = {m["_id"]: m for m in chat.messages}
    kinds = {q.kind for q in chat.questions}
    assert kinds == {"fact", "event-date", "date-relative", "paraphrase", "join", "in-chat"}
    for question in chat.questions:
        assert question.answer_ids and all(ident in by_id for ident in question.answer_ids)
        assert question.question not in {by_id[i]["content"] for i in question.answer_ids}
        for fact in question.facts:
            text = by_id[fact.turn]["content"].lower()
            needed = fact.subject if question.kind == "event-date" else fact.answers
            assert any(word.lower() in text for word in needed), (question.question, fact)
        if question.kind == "join":
            assert len(set(question.answer_ids)) == 2
        if question.kind == "paraphrase":
            answer = by_id[question.answer_ids[0]]["content"].lower()
            assert not {w for w in content_words(question.question) if w[:5] in answer} - {chat.narrator.lower()}
    for asked, answered in chat.qa_pairs:
        assert int(answered) == int(asked) + 1 and by_id[asked]["content"].endswith("?")


def test_event_dates_are_the_days_the_relative_phrases_name(chat):
    by_id = {m["_id"]: m for m in chat.messages}
    for question in chat.questions:
        if question.kind != "date-relative":
            continue
        day, asked = dt.date.fromisoformat(question.date), dt.date.fromisoformat(question.asked_on)
        told = dt.datetime.fromtimestamp(by_id[question.answer_ids[0]]["_ts"], dt.UTC).date()
        assert day < told and day < asked <= day + dt.timedelta(days=6)
        phrase = question.question.split(" do ", 1)[1].rstrip("?")
        if phrase == "yesterday":
            assert asked == day + dt.timedelta(days=1)
        else:
            assert phrase == f"last {day:%A}" and asked.weekday() < day.weekday()
    assert date_renderings(dt.date(2026, 3, 7)) == ("2026-03-07", "March 7", "7 March", "Mar 7", "7 Mar")


def test_the_relative_phrases_resolve_to_the_true_day_with_the_shared_date_module(chat):
    dates = pytest.importorskip("agent.dates")
    by_id = {m["_id"]: m for m in chat.messages}
    for question in chat.questions:
        if question.kind != "event-date":
            continue
        message = by_id[question.answer_ids[0]]
        spans = dates.find_dates(message["content"], dates.day_of(message["_ts"]))
        day = dt.date.fromisoformat(question.date)
        assert any(span.start <= day <= span.end for span in spans), (message["content"], question.date)


def test_bm25_and_rank_fusion_rank_as_documented():
    messages = [
        {"_id": "1", "content": "we walked the dog by the river"},
        {"_id": "2", "content": "pottery class pottery wheel"},
        {"_id": "3", "content": "my pottery bowl cracked"},
    ]
    assert everyday_eval.BM25(messages).rank("pottery")[:2] == ["2", "3"]
    assert everyday_eval.rrf(["1", "2"], ["2", "3"]) == ["2", "1", "3"]


@pytest.mark.timeout(60)
def test_the_eval_runs_end_to_end_on_one_small_conversation(tmp_path):
    document, paths = everyday_eval.main(1, 5, tmp_path, windows=(8_000,), tokens=20_000)
    assert paths["json"].exists() and "| all |" in paths["markdown"].read_text()
    saved = json.loads(paths["json"].read_text())
    assert saved["questions"] == len(saved["rows"]) > 20
    overall = saved["summary"]["all"]
    for method in ("keyword", "bm25"):
        assert {"answer@5", "answer@10", "neighbour@5", "neighbour@10"} <= set(overall[method])
        assert 0 < overall[method]["answer@10"] <= overall[method]["neighbour@10"] <= 1
    assert 0 <= overall["kept_8000"] <= 1
    assert saved["embeddings"].startswith("not measured")
    assert saved["conversation_info"][0]["compacted_8000"]["tokens"] < 8_000


def test_kept_means_the_whole_turn_or_the_answer_beside_its_subject():
    from tests.fakes.everyday import Fact

    fact = Fact(("Biscuit",), ("dog",), "7")
    turn = "We got a dog called Biscuit."
    assert everyday_eval.fact_kept(fact, f"notes\n{turn}\nmore", turn)
    assert everyday_eval.fact_kept(fact, "- [7] dog: Biscuit (beagle)", turn)
    assert not everyday_eval.fact_kept(fact, "walked Biscuit\n\n\nthe dog slept", turn)


def test_an_uncompacted_conversation_keeps_every_question(chat):
    from evals.compaction_eval import context_text

    context = context_text(chat.messages)
    by_id = {m["_id"]: m["content"] for m in chat.messages}
    assert all(everyday_eval.fact_kept(f, context, by_id[f.turn]) for q in chat.questions for f in q.facts)


def test_bench_search_is_found_and_smoke_runs_at_tiny_sizes(tmp_path):
    assert "search" in available_benchmarks()
    assert bench_search.main(tmp_path, sizes=(200, 500), runs=2, dimensions=16) == 0
    result = json.loads((tmp_path / "bench_search.json").read_text())
    assert [row["messages"] for row in result["rows"]] == [200, 500]
    for row in result["rows"]:
        assert set(row["queries"]) == set(bench_search.QUERIES)
        for cell in row["queries"].values():
            assert 0 < cell["keyword_ms"]["p50"] <= cell["keyword_ms"]["p95"]
            assert cell["tool_ms"]["p50"] > 0
        assert row["rss_mb_after"] > 0
    assert "| 500 |" in (tmp_path / "bench_search.md").read_text()
