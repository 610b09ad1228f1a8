"""Where the config file is and what it says: YAML text to the file layer, each syntax error located."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gateway.config.errors import ConfigError, ConfigFileError

ENV_PREFIX = "FOLDGATE_"
ENV_NESTING = "__"
CONFIG_PATH_ENV = "FOLDGATE_CONFIG"
HOME_ENV = "FOLDGATE_HOME"
DEFAULT_CONFIG_FILE = "config.yaml"
#: ``gateway.home`` when nothing sets it
DEFAULT_HOME = "~/.foldgate"


def user_config_path(environ: Mapping[str, str]) -> Path:
    """The user's own config file, ``config.yaml`` in ``$FOLDGATE_HOME`` (default ``~/.foldgate``),
    where ``foldgate init`` writes it: found from any directory, never a repository's tracked file."""
    home = environ.get(f"{ENV_PREFIX}GATEWAY{ENV_NESTING}HOME") or environ.get(HOME_ENV) or DEFAULT_HOME
    return Path(home).expanduser() / DEFAULT_CONFIG_FILE


def resolve_config_path(path: str | Path | None, environ: Mapping[str, str]) -> Path | None:
    """The explicit path, else ``$FOLDGATE_CONFIG``, else the user's own file (:func:`user_config_path`),
    else ``./config.yaml``, each if present; else None (defaults)."""
    if path is not None:
        return Path(path)
    if environ.get(CONFIG_PATH_ENV):
        return Path(environ[CONFIG_PATH_ENV])
    for candidate in (user_config_path(environ), Path(DEFAULT_CONFIG_FILE)):
        if candidate.is_file():
            return candidate
    return None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping instead of keeping the last silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in first_line:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key_node.value!r} (first at line {first_line[key] + 1})",
                        key_node.start_mark,
                    )
                first_line[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def read_text(path: Path) -> str:
    """The file's text; a missing, unreadable or non-UTF-8 file is a :class:`ConfigFileError`."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigFileError([f"{path}: cannot read the config file: {exc.strerror or exc}"], source=path) from None
    except UnicodeDecodeError as exc:
        raise ConfigFileError([f"{path}: cannot read the config file: not UTF-8 ({exc.reason})"], source=path) from None


def parse_config_text(text: str, label: str) -> dict[str, Any]:
    """YAML text -> the file layer; syntax errors name the file, line and column."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError([f"{label}: {where}invalid YAML: {exc.problem or exc.context}"], source=label) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{label}: invalid YAML: {exc}"], source=label) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                f"{label}: the top level must be a mapping of sections (compression:, model:, ...), not {type(data).__name__}"
            ],
            source=label,
        )
    return data


def read_config(path: Path | None) -> dict[str, Any]:
    """The parsed file at path ({} when there is none)."""
    return {} if path is None else parse_config_text(read_text(path), str(path))
