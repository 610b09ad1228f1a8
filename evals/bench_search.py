"""``foldgate bench search``: session search latency at 1K, 100K and 1M archived messages, keywords and hybrid.

``session_search`` scans a chat's whole archive on every call (nothing is indexed ahead of
time), so its cost grows with the archive. This measures :func:`agent.search.search_messages`
over archives of mixed realistic text — everyday chat from :mod:`tests.fakes.everyday` and
engineering sessions (tool calls, logs, diffs) from ``evals/fixtures/data`` — cycled to the
size asked for, each message with its own id and time. Per size and query kind, p50 and p95 of:

- ``keyword``: the search alone, each message looked at in turn;
- ``keyword, warm corpus``: the same search given the messages' prepared corpus
  (:class:`agent.search_corpus.SearchCorpus`), as the recovery tool has it once the chat's archive was
  read in the process (the corpus's one-time build is reported beside the memory figures);
- ``hybrid``: a semantic ranking first (cosine of a query vector against one float32 vector per
  message, numpy matrix product and top 50), its ids handed to the search as ``similar=`` (where
  the search takes it, else only the cosine part is timed); the vectors are random unit vectors,
  since what is timed is the arithmetic, not the quality;
- ``tool``: the ``session_search`` tool end to end (reading the archive from an in-memory source,
  dropping recovery traffic, searching, the JSON result), keywords alone and with the source's
  ``similar`` answering from the cosine ranking.

Memory: the process's resident set after the archive and after its vectors are built.
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.report import progress, publish

SIZES = (1_000, 100_000, 1_000_000)
#: Timed runs per query kind, by archive size (fewer where one run takes seconds).
RUNS = {1_000: 30, 100_000: 5, 1_000_000: 3}
DIMENSIONS = 384
SIMILAR = 50
QUERIES = {
    "one word": "pottery",
    "question": "When did Maya start the pottery class?",
    "date phrase": "what did I do last Saturday",
    "identifier": "8577e17",
    "quoted phrase": '"brake pads"',
    "paraphrase": "is she vegetarian these days",
}


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.999999) - 1))] if ordered else 0.0


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(quantile(seconds, 0.5) * 1000, 2),
        "p95": round(quantile(seconds, 0.95) * 1000, 2),
        "mean": round(statistics.fmean(seconds) * 1000, 2) if seconds else 0.0,
    }


def rss_mb() -> float:
    """Resident set size of this process now (Linux), in MB; 0 where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def message_pool(conversations: int = 4) -> list[dict[str, Any]]:
    """Everyday chats and the committed engineering sessions, as one list to cycle."""
    from evals.compaction_eval import load_session
    from tests.fakes.everyday import conversation

    pool: list[dict[str, Any]] = []
    for seed in range(1, conversations + 1):
        pool += conversation(seed).messages
    for path in sorted((Path(__file__).parent / "fixtures" / "data").glob("night-*.jsonl")):
        pool += [message for message in load_session(path) if message.get("role") != "system"]
    return pool


def archive(pool: Sequence[Mapping[str, Any]], size: int, start: float = 1_750_000_000.0) -> list[dict[str, Any]]:
    """``size`` messages cycled from ``pool``, numbered and a minute apart (the texts are shared, not copied)."""
    out = []
    for number in range(size):
        message = dict(pool[number % len(pool)])
        message.pop("_tok", None)
        message["_id"] = str(number + 1)
        message["_ts"] = start + 60.0 * number
        out.append(message)
    return out


def _timed(call: Any, runs: int) -> tuple[list[float], Any]:
    result = None
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    return seconds, result


class _Source:
    """The recovery tools' message source over an in-memory archive."""

    def __init__(self, messages: Sequence[Any], semantic: Callable[[], list[str]] | None = None) -> None:
        self.messages = messages
        self.semantic = semantic

    async def all_messages(self) -> Sequence[Any]:
        return self.messages

    async def messages_by_id(self, ids: Sequence[str]) -> Sequence[Any]:
        wanted = set(ids)
        return [message for message in self.messages if message.get("_id") in wanted]

    async def similar(self, query: str, limit: int) -> Sequence[str] | None:
        """The cosine ranking's ids (random vectors: its cost, not its quality), or None for keywords alone."""
        return self.semantic()[:limit] if self.semantic is not None else None


def _tool(tools: Sequence[Any]) -> Any:
    return next(tool for tool in tools if tool.name == "session_search")


async def _call(tool: Any, query: str) -> Any:
    """One ``session_search`` call as the agent loop makes it: the handler's JSON result."""
    return await tool.handler({"query": query})


def _semantic(matrix: Any, generator: Any, ids: Sequence[str]) -> list[str]:
    import numpy as np

    query = generator.standard_normal(matrix.shape[1]).astype(np.float32)
    query /= np.linalg.norm(query)
    scores = matrix @ query
    top = np.argpartition(-scores, SIMILAR)[:SIMILAR]
    return [ids[i] for i in top[np.argsort(-scores[top])]]


