"""The product code stays small enough to read: no module over 450 lines, no function over 60 lines or with a
cyclomatic complexity over 15 (as radon counts it) in agent/, gateway/ or plugins/.

Past those sizes a module or function does more than one thing, and a newcomer following a message has to hold
too much at once; the numbers here are the ones the code is held to, so a change that grows past them fails here
and is split instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

from tests.fakes.paths import REPO

PACKAGES = ("agent", "gateway", "plugins")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
MAX_COMPLEXITY = 15


def product_modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (REPO / package).rglob("*.py"))


def functions(source: str) -> Iterator[Function]:
    """Every function and method radon sees in ``source`` (a method once, under its class)."""
    for block in cc_visit(source):
        if isinstance(block, Class):
            yield from block.methods
        elif isinstance(block, Function) and not block.is_method:
            yield block


def oversized(source: str) -> list[str]:
    """``name: what is over`` for each function in ``source`` past the length or complexity bound."""
    found = []
    for function in functions(source):
        length = function.endline - function.lineno + 1
        if length > MAX_FUNCTION_LINES:
            found.append(f"{function.fullname}: {length} lines")
        if function.complexity > MAX_COMPLEXITY:
            found.append(f"{function.fullname}: complexity {function.complexity}")
    return found


def test_no_module_is_over_450_lines():
    long = {}
    for path in product_modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            long[str(path.relative_to(REPO))] = lines
    assert long == {}


def test_no_function_is_over_60_lines_or_complexity_15():
    over = {}
    for path in product_modules():
        if found := oversized(path.read_text(encoding="utf-8")):
            over[str(path.relative_to(REPO))] = found
    assert over == {}


def test_an_oversized_function_is_found():
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(16))
    long_body = "".join(f"        y{i} = {i}\n" for i in range(60))
    source = f"def branchy(x):\n{branches}    return -1\n\nclass C:\n    def long(self):\n{long_body}\n"
    assert oversized(source) == ["branchy: complexity 17", "C.long: 61 lines"]


if __name__ == "__main__":  # python -m tests.test_code_size: what is over, one line each
    for path in product_modules():
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO)
        if (lines := len(source.splitlines())) > MAX_MODULE_LINES:
            print(f"{name}: {lines} lines")
        for found in oversized(source):
            print(f"{name}: {found}")
