"""The deterministic structured summary: built from the transcript itself, no model involved.

Used when no summarizer is configured, and when the summarizer fails while the context
is critical (hygiene, manual /compress, ≥ 85% of the window). It has the same sections as
a model-written summary, filled with what can be taken mechanically and verbatim: the
user's requests, preference and decision sentences as written, the tool calls made,
files touched, errors seen, and what the assistant was doing at the cut.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from agent.compaction.digest import Digest
from agent.compaction.fitting import clip, count_line, take_lines
from agent.compaction.summary_prompt import SECTION_HEADINGS
from agent.tokens import count_text

#: Share of the body budget each fixed part may use (what a part leaves unused goes to the stated sentences).
SHARES = {
    "goal": 0.035,
    "progress": 0.07,
    "files": 0.055,
    "earlier": 0.055,
}
#: Kinds of sentence the conversation stated, in the order a round of :func:`_stated` takes them.
STATED_KINDS = ("preference", "decision", "progress", "fact")
#: Kinds whose sentences of a quoted message are still listed, by pointer: their sections must never look empty.
POINTED_KINDS = frozenset({"preference", "decision"})
#: Sentences that may not fit before a kind stops being tried (a long one is skipped, shorter ones still fit).
MAX_MISFITS = 8
#: Tokens a bullet costs beside its text ("- " and the line break).
BULLET_TOKENS = 2
GOAL_CHARS = 600
LAST_ASSISTANT_CHARS = 500
#: Characters of a sentence listed by pointer to its message, quoted whole under User Messages.
POINTER_CHARS = 100
_NEXT_STEPS = (
    "- Answer the newest user message that follows these notes.\n"
    "- Look up any detail needed from the compacted turns with session_search / session_fetch before redoing work."
)
_INDEX_POINTER = "- Verbatim identifiers from the compacted turns are listed in the Anchor Index below."
#: Most errors the Blocked part lists (newest first, each with what produced it).
BLOCKED_ERRORS = 3


def _bullets(lines: list[str], left_out: int = 0, above: int = 0) -> str:
    """The section's bullets; "(none recorded)" only when there were none to list, not when none fitted
    nor when the model's notes above hold them (``above``)."""
    if lines:
        return "\n".join(f"- {line}" for line in lines)
    if above and left_out:
        return (
            f"- ({left_out:,} recorded, none fit here: see User Messages below, or session_search;"
            f" {above:,} more in the summary above)"
        )
    if above:
        return f"- ({above:,} recorded, all in the summary above)"
    if left_out:
        return f"- ({left_out:,} recorded, none fit here: see User Messages below, or session_search)"
    return "- (none recorded)"


def _pointer(ident: str, text: str) -> str:
    """A sentence of a message quoted whole below, listed briefly by the message's id."""
    if len(text) > POINTER_CHARS:
        text = text[: POINTER_CHARS - 1].rstrip() + "…"
    return f"[{ident}, quoted under User Messages] {text}"


def _ranked(
    digest: Digest, kind: str, quoted_ids: frozenset[str], said: Callable[[str], bool], point: bool = False
) -> tuple[list[str], int]:
    """``(sentences of one kind, densest first then newest; how many the model's notes hold)``.

    A sentence the model's notes above already hold word for word (``said``) is left out:
    its room goes to the anchors. So is a sentence of a message quoted whole (it is verbatim
    below) — or, with ``point``, it is listed by a short :func:`_pointer`, so a heading never
    says there are none while the quotes below hold one.
    """
    lines = []
    above = 0
    for line in digest.sentences:
        if line.kind != kind:
            continue
        if said(line.text):
            above += 1
            continue
        quoted = line.id is not None and line.id in quoted_ids
        if point or not quoted:
            lines.append((line, quoted))
    lines.sort(key=lambda item: (item[0].score, item[0].seq), reverse=True)
    return [_pointer(line.id, line.text) if quoted and line.id else line.text for line, quoted in lines], above


def _recent_errors(digest: Digest) -> list[str]:
    """The newest error lines, each with what produced it (frame, log record, tool call)."""
    errors = digest.anchors.entries.get("error") or {}
    newest = sorted(errors, key=lambda error: (errors[error][1], errors[error][0]), reverse=True)
    return [f"Recent error: {digest.anchors.described('error', error)}" for error in newest[:BLOCKED_ERRORS]]


def _files(digest: Digest, budget_tokens: int) -> tuple[str, int]:
    """Files touched (newest first), then other paths mentioned; each with the words it was seen with when known;
    and the tokens they used."""
    touched = sorted(digest.files, key=digest.files.__getitem__, reverse=True)
    mentioned = [path for path in digest.anchors.ranked("path")[:200] if path not in digest.files]
    told = {path: digest.anchors.described("path", path) for path in [*touched, *mentioned]}
    taken, used = take_lines(told.values(), budget_tokens)
    if not taken:
        return "- (none recorded)", used
    shown = set(taken)
    described = [f"- {entry}" for path, entry in told.items() if entry in shown and entry != path]
    plain = [path for path, entry in told.items() if entry in shown and entry == path]
    return "\n".join(described + (["- " + ", ".join(plain)] if plain else [])), used


@functools.cache
def _skeleton_tokens() -> int:
    """Tokens of the body's fixed text: headings, subheadings and the standing lines."""
    return count_text("\n\n".join(SECTION_HEADINGS)) + count_text(_NEXT_STEPS + _INDEX_POINTER) + 20


