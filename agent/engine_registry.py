"""Which context engine ``context.engine`` names: the built-in, a plugin folder, a registered one, or a package.

Resolution never switches an engine on by itself: ``"compressor"`` is always the built-in,
whatever else is installed. Any other name is looked for, in this order, as

1. a plugin folder ``plugins/context_engine/<name>/`` (its ``create_engine`` or ``ENGINE``),
2. a factory given to :func:`register_context_engine` in this process,
3. an installed package's entry point named ``<name>`` in the ``foldgate.context_engines``
   group (``name = module:factory``), so that ``pip install foldgate-engine-x`` is enough
   for ``context.engine: x``.

The folder and the registry come before packages because both are deliberate acts of whoever
runs this gateway (a folder in the deployment's own tree, a call in its own code), while a
package may have arrived as somebody else's dependency. When a folder or a registered factory
takes a name an installed package also offers, one log line says which was used and which was
ignored, so the choice is never silent. A candidate that is there but broken does not hide
the name: the lookup goes on, and the log says why the earlier one was passed over.

Entry points are lazy: only the metadata of installed packages is read, and only the entry
point of the configured name is imported, so a broken or slow package costs nothing unless
it is asked for. Whatever cannot be found or loaded falls back to the built-in with one
warning naming what was looked for and what went wrong, because a plugin must never keep
the gateway from starting.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import re
import sys
import types
from pathlib import Path
from typing import Any

from agent.context_compressor import ContextCompressor
from agent.context_engine import EngineFactory

BUILTIN_ENGINE = "compressor"
#: The ``importlib.metadata`` entry-point group an installed package declares its engines in.
ENTRY_POINT_GROUP = "foldgate.context_engines"
_PLUGIN_PACKAGE = "plugins.context_engine"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_REGISTRY: dict[str, EngineFactory] = {}

log = logging.getLogger(__name__)


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


def _one_line(error: BaseException) -> str:
    """``Type: message`` on a single line, so that each problem stays one log line."""
    return " ".join(f"{type(error).__name__}: {error}".split())


def _folder_factory(name: str, package: Path, plugins_dir: Path | None) -> tuple[EngineFactory | None, str]:
    """The plugin folder's factory, or None and what is wrong with the folder."""
    try:
        module = _import_plugin(name, plugins_dir)
    except Exception as error:  # a broken plugin must not take the gateway down
        return None, f"plugin {package} failed to import: {_one_line(error)}"
    factory = _factory_from_module(module)
    if factory is None:
        return None, f"plugin {package} defines neither create_engine() nor ENGINE"
    return factory, ""


def _package_entry_points(name: str) -> tuple[list[importlib.metadata.EntryPoint], str]:
    """Installed packages' entry points for ``name``, first on ``sys.path`` first; nothing is imported.

    Reading the metadata can only fail on a damaged installation; that is reported rather than
    raised, for the same reason a broken plugin is.
    """
    try:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
    except Exception as error:
        return [], f"the installed packages' {ENTRY_POINT_GROUP!r} entry points could not be read: {_one_line(error)}"
    return list(found), ""


def _describe(entry_point: importlib.metadata.EntryPoint) -> str:
    """Which package offers an entry point and what it points at, for log lines."""
    dist = entry_point.dist
    package = dist.name if dist is not None else "an unnamed package"
    return f"the {ENTRY_POINT_GROUP!r} entry point {entry_point.name} = {entry_point.value} of package {package}"


def _entry_point_factory(entry_point: importlib.metadata.EntryPoint) -> tuple[EngineFactory | None, str]:
    """Import the entry point's object (the only import an entry point ever causes) and check it can build engines."""
    try:
        target = entry_point.load()
    except Exception as error:  # a broken package must not take the gateway down either
        return None, f"{_describe(entry_point)} failed to import: {_one_line(error)}"
    if isinstance(target, types.ModuleType):
        return None, (
            f"{_describe(entry_point)} is not a factory: it names the module {target.__name__}, "
            f"not a callable in it (write module:create_engine)"
        )
    if not callable(target):
        return None, f"{_describe(entry_point)} is not a factory: it is of type {type(target).__name__}, not callable"
    return target, ""


