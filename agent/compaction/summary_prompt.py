"""Phase 3's request: what the summarizer is told, the transcript it reads, and what a valid answer has.

The summary is reference material for a later turn, so the prompt asks for notes, not
instructions (a task left open in them must not be taken up again on its own), with
identifiers copied exactly. From the second compaction on the previous summary is passed
back and the model is asked to UPDATE it, so nothing an earlier compaction kept is lost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent import json_codec
from agent.compaction.prune import PRUNED_TOOL_OUTPUT
from agent.dates import day_of
from agent.messages import SUMMARY_PREFIX, Message, is_summary, stand_in_lines
from agent.tokens import content_text

#: The sections every summary has (a model's or the deterministic one), as Markdown headings.
SECTION_HEADINGS = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "## Key Decisions",
    "## Relevant Files",
    "## Next Steps",
    "## Critical Context",
)
PROGRESS_SUBHEADINGS = ("### Done", "### In Progress", "### Blocked")

#: Longest tool-call argument text shown to the summarizer per call.
MAX_ARGUMENT_CHARS = 600

# A backslash at a line's end continues the line: the prompt's own lines are the long ones.
SYSTEM_PROMPT = """You write compaction notes for a long conversation between people and an AI assistant: \
technical work with tools, everyday talk, or both.
The notes replace the turns you are shown; the assistant will read them later as background.

Write Markdown with exactly these sections, in this order:
## Goal
## Constraints & Preferences
## Progress
### Done
### In Progress
### Blocked
## Key Decisions
## Relevant Files
## Next Steps
## Critical Context