def _goal_lines(digest: Digest, quoted_ids: frozenset[str], focus_topic: str | None) -> list[str]:
    """Goal: the requested focus, then the earliest compacted request (pointed to when it is quoted)."""
    goal_lines = []
    if focus_topic:
        goal_lines.append(f"Focus requested for this compaction: {focus_topic}")
    first = digest.first_request
    if first is not None and first.id is not None and first.id in quoted_ids:
        goal_lines.append(f"Earliest compacted request: [{first.id}] under User Messages.")
    elif first is not None:
        ident = f" ({first.id})" if first.id else ""
        goal_lines.append(f"Earliest compacted request{ident}: {clip(first.text, GOAL_CHARS)}")
    goal_lines.append("The user's own words are quoted verbatim under User Messages below, newest first.")
    return goal_lines


def _progress(digest: Digest, budget: int) -> tuple[list[str], list[str], str, int]:
    """Progress as Done (the tool calls made), In Progress (the assistant's last words at the cut) and
    Blocked (the newest errors), within ``budget`` tokens, and the tokens used; the work the
    conversation reported joins Done from :func:`_stated`."""
    calls = sorted(digest.tool_calls.items(), key=lambda item: item[1], reverse=True)
    done_lines = []
    if calls:
        done_lines.append("Tool calls made: " + ", ".join(f"{name} ×{count}" for name, count in calls[:30]))
    done, used = take_lines(done_lines, int(budget * 0.6))
    in_progress = []
    if digest.last_assistant is not None:
        ident = f" ({digest.last_assistant.id})" if digest.last_assistant.id else ""
        in_progress.append(
            f"At the cut the assistant had last written{ident}: "
            f"{clip(digest.last_assistant.text, LAST_ASSISTANT_CHARS)}"
        )
    in_progress, used_now = take_lines(in_progress, budget - used)
    errors = _recent_errors(digest)
    shown, used_errors = take_lines(errors, max(40, budget - used - used_now))
    return done, in_progress, _bullets(shown, len(errors)), used + used_now + used_errors


def _stated(ranked: dict[str, list[str]], budget_tokens: int) -> tuple[dict[str, list[str]], int]:
    """``(lines taken per kind, tokens used)``: the conversation's sentences, round-robin across kinds within one
    budget.

    One pool instead of a share per section: a section with few sentences leaves its room to
    the others (the assistant's reported commits are not cut while the decisions' share stands
    half empty), and round-robin keeps one kind's flood from crowding out the rest.
    """
    taken: dict[str, list[str]] = {kind: [] for kind in ranked}
    positions = dict.fromkeys(ranked, 0)
    misfits = dict.fromkeys(ranked, 0)
    used = 0
    active = [kind for kind in STATED_KINDS if ranked.get(kind)]
    while active:
        still = []
        for kind in active:
            lines = ranked[kind]
            while positions[kind] < len(lines) and misfits[kind] < MAX_MISFITS:
                line = lines[positions[kind]]
                positions[kind] += 1
                cost = count_line(line) + BULLET_TOKENS
                if used + cost <= budget_tokens:
                    taken[kind].append(line)
                    used += cost
                    still.append(kind)
                    break
                misfits[kind] += 1
        active = still
    return taken, used


def render_body(
    digest: Digest,
    budget_tokens: int,
    *,
    quoted_ids: frozenset[str] = frozenset(),
    focus_topic: str | None = None,
    earlier_summary: str | None = None,
    said: Callable[[str], bool] = lambda text: False,
) -> str:
    """The summary's sections (:data:`SECTION_HEADINGS`) for ``digest`` within about ``budget_tokens``.

    Sentences from user messages already quoted verbatim elsewhere (``quoted_ids``) are
    not repeated, but their decisions and preferences are pointed to by message id in their
    sections, so no heading says "(none recorded)" while the quotes hold one. Errors and
    files carry what produced them and the words they were seen with. ``earlier_summary``
    (a model-written summary this one replaces) is carried over, clipped, so a fallback
    never loses what the model had written. Sentences a model's notes hold word for word
    (``said``) are not written twice.
    """
    share = {name: max(40, int(budget_tokens * ratio)) for name, ratio in SHARES.items()}

    goal, used = take_lines(_goal_lines(digest, quoted_ids, focus_topic), share["goal"])
    done, in_progress, blocked, used_progress = _progress(digest, share["progress"])
    files, used_files = _files(digest, share["files"])
    carried: list[str] = []
    if earlier_summary:
        carried, used_earlier = take_lines([clip(earlier_summary, share["earlier"] * 4)], share["earlier"])
        used += used_earlier
    used += used_progress + used_files + _skeleton_tokens()

    ranked: dict[str, list[str]] = {}
    above: dict[str, int] = {}
    for kind in STATED_KINDS:
        ranked[kind], above[kind] = _ranked(digest, kind, quoted_ids, said, point=kind in POINTED_KINDS)
    stated, _ = _stated(ranked, budget_tokens - used)
    preferences = _bullets(stated["preference"], len(ranked["preference"]), above["preference"])
    decisions = _bullets(stated["decision"], len(ranked["decision"]), above["decision"])
    done += stated["progress"]
    facts = stated["fact"]

    parts = [
        f"{SECTION_HEADINGS[0]}\n{_bullets(goal)}",
        f"{SECTION_HEADINGS[1]}\n{preferences}",
        f"{SECTION_HEADINGS[2]}\n### Done\n{_bullets(done)}\n### In Progress\n{_bullets(in_progress)}"
        f"\n### Blocked\n{blocked}",
        f"{SECTION_HEADINGS[3]}\n{decisions}",
        f"{SECTION_HEADINGS[4]}\n{files}",
        f"{SECTION_HEADINGS[5]}\n{_NEXT_STEPS}",
        f"{SECTION_HEADINGS[6]}\n"
        + "\n".join(f"- {line}" for line in facts)
        + ("\n" if facts else "")
        + _INDEX_POINTER,
    ]
    if carried:
        parts.append("### Earlier summary (carried over)\n" + carried[0])
    return "\n\n".join(parts)
