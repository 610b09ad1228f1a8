"""What makes a message a chat command: the first word's shape, and which commands the intake takes as they arrive.

Kept apart from the commands themselves: the intake and the backlog ask only whether a text is a
command, and that question needs none of what the commands use.
"""

from __future__ import annotations

import re

#: The commands that answer a question the bot asked (``ask``): taken by the intake as they arrive.
ANSWERS = frozenset({"approve", "refuse"})

#: Telegram's command syntax: a letter, then up to 31 letters, digits or underscores, maybe ``@botname``.
_COMMAND_WORD = re.compile(r"/([A-Za-z][A-Za-z0-9_]{0,31})(?:@\w+)?")


def parse(text: str) -> tuple[str, str] | None:
    """``("name", "argument")`` when the text is a command, known or not (``/cmd@botname arg`` too), else None.

    Only a first word of Telegram's command shape counts: ``/usr/bin is missing`` is text.
    """
    words = text.split(maxsplit=1)
    match = _COMMAND_WORD.fullmatch(words[0]) if words else None
    if match is None:
        return None
    return match[1].lower(), words[1].strip() if len(words) > 1 else ""


def unknown(name: str) -> str:
    """The answer to a command foldgate does not have."""
    return f"Unknown command /{name} — /help lists the commands."
