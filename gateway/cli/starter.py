"""``foldgate init``: give the user a config file of their own, found by default from any directory.

Following a recipe should never mean editing the ``config.yaml`` tracked in foldgate's source: the
user's file lives in their home (``~/.foldgate/config.yaml``) and starts with the few keys a new
deployment changes.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.resources import files
from pathlib import Path

from gateway.config import ConfigError, load_settings, user_config_path

STARTER = files("gateway.cli").joinpath("starter_config.yaml")


def write_starter_config(target: Path, *, force: bool = False) -> None:
    """Write the starter file to ``target`` (mode 600: it may come to hold a token).

    :raises FileExistsError: ``target`` exists and ``force`` is false — never overwrite someone's settings.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    with os.fdopen(os.open(target, flags, 0o600), "w", encoding="utf-8") as out:
        out.write(STARTER.read_text(encoding="utf-8"))


def init_command(args: argparse.Namespace) -> int:
    target = Path(args.config) if args.config else user_config_path(os.environ)
    try:
        write_starter_config(target, force=args.force)
        load_settings(target, env={})  # what was written must load as written
    except FileExistsError:
        print(
            f"foldgate init: {target} already exists; change it with `foldgate config set KEY VALUE`"
            " (or --force to start over)",
            file=sys.stderr,
        )
        return 1
    except (OSError, ConfigError) as error:
        print(f"foldgate init: cannot write {target}: {error}", file=sys.stderr)
        return 2
    print(
        f"wrote {target}; foldgate reads it from any directory.\n"
        "next: foldgate config set KEY VALUE (e.g. platforms.telegram.enabled true), then foldgate doctor"
    )
    return 0
