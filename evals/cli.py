"""``foldgate eval …`` and ``foldgate bench …``: argument handling for the measurements in evals/.

A benchmark ``NAME`` is the module ``evals/bench_NAME.py`` with ``main(out_dir) -> int``,
so a new benchmark needs no registration here: the list ``foldgate bench --help`` shows is
read from those modules' docstrings. Nothing heavy is imported at module level, because
``gateway.cli`` reads that list every time it builds its parser.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import re
import sys
import tokenize
from pathlib import Path
from typing import Any

from evals.report import PLOT_EXTRA_HINT


def available_benchmarks() -> list[str]:
    return sorted(path.stem.removeprefix("bench_") for path in Path(__file__).parent.glob("bench_*.py"))


def _first_docstring_line(path: Path) -> str:
    """The module docstring's first line, without importing the module (some import servers and clients)."""
    try:
        with path.open(encoding="utf-8") as handle:
            for token in tokenize.generate_tokens(handle.readline):
                if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING):
                    continue
                if token.type == tokenize.STRING:
                    text = ast.literal_eval(token.string)
                    return text.strip().splitlines()[0] if isinstance(text, str) and text.strip() else ""
                return ""
    except (OSError, SyntaxError, ValueError, tokenize.TokenError):
        return ""
    return ""


def benchmark_summaries() -> dict[str, str]:
    """Benchmark name -> one line on what it measures, taken from its module's docstring."""
    summaries = {}
    for name in available_benchmarks():
        line = _first_docstring_line(Path(__file__).parent / f"bench_{name}.py")
        # "``foldgate bench NAME``: what it measures." -> "what it measures."
        line = re.sub(r"^``foldgate bench [a-z0-9_]+``\s*[:—-]\s*", "", line)
        summaries[name] = line.replace("``", "")
    return summaries


def benchmarks_help() -> str:
    """The benchmark list as help text: a name and its one line each."""
    summaries = benchmark_summaries()
    width = max((len(name) for name in summaries), default=0)
    return "benchmarks:\n" + "\n".join(f"  {name:<{width}}  {line}".rstrip() for name, line in summaries.items())


#: kind -> (default --policies, default --context-length) of ``foldgate eval KIND``.
EVAL_DEFAULTS: dict[str, tuple[str, int]] = {
    "compaction": ("uncompacted,legacy,lean", 1_000_000),
    "decay": ("legacy,lean", 200_000),
}


def everyday_command(args: argparse.Namespace) -> int:
    """``foldgate eval everyday [--conversations N] [--seed S] [--embeddings-python PATH] [--out DIR]``: generated
    personal chats, no input files."""
    from evals import everyday_eval

    _, paths = everyday_eval.main(
        args.conversations or everyday_eval.DEFAULT_CONVERSATIONS,
        everyday_eval.DEFAULT_SEED if args.seed is None else args.seed,
        args.out,
        embeddings_python=getattr(args, "embeddings_python", None),
        progress=sys.stderr,
    )
    print(paths["markdown"].read_text(encoding="utf-8"))
    for label, path in paths.items():
        print(f"{label}: {path}")
    return 0


def memory_command(args: argparse.Namespace) -> int:
    """``foldgate eval memory [--worlds N] [--seed S] [--out DIR]``: generated people in private chats and groups;
    exits 1 when anything of one person reached another."""
    from evals import memory_eval

    document, paths = memory_eval.main(
        getattr(args, "worlds", None) or memory_eval.DEFAULT_WORLDS,
        memory_eval.DEFAULT_SEED if args.seed is None else args.seed,
        args.out,
        progress=sys.stderr,
    )
    print(paths["markdown"].read_text(encoding="utf-8"))
    for label, path in paths.items():
        print(f"{label}: {path}")
    if document["leaks"]:
        print(f"foldgate eval memory: {document['leaks']} leaks between people", file=sys.stderr)
        return 1
    return 0


def eval_command(args: argparse.Namespace) -> int:
    """``foldgate eval compaction|decay --sessions … --probes … [--policies …] [--context-length …]
    [--summarizer …]``, or ``foldgate eval everyday`` (:func:`everyday_command`), or ``foldgate eval memory``
    (:func:`memory_command`)."""
    if args.kind == "everyday":
        return everyday_command(args)
    if args.kind == "memory":
        return memory_command(args)
    if args.kind not in EVAL_DEFAULTS:
        available = ", ".join([*EVAL_DEFAULTS, "everyday", "memory"])
        print(f"unknown eval {args.kind!r}; available: {available}", file=sys.stderr)
        return 2
    if not args.sessions or not args.probes:
        print(f"foldgate eval {args.kind}: --sessions and --probes are required", file=sys.stderr)
        return 2
    if args.kind == "decay":
        from evals import decay_eval as module
    else:
        from evals import compaction_eval as module
    default_policies, default_window = EVAL_DEFAULTS[args.kind]
    policies = [name.strip() for name in (args.policies or default_policies).split(",") if name.strip()]
    options: dict[str, Any] = {"progress": sys.stderr, "summarizer": args.summarizer}
    options["config"] = getattr(args, "config", None)
    python = getattr(args, "embeddings_python", None) if args.kind == "compaction" else None
    with contextlib.ExitStack() as stack:
        if python:  # the recovery search fused with a local model's ranking, as with memory.embeddings on
            from evals.local_embeddings import meaning_ranking, open_embedder

            embedder, why = stack.enter_context(open_embedder(python))
            if embedder is None:
                print(f"foldgate eval: {why}", file=sys.stderr)
                return 2
            options["meaning"] = meaning_ranking(embedder)
        try:
            _, paths = module.main(
                args.sessions, args.probes, policies, args.context_length or default_window, args.out, **options
            )
        except (FileNotFoundError, ValueError, ImportError) as error:
            print(f"foldgate eval: {error}", file=sys.stderr)
            return 2
    print(paths["markdown"].read_text(encoding="utf-8"))
    for label, path in paths.items():
        print(f"{label}: {path}")
    if args.kind == "compaction" and "plot" not in paths:
        print(
            f"foldgate eval: no plot, matplotlib is not installed; {PLOT_EXTRA_HINT} adds compaction_eval.png",
            file=sys.stderr,
        )
    return 0


#: Benchmarks that can also run an older commit's code side by side (``--baseline COMMIT``).
BASELINE_BENCHMARKS = ("throughput", "hygiene", "backlog")


def bench_command(args: argparse.Namespace) -> int:
    """``foldgate bench NAME [--out …]``: runs ``evals.bench_NAME.main(out)``."""
    names = available_benchmarks()
    if not re.fullmatch(r"[a-z][a-z0-9_]*", args.name) or args.name not in names:
        print(f"foldgate bench: unknown benchmark {args.name!r}\n{benchmarks_help()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"evals.bench_{args.name}")
    baseline = getattr(args, "baseline", None)
    if baseline and args.name not in BASELINE_BENCHMARKS:
        print(f"--baseline is for the {' and '.join(BASELINE_BENCHMARKS)} benchmarks only", file=sys.stderr)
        return 2
    return int((module.main(args.out, baseline=baseline) if baseline else module.main(args.out)) or 0)
