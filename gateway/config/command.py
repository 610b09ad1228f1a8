"""``foldgate config check|show|set``: 0 fine, 1 invalid (or refused), 2 the file cannot be read."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway.config.edit import parse_value, resolve_key, set_config_value
from gateway.config.errors import ConfigError, ConfigFileError
from gateway.config.files import CONFIG_PATH_ENV, dump_yaml, read_config, resolve_config_path, user_config_path
from gateway.config.loading import load_layers, redacted, show_value, source_label
from gateway.config.models import Settings


def render_effective(settings: Settings, label: str, origins: Mapping[tuple[str, ...], str]) -> str:
    lines = [f"# effective configuration: {label} + environment"]
    if origins:
        lines.append("# set from the environment: " + ", ".join(sorted(set(origins.values()))))
    body = dump_yaml(redacted(settings.model_dump()))
    return "\n".join(lines) + "\n" + body


def _print_problems(header: str, problems: Sequence[str]) -> None:
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    print(f"{header} ({count})", *(f"  {problem}" for problem in problems), sep="\n", file=sys.stderr)


def config_file_to_change(path: str | Path | None, environ: Mapping[str, str]) -> Path | None:
    """The file ``config set`` edits: the one named (``--config``, ``$FOLDGATE_CONFIG``), else the user's
    own if it exists. Never a ``./config.yaml`` found by chance: that may be a repository's tracked file."""
    resolved = resolve_config_path(path, environ)
    if path is None and not environ.get(CONFIG_PATH_ENV) and resolved != user_config_path(environ):
        return None
    return resolved


def _set_action(config_path: Path | None, key: str, raw_value: str) -> int:
    if config_path is None:  # a one-key file made here would hide that the user has no config of their own
        print(
            f"no config file of your own to change: `foldgate init` writes it to {user_config_path(os.environ)}"
            " (or name a file with --config)",
            file=sys.stderr,
        )
        return 2
    try:
        ref = resolve_key(key)
        remaining = set_config_value(config_path, key, raw_value, os.environ)
    except ConfigFileError as err:
        print(err, file=sys.stderr)
        return 2
    except ConfigError as err:
        _print_problems(f"{key} not set, {config_path} left unchanged", err.problems)
        return 1
    print(f"set {key} = {show_value(parse_value(raw_value, ref.schema), ref.path)} in {config_path}")
    if remaining:
        _print_problems(f"{config_path} still has problems elsewhere", remaining)
    return 0


def config_command(args: argparse.Namespace) -> int:
    """``foldgate config check|show|set``: 0 fine, 1 invalid (or refused), 2 the file cannot be read."""
    if args.action == "set":
        return _set_action(config_file_to_change(args.config, os.environ), args.key, args.value)
    config_path = resolve_config_path(args.config, os.environ)
    try:
        settings, origins = load_layers(read_config(config_path), os.environ, source_label(config_path))
    except ConfigFileError as err:
        print(err, file=sys.stderr)
        return 2
    except ConfigError as err:
        _print_problems(f"config invalid: {err.source}", err.problems)
        return 1
    if args.action == "show":
        print(render_effective(settings, source_label(config_path), origins), end="")
    else:
        print(f"config OK: {source_label(config_path)}")
        # stdout stays the one verdict line scripts read; the note on what was not checked goes beside it
        print(
            "checked the file and the environment only; `foldgate doctor` also reaches Redis, the model "
            "provider and each enabled platform",
            file=sys.stderr,
        )
    return 0
