"""Phase 1: clear bulky old tool output before it reaches the summarizer.

Only what is sent to the summarizer is pruned: the anchor index and the verbatim user
quotes are built from the ORIGINAL messages first, so identifiers that appear only in
tool output (SHAs, error codes, paths in logs) survive compaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.messages import Message, with_content
from agent.tokens import content_text

#: What a cleared tool result says instead of its output.
PRUNED_TOOL_OUTPUT = "[Old tool output cleared to save context space]"
#: Tool results up to this many characters are cheap enough to keep.
PRUNE_MIN_CHARS = 200


def is_bulky_tool_result(message: Mapping[str, Any], min_chars: int = PRUNE_MIN_CHARS) -> bool:
    """A tool result long enough that clearing it saves context."""
    return message.get("role") == "tool" and len(content_text(message.get("content"))) > min_chars


def prune_tool_outputs(messages: Sequence[Message], min_chars: int = PRUNE_MIN_CHARS) -> list[Message]:
    """The messages with every tool result over ``min_chars`` characters replaced by the cleared marker.

    Cleared results record their original size in ``_pruned_chars``; other messages are
    returned as they are.
    """
    pruned: list[Message] = []
    for message in messages:
        if is_bulky_tool_result(message, min_chars):
            size = len(content_text(message.get("content")))
            pruned.append(with_content(message, PRUNED_TOOL_OUTPUT, _pruned_chars=size))
        else:
            pruned.append(message)  # passed on uncopied
    return pruned
