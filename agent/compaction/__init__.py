"""Compaction, one phase per module, in the order a compaction runs them.

``budgets`` (the S4/S5 numbers) → ``boundaries`` (head, middle, tail) → ``digest`` with
``anchors`` and ``sentences`` (facts from the ORIGINAL middle) → ``lean`` (stubs in the
tail) → ``prune`` + ``summary_prompt`` + ``summarizer`` (the model's notes) or
``fallback_summary`` (the deterministic notes) → ``framing`` (the summary message) →
``assemble`` (head + summary + tail, tool pairs sanitized). ``guard`` holds cooldowns
and strikes. :class:`agent.context_compressor.ContextCompressor` runs them.
"""
