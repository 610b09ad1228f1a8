"""The dev and held-out thirds of ``foldgate eval memory``: the same measurement on worlds said in other wordings,
set beside the tuned figures kind by kind.

Three sets, three questions. The tuned figures say how well the wordings the patterns were written from are kept;
the dev ones (:mod:`evals.dev_wordings`) how well the wordings the memory is being developed against, or whose
misses its developer has seen, are (its two parts' worlds together: twice as many); the held-out ones
(:mod:`evals.held_out_wordings`, written blind and never developed against) are the honest estimate of how well
what people really type is. All come from one run and land in one document: the tuned figures where they always
were (so earlier results stay comparable), the others under ``dev`` and ``held_out``, the three side by side under
``wordings``, and ``leaks`` counting them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evals.people_conversations import World

_FIGURES = ("planted", "kept", "recall", "entries", "precision")
#: Each set's document key and label, in the order the tables show them.
SIDES = {"tuned": "tuned", "dev": "dev", "held_out": "held-out"}


def key_of(name: str) -> str:
    """A set's key in the document: ``held-out`` -> ``held_out``."""
    return name.replace("-", "_")


def _overall(memory: dict[str, Any]) -> dict[str, Any]:
    return {
        "planted": memory["statements"],
        "kept": memory["kept"],
        "recall": memory["recall"],
        "entries": memory["entries"],
        "precision": memory["precision"],
    }


def compare(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per statement kind and overall, every set's figures side by side (``sides``: key -> its memory summary);
    and the distractors each kept."""
    kinds = sorted({kind for side in sides.values() for kind in side["by_kind"]})
    by_kind = {
        kind: {name: {k: side["by_kind"].get(kind, {}).get(k) for k in _FIGURES} for name, side in sides.items()}
        for kind in kinds
    }
    wrong = sorted({kind for side in sides.values() for kind in side["distractors"]})
    distractors = {
        kind: {name: side["distractors"].get(kind, {"planted": 0, "kept": 0}) for name, side in sides.items()}
        for kind in wrong
    }
    return {
        "all": {name: _overall(side) for name, side in sides.items()},
        "by_kind": by_kind,
        "distractors": distractors,
    }


def set_part(summary: dict[str, Any], found: dict[str, Any], made: Sequence[World]) -> dict[str, Any]:
    """What one set's worlds add to the eval's document (``summary`` is their ``summarize``)."""
    rows = found["memory_rows"]
    missed = [
        {k: row[k] for k in ("world", "person", "kind", "wording", "said", "core", "chat")}
        for row in rows
        if row["verdict"] == "missed"
    ]
    kept = [row for row in rows if row["verdict"] not in ("true", "also true", "missed")]
    return {
        "worlds": len(made),
        "people": sum(len(w.people) for w in made),
        "chats": sum(len(w.people) + len(w.groups) for w in made),
        "messages": sum(len(s.messages) for w in made for s in w.sessions),
        **summary,
        "missed_statements": missed,
        "false_entries": [
            {k: row.get(k, "") for k in ("world", "person", "verdict", "kind", "entry", "scope", "said")}
            for row in kept
        ],
        "memory_rows": rows,
        "search_rows": found["search_rows"],
    }


def other_sets(
    parts: Mapping[str, tuple[dict[str, Any], dict[str, Any], Sequence[World]]], document: dict[str, Any]
) -> dict[str, Any]:
    """What the dev and held-out worlds add to the tuned ``document``: ``parts`` is, by set name, (its summary,
    what was found, its worlds)."""
    out: dict[str, Any] = {key_of(name): set_part(*part) for name, part in parts.items()}
    everything = [document, *out.values()]
    details = {
        where: [leak for side in everything for leak in side["leak_details"][where]]
        for where in ("memory_block", "my_chats")
    }
    sides = {"tuned": document["memory"]} | {key: part["memory"] for key, part in out.items()}
    return out | {
        "wordings": compare(sides),
        "leaks": sum(side["leaks"] for side in everything),
        "leak_details": details,
    }


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _cells(side: dict[str, Any]) -> str:
    return f"{side['kept'] or 0}/{side['planted'] or 0} | {_percent(side['recall'])} | {_percent(side['precision'])}"


def _flat(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split("\n"))


def _marked(row: dict[str, Any]) -> str:
    """The message a statement was missed in, its core between brackets."""
    return _flat(row["said"].replace(row["core"], f"[{row['core']}]", 1))


def _lists(part: dict[str, Any], label: str) -> list[str]:
    """One set's misses and false entries, verbatim."""
    lines = ["", f"### {label} wordings no entry kept", "", "| kind | wording | said | missed |", "|---|---|---:|---:|"]
    lines += [f"| {r['kind']} | {_flat(r['wording'])} | {r['said']} | {r['missed']} |" for r in part["missed_wordings"]]
    lines += ["", f"### {label} statements no entry kept ({len(part['missed_statements'])}; the core in brackets)", ""]
    lines += [f"- {row['kind']}: {_marked(row)}" for row in part["missed_statements"]] or ["None."]
    lines += ["", f"### {label} entries that are not a statement of their person ({len(part['false_entries'])})", ""]
    lines += [
        f"- {row['verdict']} ({row['kind']}): {_flat(row['entry'])}"
        + (f" — said: {_flat(row['said'])}" if row["said"] else "")
        for row in part["false_entries"]
    ] or ["None."]
    return lines


def sets_markdown(document: dict[str, Any]) -> list[str]:
    """The section setting dev and held-out beside tuned: per kind, distractors, and every miss and false entry."""
    wordings, held, dev = document["wordings"], document["held_out"], document["dev"]
    sides = [key for key in SIDES if key in wordings["all"]]
    head = " | ".join(f"{SIDES[k]} kept | {SIDES[k]} recall | {SIDES[k]} precision" for k in sides)
    lines = [
        "",
        "## Tuned, dev and held-out wordings",
        "",
        "The figures above are on the wordings the memory notes were tuned on. More worlds say the same kinds of "
        f"things in other wordings: {dev['worlds']} *dev* ones (`evals/dev_wordings.py`, both its parts), the "
        "wordings the memory is developed against or whose misses were seen, and "
        f"{held['worlds']} *held-out* ones (`evals/held_out_wordings.py`), written blind (without looking at the "
        "patterns or the other sets) and never developed against: its recall is the honest one.",
        "",
        f"| statement kind | {head} |",
        "|---|" + "---:|" * (3 * len(sides)),
    ]
    for kind, row in [("all", wordings["all"]), *wordings["by_kind"].items()]:
        lines.append(f"| {kind} | " + " | ".join(_cells(row[k]) for k in sides) + " |")
    small = ", ".join(
        f"{SIDES[k]} {document[k]['memory']['small_talk_entries']} from small talk and "
        f"{document[k]['memory']['wrong_scope_entries']} in the wrong scope"
        for k in sides
        if k != "tuned"
    )
    lines += [
        "",
        "Precision per kind: entries holding a statement of that kind in its scope, of the entries traced to "
        f'statements of that kind; "all" counts every entry (distractors and small talk too). Entries: {small}.',
        "",
        "| distractor kind | " + " | ".join(f"{SIDES[k]} planted | {SIDES[k]} kept" for k in sides) + " |",
        "|---|" + "---:|" * (2 * len(sides)),
    ]
    for kind, row in wordings["distractors"].items():
        lines.append(f"| {kind} | " + " | ".join(f"{row[k]['planted']} | {row[k]['kept']}" for k in sides) + " |")
    for key in sides:
        if key != "tuned":
            lines += _lists(document[key], SIDES[key].capitalize())
    return lines