def resolve_context_engine(
    name: str | None, *, plugins_dir: str | Path | None = None
) -> tuple[EngineFactory, str | None]:
    """``(factory, warning)`` for ``context.engine: name``; the warning is None when the engine was found.

    The warning is the one line the caller shows when it falls back to the built-in. When an
    engine was found, which candidate was taken over which (a folder over an installed package,
    say, or a package over a broken folder) is logged here instead: the caller has nothing to
    report, but whoever runs the gateway should still see that a name was claimed twice.
    """
    if not name or name == BUILTIN_ENGINE:
        return builtin_factory(), None
    if not _NAME.fullmatch(name):
        return builtin_factory(), (
            f"context.engine {name!r} is not a valid engine name (letters, digits, underscore); "
            f"using the built-in {BUILTIN_ENGINE!r}"
        )
    directory = Path(plugins_dir) if plugins_dir is not None else default_plugins_dir()
    package = directory / name
    problems: list[str] = []
    factory, source = _own_factory(name, package, None if plugins_dir is None else directory, problems)
    entry_points, problem = _package_entry_points(name)
    if problem:
        problems.append(problem)
    if factory is not None:
        for ignored in entry_points:
            log.warning(
                "context engine %r: using %s and ignoring %s (a plugin folder or a registered engine comes before "
                "an installed package)",
                name,
                source,
                _describe(ignored),
            )
    elif entry_points:
        factory, source = _package_factory(name, entry_points, problems)
    if factory is not None:
        if problems:
            log.warning("context engine %r: %s; using %s instead", name, "; ".join(problems), source)
        return factory, None
    return builtin_factory(), _fallback_warning(name, package, problems)


def _own_factory(
    name: str, package: Path, plugins_dir: Path | None, problems: list[str]
) -> tuple[EngineFactory | None, str]:
    """``(factory, where it came from)`` from what whoever runs the gateway put there: the plugin folder, else the
    registry; a broken folder's problem is added to ``problems``, and the registry is asked instead."""
    factory: EngineFactory | None = None
    source = ""
    if (package / "__init__.py").is_file():
        factory, problem = _folder_factory(name, package, plugins_dir)
        source = f"plugin folder {package}"
        if problem:
            problems.append(problem)
    if factory is None and name in _REGISTRY:
        factory, source = _REGISTRY[name], "the engine given to register_context_engine"
    return factory, source


def _package_factory(
    name: str, entry_points: list[importlib.metadata.EntryPoint], problems: list[str]
) -> tuple[EngineFactory | None, str]:
    """``(factory, which entry point)`` of the first installed package offering ``name``; the others are logged as
    ignored, and a first one that cannot be loaded adds its problem to ``problems``."""
    first, *others = entry_points
    for other in others:
        log.warning(
            "context engine %r: ignoring %s, since %s comes first on sys.path",
            name,
            _describe(other),
            _describe(first),
        )
    factory, problem = _entry_point_factory(first)
    if problem:
        problems.append(problem)
    return factory, _describe(first)


def _fallback_warning(name: str, package: Path, problems: list[str]) -> str:
    """The one line the caller shows when ``name`` falls back to the built-in: what was wrong, or where it was
    looked for."""
    if problems:
        return f"context engine {name!r} cannot be used: {'; '.join(problems)}; using the built-in {BUILTIN_ENGINE!r}"
    return (
        f"context engine {name!r} not found (no plugin directory {package}; nothing registered under that name "
        f"with register_context_engine; no installed package offers it as a {ENTRY_POINT_GROUP!r} entry point); "
        f"using the built-in {BUILTIN_ENGINE!r}"
    )
