"""Which context engine ``context.engine`` names (SPEC S1.3, S1.4): the built-in, a plugin, or a registered one.

Resolution never activates a plugin on its own (S1.4): ``"compressor"`` is always the
built-in; any other name is looked up as ``plugins/context_engine/<name>/``, then in the
registry filled by :func:`register_context_engine`, and otherwise falls back to the
built-in with a warning naming what was looked for.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from agent.context_compressor import ContextCompressor
from agent.context_engine import EngineFactory

BUILTIN_ENGINE = "compressor"
_PLUGIN_PACKAGE = "plugins.context_engine"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_REGISTRY: dict[str, EngineFactory] = {}


def register_context_engine(name: str, factory: EngineFactory) -> None:
    """Make ``factory`` available as ``context.engine: <name>`` (the general plugin mechanism)."""
    if name == BUILTIN_ENGINE:
        raise ValueError(f"{BUILTIN_ENGINE!r} is the built-in engine and cannot be replaced")
    _REGISTRY[name] = factory


def unregister_context_engine(name: str) -> None:
    _REGISTRY.pop(name, None)


def builtin_factory() -> EngineFactory:
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


def resolve_context_engine(
    name: str | None, *, plugins_dir: str | Path | None = None
) -> tuple[EngineFactory, str | None]:
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
