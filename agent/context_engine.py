"""The pluggable context engine (SPEC S1): the interface, compaction stats, and engine resolution.

An engine decides when the context must shrink, shrinks it, may offer the model tools
(e.g. a plugin's ``lcm_grep``), and learns the real prompt size from every response.
The gateway and the agent loop only talk to this interface, so a plugin engine drops in
through ``context.engine`` without either of them changing.

Resolution never activates a plugin on its own (S1.4): ``"compressor"`` is always the
built-in; any other name is looked up as ``plugins/context_engine/<name>/``, then in the
registry filled by :func:`register_context_engine`, and otherwise falls back to the
built-in with a warning naming what was looked for.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.llm.usage import Usage

#: Builds an engine; called with keyword arguments ``model``, ``context_length`` and, when
#: available, ``settings`` (CompressionSettings), ``summarizer`` and ``summarizer_context_length``.
EngineFactory = Callable[..., "ContextEngine"]

BUILTIN_ENGINE = "compressor"
_PLUGIN_PACKAGE = "plugins.context_engine"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class CompactionStats:
    """What the last :meth:`ContextEngine.compress` did.

    ``outcome`` is ``compacted``, ``skipped`` (nothing to do) or ``aborted`` (transcript kept
    unchanged, e.g. the summarizer failed below the critical level). ``summarizer`` names
    what wrote the notes: the model, ``"deterministic"`` (none configured), ``"fallback"``
    (the model failed), or ``"none"``. ``replaced_ids`` are the ids of input messages that
    are not in the output under the same id (folded into the summary, stubbed, or dropped
    as orphans): the store archives exactly those.
    """

    outcome: str
    reason: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    summary_tokens: int = 0
    tail_mode: str = ""
    summarizer: str = "none"
    calls: int = 0
    compacted_messages: int = 0
    stubbed_messages: int = 0
    replaced_ids: tuple[str, ...] = field(default_factory=tuple)
    error: str | None = None
    forced: bool = False

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["replaced_ids"] = list(self.replaced_ids)
        return data


class ContextEngine(ABC):
    """Decides when and how a session's context shrinks; records the provider's real usage."""

    #: Engine name as configured in ``context.engine``.
    name: str = "engine"

    def __init__(self, model: str, context_length: int) -> None:
        self.model = model
        self.context_length = context_length
        self.threshold = 0.5
        self.compression_count = 0
        self.last_prompt_tokens: int | None = None
        self.last_usage: Usage | None = None
        self.session_usage = Usage()
        self.last_compaction: CompactionStats | None = None
        self.session_id: str | None = None

    @property
    def threshold_tokens(self) -> int:
        """Prompt size at which compaction fires."""
        return int(self.context_length * self.threshold)

    @abstractmethod
    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether the context should be compacted now (``prompt_tokens`` defaults to the last reported size)."""

    @abstractmethod
    async def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> list[dict[str, Any]]:
        """The compacted message list (valid OpenAI format); the input list is never mutated."""

    def should_idle_compact(self, idle_seconds: float, prompt_tokens: int | None = None) -> bool:
        """Whether to compact before a turn that resumes after ``idle_seconds`` of silence (S5.9); off by default."""
        return False

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-tool schemas this engine offers the model."""
        return []

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        """Run one of :meth:`get_tool_schemas`' tools; the result is a JSON string."""
        return json.dumps({"error": f"{self.name} engine has no tool {name!r}"})

    def update_from_response(self, usage: Mapping[str, Any] | Usage) -> Usage:
        """Record one response's usage (OpenAI or Anthropic field names) and return it normalised."""
        normalised = Usage.from_mapping(usage)
        self.last_usage = normalised
        self.session_usage = self.session_usage + normalised
        if normalised.prompt_tokens:
            self.last_prompt_tokens = normalised.prompt_tokens
        return normalised

    def on_session_start(self, session_id: str) -> None:
        self.session_id = session_id

    def on_session_end(self, session_id: str) -> None:
        """The session is closing; engines flush or release per-session resources here."""

    def on_session_reset(self) -> None:
        """``/new``: a fresh conversation, so nothing learned about the old one applies."""
        self.compression_count = 0
        self.last_prompt_tokens = None
        self.last_usage = None
        self.session_usage = Usage()
        self.last_compaction = None

    def update_model(self, model: str, context_length: int) -> None:
        self.model = model
        self.context_length = context_length

    def export_state(self) -> dict[str, Any]:
        """JSON-safe state the gateway persists in the session meta."""
        return {
            "compression_count": self.compression_count,
            "last_prompt_tokens": self.last_prompt_tokens,
            "session_usage": self.session_usage.as_dict(),
        }

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restore :meth:`export_state` output (missing keys keep their defaults)."""
        state = state or {}
        self.compression_count = int(state.get("compression_count") or 0)
        last = state.get("last_prompt_tokens")
        self.last_prompt_tokens = int(last) if last is not None else None
        self.session_usage = Usage.from_mapping(state.get("session_usage") or None)


_REGISTRY: dict[str, EngineFactory] = {}


def register_context_engine(name: str, factory: EngineFactory) -> None:
    """Make ``factory`` available as ``context.engine: <name>`` (the general plugin mechanism)."""
    if name == BUILTIN_ENGINE:
        raise ValueError(f"{BUILTIN_ENGINE!r} is the built-in engine and cannot be replaced")
    _REGISTRY[name] = factory


def unregister_context_engine(name: str) -> None:
    _REGISTRY.pop(name, None)


def builtin_factory() -> EngineFactory:
    from agent.context_compressor import ContextCompressor

    return ContextCompressor


def _factory_from_module(module: Any) -> EngineFactory | None:
    factory = getattr(module, "create_engine", None) or getattr(module, "ENGINE", None)
    return factory if callable(factory) else None


def _import_plugin(name: str, plugins_dir: Path | None) -> Any:
    module_name = f"{_PLUGIN_PACKAGE}.{name}"
    if plugins_dir is None:
        return importlib.import_module(module_name)
    init = plugins_dir / name / "__init__.py"
    spec = importlib.util.spec_from_file_location(module_name, init, submodule_search_locations=[str(init.parent)])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {init}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def default_plugins_dir() -> Path:
    return Path(importlib.import_module(_PLUGIN_PACKAGE).__file__ or ".").parent


def resolve_context_engine(name: str | None, *, plugins_dir: str | Path | None = None) -> tuple[EngineFactory, str | None]:
    """``(factory, warning)`` for ``context.engine: name`` (S1.3); the warning is None when found."""
    if not name or name == BUILTIN_ENGINE:
        return builtin_factory(), None
    if not _NAME.fullmatch(name):
        return builtin_factory(), (
            f"context.engine {name!r} is not a valid engine name (letters, digits, underscore); "
            f"using the built-in {BUILTIN_ENGINE!r}"
        )
    directory = Path(plugins_dir) if plugins_dir is not None else default_plugins_dir()
    package = directory / name
    problem = f"no plugin directory {package}"
    if (package / "__init__.py").is_file():
        try:
            module = _import_plugin(name, None if plugins_dir is None else directory)
        except Exception as error:  # a broken plugin must not take the gateway down
            problem = f"plugin {package} failed to import: {type(error).__name__}: {error}"
        else:
            factory = _factory_from_module(module)
            if factory is not None:
                return factory, None
            problem = f"plugin {package} defines neither create_engine() nor ENGINE"
    if name in _REGISTRY:
        return _REGISTRY[name], None
    return builtin_factory(), (
        f"context engine {name!r} not found ({problem}; nothing registered under that name "
        f"with register_context_engine); using the built-in {BUILTIN_ENGINE!r}"
    )
