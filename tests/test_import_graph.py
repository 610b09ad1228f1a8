"""The shape of foldgate's imports: no circles, each side in layers, Redis in one home.

A circle (two modules importing each other, directly or around a loop, even only for type
hints) means neither can be read, changed or tested without the other; it shows up as an
import deferred into a function or hidden behind ``TYPE_CHECKING``. A module importing a
sibling through its package (``from agent.llm import anthropic``) is not a circle. The layers
(``LAYERS``) say which way imports point; Lua scripts and the Redis client live in the store (and
the embedded server) alone. Imports are read as absolute: a relative one is refused outright, so
none can slip past these checks.

The tests have a shape too: no test module imports another one (or a conftest.py). What tests share lives
in tests/fakes/ (fake servers and helpers) and in conftest.py (fixtures), so each test module can be read,
run and moved on its own.
"""

from __future__ import annotations

import ast
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


def test_the_agent_side_never_imports_the_chat_side():
    reaching = {
        name: sorted(t for t in targets if t.startswith("gateway"))
        for name, targets in import_graph().items()
        if name.startswith("agent")
    }
    assert {name: targets for name, targets in reaching.items() if targets} == {}


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


#: The layers of each side, lowest first: a module imports only from its own layer or one below it
#: (a prefix names a package and everything in it; the longest prefix that fits decides). What sits
#: low is what many parts need and that needs little: the message shape before the store that keeps
#: it, the store before the turn that writes it, the turn before the process that runs it.
LAYERS: dict[str, list[list[str]]] = {
    "agent": [
        [
            "agent.json_codec",
            "agent.usage",
            "agent.models",
            "agent.http_options",
            "agent.cancelling",
            "agent.prompt_caching",
        ],
        ["agent.tokens", "agent.settings", "agent.pricing"],
        ["agent.messages", "agent.search", "agent.transcript_repair", "agent.items", "agent.excerpts", "agent.tools"],
        ["agent.llm", "agent.metering"],  # requests and answers, one module per route; every call metered
        ["agent.compaction", "agent.context_engine", "agent.codex", "agent.windows"],  # the pure phases, the engine's
        # contract, and where a model's window comes from
        ["agent.context_compressor", "agent.codex_engine"],  # the engines
        ["agent.engine_registry", "agent.codex_chat", "agent.loop", "agent"],  # what composes them
    ],
    "gateway": [
        [
            "gateway.config",
            "gateway.progress",
            "gateway.events",
            "gateway.server",
            "gateway.media.errors",
            "gateway.media.units",
        ],  # what a refused item says, in people's units
        ["gateway.startup_errors"],
        ["gateway.platforms.base", "gateway.platforms.split"],  # the message shape and the adapter contract
        ["gateway.store"],  # everything that talks to Redis
        [
            "gateway.outage",
            "gateway.session_source",
            "gateway.agents",
            "gateway.model_windows",
            "gateway.media",  # what people send besides text: fetched, read, kept in the store
            "gateway.access",
        ],  # who the bot answers and what they may spend
        ["gateway.delivery", "gateway.platforms"],  # replies on their way out; the adapters
        ["gateway.worker", "gateway.commands"],  # dispatch, drain, the turn's steps, chat commands
        ["gateway.metrics", "gateway.web"],  # what people and monitors read
        ["gateway.run", "gateway.bots"],  # foldgate run: the wiring, of one bot or several
        ["gateway.cli", "gateway"],  # the command line
    ],
}


def layer_of(module: str) -> int | None:
    side = LAYERS.get(module.split(".")[0], [])
    fits = [
        (len(prefix), level)
        for level, prefixes in enumerate(side)
        for prefix in prefixes
        if module == prefix or module.startswith(f"{prefix}.")
    ]
    return max(fits)[1] if fits else None


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each module's imports of a module in a higher layer of its own side."""
    found = {}
    for name, targets in graph.items():
        level = layer_of(name)
        up = sorted(
            t
            for t in targets
            if t.split(".")[0] == name.split(".")[0] and level is not None and (layer_of(t) or 0) > level
        )
        if up:
            found[name] = up
    return found


def test_every_module_has_a_layer():
    assert [name for name in modules() if not name.startswith("plugins") and layer_of(name) is None] == []


def test_no_module_imports_from_a_higher_layer():
    assert upward_imports(import_graph()) == {}


def test_an_upward_import_is_found():
    graph = {"gateway.store.inbox": {"gateway.worker.turn"}, "gateway.worker.turn": {"gateway.store.inbox"}}
    assert upward_imports(graph) == {"gateway.store.inbox": ["gateway.worker.turn"]}


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
