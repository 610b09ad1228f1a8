"""The memory a request carries: the entries of the person whose message it answers, bounded and cache-friendly.

Two parts, so the prompt cache survives:

- **the chat's part**, after the system prompt: in a private chat the person's private entries, in a group the
  group's own memory. Which entries it shows is chosen once and kept in the session's meta (``memory_view``)
  until the next compaction (which clears it), so the prefix of every request stays the same; an entry removed
  meanwhile (``/forget``) leaves it at once.
- **the speaker's part**, with the person's newest message and in no stored message: in a group, the speaker's
  entries learned in this group; anywhere, entries added since the chat's part was chosen (a ``/remember`` is used
  in the very next request, not after the next compaction). It changes from turn to turn without touching the
  cached prefix.

Together they stay within ``memory.max_tokens``, newest and most used first. Entries with no room stay kept:
the block says how many, ``memory_search`` finds them, and the person is told once. Nothing of another
person's is ever read: the keys read are the speaker's own and (in a group) the group's.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.tokens import count_text
from gateway.access.roles import person_of
from gateway.memory.scopes import PRIVATE, is_private, scope_of
from gateway.platforms.base import IncomingMessage
from gateway.store.memory import MemoryEntry, MemoryStore
from gateway.store.meta import SessionMeta

#: The notice a person gets, once per chat, when their memory holds more than one request carries.
FULL_NOTICE = (
    "ℹ️ I keep more about you here than fits in one request (memory.max_tokens): {count} older or less used "
    "entries stay kept and I can still search them. /memory lists everything; /forget N frees room."
)


#: The share of a model's window the block takes at most, whatever ``memory.max_tokens`` allows.
WINDOW_SHARE = 0.1
#: What a line adds to its entry's text: "- [g123] " and the line's end, at most.
LINE_TOKENS = 6
#: What the speaker's part adds around its lines: its opening words and the count of entries left out.
NOTE_TOKENS = 40


@dataclass(frozen=True)
class MemoryBlock:
    """What a request carries of memory, and what choosing it decided."""

    #: The chat's part, sent after the system prompt ("" when there is nothing to carry).
    system: str = ""
    #: The speaker's part, sent with their newest message only ("" when there is nothing).
    note: str = ""
    #: Entries kept for this person here that neither part had room for.
    left_out: int = 0
    #: The session's ``memory_view`` when this choice changed it (store it), else None.
    view: dict[str, object] | None = None
    #: The numbers of the entries the chat's part shows for the first time this session (mark them used).
    chosen: tuple[int, ...] = ()
    #: Who the block is about, and whose entries ``chosen`` are (``""``: the group's own).
    person: str = ""
    chosen_owner: str = ""
    chosen_scope: str = PRIVATE
    #: What both parts add to a request, from the entries' own counts (no tokenizer on every request).
    tokens: int = 0


@dataclass
class _Fit:
    """Entries taken in order while their lines fit ``budget`` tokens."""

    budget: int
    lines: list[str] = field(default_factory=list)
    taken: list[MemoryEntry] = field(default_factory=list)
    skipped: int = 0

    def offer(self, entry: MemoryEntry, label: str) -> None:
        # the entry's own count (made when it was written) and its line's mark: no tokenizer on every request
        cost = (entry.tokens or count_text(entry.text)) + LINE_TOKENS
        if cost > self.budget:
            self.skipped += 1
            return
        self.budget -= cost
        self.lines.append(f"- [{label}{entry.number}] {entry.text}")
        self.taken.append(entry)


def _view_key(owner: str, scope: str) -> str:
    return f"{owner}|{scope}"


@dataclass(frozen=True)
class _Choice:
    """Which entries the chat's part shows, and the newest number when they were chosen."""

    shown: list[int]
    upto: int
    #: The view to store when chosen now (None: the session's stands), and the entries chosen now.
    view: dict[str, object] | None = None
    chosen: tuple[int, ...] = ()


def _choice(view: dict[str, object], key: str, entries: Sequence[MemoryEntry], label: str, budget: int) -> _Choice:
    """The session's choice for ``key``, or a new one: the first entries that fit ``budget``."""
    kept = view.get(key)
    if isinstance(kept, dict):
        upto = kept.get("upto", 0)
        shown = [n for n in kept.get("shown", []) if isinstance(n, int)]
        return _Choice(shown, upto if isinstance(upto, int) else 0)
    fit = _Fit(budget)
    for entry in entries:
        fit.offer(entry, label)
    shown = [entry.number for entry in fit.taken]
    upto = max((entry.number for entry in entries), default=0)
    return _Choice(shown, upto, {"shown": shown, "upto": upto}, tuple(shown))


