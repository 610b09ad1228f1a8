"""The ChatGPT Codex route's threshold autoraise and its one-time notice.

On ``provider: openai-codex`` the gpt-5.4 / gpt-5.5 / gpt-5.6 models are capped at a
272K window. At the default 50% compaction would start near 136K — half of what the
model can really use — so on that route, and only there, their trigger is raised to
85% (231,200 of 272,000). ``-900k`` aliases keep the global threshold: a 911K window
needs no raise. An explicit ``compression.model_thresholds`` entry for the model wins,
because the operator asked for that number.

The notice is shown once per profile: a marker file under the profile home records the
raised value, so a gateway that builds an engine for every message says it once, and
says it once more only if the raised value changes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agent.compaction.budgets import resolve_model_threshold, threshold_tokens
from agent.models import LARGE_ALIAS_SUFFIX, longest_key_match
from agent.settings import CompressionSettings

#: The route whose 272K-window models are raised.
CODEX_PROVIDER = "openai-codex"
#: The raised trigger, as a share of the window.
AUTORAISE_THRESHOLD = 0.85
#: The window the Codex backend advertises for these models.
CODEX_WINDOW = 272_000
#: Base names on that route that are capped at 272K (gpt-5.5; gpt-5.4 and gpt-5.6 and their named variants).
_CAPPED_FAMILY = re.compile(r"gpt-5\.(?:4|5|6)(?:-[a-z]+)?")
#: Marker file under the profile home recording that the notice was shown, and for which value.
NOTICE_MARKER = ".codex_gpt55_autoraise_notice"
#: How the notice tells the operator to turn the raise off.
DISABLE_COMMAND = "foldgate config set compression.codex_gpt55_autoraise false"
HIDE_NOTICE_COMMAND = "foldgate config set compression.codex_gpt55_autoraise_notice false"


def _bare(model: str) -> str:
    return model.rsplit("/", 1)[-1].lower()


def autoraise_applies(model: str, provider: str | None, settings: CompressionSettings) -> bool:
    """Whether the Codex autoraise lifts this model's trigger: the Codex route, a 272K base name, no explicit
    override."""
    if provider != CODEX_PROVIDER or not settings.codex_gpt55_autoraise:
        return False
    bare = _bare(model)
    if bare.endswith(LARGE_ALIAS_SUFFIX) or not _CAPPED_FAMILY.fullmatch(bare):
        return False
    return longest_key_match(model, settings.model_thresholds) is None


def route_threshold(
    model: str,
    provider: str | None,
    settings: CompressionSettings,
    context_length: int,
) -> float:
    """The compaction threshold for ``model`` on ``provider``: the Codex autoraise where it applies, else the
    model's ``model_thresholds`` entry (floored on small windows) or the global threshold."""
    if autoraise_applies(model, provider, settings):
        return AUTORAISE_THRESHOLD
    return resolve_model_threshold(model, settings.model_thresholds, settings.threshold, context_length)


def notice_text(model: str, context_length: int, threshold: float) -> str:
    raised = threshold_tokens(context_length, threshold)
    default = threshold_tokens(context_length, 0.5)
    return (
        f"ℹ️  {model} on the ChatGPT Codex route has a {context_length:,}-token window: compaction now starts at"
        f" {threshold:.0%} ({raised:,} tokens) instead of 50% ({default:,}), so the model can use the window it has."
        f" To keep the global threshold instead: {DISABLE_COMMAND}"
        f" (to keep the raise but hide this notice: {HIDE_NOTICE_COMMAND})."
    )


class AutoraiseNotice:
    """Shows the autoraise notice once per profile (``home``) and once more when the raised value changes."""

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / NOTICE_MARKER
        self._recorded: str | None = None

    @staticmethod
    def _value(context_length: int, threshold: float) -> str:
        return f"threshold={threshold:.4f} tokens={threshold_tokens(context_length, threshold)}\n"

    def _read(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _write(self, value: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(value, encoding="utf-8")
        os.replace(temporary, self.path)  # atomic: a reader sees the old value or the new one

    def check(
        self,
        model: str,
        provider: str | None,
        settings: CompressionSettings,
        context_length: int,
    ) -> str | None:
        """The notice to show for this engine construction, or None (not raised, hidden, or already shown)."""
        if not settings.codex_gpt55_autoraise_notice or not autoraise_applies(model, provider, settings):
            return None
        value = self._value(context_length, AUTORAISE_THRESHOLD)
        if self._recorded == value:
            return None  # this process already knows it was shown: no file read per message
        if self._read() == value:
            self._recorded = value
            return None
        self._write(value)
        self._recorded = value
        return notice_text(model, context_length, AUTORAISE_THRESHOLD)
