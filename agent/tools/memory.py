"""The model's hands on what the bot keeps about the person it is answering: ``memory`` and ``memory_search``.

``memory`` adds, rewrites or removes one entry; its result says exactly what is kept now (or why nothing
changed), so the model can never tell the person it saved something that was not saved. ``memory_search``
finds entries the bounded memory block had no room for. Both reach only the memory of the person whose message
the turn answers (and, in a group, the group's own): nothing in their arguments names anyone else, so a message
asking for another person's memory has no way to get it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent import json_codec
from agent.tools.registry import Tool

#: The names of the memory tools (their calls are the person's memory traffic, not conversation).
MEMORY_TOOL_NAMES = frozenset({"memory", "memory_search"})
#: Most entries one ``memory_search`` hands back.
MAX_MEMORY_HITS = 20
ACTIONS = ("add", "replace", "remove")


@dataclass(frozen=True)
class KeptEntry:
    """One entry as the tools show it: its number (``/forget N`` names it), text, and whose it is."""

    number: int
    text: str
    #: ``"person"`` (the person's own) or ``"group"`` (the group's own memory).
    whose: str


@dataclass(frozen=True)
class MemoryChange:
    """What a write did: ``changed`` False when nothing was (``reason`` says why), ``entry`` as kept now."""

    changed: bool
    entry: KeptEntry | None = None
    reason: str = ""


class PersonMemory(Protocol):
    """One person's memory where the turn is (their private chats, or this group), as the tools may use it."""

    async def add(self, text: str, *, group: bool) -> MemoryChange:
        """Keep ``text`` (for the group as a whole when ``group``)."""

    async def replace(self, old_text: str, text: str, *, group: bool) -> MemoryChange:
        """Rewrite the entry whose text is ``old_text``."""

    async def remove(self, old_text: str, *, group: bool) -> MemoryChange:
        """Remove the entry whose text is ``old_text``."""

    async def search(self, query: str, limit: int) -> Sequence[KeptEntry]:
        """The entries that best match ``query``, best first."""


MEMORY_DESCRIPTION = (
    "Keep, rewrite or drop one short entry about the person you answer (their facts, preferences, "
    "instructions, decisions) for later conversations. The result says what is kept; say only that. "
    "whose='group': the group's own rules."
)
MEMORY_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "text": {"type": "string"},
        "old_text": {"type": "string", "description": "a kept entry's exact text"},
        "whose": {"type": "string", "enum": ["person", "group"]},
    },
    "required": ["action"],
}
SEARCH_DESCRIPTION = "Search what is kept about the person you answer, entries the memory block had no room for too."
SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": MAX_MEMORY_HITS}},
}


def memory_tools(memory: PersonMemory) -> list[Tool]:
    """``memory`` and ``memory_search`` over one person's memory."""
    handlers = _Handlers(memory)
    return [
        Tool(name="memory", description=MEMORY_DESCRIPTION, parameters=MEMORY_PARAMETERS, handler=handlers.write),
        Tool(
            name="memory_search", description=SEARCH_DESCRIPTION, parameters=SEARCH_PARAMETERS, handler=handlers.search
        ),
    ]


def _entry(entry: KeptEntry) -> dict[str, Any]:
    return {"number": entry.number, "text": entry.text, "whose": entry.whose}


def _answer(action: str, change: MemoryChange) -> str:
    """The result the model reads: what is kept now, in so many words."""
    if not change.changed:
        body: dict[str, Any] = {"saved": False, "action": action, "reason": change.reason or "nothing changed"}
        if change.entry is not None:
            body["kept"] = _entry(change.entry)
        return json_codec.dumps_text(body)
    assert change.entry is not None
    done = {"add": "kept", "replace": "kept", "remove": "removed"}[action]
    return json_codec.dumps_text({"saved": True, "action": action, done: _entry(change.entry)})


class _Handlers:
    def __init__(self, memory: PersonMemory) -> None:
        self.memory = memory

    async def write(self, args: dict[str, Any]) -> str:
        action = str(args.get("action") or "")
        if action not in ACTIONS:
            return _error(f"action must be one of {', '.join(ACTIONS)}")
        text, old = str(args.get("text") or "").strip(), str(args.get("old_text") or "").strip()
        whose = str(args.get("whose") or "person")
        if whose not in ("person", "group"):
            return _error("whose must be 'person' or 'group'")
        group = whose == "group"
        if action in ("add", "replace") and not text:
            return _error(f"{action} needs text")
        if action in ("replace", "remove") and not old:
            return _error(f"{action} needs old_text, the kept entry's text")
        if action == "add":
            change = await self.memory.add(text, group=group)
        elif action == "replace":
            change = await self.memory.replace(old, text, group=group)
        else:
            change = await self.memory.remove(old, group=group)
        return _answer(action, change)

    async def search(self, args: dict[str, Any]) -> str:
        query = str(args.get("query") or "").strip()
        try:
            limit = max(1, min(int(args.get("limit") or 8), MAX_MEMORY_HITS))
        except (TypeError, ValueError):
            limit = 8
        found = await self.memory.search(query, limit)
        return json_codec.dumps_text({"query": query, "entries": [_entry(entry) for entry in found]})


def _error(text: str) -> str:
    return json_codec.dumps_text({"saved": False, "error": f"{text}; nothing was changed"})
