"""What the bot keeps about the person writing: ``/remember <text>``, ``/memory`` and ``/forget <n|all>``; an
admin's ``/memory PERSON`` and ``/forget PERSON <n|all>``.

What is kept lives in Redis (:mod:`gateway.store.memory`), so a ``/forget`` counts in every process at once and
everything outlives a restart. A person only ever sees and removes their own entries (and, in a group, the
group's own); only an admin names someone else.

Whether a chat is private decides where an entry applies (:func:`is_private`): a chat is private when it is
one person's. On Telegram that is a chat whose id is the sender's id; the terminal and each browser of the web
chat are one person's; an API session (``api:<key>/<session>``) is its key's own. A Discord DM arrives as a
channel whose id is not the person's and nothing in the message says it is a DM, so every Discord channel,
DMs included, counts as a group of its own: what is learned there is used there only.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.access.roles import named_person, person_of
from gateway.commands.context import CommandContext
from gateway.platforms.base import IncomingMessage
from gateway.store.memory import PRIVATE, MemoryEntry, group_scope
from gateway.worker.chat_turn import ChatTurn

#: Platforms where every chat is one person's: the terminal, a browser of the web chat, an API key's session.
ONE_PERSON_PLATFORMS = frozenset({"local", "web", "api"})


def is_private(message: IncomingMessage) -> bool:
    """Whether ``message``'s chat is one person's (the module docstring says how each platform tells)."""
    if message.platform in ONE_PERSON_PLATFORMS:
        return True
    if message.platform == "tg":
        return bool(message.user_id) and message.chat_id == message.user_id
    return False


def scope_of(message: IncomingMessage) -> str:
    """Where an entry learned from ``message`` applies: the sender's private chats, or this group."""
    return PRIVATE if is_private(message) else group_scope(message.chat)


def _where(scope: str) -> str:
    return "private" if scope == PRIVATE else scope.removeprefix("group:")


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
    if not added.changed:
        return f"Already remembered as #{added.entry.number} ({_where(scope)}): {added.entry.text}"
    return f"Remembered ({_where(scope)}) as #{added.entry.number}: {added.entry.text}"


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
        lines += [f"{_line(entry)} [{_where(entry.scope)}]" for entry in listed]
        return "\n".join(lines) if listed else f"Nothing yet about {person}."
    scope = scope_of(message)
    own = await store.entries(person_of(message), scope)
    group = await store.entries("", scope) if scope != PRIVATE else []
    if not own and not group:
        return "Nothing yet: /remember <text> keeps something about you."
    lines = [f"What I keep about you ({_where(scope)}):"] if own else []
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
        return f"Forgot everything I kept about {whom} ({removed} {'entry' if removed == 1 else 'entries'})."
    if not which.removeprefix("#").isdigit():
        return "Which one? /forget N removes entry N of /memory; /forget all removes every one. Nothing was changed."
    entry = await store.remove(person, int(which.removeprefix("#")))
    if entry is None:
        return f"There is no entry #{which.removeprefix('#')} about {whom}: /memory lists them. Nothing was changed."
    return f"Forgot #{entry.number} ({_where(entry.scope)}): {entry.text}"


def _named(context: CommandContext, turn: ChatTurn, text: str, doing: str) -> tuple[str | None, str]:
    """The person an admin's argument names (None with the reply that says why not)."""
    if not context.roles.is_admin(person_of(turn.message)):
        return None, f"Only an admin may {doing}. Nothing was changed."
    person = named_person(text, turn.message.platform)
    if person is None:
        return None, "Name the person by their id (123456789, or tg:123456789) or their mention."
    return person, ""
