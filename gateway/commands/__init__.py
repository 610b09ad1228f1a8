"""Chat commands: ``/help``, ``/compress [focus]``, ``/model [name]``, ``/new`` (``/reset``), ``/sessions``,
``/resume N``, ``/usage``, ``/status``, ``/stop``; ``/remember``, ``/memory``, ``/forget`` (what the bot keeps
about a person); an admin's ``/allow``, ``/block``, ``/unblock``; and ``/approve``, ``/refuse`` for a question
the bot asked.

Each command runs inside the chat's turn (holding its lock), so it sees and changes the
session exactly like a message would, and its reply goes out like any other. A message is a
command when its first word has Telegram's command shape (``/name`` or ``/name@bot``); an
unknown one is answered as such and never reaches the model, while ``/usr/bin is missing``
is ordinary text. A command receives its :class:`~gateway.commands.context.CommandContext` (what it
may use of the gateway), the turn, and the text after its name.

- :mod:`.syntax` — what makes a text a command; :mod:`.context` — what commands use;
- :mod:`.table` — the names, ``/help``, and running the command a message names;
- :mod:`.sessions`, :mod:`.models`, :mod:`.usage`, :mod:`.compress`, :mod:`.access`, :mod:`.memory` — the commands, by
  topic.
"""

from gateway.commands.context import Command, CommandContext
from gateway.commands.syntax import ANSWERS, parse, unknown
from gateway.commands.table import ARGUMENTS, COMMANDS, handle_command, summary

__all__ = [
    "ANSWERS",
    "ARGUMENTS",
    "COMMANDS",
    "Command",
    "CommandContext",
    "handle_command",
    "parse",
    "summary",
    "unknown",
]
