"""``lcm`` — lossless context management, a plugin context engine.

Turned on only by ``context.engine: lcm`` (the built-in compressor runs otherwise). It
compacts like the built-in compressor, but its summary is an index into the archive, and
the model gets ``lcm_grep``, ``lcm_expand`` and ``lcm_describe`` to search and read
everything that was compacted away. See :mod:`plugins.context_engine.lcm.engine`.
"""

from __future__ import annotations

from typing import Any

from plugins.context_engine.lcm.engine import LcmEngine

__all__ = ["LcmEngine", "create_engine"]


def create_engine(**kwargs: Any) -> LcmEngine:
    """The factory :func:`agent.engine_registry.resolve_context_engine` finds in this package.

    Takes the built-in compressor's keyword arguments (``model``, ``context_length``,
    ``settings``, ``summarizer``, ``summarizer_context_length``, ``provider``).
    """
    return LcmEngine(**kwargs)
