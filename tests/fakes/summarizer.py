"""The LLM summarizer on the fake provider: the notes it is answered with, a clock the test moves, and a
compressor built around it."""

from __future__ import annotations

from agent.compaction.summarizer import LLMSummarizer
from agent.compaction.summary_prompt import SECTION_HEADINGS
from agent.context_compressor import ContextCompressor
from agent.settings import CompressionSettings

#: The notes the fake provider gives back when asked for a summary: every section, each noted.
NOTES = "\n".join(f"{heading}\n- noted by the model" for heading in SECTION_HEADINGS)


class Clock:
    """A clock that stands still until the test moves ``now`` (the compressor's cooldowns are read on it)."""

    def __init__(self):
        self.now = 5_000_000.0

    def __call__(self):
        return self.now


def make(client, clock, context_length=60_000, summarizer_window=200_000, **settings):
    """A compressor for ``main-model`` whose summarizer is ``aux-model`` on ``client``, reading ``clock``."""
    summarizer = LLMSummarizer(client, "aux-model", summarizer_window)
    return ContextCompressor("main-model", context_length, CompressionSettings(**settings), summarizer, clock=clock)
