"""The shape of foldgate's imports: no circles, each side in layers, Redis in one home.

A circle (two modules importing each other, directly or around a loop, even only for type
hints) means neither can be read, changed or tested without the other; it shows up as an
import deferred into a function or hidden behind ``TYPE_CHECKING``. A module importing a
sibling through its package (``from agent.llm import anthropic``) is not a circle. The layers
say which way imports point: they are import-linter contracts in pyproject.toml
(``[tool.importlinter]``), which ``./dev lint`` checks and a test here checks too, so the suite
alone still catches an import that points up. Lua scripts and the Redis client live in the store
(and the embedded server) alone. Imports are read as absolute: a relative one is refused
outright, so none can slip past these checks.

The tests have a shape too: no test module imports another one (or a conftest.py). What tests share lives
in tests/fakes/ (fake servers and helpers) and in conftest.py (fixtures), so each test module can be read,
run and moved on its own.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "gateway", "plugins")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [t for t in targets if t in known] or [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in known and t != name and not name.startswith(f"{t}."))
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_one_that_imports_it_back():
    assert circles(import_graph()) == []


def test_every_import_is_absolute():
    relative = {
        name: sorted(
            {
                node.lineno
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.ImportFrom) and node.level
            }
        )
        for name, path in modules().items()
    }
    assert {name: lines for name, lines in relative.items() if lines} == {}


def test_a_circle_is_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: What marks Lua source in a string: a script talks to Redis through ``redis.call`` and reads ``KEYS``.
LUA_MARKS = ("redis.call(", "redis.pcall(", "KEYS[")
#: Ways to hand Redis a script: redis-py's methods, the raw commands, and the store's own Script.
SCRIPT_CALLS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "register_script", "script_load"}
SCRIPT_COMMANDS = {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT"}


def script_uses(path: Path) -> list[str]:
    """Where ``path`` holds Lua source or sends a script to Redis, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(mark in node.value for mark in LUA_MARKS):
                found.append(f"{node.lineno}: Lua source")
            elif node.value in SCRIPT_COMMANDS:
                found.append(f"{node.lineno}: the {node.value} command")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            owner = node.func.value
            if name in SCRIPT_CALLS or (name == "of" and isinstance(owner, ast.Name) and owner.id == "Script"):
                found.append(f"{node.lineno}: {name}()")
    return found


def test_only_the_store_holds_lua_or_runs_scripts():
    """Redis has one home: every script is a .lua file under gateway/store/scripts/, run by the store."""
    outside = {
        name: uses
        for name, path in modules().items()
        if not (name == "gateway.store" or name.startswith("gateway.store.")) and (uses := script_uses(path))
    }
    assert outside == {}


def redis_clients(path: Path) -> list[str]:
    """The parts of redis-py other than its exceptions that ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        found += [
            f"{node.lineno}: {name}"
            for name in names
            if (name == "redis" or name.startswith("redis.")) and name != "redis.exceptions"
        ]
    return found


def test_only_the_store_and_the_embedded_server_hold_a_redis_client():
    """Everything else reaches Redis through the store (and may only catch redis-py's exceptions)."""
    homes = ("gateway.store", "gateway.server")
    outside = {
        name: uses
        for name, path in modules().items()
        if not any(name == home or name.startswith(f"{home}.") for home in homes) and (uses := redis_clients(path))
    }
    assert outside == {}


def test_lua_in_a_module_is_found(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "X = Script.of(\"return redis.call('GET', KEYS[1])\")\nawait r.evalsha(sha, 0)\n"
        'await channel.call("EVALSHA", sha, 0)\n',
        encoding="utf-8",
    )
    assert sorted(script_uses(sample)) == ["1: Lua source", "1: of()", "2: evalsha()", "3: the EVALSHA command"]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter's own command line over the checkout at ``root``, with the contracts in its pyproject.toml.

    Run apart from the test process: the linter puts its working directory first on ``sys.path``, and that
    must be ``root`` (a scratch copy, for the test below) rather than whatever this process imported. No
    cache is kept: the graph takes well under a second to build, and a cache folder would litter the checkout.
    """
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
            "--no-logo",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_are_kept():
    """The layers of each side, and the agent side never importing the chat side (pyproject.toml says why)."""
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


def layered_prefixes() -> set[str]:
    """Every module the layers contracts name: each covers itself and everything inside it."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return {
        f"{container}.{tail.strip()}"
        for contract in contracts["contracts"]
        if contract["type"] == "layers"
        for container in contract["containers"]
        for layer in contract["layers"]
        for tail in layer.replace("|", ":").split(":")
    }


