"""The section a config line stands under: its YAML parent key or its INI ``[section]``.

``monthly_cost_usd: 6976`` does not say whose cost it is; ``checkout_backoff:`` two lines up
does. Both the listing lines (settings) and the anchors' context words name a value by it.
"""

from __future__ import annotations

import re

#: Lines, and characters, read back from a line for its section.
SECTION_LOOKBACK = 80
SECTION_LOOKBACK_CHARS = 4_000

_SECTION = re.compile(r"^([ \t]*)[\"']?([A-Za-z_][\w.-]*)[\"']?[ \t]*:[ \t]*(?:#.*)?$|^\[([^\]\n]+)\][ \t]*$")


def section_above(text: str, start: int, indent: int) -> str | None:
    """The YAML parent key (a less indented ``name:`` line) or INI ``[section]`` above the line at ``start``."""
    floor = max(0, start - SECTION_LOOKBACK_CHARS)
    end = start
    for _ in range(SECTION_LOOKBACK):
        if end <= floor:
            return None
        begin = max(floor, text.rfind("\n", floor, end - 1) + 1)
        line = text[begin : end - 1] if end - 1 > begin else text[begin:end]
        end = begin
        match = _SECTION.match(line)
        if match is None:
            continue
        if match.group(3):
            return match.group(3).strip()
        if len(match.group(1).expandtabs()) < indent:
            return match.group(2)
    return None