@functools.lru_cache(maxsize=4_096)
def _tokens_of(heading: str) -> int:
    """A heading's tokens: the same few headings every turn, counted once."""
    return count_text(heading)


def _heading(name: str, private: bool) -> str:
    if private:
        return (
            f"What you keep about {name} from earlier conversations (their memory; they see it with /memory and "
            "remove entries with /forget; the memory tool changes it):"
        )
    return "What this group keeps as its own memory (its rules and decisions):"


class MemoryReader:
    """Chooses and writes the memory block of each request (see the module docstring)."""

    def __init__(self, store: MemoryStore, max_tokens: int) -> None:
        self.store = store
        self.max_tokens = max_tokens

    def bound(self, window: int) -> int:
        """The block's tokens at most for a model of ``window``: ``memory.max_tokens``, and never more than
        :data:`WINDOW_SHARE` of a small window."""
        return min(self.max_tokens, int(window * WINDOW_SHARE))

    async def block(self, message: IncomingMessage, meta: SessionMeta, window: int) -> MemoryBlock:
        """The memory block of a request answering ``message`` in the session ``meta`` describes, for a model
        of ``window`` tokens."""
        person, bound = person_of(message), self.bound(window)
        if bound <= 0 or not message.user_id:
            return MemoryBlock(person=person)
        private, scope = is_private(message), scope_of(message)
        owner = person if private else ""  # whose entries the chat's part shows: the person's, or the group's
        label = "" if private else "g"
        chat_entries = await self.store.entries(owner, scope)
        own = [] if private else await self.store.entries(person, scope)
        key = _view_key(owner, scope)
        heading = _heading(message.user_name or person, private)
        room = (bound if private else bound // 2) - _tokens_of(heading) - NOTE_TOKENS  # the note's words kept free
        choice = _choice(meta.memory_view, key, chat_entries, label, room)
        system, used = _chat_part(chat_entries, choice.shown, label, heading)
        note_fit = _Fit(max(0, bound - used - NOTE_TOKENS))
        for entry in own:
            note_fit.offer(entry, "")
        for entry in chat_entries:
            if entry.number > choice.upto:  # added since the chat's part was chosen
                note_fit.offer(entry, label)
        in_chat_part = len(set(choice.shown) & {entry.number for entry in chat_entries})
        left_out = max(0, len(own) + len(chat_entries) - len(note_fit.taken) - in_chat_part)
        note = _note(note_fit.lines, message.user_name or person, private, left_out)
        return MemoryBlock(
            system=system,
            note=note,
            left_out=left_out,
            view=None if choice.view is None else {**meta.memory_view, key: choice.view},
            chosen=choice.chosen,
            person=person,
            chosen_owner=owner,
            chosen_scope=scope,
            tokens=used + (max(0, bound - used - NOTE_TOKENS) - note_fit.budget) + (NOTE_TOKENS if note else 0),
        )

    async def used(self, block: MemoryBlock) -> None:
        """Mark the entries the chat's part shows for the first time this session as used once more."""
        if block.chosen:
            await self.store.touch(block.chosen_owner, block.chosen, block.chosen_scope)


def _chat_part(entries: Sequence[MemoryEntry], shown: Sequence[int], label: str, heading: str) -> tuple[str, int]:
    """The chat's part: the chosen entries still kept, in the order chosen; and its tokens."""
    by_number = {entry.number: entry for entry in entries}
    fit = _Fit(sys.maxsize)
    for number in shown:
        if number in by_number:
            fit.offer(by_number[number], label)
    if not fit.lines:
        return "", 0
    return "\n".join([heading, *fit.lines]), _tokens_of(heading) + sys.maxsize - fit.budget


def _note(lines: Sequence[str], name: str, private: bool, left_out: int) -> str:
    """The speaker's part, as it goes before their message."""
    if not lines and not left_out:
        return ""
    where = "" if private else " in this group (no one else's)"
    parts = [f"[Memory of {name}{where}, kept from earlier conversations:", *lines]
    if left_out:
        parts.append(f"({left_out} more kept entries had no room here: memory_search finds them.)")
    parts[-1] += "]"
    return "\n".join(parts)