def _vectors(size: int, dimensions: int) -> Any:
    import numpy as np

    generator = np.random.default_rng(7)
    matrix = np.empty((size, dimensions), dtype=np.float32)
    for start in range(0, size, 100_000):  # in slices, so no float64 copy of the whole matrix exists at once
        block = generator.standard_normal((min(100_000, size - start), dimensions), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        matrix[start : start + len(block)] = block
    return matrix


def measure_size(pool: Sequence[Mapping[str, Any]], size: int, runs: int, dimensions: int) -> dict[str, Any]:
    from agent.search import search_messages
    from agent.search_corpus import SearchCorpus
    from agent.tools.recovery import recovery_tools

    before = rss_mb()
    messages = archive(pool, size)
    row: dict[str, Any] = {"messages": size, "runs": runs, "rss_mb_before": before, "rss_mb_archive": rss_mb()}
    row["archive_chars"] = sum(len(str(m.get("content") or "")) for m in messages)
    try:
        import numpy as np
    except ImportError:
        np = None  # type: ignore[assignment]
    matrix = _vectors(size, dimensions) if np is not None else None
    started = time.perf_counter()
    corpus = SearchCorpus.build(messages)
    row["corpus_build_ms"] = round((time.perf_counter() - started) * 1000, 1)
    row["rss_mb_corpus"] = rss_mb()
    row["rss_mb_vectors"] = rss_mb()
    row["vector_mb"] = round(matrix.nbytes / 1e6, 1) if matrix is not None else None
    ids = [m["_id"] for m in messages]
    fused = "similar" in inspect.signature(search_messages).parameters
    row["hybrid"] = "keyword + similar= (fused in search)" if fused else "cosine only (search takes no similar=)"
    if matrix is None:
        row["hybrid"] = "not measured (numpy is not installed)"
    generator = np.random.default_rng(11) if np is not None else None

    def semantic() -> list[str]:
        return _semantic(matrix, generator, ids)

    search_tool = _tool(recovery_tools(_Source(messages)))
    hybrid_tool = _tool(recovery_tools(_Source(messages, semantic))) if matrix is not None else None
    row["queries"] = {}
    for kind, query in QUERIES.items():
        search_messages(messages, query)  # warm-up: compiled patterns, caches
        keyword, hits = _timed(lambda query=query: search_messages(messages, query), runs)
        cell: dict[str, Any] = {"keyword_ms": summary_ms(keyword), "hits": len(hits)}
        warm, same = _timed(lambda query=query: search_messages(messages, query, corpus=corpus), runs)
        cell["keyword_warm_ms"] = summary_ms(warm)
        cell["warm_same_hits"] = same == hits
        if matrix is not None:
            cosine, similar = _timed(lambda: _semantic(matrix, generator, ids), runs)
            cell["cosine_ms"] = summary_ms(cosine)
            if fused:
                both, _ = _timed(
                    lambda query=query: search_messages(messages, query, similar=_semantic(matrix, generator, ids)),
                    runs,
                )
                cell["hybrid_ms"] = summary_ms(both)
        tool, _ = _timed(lambda query=query: asyncio.run(_call(search_tool, query)), max(1, runs // 2))
        cell["tool_ms"] = summary_ms(tool)
        if hybrid_tool is not None:
            tool, _ = _timed(lambda query=query: asyncio.run(_call(hybrid_tool, query)), max(1, runs // 2))
            cell["tool_hybrid_ms"] = summary_ms(tool)
        row["queries"][kind] = cell
    row["rss_mb_after"] = rss_mb()
    return row


def measure(
    sizes: Sequence[int] = SIZES, runs: Mapping[int, int] | int | None = None, dimensions: int = DIMENSIONS
) -> dict[str, Any]:
    pool = message_pool()
    rows = []
    bar = progress(len(sizes), "archive size", "bench search")
    for size in sizes:
        bar.update(advance=0, note=f"{size:,} messages")
        count = runs if isinstance(runs, int) else (runs or RUNS).get(size, 3)
        rows.append(measure_size(pool, size, count, dimensions))
        bar.update()
    return {"pool_messages": len(pool), "dimensions": dimensions, "queries": QUERIES, "rows": rows}


def table(result: Mapping[str, Any]) -> str:
    lines = [
        "# Session search latency",
        "",
        f"p50 / p95 in ms. Archives cycle a pool of {result['pool_messages']:,} everyday and engineering messages; "
        f"hybrid adds a cosine ranking over {result['dimensions']}-dim float32 vectors (top {SIMILAR}).",
        "",
        "| messages | query | keyword | keyword, warm corpus | cosine | hybrid | tool, keywords | tool, hybrid "
        "| hits |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(value: Mapping[str, float] | None) -> str:
        return f"{value['p50']:.1f} / {value['p95']:.1f}" if value else "—"

    for row in result["rows"]:
        for kind, data in row["queries"].items():
            lines.append(
                f"| {row['messages']:,} | {kind} | {cell(data['keyword_ms'])} | {cell(data.get('keyword_warm_ms'))} | "
                f"{cell(data.get('cosine_ms'))} | "
                f"{cell(data.get('hybrid_ms'))} | {cell(data['tool_ms'])} | {cell(data.get('tool_hybrid_ms'))} | "
                f"{data['hits']} |"
            )
    lines += [
        "",
        "| messages | archive MB of text | RSS after archive | corpus build | RSS with corpus | RSS with vectors "
        "| vectors MB | hybrid |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['messages']:,} | {row['archive_chars'] / 1e6:.1f} | {row['rss_mb_archive']:,} MB | "
            f"{row.get('corpus_build_ms', '—')} ms | {row.get('rss_mb_corpus', '—')} MB | "
            f"{row['rss_mb_vectors']:,} MB | {row['vector_mb']} | {row['hybrid']} |"
        )
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = measure(**options)
    publish(out_dir, "bench_search", result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
