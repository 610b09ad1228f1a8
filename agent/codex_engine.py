"""The context engine of the codex app-server route: when to ask codex to compact; never a rewrite.

Summarizing a local copy would not shrink the app-server's thread, so this engine's
``compress()`` returns the list it was given. ``compression.codex_app_server_auto``:
``native`` lets the app-server decide and records what it did; ``hermes`` (alias
``foldgate``) starts ``thread/compact/start`` when foldgate's threshold is crossed; ``off``
never starts one (codex itself still may). Every compaction is counted in the engine
state the gateway persists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.codex import route_threshold
from agent.context_engine import CompactionStats, ContextEngine
from agent.llm.codex_process import CodexAppServer, NativeCompaction, TurnOutcome
from agent.llm.codex_transcript import thread_of
from agent.messages import Message
from agent.settings import CompressionSettings
from agent.tokens import count_messages

AUTO_MODES = ("native", "hermes", "off")


class CodexThreadEngine(ContextEngine):
    """The context engine of the app-server route: decides when to ask codex to compact, never rewrites.

    ``compress()`` returns the very list it was given; a compaction it starts happens in
    the codex thread and is recorded in :attr:`native_compactions` (persisted with the
    engine state) and in :attr:`last_compaction`.
    """

    name = "codex_app_server"
    rewrites_transcript = False

    def __init__(
        self,
        model: str,
        context_length: int,
        settings: CompressionSettings | None = None,
        *,
        server: CodexAppServer,
        provider: str | None = None,
        **_ignored: Any,
    ) -> None:
        super().__init__(model, context_length)
        self.settings = settings or CompressionSettings()
        self.server = server
        self.provider = provider
        self.mode = self.settings.codex_app_server_auto
        self.threshold = route_threshold(model, provider, self.settings, context_length)
        #: how many compactions of this conversation's thread, by who started them
        self.native_compactions: dict[str, int] = {"manual": 0, "gateway": 0, "app_server": 0}

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Only in ``hermes`` mode: foldgate's threshold starts the app-server's compaction."""
        tokens = prompt_tokens if prompt_tokens is not None else self.last_prompt_tokens
        return (
            self.settings.enabled and self.mode == "hermes" and tokens is not None and tokens >= self.threshold_tokens
        )

    async def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> list[Message]:
        """``hermes`` mode: start the thread's compaction when over the threshold. Never rewrites ``messages``."""
        tokens = current_tokens if current_tokens is not None else self.last_prompt_tokens
        if self.mode != "hermes":
            return self._skip(messages, f"codex_app_server_auto is {self.mode}: the app-server compacts its own thread")
        if not (force or self.should_compress(tokens)):
            return self._skip(messages, "below the threshold")
        thread = thread_of(messages)
        if thread is None:
            return self._skip(messages, "no codex thread yet")
        await self.compact_thread(thread, trigger="gateway")
        return messages

    async def compact_thread(self, thread_id: str, *, trigger: str = "manual") -> NativeCompaction:
        """Compact the thread now (``/compress`` and the ``hermes`` trigger) and record it."""
        done = await self.server.compact(thread_id)
        self.native_compactions[trigger] = self.native_compactions.get(trigger, 0) + 1
        self.compression_count += 1
        if done.tokens_after:
            self.last_prompt_tokens = done.tokens_after
        self.last_compaction = CompactionStats(
            outcome="compacted",
            reason=f"{trigger}: codex app-server thread/compact/start",
            tokens_before=done.tokens_before,
            tokens_after=done.tokens_after,
            summarizer="codex app-server",
        )
        return done

    def record_turn(self, outcome: TurnOutcome) -> None:
        """Count compactions the app-server made on its own during a turn."""
        if outcome.compactions:
            self.native_compactions["app_server"] = self.native_compactions.get("app_server", 0) + outcome.compactions
            self.compression_count += outcome.compactions

    def _skip(self, messages: list[Message], reason: str) -> list[Message]:
        tokens = count_messages(messages)
        self.last_compaction = CompactionStats(
            outcome="skipped",
            reason=reason,
            tokens_before=tokens,
            tokens_after=tokens,
            messages_before=len(messages),
            messages_after=len(messages),
        )
        return messages

    def export_state(self) -> dict[str, Any]:
        state = super().export_state()
        state.update(engine=self.name, native_compactions=dict(self.native_compactions))
        return state

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        super().load_state(state)
        counts = (state or {}).get("native_compactions") or {}
        self.native_compactions.update({str(k): int(v) for k, v in counts.items()})
