"""A context engine shipped as a package of its own, found through the ``foldgate.context_engines`` entry points.

Each test lays out a real installed distribution in a temporary directory (a ``*.dist-info``
with ``METADATA`` and ``entry_points.txt`` next to its module) and puts that directory on
``sys.path``, so ``importlib.metadata`` finds it exactly as it would after ``pip install``.
"""

from __future__ import annotations

import importlib
import logging
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.context_compressor import ContextCompressor
from agent.engine_registry import ENTRY_POINT_GROUP, register_context_engine, resolve_context_engine
from agent.engine_registry import unregister_context_engine as unregister
from gateway.agents import AgentBuilder
from gateway.config import Settings

ENGINE_MODULE = """\
from agent.context_engine import ContextEngine


class PackagedEngine(ContextEngine):
    name = {name!r}

    def should_compress(self, prompt_tokens=None):
        return False

    async def compress(self, messages, current_tokens=None, focus_topic=None, force=False):
        return list(messages)


def create_engine(**kwargs):
    return PackagedEngine(kwargs["model"], kwargs["context_length"])
"""


class Site:
    """A directory on ``sys.path`` where tests install distributions by writing their files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def install(self, package: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
        """Install ``package`` with its ``entry_points`` (engine name -> ``module:attr``) and modules' source."""
        dist_info = self.root / f"{package.replace('-', '_')}-1.0.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
        lines = [f"{name} = {target}" for name, target in entry_points.items()]
        (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n" + "\n".join(lines) + "\n")
        for module, source in modules.items():
            (self.root / f"{module}.py").write_text(source)
            self.modules.append(module)


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site-packages"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))  # also invalidates importlib's caches, metadata included
    installed = Site(root)
    yield installed
    for module in installed.modules:
        sys.modules.pop(module, None)


def unique(prefix: str) -> str:
    """An engine or module name no other test, plugin folder or installed package uses."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def packaged(site: Site, name: str) -> tuple[str, str]:
    """Install a working engine ``name`` as its own package; returns (package, module)."""
    module = unique("foldgate_engine")
    package = module.replace("_", "-")
    site.install(package, {name: f"{module}:create_engine"}, {module: ENGINE_MODULE.format(name=name)})
    return package, module


async def built_by_the_gateway(tmp_path: Path, name: str, caplog) -> tuple[object, list[str]]:
    """The engine the gateway builds for ``context.engine: name``, and the warnings it logged while setting up."""
    settings = Settings(
        model={"provider": "custom", "name": "gpt-4o", "base_url": "http://127.0.0.1:9/v1"},
        gateway={"home": str(tmp_path / "home")},
        context={"engine": name},
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        builder = AgentBuilder(settings)
    try:
        engine = builder.build_engine("gpt-4o", {}, SimpleNamespace(chat="local:x", session_id="s-1"))  # type: ignore[arg-type]
    finally:
        await builder.aclose()
    return engine, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_an_installed_package_s_engine_is_built_by_the_gateway(site, tmp_path, caplog):
    name = unique("pkgengine")
    _, module = packaged(site, name)
    factory, warning = resolve_context_engine(name)
    assert warning is None and factory.__module__ == module

    engine, warnings = await built_by_the_gateway(tmp_path, name, caplog)
    assert type(engine).__name__ == "PackagedEngine" and engine.name == name
    assert not [line for line in warnings if name in line]


def test_entry_points_are_imported_only_when_their_name_is_configured(site, tmp_path):
    name = unique("pkgengine")
    _, module = packaged(site, name)
    for other in ("compressor", None, unique("other")):
        resolve_context_engine(other, plugins_dir=tmp_path)
    assert module not in sys.modules
    resolve_context_engine(name, plugins_dir=tmp_path)
    assert module in sys.modules


def test_the_built_in_name_cannot_be_taken_by_a_package(site):
    module = unique("foldgate_engine")
    site.install("foldgate-engine-impostor", {"compressor": f"{module}:create_engine"}, {module: "raise SystemExit"})
    factory, warning = resolve_context_engine("compressor")
    assert factory is ContextCompressor and warning is None and module not in sys.modules


BROKEN = [
    ("missing_module", None, "failed to import: ModuleNotFoundError"),
    ("raises", "raise RuntimeError('engine package bug')\n", "failed to import: RuntimeError: engine package bug"),
    ("no_attribute", "X = 1\n", "failed to import: AttributeError"),
    ("not_callable", "create_engine = 42\n", "is not a factory: it is of type int, not callable"),
    ("a_module", "def create_engine(**kwargs): ...\n", "is not a factory: it names the module"),
]


@pytest.mark.parametrize(("case", "source", "problem"), BROKEN, ids=[case for case, _, _ in BROKEN])
async def test_a_broken_entry_point_falls_back_to_the_builtin_with_one_line_naming_the_package(
    site, tmp_path, caplog, case, source, problem
):
    name, module = unique("pkgengine"), unique("foldgate_engine")
    package = f"foldgate-engine-{case.replace('_', '-')}"
    target = module if case == "a_module" else f"{module}:create_engine"
    site.install(package, {name: target}, {} if source is None else {module: source})

    factory, warning = resolve_context_engine(name, plugins_dir=tmp_path)
    assert factory is ContextCompressor
    assert package in warning and problem in warning and "using the built-in 'compressor'" in warning
    assert "\n" not in warning

    engine, warnings = await built_by_the_gateway(tmp_path, name, caplog)
    assert isinstance(engine, ContextCompressor)
    assert [line for line in warnings if name in line] == [next(line for line in warnings if package in line)]


@pytest.fixture
def plugins(tmp_path):
    """A plugin folder directory with one working plugin and one that fails to import, both under fresh names."""
    directory = tmp_path / "plugins"
    working, broken = unique("twin"), unique("twin")
    (directory / working).mkdir(parents=True)
    (directory / working / "__init__.py").write_text(ENGINE_MODULE.format(name=f"{working}-folder"))
    (directory / broken).mkdir()
    (directory / broken / "__init__.py").write_text("raise RuntimeError('folder plugin bug')\n")
    yield SimpleNamespace(directory=directory, working=working, broken=broken)
    for name in (working, broken):
        sys.modules.pop(f"plugins.context_engine.{name}", None)


def test_a_plugin_folder_wins_over_a_package_of_the_same_name_and_says_so(site, plugins, caplog):
    package, module = packaged(site, plugins.working)
    with caplog.at_level(logging.WARNING, logger="agent.engine_registry"):
        factory, warning = resolve_context_engine(plugins.working, plugins_dir=plugins.directory)
    assert warning is None
    assert factory(model="m", context_length=1000).name == f"{plugins.working}-folder"
    assert module not in sys.modules  # the package that lost was never imported
    [line] = [r.getMessage() for r in caplog.records]
    assert f"using plugin folder {plugins.directory / plugins.working}" in line
    assert f"ignoring the {ENTRY_POINT_GROUP!r} entry point" in line and package in line


def test_a_registered_engine_also_comes_before_a_package(site, caplog):
    name = unique("pkgengine")
    package, module = packaged(site, name)
    register_context_engine(name, ContextCompressor)
    try:
        with caplog.at_level(logging.WARNING, logger="agent.engine_registry"):
            factory, warning = resolve_context_engine(name)
    finally:
        unregister(name)
    assert factory is ContextCompressor and warning is None and module not in sys.modules
    [line] = [r.getMessage() for r in caplog.records]
    assert "register_context_engine" in line and package in line


def test_a_broken_plugin_folder_gives_way_to_the_package_and_the_log_says_why(site, plugins, caplog):
    package, module = packaged(site, plugins.broken)
    with caplog.at_level(logging.WARNING, logger="agent.engine_registry"):
        factory, warning = resolve_context_engine(plugins.broken, plugins_dir=plugins.directory)
    assert warning is None and factory.__module__ == module
    [line] = [r.getMessage() for r in caplog.records]
    assert "folder plugin bug" in line and package in line and line.endswith("instead")


def test_when_folder_and_package_are_both_broken_the_fallback_names_both(site, plugins):
    module = unique("foldgate_engine")
    site.install("foldgate-engine-also-broken", {plugins.broken: f"{module}:create_engine"}, {module: "X = 1\n"})
    factory, warning = resolve_context_engine(plugins.broken, plugins_dir=plugins.directory)
    assert factory is ContextCompressor
    assert "folder plugin bug" in warning and "foldgate-engine-also-broken" in warning


def test_two_packages_offering_one_name_use_the_first_on_sys_path_and_say_so(site, tmp_path, monkeypatch, caplog):
    name = unique("pkgengine")
    first_package, first_module = packaged(site, name)
    later = Site(tmp_path / "later-site")
    later.root.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(later.root)])  # behind ``site`` on sys.path
    importlib.invalidate_caches()
    later_module = unique("foldgate_engine")
    later.install(
        "foldgate-engine-later", {name: f"{later_module}:create_engine"}, {later_module: "raise SystemExit\n"}
    )
    with caplog.at_level(logging.WARNING, logger="agent.engine_registry"):
        factory, warning = resolve_context_engine(name, plugins_dir=tmp_path)
    assert warning is None and factory.__module__ == first_module and later_module not in sys.modules
    [line] = [r.getMessage() for r in caplog.records]
    assert line.index("foldgate-engine-later") < line.index(first_package)


def test_a_missing_engine_s_warning_says_packages_were_looked_at_too(site, tmp_path):
    factory, warning = resolve_context_engine(unique("nosuch"), plugins_dir=tmp_path)
    assert factory is ContextCompressor and ENTRY_POINT_GROUP in warning and "register_context_engine" in warning
