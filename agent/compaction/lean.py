"""Lean tail: old tool results inside the kept tail become one-line stubs.

(The compressor applies the same stubs to the tool results of the protected head's first
exchange: they are the oldest output of all.)

A stub names the tool, the output's size and the message id, and says how to get the
original back, so nothing is lost: the original stays in the session archive under its
id. A tool result is old when it lies before where the tail's token budget ends (it is
only kept because of the tail's minimum-count or user-message guarantees), or when the
newer tool results after it already fill the fresh share of the tail. The newest results
stay verbatim even when a user message followed them: the file the model was just reading
is what the next turn works with, and a stub there would start it with a ``session_fetch``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from agent.compaction.prune import PRUNE_MIN_CHARS
from agent.messages import Message, tool_names_by_call_id, with_content
from agent.tokens import content_text, count_message

#: The field a stubbed tool result carries: the size of the original it stands in for.
STUBBED_KEY: Final = "_stubbed_chars"
#: Characters of the output's first line a stub shows, so the model knows what it was.
PREVIEW_CHARS = 48
#: Share of the lean tail budget the newest tool results may fill verbatim.
FRESH_SHARE = 0.25
#: Fewest tokens of newest tool output kept verbatim, whatever the window.
MIN_FRESH_TOKENS = 4_000


def _preview(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"
    return ""


def stub_text(tool_name: str, text: str, message_id: str | None) -> str:
    """The one line that stands in for an old tool result, with its recovery hint."""
    preview = _preview(text).replace('"', "'")
    shown = f', "{preview}"' if preview else ""
    how = f'session_fetch(ids=["{message_id}"])' if message_id else "session_search"
    return f"[Old {tool_name} output stubbed: {len(text):,} chars{shown}; {how}]"


def old_tool_result_cutoff(
    tail: Sequence[Mapping[str, Any]], budget_offset: int, fresh_tokens: int | None = None
) -> int:
    """Index in ``tail`` before which tool results count as old.

    ``budget_offset`` is where the token budget alone would have started the tail;
    ``fresh_tokens`` is how much of the newest tool output stays verbatim.
    """
    # Results after the last assistant message answer calls the model has not seen answered yet.
    last_assistant = max((i for i, m in enumerate(tail) if m.get("role") == "assistant"), default=len(tail))
    fresh_start = 0
    if fresh_tokens is not None:
        used = 0
        for index in range(len(tail) - 1, -1, -1):
            if tail[index].get("role") == "tool":
                used += count_message(tail[index])
                if used > fresh_tokens:
                    fresh_start = index + 1
                    break
    return min(max(budget_offset, fresh_start), last_assistant)


def stub_old_tool_results(
    tail: Sequence[Message],
    cutoff: int,
    min_chars: int = PRUNE_MIN_CHARS,
) -> tuple[list[Message], list[tuple[int, Message]]]:
    """``(tail with old bulky tool results stubbed, [(tail index, original)] of the stubbed ones)``.

    Stubbed messages are new versions (:func:`agent.messages.with_content`), so their
    originals are archived under their ids when the compacted list is committed.
    """
    names = tool_names_by_call_id(tail)
    out: list[Message] = []
    stubbed: list[tuple[int, Message]] = []
    for index, message in enumerate(tail):
        if index < cutoff and message.get("role") == "tool":
            text = content_text(message.get("content"))
            if len(text) > min_chars:
                name = names.get(str(message.get("tool_call_id")), "tool")
                stub = stub_text(name, text, message.get("_id"))
                stand_in = with_content(message, stub)
                stand_in[STUBBED_KEY] = len(text)
                out.append(stand_in)
                stubbed.append((index, message))
                continue
        out.append(message)  # kept unchanged: passed on uncopied
    return out, stubbed
