"""The command table: each name and its command, what ``/help`` says of each, and running the command a
message names."""

from __future__ import annotations

import inspect
import re

from gateway.commands.access import allow, answer, block, unblock
from gateway.commands.compress import compress
from gateway.commands.context import Command, CommandContext
from gateway.commands.memory import forget, memory, remember
from gateway.commands.models import model
from gateway.commands.sessions import new, resume, sessions, status, stop
from gateway.commands.syntax import parse, unknown
from gateway.commands.usage import usage
from gateway.worker.chat_turn import ChatTurn


async def show_help(context: CommandContext, turn: ChatTurn, _arg: str) -> str:
    """List the commands and what each one does."""
    lines = ["Commands:"]
    for command, names in _by_command().items():
        usage = f"/{names[0]}" + (f" {ARGUMENTS[names[0]]}" if names[0] in ARGUMENTS else "")
        aliases = "".join(f" (/{alias})" for alias in names[1:])
        lines.append(f"{usage}{aliases} — {summary(command)}")
    return "\n".join(lines)


COMMANDS: dict[str, Command] = {
    "help": show_help,
    "compress": compress,
    "model": model,
    "new": new,
    "reset": new,
    "sessions": sessions,
    "resume": resume,
    "usage": usage,
    "status": status,
    "stop": stop,
    "remember": remember,
    "memory": memory,
    "forget": forget,
    "approve": answer,
    "refuse": answer,
    "allow": allow,
    "block": block,
    "unblock": unblock,
}

#: What a command takes after its name, as ``/help`` shows it (``[...]`` when it may be left out).
ARGUMENTS = {
    "compress": "[focus]",
    "model": "[name]",
    "resume": "N",
    "approve": "ID",
    "allow": "PERSON",
    "block": "PERSON",
    "unblock": "PERSON",
    "usage": "[PERSON]",
    "remember": "TEXT",
    "memory": "[PERSON]",
    "forget": "[PERSON] N|all",
}


def _by_command() -> dict[Command, list[str]]:
    """Each command with its names, the first being the one it is listed under (aliases after it)."""
    names: dict[Command, list[str]] = {}
    for name, command in COMMANDS.items():
        names.setdefault(command, []).append(name)
    return names


def summary(command: Command) -> str:
    """The first sentence of a command's docstring: what ``/help`` says it does."""
    doc = inspect.getdoc(command) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split()).replace("``", "")
    match = re.match(r"(.+?[.!?])(?:\s|$)", paragraph)
    return match[1] if match else paragraph


async def handle_command(context: CommandContext, turn: ChatTurn) -> str | None:
    """Run the command in the turn's message; None when the message is not a command.

    A message not addressed to the bot (``respond=False``: group chatter, another bot's
    ``/cmd@other_bot``) is never a command here: it is recorded like any other line.
    """
    if not turn.message.respond:
        return None
    parsed = parse(turn.message.text.strip())
    if parsed is None:
        return None
    name, argument = parsed
    command = COMMANDS.get(name)
    if command is None:
        return unknown(name)
    return await command(context, turn, argument)
