"""Who the bot answers, changed from the chat by an admin (``/allow``, ``/block``, ``/unblock``), and the
answers to a question the bot asked before running a tool (``/approve``, ``/refuse``)."""

from __future__ import annotations

from gateway.access.roles import named_person, person_of
from gateway.commands.context import CommandContext
from gateway.worker.chat_turn import ChatTurn


def _admin_target(context: CommandContext, turn: ChatTurn, arg: str) -> tuple[str | None, str]:
    """The person an admin's command names (None with the reply that says why not)."""
    if not context.roles.is_admin(person_of(turn.message)):
        return None, "Only an admin may change who I answer (access.admins)."
    person = named_person(arg, turn.message.platform)
    if person is None:
        return None, (
            "Name the person by their numeric id (123456789, or tg:123456789), a Discord mention or an API "
            "key's name (api:laptop): a username can change hands."
        )
    return person, ""


async def allow(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """Answer this person from now on (admins only; with anyone allowed, only they are answered)."""
    person, refusal = _admin_target(context, turn, arg)
    if person is None:
        return refusal
    roles = context.roles
    if person in roles.settings.blocked:
        return f"{person} is blocked in the configuration (access.blocked): only the file can change that."
    first = not roles.settings.allowed and not (await roles.lists.read()).allowed
    await roles.lists.allow(person)
    note = (
        " From now on I answer only the people allowed (and the admins): /allow the others you want answered."
        if first
        else ""
    )
    return f"✅ {person} is allowed: I answer them from their next message.{note}"


async def block(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """Stop answering this person; their messages are still kept (admins only)."""
    person, refusal = _admin_target(context, turn, arg)
    if person is None:
        return refusal
    if context.roles.is_admin(person):
        return f"{person} is an admin (access.admins): an admin cannot be blocked."
    await context.roles.lists.block(person)
    return f"⛔ {person} is blocked: their messages are kept and not answered."


async def unblock(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """Answer a blocked person again (admins only)."""
    person, refusal = _admin_target(context, turn, arg)
    if person is None:
        return refusal
    if person in context.roles.settings.blocked:
        return f"{person} is blocked in the configuration (access.blocked): only the file can change that."
    if not await context.roles.lists.unblock(person):
        return f"{person} was not blocked."
    return f"✅ {person} is unblocked: I answer them from their next message."


async def answer(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """Answer a question the bot asked before running a tool (the buttons do the same).

    An answer that reaches a waiting turn is taken as it arrives and never queued; one that comes here found
    nothing it could answer."""
    approval_id = arg.split()[0] if arg else "?"
    return (
        f"No question with id {approval_id} is waiting for your answer: it was answered already, its time ran "
        "out, or someone else was asked."
    )
