"""A benchmark of an older commit, run beside this checkout's in the same command.

Regressions are judged by ratios measured side by side on this noisy machine, so a
benchmark can also run the same measurement at an older commit: the commit is checked out
into a temporary git worktree and its own ``evals/bench_<name>.py`` runs in a child process,
with the old tree's packages ahead of this checkout's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_at(commit: str, bench: str, *, overlay: tuple[str, ...] = (), **options: Any) -> dict[str, Any]:
    """``evals.<bench>.main(out, **options)`` at ``commit``; the JSON it wrote.

    ``overlay`` names files of this checkout laid over the old tree first: the measurement itself (a
    benchmark newer than the commit, the fakes it drives), so that only the code under test is the old one.
    """
    with tempfile.TemporaryDirectory(prefix="fg-baseline-") as scratch:
        tree, out = Path(scratch) / "tree", Path(scratch) / "out"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True, capture_output=True
        )
        try:
            for name in overlay:
                (tree / name).write_bytes((ROOT / name).read_bytes())
            # The old tree's packages, not this checkout's, for this child and the workers it starts: its cwd
            # (first on sys.path under -c) and PYTHONPATH are the tree, ahead of the entries that point here.
            code = f"import sys; from evals import {bench} as b; sys.exit(b.main({str(out)!r}, **{options!r}))"
            environment = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run(
                [sys.executable, "-c", code], cwd=tree, env=environment, check=True, stdout=subprocess.DEVNULL
            )
            return json.loads((out / f"{bench}.json").read_text())
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
