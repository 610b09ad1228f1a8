"""The held-out half of ``foldgate eval memory``: the same measurement on worlds said in wordings nobody tuned the
memory notes on (:mod:`evals.held_out_wordings`), set beside the tuned figures kind by kind.

The tuned figures say how well the wordings the patterns were written from are kept; the held-out ones are the
honest estimate of how well what people really type is. Both come from one run and land in one document: the
tuned figures where they always were (so earlier results stay comparable), the held-out ones under
``held_out``, the two side by side under ``wordings``, and ``leaks`` counting both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evals.people_conversations import World

_FIGURES = ("planted", "kept", "recall", "entries", "precision")


def _overall(memory: dict[str, Any]) -> dict[str, Any]:
    return {
        "planted": memory["statements"],
        "kept": memory["true"],
        "recall": memory["recall"],
        "entries": memory["entries"],
        "precision": memory["precision"],
    }


def compare(tuned: dict[str, Any], held: dict[str, Any]) -> dict[str, Any]:
    """Per statement kind and overall, the tuned and held-out figures side by side; and distractors kept."""
    kinds = sorted({*tuned["by_kind"], *held["by_kind"]})
    by_kind = {
        kind: {
            name: {k: side["by_kind"].get(kind, {}).get(k) for k in _FIGURES}
            for name, side in (("tuned", tuned), ("held_out", held))
        }
        for kind in kinds
    }
    wrong = sorted({*tuned["distractors"], *held["distractors"]})
    distractors = {
        kind: {
            name: side["distractors"].get(kind, {"planted": 0, "kept": 0})
            for name, side in (("tuned", tuned), ("held_out", held))
        }
        for kind in wrong
    }
    return {
        "all": {"tuned": _overall(tuned), "held_out": _overall(held)},
        "by_kind": by_kind,
        "distractors": distractors,
    }


def held_out_part(
    summary: dict[str, Any], found: dict[str, Any], held: Sequence[World], document: dict[str, Any]
) -> dict[str, Any]:
    """What the held-out worlds add to the eval's document (``summary`` is their :func:`summarize`)."""
    rows = found["memory_rows"]
    missed = [
        {k: row[k] for k in ("world", "person", "kind", "wording", "said", "chat")}
        for row in rows
        if row["verdict"] == "missed"
    ]
    kept = [row for row in rows if row["verdict"] not in ("true", "missed")]
    part = {
        "worlds": len(held),
        "people": sum(len(w.people) for w in held),
        "chats": sum(len(w.people) + len(w.groups) for w in held),
        "messages": sum(len(s.messages) for w in held for s in w.sessions),
        **summary,
        "missed_statements": missed,
        "false_entries": [
            {k: row.get(k, "") for k in ("world", "person", "verdict", "kind", "entry", "scope", "said")}
            for row in kept
        ],
        "memory_rows": rows,
        "search_rows": found["search_rows"],
    }
    details = {
        where: [*document["leak_details"][where], *part["leak_details"][where]]
        for where in ("memory_block", "my_chats")
    }
    return {
        "held_out": part,
        "wordings": compare(document["memory"], part["memory"]),
        "leaks": document["leaks"] + part["leaks"],
        "leak_details": details,
    }


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _cells(side: dict[str, Any]) -> str:
    return f"{side['planted'] or 0} | {side['kept'] or 0} | {_percent(side['recall'])} | {_percent(side['precision'])}"


def _flat(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split("\n"))


def held_out_markdown(document: dict[str, Any]) -> list[str]:
    """The section setting held-out beside tuned: per kind, distractors, and every held-out miss and false entry."""
    held, wordings = document["held_out"], document["wordings"]
    lines = [
        "",
        "## Tuned and held-out wordings",
        "",
        f"The figures above are on the wordings the memory notes were tuned on. {held['worlds']} more worlds "
        f"({held['people']} people, {held['messages']:,} messages) say the same kinds of things in wordings written "
        "without looking at them (`evals/held_out_wordings.py`): their recall is the honest one.",
        "",
        "| statement kind | tuned planted | tuned kept | tuned recall | tuned precision "
        "| held-out planted | held-out kept | held-out recall | held-out precision |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    sides = [("all", wordings["all"]), *wordings["by_kind"].items()]
    lines += [f"| {kind} | {_cells(pair['tuned'])} | {_cells(pair['held_out'])} |" for kind, pair in sides]
    lines += [
        "",
        "Precision per kind: entries holding a statement of that kind in its scope, of the entries traced to "
        'statements of that kind; "all" counts every entry (distractors and small talk too). Held-out: '
        f"{held['memory']['small_talk_entries']} entries from small talk, "
        f"{held['memory']['wrong_scope_entries']} in the wrong scope.",
        "",
        "| distractor kind | tuned planted | tuned kept | held-out planted | held-out kept |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, pair in wordings["distractors"].items():
        tuned, other = pair["tuned"], pair["held_out"]
        lines.append(f"| {kind} | {tuned['planted']} | {tuned['kept']} | {other['planted']} | {other['kept']} |")
    lines += [
        "",
        "### Held-out wordings no entry kept",
        "",
        "| kind | wording | said | missed |",
        "|---|---|---:|---:|",
    ]
    lines += [f"| {r['kind']} | {_flat(r['wording'])} | {r['said']} | {r['missed']} |" for r in held["missed_wordings"]]
    lines += ["", f"### Held-out statements no entry kept ({len(held['missed_statements'])})", ""]
    lines += [f"- {row['kind']}: {_flat(row['said'])}" for row in held["missed_statements"]] or ["None."]
    lines += ["", f"### Held-out entries that are not a statement of their person ({len(held['false_entries'])})", ""]
    lines += [
        f"- {row['verdict']} ({row['kind']}): {_flat(row['entry'])}"
        + (f" — said: {_flat(row['said'])}" if row["said"] else "")
        for row in held["false_entries"]
    ] or ["None."]
    return lines