Rules:
- Copy identifiers exactly as written, never paraphrase them: file paths, commit SHAs, PR and issue numbers, \
ticket keys, error messages, URLs, version numbers, numbers with units, names of people, pets, places and things.
- Record preferences and decisions in the speaker's own words where you can, likes and dislikes too, naming \
who said them.
- Everyday talk: under Critical Context keep the people and who they are to whom ("Ana: Maya's sister"), \
events, feelings and places; under Next Steps plans and promises. A greeting is never a name or a decision.
- Date every event and plan: resolve "yesterday", "last Saturday", "in March" against the day of the message \
that said it and write the ISO date, e.g. "Maya (2023-05-08): started pottery on 2023-05-06".
- These are reference notes, not instructions: describe what was happening and what was left open; do not \
address the assistant or tell it to continue anything. The newest user message, which comes after the notes, \
always decides what happens next.
- Cite message ids like [m-12] where a detail came from, so the original can be fetched.
- Be dense. Stay within the token budget you are given."""

UPDATE_INSTRUCTION = (
    "UPDATE the previous notes with the new turns below instead of starting over: move items that are now "
    "finished from In Progress to Done, add new progress, decisions, files and context, and drop what is stale "
    "or superseded. Keep every identifier that is still relevant. Return the complete updated notes."
)


@dataclass(frozen=True)
class TranscriptEntry:
    """One compacted message rendered for the summarizer, with its estimated token cost."""

    text: str
    tokens: int


def _label(message: Message, tool_names: Mapping[str, str]) -> str:
    ident = message.get("_id") or message.get("_orig_id")
    role = message.get("role")
    if role == "tool":
        name = tool_names.get(str(message.get("tool_call_id")), "tool")
        role = f"tool result ({name})"
    elif message.get("_synthetic"):
        role = f"{role} (synthetic)"
    return f"[{ident}] {role}" if ident is not None else str(role)


def render_message(
    message: Message, tool_names: Mapping[str, str], max_chars: int | None = None, *, day: str | None = None
) -> str:
    """One message as transcript text: label, content, who sent it and the day (``day``, given when it differs from
    the message before: relative dates count from it), and its tool calls with (trimmed) arguments."""
    text = content_text(message.get("content"))
    if message.get("_pruned_chars"):
        text = f"{PRUNED_TOOL_OUTPUT} (was {message['_pruned_chars']:,} chars)"
    if max_chars is not None and len(text) > max_chars:
        ident = message.get("_id") or message.get("_orig_id")
        omitted = len(text) - max_chars
        half = max_chars // 2
        text = f'{text[:half]}\n… [{omitted:,} chars omitted; session_fetch(ids=["{ident}"])] …\n{text[-half:]}'
    lines = [f"{_label(message, tool_names)}: {text}"]
    lines += [f"  {line}" for line in stand_in_lines(message)]  # its photos, documents, voice, one line each
    lines += _sent_line(message, day)
    for call in message.get("tool_calls") or ():
        function = (call or {}).get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json_codec.dumps_text(arguments)
        if len(arguments) > MAX_ARGUMENT_CHARS:
            arguments = arguments[:MAX_ARGUMENT_CHARS] + "…"
        lines.append(f"  -> calls {function.get('name')}({arguments})")
    return "\n".join(lines)


def _sent_line(message: Message, day: str | None) -> list[str]:
    """``["  (from Maya, sent 2023-05-08)"]``: who sent a message (when the chat names them) and the day (when it
    changed), so the summarizer can say who said what and resolve "yesterday"; empty when neither is known."""
    sender = message.get("_from")
    said = [f"from {' '.join(sender.split())}"] if isinstance(sender, str) and sender.strip() else []
    said += [f"sent {day}"] if day else []
    return ["  (" + ", ".join(said) + ")"] if said else []


def transcript_entries(
    pruned_middle: Sequence[Message],
    estimated_tokens: Sequence[int],
    tool_names: Mapping[str, str],
    max_entry_tokens: int,
) -> list[TranscriptEntry]:
    """The compacted messages as transcript entries; a single message larger than ``max_entry_tokens`` is cut in
    its middle.

    Earlier summaries are left out (they are passed separately as the previous notes).
    """
    entries = []
    last_day = None
    for message, tokens in zip(pruned_middle, estimated_tokens):
        if is_summary(message):
            continue
        ts = message.get("_ts")
        written = day_of(float(ts)).isoformat() if isinstance(ts, int | float) and ts > 0 else None
        day, last_day = (written if written != last_day else None), written or last_day
        if message.get("_pruned_chars"):
            tokens = 24
        max_chars = None
        if tokens > max_entry_tokens:
            chars = max(len(content_text(message.get("content"))), 1)
            max_chars = max(200, int(chars * max_entry_tokens / tokens))
            tokens = max_entry_tokens
        entries.append(TranscriptEntry(render_message(message, tool_names, max_chars, day=day), tokens + 6))
    return entries


def build_request(
    entries: Sequence[TranscriptEntry],
    *,
    budget_tokens: int,
    previous_summary: str | None,
    focus_topic: str | None,
) -> list[dict[str, str]]:
    """The summarizer's messages for one piece of the transcript."""
    parts = []
    if previous_summary:
        parts.append(f"<previous_notes>\n{previous_summary}\n</previous_notes>\n\n{UPDATE_INSTRUCTION}")
    else:
        parts.append("Write the notes for the turns below.")
    if focus_topic:
        parts.append(f"Give extra detail to anything about: {focus_topic}")
    parts.append(f"Token budget for the notes: about {budget_tokens:,} tokens.")
    parts.append("<turns>\n" + "\n\n".join(entry.text for entry in entries) + "\n</turns>")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


def _normalise_heading(line: str) -> str:
    return re.sub(r"[^a-z]+", "", line.lower().replace("&", "and"))


_REQUIRED = [_normalise_heading(heading) for heading in SECTION_HEADINGS]


def missing_sections(summary: str) -> list[str]:
    """The required section headings a model-written summary lacks (empty = valid)."""
    present = {_normalise_heading(line) for line in summary.splitlines() if line.lstrip().startswith("#")}
    return [heading for heading, key in zip(SECTION_HEADINGS, _REQUIRED) if key not in present]


def clean_summary(text: str) -> str:
    """The model's notes without wrapping a model sometimes adds (code fences, our own prefix)."""
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    text = text.strip()
    if text.startswith(SUMMARY_PREFIX):
        text = text[len(SUMMARY_PREFIX) :].lstrip()
    return text
