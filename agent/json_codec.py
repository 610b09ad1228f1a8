"""JSON on foldgate's hot paths: provider requests and replies, stored message bodies, session meta.

Every turn encodes the whole prompt and decodes the stored transcript, so the codec's speed
scales with the session: orjson encodes a prompt about 25 times faster than the standard
library and decodes about twice as fast. The output is compact UTF-8 JSON, always valid:

- ``NaN`` and infinities are written as ``null`` (the standard library would write ``NaN``,
  which no JSON parser accepts);
- what JSON cannot carry (a non-string key, an integer beyond 64 bits, a lone surrogate,
  an arbitrary object) raises :class:`EncodeError`, a ``TypeError``.

Decoding accepts ``bytes`` or ``str`` and raises :class:`DecodeError`, a ``ValueError``.

JSON that lives as text — tool results and tool-call arguments inside messages, what the CLI
prints — goes through :func:`dumps_text` (the same encoding, as ``str``; non-ASCII kept as is).

Small typed state (session meta such as the engine's state) goes through :func:`dumps_state`
instead: a ``null`` where a number belongs would fail every later turn that reads it back, so
there a non-finite number is refused, not written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson

EncodeError = orjson.JSONEncodeError
DecodeError = orjson.JSONDecodeError


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    return orjson.dumps(value)


def dumps_text(value: Any, *, default: Callable[[Any], Any] | None = None, indent: bool = False) -> str:
    """``value`` as JSON text; ``default`` turns what JSON cannot carry into something it can
    (``str`` for a tool result's odd values), ``indent`` pretty-prints for people."""
    return orjson.dumps(value, default=default, option=orjson.OPT_INDENT_2 if indent else None).decode()


def dumps_state(value: Any) -> str:
    """Compact JSON text of small typed state; raises ``ValueError`` for NaN or an infinity and
    :class:`EncodeError` (a ``TypeError``) for what JSON cannot carry, a lone surrogate included."""
    _require_finite(value)
    return orjson.dumps(value).decode()


def _require_finite(value: Any) -> None:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a JSON number")
    elif isinstance(value, dict):
        for item in value.values():
            _require_finite(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _require_finite(item)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of a JSON document."""
    return orjson.loads(data)
