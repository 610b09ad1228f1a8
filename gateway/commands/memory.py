"""What the bot keeps about the person writing: ``/remember <text>``, ``/memory`` and ``/forget <n|all>``; an
admin's ``/memory PERSON`` and ``/forget PERSON <n|all>``.

What is kept lives in Redis (:mod:`gateway.store.memory`), so a ``/forget`` counts in every process at once and
everything outlives a restart. A person only ever sees and removes their own entries (and, in a group, the
group's own); only an admin names someone else.

Whether a chat is private decides where an entry applies (:mod:`gateway.memory.scopes`). Every change is told
to the event bus (``memory:write``): the chat's activity shows it and ``/metrics`` counts it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.access.roles import named_person, person_of
from gateway.commands.context import CommandContext
from gateway.events import MemoryAction, MemoryWriteEvent
from gateway.memory.scopes import PRIVATE, scope_of, where
from gateway.store.memory import MemoryEntry
from gateway.worker.chat_turn import ChatTurn


async def _told(context: CommandContext, turn: ChatTurn, person: str, action: MemoryAction, entries: int = 1) -> None:
    """A change a person (or an admin) made, into the chat's activity and the metrics."""
    message = turn.message
    await context.events.emit(
        MemoryWriteEvent(
            platform=message.platform,
            chat=turn.chat,
            person=person,
            source="remember",
            action=action,
            entries=entries,
        )
    )


def _line(entry: MemoryEntry, label: str = "") -> str:
    when = datetime.fromtimestamp(entry.created, UTC).strftime("%Y-%m-%d %H:%M UTC")
    origin = f"{entry.chat}, message {entry.message_id}" if entry.message_id else entry.chat or "?"
    return f"{label}{entry.number}. {entry.text} — {entry.source}, from {origin}, {when}"


async def remember(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """Keep something about you for later chats: here in private, or for this group."""
    store, message = context.memory, turn.message
    scope = scope_of(message)
    refused = store.refusal(arg)
    if refused == "empty":
        return "What should I remember? /remember <text>, e.g. /remember I prefer short answers."
    if refused is not None:
        return f"Not remembered: the text is {refused}. Say it shorter."
    added = await store.add(
        person_of(message), scope, arg, source="remember", chat=turn.chat, message_id=message.update_id
    )
    assert added.entry is not None
    if added.changed:
        await _told(context, turn, person_of(message), "add")
    if not added.changed:
        return f"Already remembered as #{added.entry.number} ({where(scope)}): {added.entry.text}"
    return f"Remembered ({where(scope)}) as #{added.entry.number}: {added.entry.text}"


async def memory(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """What I keep about you that applies in this chat, numbered, and where each came from (an admin may name
    anyone: /memory tg:123)."""
    store, message = context.memory, turn.message
    if arg.strip():
        person, refusal = _named(context, turn, arg.strip(), "see what I keep about someone else")
        if person is None:
            return refusal
        listed = await store.entries(person)
        lines = [f"What I keep about {person}, everywhere:"]
        lines += [f"{_line(entry)} [{where(entry.scope)}]" for entry in listed]
        return "\n".join(lines) if listed else f"Nothing yet about {person}."
    scope = scope_of(message)
    own = await store.entries(person_of(message), scope)
    group = await store.entries("", scope) if scope != PRIVATE else []
    if not own and not group:
        return "Nothing yet: /remember <text> keeps something about you."
    lines = [f"What I keep about you ({where(scope)}):"] if own else []
    lines += [_line(entry) for entry in own]
    if group:
        lines += ["This group's own memory:", *(_line(entry, "g") for entry in group)]
    if own:
        lines.append("/forget N removes one, /forget all every one.")
    return "\n".join(lines)


async def forget(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """Remove what I keep about you: /forget N (a number of /memory) or /forget all (an admin may name anyone:
    /forget tg:123 N)."""
    store, words = context.memory, arg.split()
    person, whom = person_of(turn.message), "you"
    if len(words) == 2:
        named, refusal = _named(context, turn, words[0], "remove what I keep about someone else")
        if named is None:
            return refusal
        person, whom, words = named, named, words[1:]
    which = words[0].lower() if len(words) == 1 else ""
    if which == "all":
        removed = await store.forget_all(person)
        if not removed:
            return f"Nothing was kept about {whom}."
        await _told(context, turn, person, "forget", removed)
        return f"Forgot everything I kept about {whom} ({removed} {'entry' if removed == 1 else 'entries'})."
    if not which.removeprefix("#").isdigit():
        return "Which one? /forget N removes entry N of /memory; /forget all removes every one. Nothing was changed."
    entry = await store.remove(person, int(which.removeprefix("#")))
    if entry is None:
        return f"There is no entry #{which.removeprefix('#')} about {whom}: /memory lists them. Nothing was changed."
    await _told(context, turn, person, "remove")
    return f"Forgot #{entry.number} ({where(entry.scope)}): {entry.text}"


def _named(context: CommandContext, turn: ChatTurn, text: str, doing: str) -> tuple[str | None, str]:
    """The person an admin's argument names (None with the reply that says why not)."""
    if not context.roles.is_admin(person_of(turn.message)):
        return None, f"Only an admin may {doing}. Nothing was changed."
    person = named_person(text, turn.message.platform)
    if person is None:
        return None, "Name the person by their id (123456789, or tg:123456789) or their mention."
    return person, ""
