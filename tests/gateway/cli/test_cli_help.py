"""``foldgate … --help`` explains every command in plain text, and the options behave as it says.

The parser is walked rather than listed by hand, so a subcommand added later is held to the
same rules: plain help, ``--config`` after the subcommand, and help text on every option.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import cli
from gateway.cli.offline import context_length_problem, context_length_range
from gateway.config import ModelSettings
from tests.fakes.paths import REPO

REPO = REPO
DOCUMENTED_COMMANDS = ("eval", "replay", "compact", "search")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of ``parser``'s subcommands, by name (aliases once)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if all(child is not seen for seen in found.values()):
                    found[name] = child
    return found


def every_command(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(``("config", "set")``, its parser) for every subcommand at any depth."""
    for name, child in subcommands(parser).items():
        yield (*path, name), child
        yield from every_command(child, (*path, name))


def minimal_argv(parser: argparse.ArgumentParser) -> list[str]:
    """Arguments a subcommand's parser accepts: its required positionals and options filled in, a sub-subcommand
    chosen."""
    argv: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name, child = next(iter(subcommands(parser).items()))
            return argv + [name] + minimal_argv(child)
        if not (action.required or not action.option_strings) or action.nargs == 0:
            continue
        value = str(next(iter(action.choices))) if action.choices else ("2048" if action.type is int else "x")
        argv += ([action.option_strings[0]] if action.option_strings else []) + [value]
    return argv


def test_top_level_help_is_plain_and_lists_common_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "`" not in text
    assert text.split("\n\n")[1].startswith("foldgate: ")  # the description, right after the usage line
    assert "common commands:" in text and "foldgate config check" in text


@pytest.mark.parametrize("path", [path for path, _ in every_command(cli.build_parser())], ids=" ".join)
def test_every_command_help_is_plain_text(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*path, "--help"])
    assert exit_.value.code == 0
    assert "`" not in capsys.readouterr().out


def test_bench_help_lists_every_benchmark_module_with_a_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    text = capsys.readouterr().out
    listed = {
        line.split()[0]: line.split(maxsplit=1)[1]
        for line in text.split("benchmarks:\n", 1)[1].splitlines()
        if line.strip()
    }
    modules = {path.stem.removeprefix("bench_") for path in (REPO / "evals").glob("bench_*.py")}
    assert modules and set(listed) == modules
    assert all(len(line) > 20 for line in listed.values())
    assert (
        "foldgate bench" not in text.split("benchmarks:\n", 1)[1]
    )  # the docstrings' "``foldgate bench NAME``:" is taken off


def test_an_unknown_benchmark_is_refused_with_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "no_such_bench"]) == 2
    err = capsys.readouterr().err
    assert "'no_such_bench'" in err
    for path in (REPO / "evals").glob("bench_*.py"):
        assert f"\n  {path.stem.removeprefix('bench_')} " in err


@pytest.mark.parametrize("command", DOCUMENTED_COMMANDS)
def test_every_option_of_the_offline_commands_has_help(command: str) -> None:
    parser = subcommands(cli.build_parser())[command]
    undocumented = [
        action.dest
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not (action.help or "").strip()
    ]
    assert undocumented == []
    assert parser.description


@pytest.mark.parametrize("path", [path for path, _ in every_command(cli.build_parser())], ids=" ".join)
def test_config_is_accepted_after_every_subcommand(path: tuple[str, ...]) -> None:
    parser = cli.build_parser()
    command: argparse.ArgumentParser = parser
    for name in path:
        command = subcommands(command)[name]
    argv = [*path, *minimal_argv(command)]
    assert parser.parse_args([*argv, "--config", "after.yaml"]).config == "after.yaml"
    # a value before the subcommand is kept when none follows it, and one after it wins
    assert parser.parse_args(["--config", "before.yaml", *argv]).config == "before.yaml"
    assert parser.parse_args(["--config", "before.yaml", *argv, "--config", "after.yaml"]).config == "after.yaml"
    assert parser.parse_args(argv).config is None


def test_config_after_the_subcommand_reaches_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("compression:\n  threshold: 1.5\n")
    assert cli.main(["config", "check", "--config", str(bad)]) == 1
    assert str(bad) in capsys.readouterr().err


def _context_length_bounds_from_the_config() -> tuple[int | None, int | None]:
    low = high = None
    for bound in ModelSettings.model_fields["context_length"].metadata:
        low = getattr(bound, "ge", low)
        high = getattr(bound, "le", high)
    return low, high


def test_compact_takes_its_context_length_range_from_the_config_field() -> None:
    low, high = _context_length_bounds_from_the_config()
    assert low is not None  # the config refuses tiny windows; so must `compact`
    assert context_length_range() == (low, high)
    assert context_length_problem(low) is None
    assert str(low) in (context_length_problem(low - 1) or "")
    if high is not None:
        assert context_length_problem(high) is None and context_length_problem(high + 1)


def test_compact_refuses_a_context_length_the_config_would_refuse(tmp_path: Path) -> None:
    low, high = _context_length_bounds_from_the_config()
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "hello"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "compact", "--input", str(transcript), "--context-length", "100"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "--context-length 100" in done.stderr and str(low) in done.stderr
    assert high is None or str(high) in done.stderr
    assert "model.context_length" in done.stderr
    assert done.stdout == ""
