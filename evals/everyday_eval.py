"""Everyday conversations, measured: does ``session_search`` find what a person said, and does compaction keep it?

The compaction eval plants engineering facts (SHAs, ports, error codes). This one runs over
generated personal chats (:mod:`tests.fakes.everyday`: months of sessions about people, pets,
events told with relative dates, plans, likes, feelings, and a lot of small talk) and asks the
questions of its ground truth. For every question:

* **search** — :func:`agent.search.search_messages` over the whole conversation with the
  question as the query, as a model would call ``session_search`` once. Found at k when an
  answer turn is among the first k hits (for a two-fact join, any of its two turns; "all" also
  reported); "or neighbour" also counts a hit on the turn just before or after an answer turn
  (the turn that asked, or the reply to it). Date-relative questions ("what did Maya do last
  Saturday?") are asked on a given day: when ``search_messages`` takes a reference day it is
  passed (see :func:`search_options`), otherwise the question is searched as written.
* **BM25** — the same questions against a plain BM25 over lowercased words without stopwords,
  the baseline a smarter search has to beat.
* **embeddings** — when a local embedding server runs (:mod:`evals.local_embeddings`, started
  with ``--embeddings-python``): cosine ranking alone, and keyword + cosine fused by reciprocal
  rank (through ``search_messages(similar=…)`` where it exists, else fused here).
* **kept after compaction** — the conversation is compacted once per window by foldgate's
  compressor (default settings, deterministic notes, as ``foldgate eval compaction`` builds it).
  A question is kept when every fact it needs is in the compacted context (all message text the
  model reads, notes included): a fact is in it when its answer turn's text stands there whole,
  or one of its answer strings does with one of its subject words on the same line or the line
  before or after (:func:`evals.compaction_eval.is_attributed`; a fact without subject words
  needs only the answer string). Dates count in any of ``2026-03-07``, ``March 7``, ``7 March``,
  ``Mar 7``, ``7 Mar``: a note that still says "last Saturday" without the day does not keep it.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import inspect
import json
import math
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from agent.search import search_messages
from agent.search_query import STOPWORDS
from evals.compaction_eval import context_text, is_attributed, make_compressor
from tests.fakes.everyday import Conversation, Question, conversation

DEFAULT_CONVERSATIONS = 8
DEFAULT_SEED = 1
WINDOWS = (8_000, 16_000)
DEPTH = 10
RRF_K = 60
#: Parameters through which a newer ``search_messages`` may take the day a question is asked on.
_REFERENCE_PARAMETERS = ("today", "reference_day", "asked_on", "now", "at")
SYSTEM_PROMPT = "You are a warm, attentive companion. Remember what the user tells you about their life."


# --- search ----------------------------------------------------------------------------------------


def search_options(question: Question, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``search_messages`` beyond the query: the day a date-relative question is asked on,
    as a date (``today``, ``reference_day``, ``asked_on``) or Unix seconds at noon UTC (``now``, ``at``)."""
    names = parameters if parameters is not None else inspect.signature(search_messages).parameters
    if question.asked_on is None:
        return {}
    day = dt.date.fromisoformat(question.asked_on)
    for name in _REFERENCE_PARAMETERS:
        if name in names:
            if name in ("now", "at"):
                return {name: dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC).timestamp()}
            return {name: day}
    return {}


def reference_parameter() -> str | None:
    names = inspect.signature(search_messages).parameters
    return next((name for name in _REFERENCE_PARAMETERS if name in names), None)


def takes_similar() -> bool:
    return "similar" in inspect.signature(search_messages).parameters


