"""Phase 4: head + summary + tail, then tool pairs made valid.

The system prompt gets a one-line note on the FIRST compaction only and is never edited
again, so its prompt-cache entry survives every later compaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.messages import SUMMARY_KEY, SYNTHETIC_KEY, Message, tool_call_ids, with_content
from agent.tokens import content_text

#: Appended to the system prompt on the first compaction.
SYSTEM_NOTE = (
    "[Note: earlier turns of this conversation have been compacted into a summary to save context space. "
    "Originals stay retrievable with session_search and session_fetch.]"
)
#: Content of the stand-in result given to a call whose result is missing.
STAND_IN_RESULT = (
    "[No result was recorded for this tool call (it was interrupted or its result was lost). "
    "Run it again only if the result is still needed.]"
)


def note_system_prompt(head: Sequence[Message]) -> list[Message]:
    """The head with :data:`SYSTEM_NOTE` appended to its system prompt (unchanged when there is none or it has
    the note)."""
    out = list(head)  # the messages themselves, uncopied: only the system prompt is replaced
    if not out or out[0].get("role") != "system":
        return out
    system = out[0]
    content = system.get("content")
    if SYSTEM_NOTE in content_text(content):
        return out
    if isinstance(content, list):
        noted: Any = [*content, {"type": "text", "text": SYSTEM_NOTE}]
    else:
        noted = f"{content}\n\n{SYSTEM_NOTE}" if content else SYSTEM_NOTE
    out[0] = with_content(system, noted)
    return out


def summary_message(text: str, role: str) -> Message:
    """The message that carries the summary (marked so it is never quoted as the user's words)."""
    return {"role": role, "content": text, SUMMARY_KEY: True, SYNTHETIC_KEY: True}


def stand_in_result(call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": STAND_IN_RESULT, SYNTHETIC_KEY: True}


def sanitize_tool_pairs(messages: Sequence[Message], *, keep_trailing_pending: bool = True) -> list[Message]:
    """A list in which every tool result answers a call just before it and every call is answered.

    Results whose call is gone (or answered already) are dropped; calls left without a
    result get a stand-in result right after their results block. A call at the very end
    of the list still waiting for its results is in flight (the loop is running it, or the
    turn ended with it for the client to run and the client's next request brings its
    result), so with ``keep_trailing_pending`` it is left alone rather than answered with a
    stand-in the agent would mistake for a real result.
    """
    out: list[Message] = []
    pending: list[str] = []
    used_ids: set[str] = set()

    def close_pending() -> None:
        for call_id in pending:
            out.append(stand_in_result(call_id))
        pending.clear()

    # Messages kept unchanged go on uncopied.
    for message in messages:
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id in pending:
                pending.remove(call_id)
                out.append(message)
            continue
        close_pending()
        ids = tool_call_ids(message)
        if ids:
            fresh = [i for i in dict.fromkeys(ids) if i not in used_ids]
            if len(fresh) != len(ids):
                calls = [c for c in message["tool_calls"] if c.get("id") in fresh]
                first_by_id: dict[str, Any] = {}
                for call in calls:
                    first_by_id.setdefault(call["id"], call)
                calls = list(first_by_id.values())
                message = with_content(message, message.get("content"), tool_calls=calls)
                if not calls:
                    message.pop("tool_calls")
            used_ids.update(fresh)
            pending = list(fresh)
        out.append(message)
    if not keep_trailing_pending:
        close_pending()
    return out


def assemble(
    head: Sequence[Message],
    summary: Message,
    tail: Sequence[Message],
    *,
    first_compaction: bool,
) -> list[Message]:
    """The compacted list: head (noted on the first compaction), the summary, the tail; pairs sanitized."""
    kept_head = note_system_prompt(head) if first_compaction else list(head)
    return sanitize_tool_pairs([*kept_head, summary, *tail])
