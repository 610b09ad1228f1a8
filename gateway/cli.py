"""``foldgate`` — the command line: run the gateway, compact or search offline, evaluate, configure.

Each subcommand's work lives in the module that owns the feature; this file only
parses arguments and dispatches, importing lazily so ``foldgate config`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

#: subcommand -> "module:function"; each function takes the parsed namespace and returns an exit code.
HANDLERS: dict[str, str] = {
    "run": "gateway.app:run_command",
    "config": "gateway.config:config_command",
    "compact": "gateway.offline:compact_command",
    "search": "gateway.offline:search_command",
    "replay": "gateway.replay:replay_command",
    "eval": "evals.cli:eval_command",
    "bench": "evals.cli:bench_command",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="foldgate", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="path to config.yaml (default: ./config.yaml or $FOLDGATE_CONFIG)")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the gateway (embedded Redis when redis.url is empty)")
    run.add_argument("--demo", action="store_true", help="replay the bundled overnight conversation, then exit")
    # also accepted after `run` (as service files write it); SUPPRESS keeps a value given before `run`
    run.add_argument("--config", default=argparse.SUPPRESS, help="path to config.yaml (same as before `run`)")

    config = commands.add_parser("config", help="check, show or change config.yaml")
    config_actions = config.add_subparsers(dest="action", required=True)
    config_actions.add_parser("check", help="validate the configuration and environment overrides")
    config_actions.add_parser("show", help="print the effective configuration, secrets redacted")
    config_set = config_actions.add_parser("set", help="set KEY (dotted) to VALUE in config.yaml")
    config_set.add_argument("key")
    config_set.add_argument("value")

    compact = commands.add_parser("compact", help="compact a transcript file offline and print JSON stats")
    compact.add_argument("--input", required=True, help="JSONL, one OpenAI-format message per line")
    compact.add_argument("--context-length", type=int, required=True)
    compact.add_argument("--model", default=None)
    compact.add_argument("--tail-mode", choices=["lean", "legacy"], default=None)
    compact.add_argument("--focus", default=None, help="topic the summary should favour")
    compact.add_argument("--output", default=None, help="write the compacted transcript here (JSONL)")

    search = commands.add_parser("search", help="search a chat's active and archived messages")
    search.add_argument("chat", help="chat key, e.g. tg:123456")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=5)

    replay = commands.add_parser("replay", help="replay a recorded conversation through the whole gateway")
    replay.add_argument("fixture")

    evaluate = commands.add_parser("eval", help="measure compaction quality")
    evaluate.add_argument("kind", choices=["compaction"])
    evaluate.add_argument("--sessions", required=True)
    evaluate.add_argument("--probes", required=True)
    evaluate.add_argument("--policies", default="uncompacted,legacy,lean")
    evaluate.add_argument("--context-length", type=int, default=1_000_000)
    evaluate.add_argument("--out", default="evals/out")

    bench = commands.add_parser("bench", help="run a benchmark from evals/")
    bench.add_argument("name")
    bench.add_argument("--out", default="evals/out")
    bench.add_argument("--baseline", metavar="COMMIT",
                       help="throughput only: also run the benchmark of this older commit, side by side")
    return parser


def resolve(spec: str) -> Callable[[argparse.Namespace], int]:
    module_name, function_name = spec.split(":")
    return getattr(importlib.import_module(module_name), function_name)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = resolve(HANDLERS[args.command])
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
