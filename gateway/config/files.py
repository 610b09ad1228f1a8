"""Where the config file is and what it says: YAML text to the file layer, each syntax error located,
and data back to YAML text, both through ruamel.yaml as YAML 1.1."""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import ConstructorError, SafeConstructor
from ruamel.yaml.error import MantissaNoDotYAML1_1Warning, MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode

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


#: Config files are YAML 1.1, as they have always been read: ``yes``/``no``/``on``/``off`` are
#: booleans (hence ``provider: "off"`` in quotes), ``0755`` is octal. ruamel.yaml reads YAML 1.2 unless told.
YAML_VERSION = (1, 1)
_VERSION_DIRECTIVE = re.compile(r"\A%YAML 1\.1\n---[ \n]")
# ruamel.yaml reads ``1e3`` as the number meant, then warns at length that YAML 1.1 wants ``1.0e3``
warnings.filterwarnings("ignore", category=MantissaNoDotYAML1_1Warning)


class _SafeConstructor(SafeConstructor):
    """ruamel.yaml's safe constructor; a key given twice is refused naming the line it was first given
    on, and not the two values, which may be secrets."""

    def check_mapping_key(self, node: MappingNode, key_node: ScalarNode, mapping: Any, key: Any, value: Any) -> bool:
        if key not in mapping:
            return True
        first = next(
            (other.start_mark.line for other, _ in node.value if self.construct_object(other, deep=True) == key), None
        )
        where = f" (first at line {first + 1})" if first is not None else ""
        raise ConstructorError(None, None, f"duplicate key {key!r}{where}", key_node.start_mark)

    def construct_yaml_int(self, node: ScalarNode) -> Any:
        return self._number(SafeConstructor.construct_yaml_int, node)

    def construct_yaml_float(self, node: ScalarNode) -> Any:
        return self._number(SafeConstructor.construct_yaml_float, node)

    def _number(self, construct: Any, node: ScalarNode) -> Any:
        """ruamel.yaml takes a few plain values such as ``-_`` or ``0x_`` for numbers, then fails to read
        them with a Python error; they are a YAML error on their line instead."""
        try:
            return construct(self, node)
        except (ValueError, IndexError):
            raise ConstructorError(
                None, None, f"{node.value!r} looks like a number but is none; quote it if it is text", node.start_mark
            ) from None


_SafeConstructor.add_constructor("tag:yaml.org,2002:int", _SafeConstructor.construct_yaml_int)
_SafeConstructor.add_constructor("tag:yaml.org,2002:float", _SafeConstructor.construct_yaml_float)


def config_yaml(typ: str = "safe") -> YAML:
    """A ruamel.yaml instance reading (and writing) config files as YAML 1.1: ``typ="safe"`` to read
    plain data, ``"rt"`` to edit a file keeping its comments. A new one each time: the instance remembers
    the version of the last document it read."""
    yaml = YAML(typ=typ, pure=True)
    yaml.version = YAML_VERSION
    if typ == "safe":
        yaml.Constructor = _SafeConstructor
        yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
        yaml.default_flow_style = False
        yaml.brace_single_entry_mapping_in_flow_sequence = True
    return yaml


def dump_yaml(data: Any, yaml: YAML | None = None, **settings: Any) -> str:
    """``data`` as YAML text, by ``yaml`` (a safe :func:`config_yaml` with the given attributes, e.g.
    ``default_flow_style=True``, when None). ruamel.yaml marks every document it writes with a set version
    as ``%YAML 1.1``; the config never had that line, so it is left out."""
    if yaml is None:
        yaml = config_yaml()
        for name, value in settings.items():
            setattr(yaml, name, value)
    out = io.StringIO()
    yaml.dump(data, out)
    return _VERSION_DIRECTIVE.sub("", out.getvalue(), count=1)


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
        data = config_yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError([f"{label}: {where}invalid YAML: {exc.problem or exc.context}"], source=label) from None
    except YAMLError as exc:
        raise ConfigError([f"{label}: invalid YAML: {exc}"], source=label) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [
                f"{label}: the top level must be a mapping of sections (compression:, model:, ...), "
                f"not {type(data).__name__}"
            ],
            source=label,
        )
    names = [key for key in data if not isinstance(key, str)]  # ``1:``, or ``n:``, which YAML 1.1 reads as false
    if names:
        raise ConfigError(
            [f"{label}: top-level key {names[0]!r} is not a section name (compression:, model:, ...)"], source=label
        )
    return data


def read_config(path: Path | None) -> dict[str, Any]:
    """The parsed file at path ({} when there is none)."""
    return {} if path is None else parse_config_text(read_text(path), str(path))