def _ranks(hit_ids: Sequence[str], question: Question) -> dict[str, int | None]:
    """First rank (1-based) of an answer turn, of an answer turn or its neighbour, and of the last answer turn
    when all are found (joins)."""
    answers = set(question.answer_ids)
    near = answers | {str(int(a) + step) for a in answers for step in (-1, 1)}
    first = next((rank for rank, ident in enumerate(hit_ids, 1) if ident in answers), None)
    neighbour = next((rank for rank, ident in enumerate(hit_ids, 1) if ident in near), None)
    spots = [hit_ids.index(a) + 1 for a in answers if a in hit_ids]
    every = max(spots) if len(spots) == len(answers) else None
    return {"answer": first, "neighbour": neighbour, "all": every}


def keyword_ids(messages: Sequence[Mapping[str, Any]], question: Question, similar: Sequence[str] = ()) -> list[str]:
    extra = search_options(question)
    if similar:
        extra["similar"] = list(similar)
    hits = search_messages(messages, question.question, limit=DEPTH, snippet_chars=400, **extra)
    return [str(hit.message_id) for hit in hits]


_WORD = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")


def words(text: str) -> list[str]:
    return [word for word in _WORD.findall(text.lower()) if word not in STOPWORDS]


class BM25:
    """Okapi BM25 (k1 1.2, b 0.75) over lowercased words minus stopwords: the baseline."""

    def __init__(self, messages: Sequence[Mapping[str, Any]]) -> None:
        self.ids = [str(message["_id"]) for message in messages]
        self.docs = [Counter(words(str(message.get("content") or ""))) for message in messages]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.average = sum(self.lengths) / max(1, len(self.docs))
        frequency: Counter[str] = Counter()
        for doc in self.docs:
            frequency.update(doc.keys())
        size = len(self.docs)
        self.idf = {word: math.log(1 + (size - n + 0.5) / (n + 0.5)) for word, n in frequency.items()}

    def rank(self, query: str, limit: int = DEPTH) -> list[str]:
        terms = [word for word in set(words(query)) if word in self.idf]
        scores = []
        for index, doc in enumerate(self.docs):
            norm = 1.2 * (0.25 + 0.75 * self.lengths[index] / self.average)
            score = sum(self.idf[t] * doc[t] * 2.2 / (doc[t] + norm) for t in terms if doc[t])
            if score > 0:
                scores.append((score, index))
        scores.sort(key=lambda item: (-item[0], -item[1]))
        return [self.ids[index] for _, index in scores[:limit]]


def rrf(*rankings: Sequence[str], limit: int = DEPTH) -> list[str]:
    """Reciprocal rank fusion: each list adds 1 / (60 + rank) to an id."""
    score: dict[str, float] = {}
    for ranking in rankings:
        for rank, ident in enumerate(ranking, 1):
            score[ident] = score.get(ident, 0.0) + 1.0 / (RRF_K + rank)
    return [ident for ident, _ in sorted(score.items(), key=lambda item: (-item[1], -int(item[0])))[:limit]]


# --- compaction ------------------------------------------------------------------------------------


def fact_kept(fact: Any, context: str, turn_text: str) -> bool:
    """The fact's turn whole in the context, or an answer string with a subject word beside it."""
    if turn_text and turn_text in context:
        return True
    for answer in fact.answers:
        if answer in context and (not fact.subject or is_attributed(context, answer, fact.subject)):
            return True
    return False


async def compacted_context(messages: Sequence[Mapping[str, Any]], window: int) -> tuple[str, int, dict[str, Any]]:
    """The text a model reads after foldgate's compressor fits the conversation into ``window`` tokens."""
    from agent.tokens import count_messages

    working = [{"role": "system", "content": SYSTEM_PROMPT, "_id": "system"}, *copy.deepcopy(list(messages))]
    engine = make_compressor("lean", window)
    result = await engine.compress(working, force=True)
    stats = getattr(engine, "last_compaction", None)
    note = {"summary_kind": getattr(stats, "summary_kind", None)} if stats is not None else {}
    return context_text(result), count_messages(result), note


# --- running ---------------------------------------------------------------------------------------


def _question_row(convo: Conversation, question: Question) -> dict[str, Any]:
    return {"conversation": convo.name, **question.as_dict()}


