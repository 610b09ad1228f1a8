"""The summary message as an index into the archive.

The built-in compressor writes notes meant to stand in for the compacted turns. Here
they are one part of an index: the framing says nothing was deleted and how to get any
original back, every compaction is listed as a range (``r1``, ``r2`` …) with the message
ids it took, and the notes say which ranges they cover. The model is pointed at the
originals instead of being asked to trust a paraphrase.
"""

from __future__ import annotations

import time

from agent.messages import SUMMARY_PREFIX
from plugins.context_engine.lcm.ids import Run, runs_text
from plugins.context_engine.lcm.ledger import CompactionRecord, Ledger

#: Compactions listed one line each in the summary; older ones share one line.
INDEX_LINES = 12
#: Longest id list printed on one index line before it is shortened.
MAX_IDS_TEXT = 160
#: The compressor's closing section, which names the built-in recovery tools; the index brings its own.
_COMPRESSOR_RECOVERY = "\n\n## Recovery\n"


def clock_text(timestamp: float | None) -> str:
    """A wall-clock time the model can read: ``2024-06-01 22:10 UTC``."""
    if not timestamp:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(timestamp))


def _ids_text(runs: list[Run], partial: bool = False) -> str:
    """Runs as text, shortened to :data:`MAX_IDS_TEXT` (lcm_describe always lists them whole)."""
    text = runs_text(runs) or "none"
    if len(text) > MAX_IDS_TEXT:
        text = text[: MAX_IDS_TEXT - 1].rsplit(",", 1)[0] + ", … (lcm_describe lists all)"
    elif partial:
        text += " (list shortened)"
    return text


def index_line(record: CompactionRecord) -> str:
    """One compaction: its label, ids, size, when its messages were written, and what they were about."""
    parts = [
        f"- {record.label} · ids {_ids_text(record.folded, record.partial)}",
        f"{record.folded_count:,} messages, ~{record.tokens:,} tokens",
    ]
    if record.first_ts:
        parts.append(f"written {clock_text(record.first_ts)} – {clock_text(record.last_ts)}")
    parts.append(f"compacted {clock_text(record.at)}")
    if record.tools:
        parts.append("tool calls: " + ", ".join(f"{name} ×{count}" for name, count in record.tools.items()))
    if record.keys:
        parts.append("identifiers: " + ", ".join(record.keys))
    line = " · ".join(parts)
    if record.replaced_count:
        line += (
            f"\n  also {record.replaced_count:,} kept in the context as a shortened or edited copy, "
            f"original archived: ids {_ids_text(record.replaced)}"
        )
    return line


def header(ledger: Ledger) -> str:
    """The opening paragraph: what is archived, that it is reference only, and how to get it back."""
    compactions = ledger.compactions
    return (
        f"{SUMMARY_PREFIX} Archive index. {ledger.messages:,} earlier messages of this conversation "
        f"(~{ledger.tokens:,} tokens) were taken out of the context over {compactions:,} "
        f"compaction{'s' if compactions != 1 else ''}; none was deleted — each is archived word for word "
        "under its message id. Below: the ranges each compaction took (r1, r2, … with their ids), then notes "
        "on what they contain. This is background, not instructions and not an active task: answer the newest "
        "user message after it; where they disagree, the newest message wins. Before relying on a detail here "
        'or redoing work, read the original: lcm_grep(pattern="…") searches the archive and the context '
        '(keywords, identifiers or /regex/) and returns message ids with snippets; lcm_expand(ids=["…"]) or '
        'lcm_expand(range="r1" or "A..B") returns messages verbatim; lcm_describe() lists every range.'
    )


def ranges_section(ledger: Ledger) -> str:
    lines = ["## Archived Ranges"]
    shown = ledger.records[-INDEX_LINES:]
    hidden = ledger.records[: len(ledger.records) - len(shown)]
    older_records = ledger.older.records + len(hidden)
    if older_records:
        messages = ledger.older.messages + sum(r.messages for r in hidden)
        tokens = ledger.older.tokens + sum(r.tokens for r in hidden)
        last = hidden[-1].label if hidden else f"r{ledger.older.last_number}"
        lines.append(
            f"- r1–{last} (older, {older_records:,} compactions): {messages:,} messages, ~{tokens:,} tokens "
            "— lcm_describe() lists them, lcm_grep searches them"
        )
    lines += [index_line(record) for record in shown]
    return "\n".join(lines)


def notes_heading(ledger: Ledger) -> str:
    if not ledger.records:
        return "## Notes"
    first = "r1" if ledger.older.records else ledger.records[0].label
    last = ledger.records[-1].label
    cover = first if first == last else f"{first}–{last}"
    return f"## Notes on {cover} (condensed; the originals are in those ranges)"


def recovery_section(ledger: Ledger) -> str:
    lines = ["## Recovery"]
    keys = [key for record in reversed(ledger.records) for key in record.keys if '"' not in key][:3]
    if keys:
        lines.append("- For example: " + ", ".join(f'lcm_grep(pattern="{key}")' for key in keys))
    if ledger.records:
        latest = ledger.records[-1]
        lines.append(f'- Everything of the latest compaction: lcm_expand(range="{latest.label}")')
    lines.append(
        '- A stubbed tool output in the context names its message id: lcm_expand(ids=["that id"]) returns it in full.'
    )
    return "\n".join(lines)


def notes_of(compressor_text: str) -> str:
    """The compressor's notes without its opening paragraph and its recovery section."""
    text = compressor_text.strip()
    if text.startswith(SUMMARY_PREFIX):
        _, _, text = text.partition("\n\n")
    head, found, rest = text.rpartition(_COMPRESSOR_RECOVERY)
    if found and "\n## " not in rest:
        text = head
    return text.strip()


def compose(compressor_text: str, ledger: Ledger) -> str:
    """The whole summary: header, archived ranges, the compressor's notes, recovery."""
    parts = [header(ledger), ranges_section(ledger)]
    notes = notes_of(compressor_text)
    if notes:
        parts.append(f"{notes_heading(ledger)}\n\n{notes}")
    parts.append(recovery_section(ledger))
    return "\n\n".join(parts)
