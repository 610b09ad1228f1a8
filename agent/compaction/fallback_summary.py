"""The deterministic structured summary: built from the transcript itself, no model involved.

Used when no summarizer is configured, and when the summarizer fails while the context
is critical (hygiene, manual /compress, ≥ 85% of the window). It has the same sections as
a model-written summary, filled with what can be taken mechanically and verbatim: the
user's requests, preference and decision sentences as written, the tool calls made,
files touched, errors seen, and what the assistant was doing at the cut.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

from agent.compaction.digest import Digest, Line
from agent.compaction.everyday import KINDS as EVERYDAY_KINDS
from agent.compaction.fitting import clip, count_line, take_lines
from agent.compaction.sentences import is_advice, is_firm_decision, is_stated
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
#: Every kind the one pool of :func:`_stated` serves: the sentences' first, then what everyday conversation
#: stated (a session of commits keeps its room; a chat between friends, which has no sentences of those, gets all).
POOL_KINDS = STATED_KINDS + EVERYDAY_KINDS
#: Subheadings the everyday remarks are listed under, by kind, inside the fixed sections.
EVERYDAY_HEADINGS = {
    "like": "### Likes & Dislikes",
    "plan": "### Plans & Promises",
    "person": "### People",
    "event": "### Events",
    "place": "### Places",
    "feeling": "### Feelings & Wants",
}
#: Lines a kind takes per round of the pool in a chat between people: who is who and what happened when are what
#: such a chat is asked about later; a mood, a place or a sentence that only looks like a decision, least.
CHAT_SHARES = {"person": 3, "event": 3, "plan": 2}
#: Score from which an everyday event or plan names a day of its own (see :mod:`agent.compaction.everyday`).
RESOLVED_SCORE = 6
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
#: Characters an everyday remark shows in a chat between people (the message id gives the rest back): at an 8K
#: window the notes hold a dozen lines, and the head of a remark is what says who and what.
PLAIN_REMARK_CHARS = 90
#: The speaker in their own sentence: a chat's "never have, never will" is banter, "I never eat meat" a preference.
_FIRST_PERSON = re.compile(r"(?i)\b(?:i|i'm|i'd|i've|me|my|we|us|our)\b")
_WORD = re.compile(r"[A-Z][a-z]+")
#: A request to the assistant, as opposed to small talk opening a chat.
_REQUEST = re.compile(r"(?i)\b(?:can you|could you|would you|will you|please|help me|i need you|tell me|show me)\b")
_NEXT_STEPS = (
    "- Answer the newest user message that follows these notes.\n"
    "- Look up any detail needed from the compacted turns with session_search / session_fetch before redoing work."
)
#: The standing lines of a chat between people: the same two points, in the room of one.
_CHAT_NEXT_STEPS = "- Answer the newest message after these notes; session_search / session_fetch give back any detail."
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
    digest: Digest,
    kind: str,
    quoted_ids: frozenset[str],
    said: Callable[[str], bool],
    point: bool = False,
    chat: bool = False,
) -> tuple[list[str], int]:
    """``(sentences of one kind, densest first then newest; how many the model's notes hold)``.

    A sentence the model's notes above already hold word for word (``said``) is left out:
    its room goes to the anchors. So is a sentence of a message quoted whole (it is verbatim
    below) — or, with ``point``, it is listed by a short :func:`_pointer`, so a heading never
    says there are none while the quotes below hold one. In a ``chat`` between people a "decision" that only
    gives a reason ("since", "because") and a "preference" that tells someone else's advice are left out.
    """
    lines = []
    above = 0
    for line in digest.sentences:
        if line.kind != kind or (chat and not _chat_worthy(line.text, kind)):
            continue
        if said(line.text):
            above += 1
            continue
        quoted = line.id is not None and line.id in quoted_ids
        if point or not quoted:
            lines.append((line, quoted))
    lines.sort(key=lambda item: (item[0].score, item[0].seq), reverse=True)
    return [_pointer(line.id, line.text) if quoted and line.id else line.text for line, quoted in lines], above


def _resolves(line: Line) -> bool:
    """Whether a remark says what its message quoted whole does not: the ISO day a "yesterday" stands for."""
    return line.kind in ("event", "plan") and line.score >= RESOLVED_SCORE


def _known_people(digest: Digest) -> frozenset[str]:
    """The names the person remarks give a relation to ("Felix" of "Felix: Callum's sister")."""
    return frozenset(line.text.split(":", 1)[0] for line in digest.everyday if line.kind == "person")


def _names_one(text: str, known: frozenset[str]) -> int:
    """Points for a remark about someone the notes say who they are to whom ("Felix got the job …"): news of the
    people in a life is what is asked about after who they are."""
    words = set(_WORD.findall(text.split(":", 1)[-1]))
    return 2 if words & known else 0


def _short(text: str) -> str:
    """A remark cut at a word within :data:`PLAIN_REMARK_CHARS`, marked by "…" (the message id gives it whole)."""
    if len(text) <= PLAIN_REMARK_CHARS:
        return text
    return text[: PLAIN_REMARK_CHARS - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"


def _chat_worthy(text: str, kind: str) -> bool:
    """Whether a sentence of a chat between people is what its kind says: a decision with what was decided, a
    preference that is the speaker's own, a fact stated for the record."""
    if kind == "decision":
        return is_firm_decision(text)
    if kind == "preference":
        return bool(_FIRST_PERSON.search(text)) and not is_advice(text)
    if kind == "fact":
        return is_stated(text)
    return True


def _remarks(
    digest: Digest, kind: str, said: Callable[[str], bool], quoted_ids: frozenset[str], chat: bool = False
) -> list[str]:
    """The everyday remarks of one kind, densest first then newest, each led by its message's id (session_fetch
    gives the message back); those the model's notes hold word for word are left out. In a ``chat`` between
    people, those of a message quoted whole below are left out too and the rest clipped short: a dozen must fit."""
    lines = [
        line
        for line in digest.everyday
        if line.kind == kind and not said(line.text) and not (chat and line.id in quoted_ids and not _resolves(line))
    ]
    if chat:
        known = _known_people(digest)
        lines.sort(key=lambda line: (line.score + _names_one(line.text, known), line.seq), reverse=True)
    else:
        lines.sort(key=lambda line: (line.score, line.seq), reverse=True)
    texts = [_short(line.text) if chat else line.text for line in lines]
    return [f"[{line.id}] {text}" if line.id else text for line, text in zip(lines, texts, strict=True)]


def _subsections(stated: dict[str, list[str]], kinds: tuple[str, ...]) -> str:
    """The everyday remarks taken for ``kinds``, each kind under its subheading (none when it has none)."""
    parts = [EVERYDAY_HEADINGS[kind] + "\n" + _bullets(stated[kind]) for kind in kinds if stated.get(kind)]
    return "\n".join(parts)


def _joined(*parts: str) -> str:
    return "\n".join(part for part in parts if part)


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
    """Goal: the requested focus, then the earliest compacted request (pointed to when it is quoted; left out
    when it is only the small talk a chat between people opened with)."""
    goal_lines = []
    if focus_topic:
        goal_lines.append(f"Focus requested for this compaction: {focus_topic}")
    first = digest.first_request
    if first is not None and digest.plain() and not _REQUEST.search(first.text):
        first = None  # a chat's opening small talk; what it said of people and days is listed below
    if first is not None and first.id is not None and first.id in quoted_ids:
        goal_lines.append(f"Earliest compacted request: [{first.id}] under User Messages.")
    elif first is not None:
        ident = f" ({first.id})" if first.id else ""
        goal_lines.append(f"Earliest compacted request{ident}: {clip(first.text, GOAL_CHARS)}")
    if first is not None or not digest.plain():
        goal_lines.append("The user's own words are quoted verbatim under User Messages below, newest first.")
    return goal_lines


def _progress(digest: Digest, budget: int) -> tuple[list[str], list[str], str, int]:
    """Progress as Done (the tool calls made), In Progress (the assistant's last words at the cut; not in a chat
    between people, whose kept turns carry the talk on) and Blocked (the newest errors), within ``budget``
    tokens, and the tokens used; the work the conversation reported joins Done from :func:`_stated`."""
    calls = sorted(digest.tool_calls.items(), key=lambda item: item[1], reverse=True)
    done_lines = []
    if calls:
        done_lines.append("Tool calls made: " + ", ".join(f"{name} ×{count}" for name, count in calls[:30]))
    done, used = take_lines(done_lines, int(budget * 0.6))
    in_progress = []
    if digest.last_assistant is not None and not digest.plain():  # a chat's last words: the kept tail goes on
        ident = f" ({digest.last_assistant.id})" if digest.last_assistant.id else ""
        in_progress.append(
            f"At the cut the assistant had last written{ident}: "
            f"{clip(digest.last_assistant.text, LAST_ASSISTANT_CHARS)}"
        )
    in_progress, used_now = take_lines(in_progress, budget - used)
    errors = _recent_errors(digest)
    shown, used_errors = take_lines(errors, max(40, budget - used - used_now))
    return done, in_progress, _bullets(shown, len(errors)), used + used_now + used_errors


def _pool_order(digest: Digest) -> tuple[str, ...]:
    """The order a round of the pool takes the kinds in: a conversation without tools (people talking) puts what
    everyday talk states first, ahead of sentences that only look like decisions ("since the party"); a mood
    and a place alone say least, so they come last."""
    if not digest.plain():
        return POOL_KINDS
    return ("person", "event", "plan", "like") + STATED_KINDS + ("feeling", "place")


def _stated(
    ranked: dict[str, list[str]],
    budget_tokens: int,
    order: tuple[str, ...] = POOL_KINDS,
    shares: Mapping[str, int] | None = None,
    headings: Mapping[str, int] | None = None,
) -> tuple[dict[str, list[str]], int]:
    """``(lines taken per kind, tokens used)``: the conversation's sentences, round-robin across kinds within one
    budget.

    One pool instead of a share per section: a section with few sentences leaves its room to
    the others (the assistant's reported commits are not cut while the decisions' share stands
    half empty), and round-robin keeps one kind's flood from crowding out the rest. ``shares`` lets a kind take
    more than one line a round; ``headings`` are the tokens a kind's subheading costs, paid with its first line
    (not reserved for kinds that may get none).
    """
    taken: dict[str, list[str]] = {kind: [] for kind in ranked}
    positions = dict.fromkeys(ranked, 0)
    misfits = dict.fromkeys(ranked, 0)
    used = 0
    active = [kind for kind in order if ranked.get(kind)]
    while active:
        still = []
        for kind in active:
            for _ in range((shares or {}).get(kind, 1)):
                heading = 0 if taken[kind] else (headings or {}).get(kind, 0)
                line = _next_fit(ranked[kind], positions, misfits, kind, budget_tokens - used - heading)
                if line is None:
                    break
                text, cost = line
                cost += heading
                taken[kind].append(text)
                used += cost
                if kind not in still:
                    still.append(kind)
        active = still
    return taken, used


def _next_fit(
    lines: list[str], positions: dict[str, int], misfits: dict[str, int], kind: str, room: int
) -> tuple[str, int] | None:
    """The next line of a kind that fits ``room`` (with its cost), skipping up to :data:`MAX_MISFITS` longer ones."""
    while positions[kind] < len(lines) and misfits[kind] < MAX_MISFITS:
        line = lines[positions[kind]]
        positions[kind] += 1
        cost = count_line(line) + BULLET_TOKENS
        if cost <= room:
            return line, cost
        misfits[kind] += 1
    return None


def _pooled(
    digest: Digest, budget: int, quoted_ids: frozenset[str], said: Callable[[str], bool], chat: bool
) -> tuple[dict[str, list[str]], dict[str, int], dict[str, list[str]]]:
    """``(ranked lines per kind, how many the model's notes hold per stated kind, lines taken per kind)``: the
    sentences and remarks ranked, and the pool shared between them within ``budget`` (a chat between people
    gives more of each round to people and events, and pays a subheading only with its first line)."""
    ranked: dict[str, list[str]] = {}
    above: dict[str, int] = {}
    for kind in STATED_KINDS:
        point = kind in POINTED_KINDS
        ranked[kind], above[kind] = _ranked(digest, kind, quoted_ids, said, point=point, chat=chat)
    headings = {kind: count_line(EVERYDAY_HEADINGS[kind]) + 1 for kind in EVERYDAY_KINDS}
    for kind in EVERYDAY_KINDS:
        ranked[kind] = _remarks(digest, kind, said, quoted_ids, chat)
        if ranked[kind] and not chat:
            budget -= headings[kind]
    if chat:
        stated, _ = _stated(ranked, budget, _pool_order(digest), CHAT_SHARES, headings)
    else:
        stated, _ = _stated(ranked, budget, _pool_order(digest))
    return ranked, above, stated


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

    chat = digest.plain()
    ranked, above, stated = _pooled(digest, budget_tokens - used, quoted_ids, said, chat)
    preferences = _bullets(stated["preference"], len(ranked["preference"]), above["preference"])
    if stated["like"] and not ranked["preference"] and not above["preference"]:
        preferences = ""  # the likes below are what this conversation prefers
    decisions = _bullets(stated["decision"], len(ranked["decision"]), above["decision"])
    done += stated["progress"]
    facts = "\n".join(f"- {line}" for line in stated["fact"])
    progress = f"### Done\n{_bullets(done)}\n### In Progress\n{_bullets(in_progress)}\n### Blocked\n{blocked}"
    if chat and not done and not in_progress and not digest.anchors.entries.get("error"):
        progress = _bullets([])  # no tool work: three empty subsections would only take the room
    context = _subsections(stated, ("person", "event", "place", "feeling"))
    parts = [
        f"{SECTION_HEADINGS[0]}\n{_bullets(goal)}",
        f"{SECTION_HEADINGS[1]}\n" + _joined(preferences, _subsections(stated, ("like",))),
        f"{SECTION_HEADINGS[2]}\n{progress}",
        f"{SECTION_HEADINGS[3]}\n{decisions}",
        f"{SECTION_HEADINGS[4]}\n{files}",
        f"{SECTION_HEADINGS[5]}\n"
        + _joined(_CHAT_NEXT_STEPS if chat else _NEXT_STEPS, _subsections(stated, ("plan",))),
        f"{SECTION_HEADINGS[6]}\n" + (_joined(facts, context, "" if chat else _INDEX_POINTER) or _bullets([])),
    ]
    if carried:
        parts.append("### Earlier summary (carried over)\n" + carried[0])
    return "\n\n".join(parts)