async def evaluate(
    convo: Conversation, windows: Sequence[int], embedder: Any | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every question of one conversation scored for search and for each window's compaction."""
    by_id = {str(m["_id"]): str(m["content"]) for m in convo.messages}
    baseline = BM25(convo.messages)
    vectors = embedder.index(convo.messages) if embedder is not None else None
    contexts = {}
    info: dict[str, Any] = {"name": convo.name, "style": convo.style, "messages": len(convo.messages)}
    for window in windows:
        started = time.perf_counter()
        context, tokens, note = await compacted_context(convo.messages, window)
        contexts[window] = context
        info[f"compacted_{window}"] = {"tokens": tokens, "seconds": round(time.perf_counter() - started, 3), **note}
    rows = []
    for question in convo.questions:
        row = _question_row(convo, question)
        keyword = keyword_ids(convo.messages, question)
        row["keyword"] = _ranks(keyword, question)
        row["bm25"] = _ranks(baseline.rank(question.question), question)
        if embedder is not None and vectors is not None:
            semantic = embedder.rank(vectors, question.question, DEPTH * 5)
            row["embedding"] = _ranks(semantic[:DEPTH], question)
            if takes_similar():
                fused = keyword_ids(convo.messages, question, similar=semantic)
            else:
                wide = search_messages(convo.messages, question.question, limit=DEPTH * 5, **search_options(question))
                fused = rrf([str(hit.message_id) for hit in wide], semantic)
            row["hybrid"] = _ranks(fused, question)
        row["kept"] = {
            str(window): all(fact_kept(f, contexts[window], by_id[f.turn]) for f in question.facts)
            for window in windows
        }
        # Lenient: every fact's answer string somewhere in the context, beside its subject or not.
        row["kept_literal"] = {
            str(window): all(any(a in contexts[window] for a in f.answers) for f in question.facts)
            for window in windows
        }
        rows.append(row)
    return rows, info


def _share(rows: Sequence[Mapping[str, Any]], method: str, key: str, depth: int) -> float | None:
    values = [row[method][key] for row in rows if method in row]
    if not values:
        return None
    return round(sum(1 for value in values if value is not None and value <= depth) / len(values), 4)


def summarize(rows: Sequence[Mapping[str, Any]], windows: Sequence[int]) -> dict[str, Any]:
    """Recall@5/@10 per method (overall and by question kind) and the kept share per window."""
    kinds = sorted({row["kind"] for row in rows})
    methods = [m for m in ("keyword", "bm25", "embedding", "hybrid") if any(m in row for row in rows)]

    def block(selected: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"questions": len(selected)}
        for method in methods:
            out[method] = {
                f"{key}@{depth}": _share(selected, method, key, depth)
                for key in ("answer", "neighbour")
                for depth in (5, 10)
            }
        joins = [row for row in selected if row["kind"] == "join"]
        if joins:
            out["keyword"]["all@10"] = _share(joins, "keyword", "all", 10)
        for window in windows:
            for key in ("kept", "kept_literal"):
                share = sum(row[key][str(window)] for row in selected) / max(1, len(selected))
                out[f"{key}_{window}"] = round(share, 4)
        return out

    return {"all": block(rows), "by_kind": {kind: block([r for r in rows if r["kind"] == kind]) for kind in kinds}}


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def markdown(document: Mapping[str, Any]) -> str:
    windows = document["windows"]
    summary = document["summary"]
    methods = [m for m in ("keyword", "bm25", "embedding", "hybrid") if m in summary["all"]]
    lines = [
        "# Everyday conversations: search recall and what compaction keeps",
        "",
        f"{document['conversations']} generated conversations (seed {document['seed']}), "
        f"{document['questions']} questions, {document['tokens']:,} tokens in all. "
        f"Embeddings: {document['embeddings']}. Reference day passed to search: {document['reference_parameter']}.",
        "",
        "recall@k: an answer turn among the first k hits (@k) / an answer turn or its neighbour (nb@10). kept: every "
        "fact the question needs in the compacted context (its turn whole, or its answer beside its subject); "
        "literal: the answer strings anywhere in it.",
        "",
        "| kind | questions | "
        + " | ".join(f"{m} @5 | {m} @10 | {m} nb@10" for m in methods)
        + " | "
        + " | ".join(f"kept {w // 1000}K | literal {w // 1000}K" for w in windows)
        + " |",
        "|---|---:|" + "---:|" * (3 * len(methods) + 2 * len(windows)),
    ]
    for kind, block in [("all", summary["all"]), *summary["by_kind"].items()]:
        cells = []
        for method in methods:
            shares = block[method]
            cells += [_percent(shares["answer@5"]), _percent(shares["answer@10"]), _percent(shares["neighbour@10"])]
        cells += [_percent(block[f"{key}_{w}"]) for w in windows for key in ("kept", "kept_literal")]
        lines.append(f"| {kind} | {block['questions']} | " + " | ".join(cells) + " |")
    if "all@10" in summary["by_kind"].get("join", {}).get("keyword", {}):
        both = _percent(summary["by_kind"]["join"]["keyword"]["all@10"])
        lines += ["", f"Joins with both turns in the keyword top 10: {both}."]
    lines += [
        "",
        "| conversation | style | messages | " + " | ".join(f"tokens after {w // 1000}K" for w in windows) + " |",
    ]
    lines.append("|---|---|---:|" + "---:|" * len(windows))
    for info in document["conversation_info"]:
        cells = [f"{info[f'compacted_{w}']['tokens']:,}" for w in windows]
        lines.append(f"| {info['name']} | {info['style']} | {info['messages']} | " + " | ".join(cells) + " |")
    misses = [row for row in document["rows"] if row["keyword"]["answer"] is None][:15]
    if misses:
        lines += ["", "## Some questions the keyword search missed (top 10)", "", "| kind | question |", "|---|---|"]
        lines += [f"| {row['kind']} | {row['question']} |" for row in misses]
    lines += ["", f"Took {document['seconds']:.1f} s."]
    return "\n".join(lines) + "\n"


def main(
    conversations: int = DEFAULT_CONVERSATIONS,
    seed: int = DEFAULT_SEED,
    out: str | Path = "evals/out",
    *,
    windows: Sequence[int] = WINDOWS,
    tokens: int | None = None,
    embeddings_python: str | None = None,
    progress: TextIO | None = None,
) -> tuple[dict[str, Any], dict[str, Path]]:
    """Generate, score, write ``everyday_eval.json`` and ``.md`` under ``out``; what ``foldgate eval everyday``
    runs."""
    from agent.tokens import count_messages
    from evals.local_embeddings import open_embedder

    started = time.perf_counter()
    convos = [conversation(seed + number, tokens=tokens) for number in range(conversations)]
    rows: list[dict[str, Any]] = []
    infos = []
    with open_embedder(embeddings_python) as (embedder, status):
        for number, convo in enumerate(convos, 1):
            if progress is not None:
                print(f"everyday eval: conversation {number}/{len(convos)}", file=progress, flush=True)
            found, info = asyncio.run(evaluate(convo, windows, embedder))
            rows += found
            infos.append(info)
    document = {
        "conversations": len(convos),
        "seed": seed,
        "windows": list(windows),
        "depth": DEPTH,
        "questions": len(rows),
        "tokens": sum(count_messages(c.messages) for c in convos),
        "embeddings": status,
        "reference_parameter": reference_parameter() or "none (date-relative questions searched as written)",
        "summary": summarize(rows, windows),
        "conversation_info": infos,
        "rows": rows,
        "seconds": round(time.perf_counter() - started, 2),
    }
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    paths = {"json": target / "everyday_eval.json", "markdown": target / "everyday_eval.md"}
    paths["json"].write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(document), encoding="utf-8")
    return document, paths
