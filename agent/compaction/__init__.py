"""Compaction, one phase per module, in the order a compaction runs them.

``budgets`` (thresholds, tail and summary budgets) → ``boundaries`` (head, middle, tail) → ``cut`` with
``lean`` (the pieces, stubs in the tail) → ``digest`` with ``anchors`` (found by ``anchor_extractors``),
``sentences`` and ``listings`` (facts from the ORIGINAL middle and stubbed tail results) → ``notes``:
``prune`` + ``summary_prompt`` + ``summarizer`` (the model's notes) or ``fallback_summary`` (the
deterministic notes) → ``framing`` (the summary message, fitted with ``fitting``) → ``assemble`` (head +
summary + tail, tool pairs sanitized). ``guard`` holds cooldowns and strikes; ``memo`` keeps
per-message results between compactions. :class:`agent.context_compressor.ContextCompressor`
runs them.
"""
