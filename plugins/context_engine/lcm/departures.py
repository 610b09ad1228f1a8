"""What one compaction took out of the context, tallied for its ledger entry.

The ledger keeps ranges and counts, never message text: which ids were folded (or replaced by a
newer version of themselves), how many tokens they held, when they were written, which tools
they called and the few identifiers someone is likely to look for again. This tally gathers
those as the engine walks the messages that left; the engine archives them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from agent.compaction.anchor_index import AnchorIndex
from agent.compaction.anchors import anchors_in
from agent.messages import Message
from agent.search import message_search_text
from agent.tokens import count_message
from plugins.context_engine.lcm.ids import encode_runs
from plugins.context_engine.lcm.ledger import Ledger

#: Anchor kinds worth naming on an index line (what people search for again).
KEY_KINDS = ("ref", "commit", "path", "error")
#: Identifiers named on an index line are this long (shorter ones, like "#1", match too much).
MIN_KEY_CHARS = 4
MAX_KEY_CHARS = 40


@dataclass
class Departures:
    """The messages one compaction took out of the context, as its ledger entry counts them."""

    #: Archive ids of the folded messages the ledger can name again (see :meth:`fold`).
    folded: list[str] = field(default_factory=list)
    folded_count: int = 0
    #: Archive ids of messages that left because a newer version of them (an excerpt) stayed.
    replaced: list[str] = field(default_factory=list)
    tokens: int = 0
    stamps: list[float] = field(default_factory=list)
    tool_calls: dict[str, int] = field(default_factory=dict)
    anchors: AnchorIndex = field(default_factory=AnchorIndex)

    def replace(self, message: Message, archived_as: str) -> None:
        """Count a message that left because a newer version of it (an excerpt) stayed in the context."""
        self.tokens += count_message(message)
        self.replaced.append(archived_as)

    def fold(self, seq: int, message: Message, archived_as: str | None) -> None:
        """Count a folded message: its tokens, time, tool calls and identifiers; ``archived_as`` is None for one
        whose local id will not outlive the turn (the gateway archives it under another)."""
        self.tokens += count_message(message)
        self.folded_count += 1
        if archived_as is not None:
            self.folded.append(archived_as)
        stamp = timestamp(message.get("_ts"))
        if stamp is not None:
            self.stamps.append(stamp)
        for call in message.get("tool_calls") or ():
            name = str(((call or {}).get("function") or {}).get("name") or "tool")
            self.tool_calls[name] = self.tool_calls.get(name, 0) + 1
        conversation = message.get("role") != "tool"
        self.anchors.add_all(anchors_in(message_search_text(message), conversation), seq, conversation=conversation)

    def keys(self) -> list[str]:
        """The few identifiers an index line names: the top two of each key kind, of a searchable length."""
        return [
            anchor
            for kind in KEY_KINDS
            for anchor in self.anchors.ranked(kind)[:2]
            if MIN_KEY_CHARS <= len(anchor) <= MAX_KEY_CHARS and "\n" not in anchor
        ]

    def record_in(self, ledger: Ledger, *, at: float, trigger: str, summarizer: str) -> None:
        """Add the compaction's entry to ``ledger``: its id runs and counts, never the messages' text."""
        ledger.add(
            at=at,
            trigger=trigger,
            folded=encode_runs(self.folded),
            folded_count=self.folded_count,
            replaced=encode_runs(self.replaced),
            replaced_count=len(self.replaced),
            tokens=self.tokens,
            first_ts=min(self.stamps) if self.stamps else None,
            last_ts=max(self.stamps) if self.stamps else None,
            tools=self.tool_calls,
            keys=self.keys(),
            summarizer=summarizer,
        )


def timestamp(value: Any) -> float | None:
    """A message's ``_ts`` as unix seconds: the store writes numbers, transcripts often ISO 8601 text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=datetime.UTC)
        return parsed.timestamp()
    return None
