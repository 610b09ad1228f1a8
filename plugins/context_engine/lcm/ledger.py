"""The ledger: which message ids each compaction took out of the context, and when.

It is the engine's whole persistent memory of the archive — ranges and counts, a few
tool names and identifiers, never message text — so it fits in the session meta the
gateway stores after every turn. The text itself stays in the session archive (or, with
no gateway, in the engine's in-memory archive), found again by id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from plugins.context_engine.lcm.ids import Run, expand_runs

#: Compactions listed one by one; older ones are folded into one aggregate line.
MAX_RECORDS = 64
#: Runs kept per record and kind (more only happens with ids that are not numbered).
MAX_RUNS = 64
#: Tool names and identifiers remembered per record (enough to say what a range was about).
MAX_TOOLS = 5
MAX_KEYS = 4


@dataclass
class CompactionRecord:
    """One compaction, cited as ``r<number>``.

    ``folded`` ids went into the summary; ``replaced`` ids stayed in the context as a new
    version (a stubbed tool output, the system prompt with its compaction note) while the
    original went to the archive. ``partial`` says the id runs were cut at
    :data:`MAX_RUNS`; the counts stay exact.
    """

    number: int
    at: float
    trigger: str
    folded: list[Run] = field(default_factory=list)
    folded_count: int = 0
    replaced: list[Run] = field(default_factory=list)
    replaced_count: int = 0
    tokens: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    tools: dict[str, int] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)
    summarizer: str = ""
    partial: bool = False

    @property
    def label(self) -> str:
        return f"r{self.number}"

    @property
    def messages(self) -> int:
        return self.folded_count + self.replaced_count

    def ids(self) -> list[str]:
        """Every id this compaction took out of the context: folded first, then replaced."""
        return expand_runs(self.folded) + expand_runs(self.replaced)

    def to_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "n": self.number,
            "at": round(self.at, 3),
            "trigger": self.trigger,
            "folded": self.folded,
            "folded_count": self.folded_count,
            "replaced": self.replaced,
            "replaced_count": self.replaced_count,
            "tokens": self.tokens,
            "ts": [self.first_ts, self.last_ts],
            "tools": self.tools,
            "keys": self.keys,
            "summarizer": self.summarizer,
        }
        if self.partial:
            state["partial"] = True
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> CompactionRecord:
        span = list(state.get("ts") or [None, None]) + [None, None]
        return cls(
            number=int(state["n"]),
            at=float(state.get("at") or 0.0),
            trigger=str(state.get("trigger") or ""),
            folded=_runs(state.get("folded")),
            folded_count=int(state.get("folded_count") or 0),
            replaced=_runs(state.get("replaced")),
            replaced_count=int(state.get("replaced_count") or 0),
            tokens=int(state.get("tokens") or 0),
            first_ts=_float_or_none(span[0]),
            last_ts=_float_or_none(span[1]),
            tools={str(k): int(v) for k, v in (state.get("tools") or {}).items()},
            keys=[str(k) for k in state.get("keys") or ()][:MAX_KEYS],
            summarizer=str(state.get("summarizer") or ""),
            partial=bool(state.get("partial")),
        )


@dataclass
class Older:
    """Compactions no longer listed one by one: how many, and what they covered in total."""

    records: int = 0
    messages: int = 0
    tokens: int = 0
    first_number: int = 0
    last_number: int = 0

    def absorb(self, record: CompactionRecord) -> None:
        self.records += 1
        self.messages += record.messages
        self.tokens += record.tokens
        self.first_number = self.first_number or record.number
        self.last_number = record.number


@dataclass
class Ledger:
    """Every compaction of the session, oldest first, bounded by :data:`MAX_RECORDS`."""

    records: list[CompactionRecord] = field(default_factory=list)
    older: Older = field(default_factory=Older)
    next_number: int = 1

    def add(
        self,
        *,
        at: float,
        trigger: str,
        folded: Sequence[Run],
        folded_count: int,
        replaced: Sequence[Run],
        replaced_count: int,
        tokens: int,
        first_ts: float | None,
        last_ts: float | None,
        tools: Mapping[str, int],
        keys: Sequence[str],
        summarizer: str,
    ) -> CompactionRecord:
        partial = len(folded) > MAX_RUNS or len(replaced) > MAX_RUNS
        top_tools = dict(sorted(tools.items(), key=lambda item: (-item[1], item[0]))[:MAX_TOOLS])
        record = CompactionRecord(
            number=self.next_number,
            at=at,
            trigger=trigger,
            folded=list(folded[:MAX_RUNS]),
            folded_count=folded_count,
            replaced=list(replaced[:MAX_RUNS]),
            replaced_count=replaced_count,
            tokens=tokens,
            first_ts=first_ts,
            last_ts=last_ts,
            tools=top_tools,
            keys=list(keys[:MAX_KEYS]),
            summarizer=summarizer,
            partial=partial,
        )
        self.next_number += 1
        self.records.append(record)
        while len(self.records) > MAX_RECORDS:
            self.older.absorb(self.records.pop(0))
        return record

    def get(self, label: str) -> CompactionRecord | None:
        """The record cited as ``label`` (``"r3"``), if it is still listed."""
        for record in self.records:
            if record.label == label.strip().lower():
                return record
        return None

    def ranges_by_id(self) -> dict[str, str]:
        """message id → the label of the compaction that took it out of the context."""
        where: dict[str, str] = {}
        for record in self.records:
            for message_id in record.ids():
                where[message_id] = record.label
        return where

    @property
    def messages(self) -> int:
        return self.older.messages + sum(record.messages for record in self.records)

    @property
    def tokens(self) -> int:
        return self.older.tokens + sum(record.tokens for record in self.records)

    @property
    def compactions(self) -> int:
        return self.older.records + len(self.records)

    def to_state(self) -> dict[str, Any]:
        return {
            "records": [record.to_state() for record in self.records],
            "older": vars(self.older).copy(),
            "next": self.next_number,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> Ledger:
        state = state or {}
        records = [
            CompactionRecord.from_state(item) for item in state.get("records") or () if isinstance(item, Mapping)
        ]
        older_state = state.get("older") or {}
        older = Older(**{name: int(older_state.get(name) or 0) for name in vars(Older())})
        next_number = int(state.get("next") or 0) or (max((r.number for r in records), default=0) + 1)
        return cls(records=records[-MAX_RECORDS:], older=older, next_number=next_number)


def _runs(value: Any) -> list[Run]:
    runs: list[Run] = []
    for item in value or ():
        if isinstance(item, (list, tuple)) and item:
            runs.append([str(item[0]), str(item[-1])])
        elif item is not None:
            runs.append(str(item))
    return runs[:MAX_RUNS]


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