def test_every_module_has_a_layer():
    """A module in no layer is one the contracts never look at. import-linter's ``exhaustive`` sees only a
    container's children; where a package is split across layers (gateway.platforms, gateway.media) its
    modules are named one by one, and a new one could be left out. Only a package file that imports
    nothing may stay outside: an import of it ties nothing to anything."""
    prefixes = layered_prefixes()
    outside = {
        name: path
        for name, path in modules().items()
        if not name.startswith("plugins") and not any(name == p or name.startswith(f"{p}.") for p in prefixes)
    }
    assert {
        name
        for name, path in outside.items()
        if path.name != "__init__.py"
        or any(isinstance(node, ast.Import | ast.ImportFrom) for node in ast.walk(ast.parse(path.read_text("utf-8"))))
    } == set()


#: Imports that break each contract, written into a scratch copy of the checkout.
BREAKING_IMPORTS = {
    "gateway/store/keys.py": "from gateway.worker import turn",  # the store reaches up to the turn
    "gateway/platforms/base.py": "import gateway.platforms.telegram",  # the shape reaches up to an adapter
    "agent/tokens.py": "from agent import loop",  # the vocabulary reaches up to the loop
    "agent/messages.py": "from gateway import config",  # the agent side reaches for the chat side
}


def test_the_contracts_catch_an_import_that_breaks_them(tmp_path: Path):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for file, line in BREAKING_IMPORTS.items():
        with (tmp_path / file).open("a", encoding="utf-8") as module:
            module.write(f"\n{line}\n")
    run = lint_imports(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Contracts: 0 kept, 3 broken." in run.stdout, run.stdout
    for told in (
        "gateway.store.keys -> gateway.worker.turn",
        "gateway.platforms.base -> gateway.platforms.telegram",
        "agent.tokens -> agent.loop",
        "agent.messages -> gateway.config",
    ):
        assert told in run.stdout, run.stdout


def test_a_redis_client_in_a_module_is_found(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from redis.asyncio import Redis\nfrom redis.exceptions import RedisError\nimport redis\n", encoding="utf-8"
    )
    assert redis_clients(sample) == ["1: redis.asyncio", "3: redis"]


def is_test_module(name: str) -> bool:
    """Whether the dotted ``name`` is a test module or a conftest.py of tests/ (or something inside one)."""
    first, *rest = name.split(".")
    return first == "tests" and any(part.startswith("test_") or part == "conftest" for part in rest)


def imports_of_tests(path: Path) -> list[str]:
    """Where ``path`` imports a test module or a conftest.py (``tests.test_x``, ``tests.reliability.test_x``,
    ``from tests import test_x``), as ``line: module``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if is_test_module(node.module) else [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names if is_test_module(name)]
    return found


def test_no_test_module_imports_another():
    """Shared helpers and fakes are in tests/fakes/, shared fixtures in conftest.py: never in a test module."""
    tests = ROOT / "tests"
    importing = {
        str(path.relative_to(ROOT)): uses
        for path in sorted(tests.rglob("*.py"))
        if "__pycache__" not in path.parts and (uses := imports_of_tests(path))
    }
    assert importing == {}


def test_an_import_of_a_test_module_is_found(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from tests.fakes.gateway import message\nfrom tests.test_discord import TOKEN\n"
        "from tests import test_web_chat\nimport tests.reliability.test_outages\nfrom tests.conftest import redis\n",
        encoding="utf-8",
    )
    assert imports_of_tests(sample) == [
        "2: tests.test_discord",
        "3: tests.test_web_chat",
        "4: tests.reliability.test_outages",
        "5: tests.conftest",
    ]
