"""``lcm`` — lossless context management, a plugin context engine (SPEC S1.5).

Turned on only by ``context.engine: lcm`` (S1.4). It compacts like the built-in
compressor, but its summary is an index into the archive, and the model gets
``lcm_grep``, ``lcm_expand`` and ``lcm_describe`` to search and read everything that
was compacted away. See :mod:`plugins.context_engine.lcm.engine`.
"""

from __future__ import annotations

from agent.compaction.summarizer import Summarizer
from agent.settings import CompressionSettings
from plugins.context_engine.lcm.engine import LcmEngine

__all__ = ["LcmEngine", "create_engine"]


def create_engine(
    *,
    model: str,
    context_length: int,
    settings: CompressionSettings | None = None,
    summarizer: Summarizer | None = None,
    summarizer_context_length: int | None = None,
) -> LcmEngine:
    """The factory :func:`agent.context_engine.resolve_context_engine` finds in this package."""
    return LcmEngine(
        model,
        context_length,
        settings=settings,
        summarizer=summarizer,
        summarizer_context_length=summarizer_context_length,
    )
