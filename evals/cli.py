"""``foldgate eval …`` and ``foldgate bench …``: argument handling for the measurements in evals/.

A benchmark ``NAME`` is the module ``evals/bench_NAME.py`` with ``main(out_dir) -> int``,
so a new benchmark needs no registration here.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

from evals import compaction_eval


def available_benchmarks() -> list[str]:
    return sorted(path.stem.removeprefix("bench_") for path in Path(__file__).parent.glob("bench_*.py"))


def eval_command(args: argparse.Namespace) -> int:
    """``foldgate eval compaction --sessions … --probes … [--policies …] [--context-length …] [--out …]``."""
    if args.kind != "compaction":
        print(f"unknown eval {args.kind!r}; available: compaction", file=sys.stderr)
        return 2
    policies = [name.strip() for name in args.policies.split(",") if name.strip()]
    try:
        runs, paths = compaction_eval.main(args.sessions, args.probes, policies, args.context_length, args.out)
    except (FileNotFoundError, ValueError, ImportError) as error:
        print(f"foldgate eval: {error}", file=sys.stderr)
        return 2
    print(paths["markdown"].read_text(encoding="utf-8"))
    for label, path in paths.items():
        print(f"{label}: {path}")
    return 0


def bench_command(args: argparse.Namespace) -> int:
    """``foldgate bench NAME [--out …]``: runs ``evals.bench_NAME.main(out)``."""
    names = available_benchmarks()
    if not re.fullmatch(r"[a-z][a-z0-9_]*", args.name) or args.name not in names:
        print(f"unknown benchmark {args.name!r}; available: {', '.join(names)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"evals.bench_{args.name}")
    baseline = getattr(args, "baseline", None)
    if baseline and args.name != "throughput":
        print("--baseline is for the throughput benchmark only", file=sys.stderr)
        return 2
    return int((module.main(args.out, baseline=baseline) if baseline else module.main(args.out)) or 0)
