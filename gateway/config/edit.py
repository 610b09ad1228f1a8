"""``foldgate config set``: one key changed in the file through ruamel.yaml's round trip, which keeps
comments, order and quoting; refused, the file untouched, if the result does not validate.

The file is read and written as YAML 1.1, as the gateway reads it, so ruamel.yaml quotes a new value
wherever it would otherwise read back as something else (``yes``, ``1:30``). What it would still change
in the lines around the edit is kept below: the file's indentation, how plain nulls, booleans and numbers
are spelled, where the comments after an entry go, how a comment pushed by a longer value is spaced,
and text with line separators, which it would fold.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarstring import (
    DoubleQuotedScalarString,
    FoldedScalarString,
    LiteralScalarString,
)
from ruamel.yaml.tokens import CommentToken

from gateway.config.errors import ConfigError
from gateway.config.files import config_yaml, dump_yaml, parse_config_text, read_text
from gateway.config.loading import load_layers
from gateway.config.models import Settings
from gateway.config.schema import Schema, document, field_schema, keys_of, unknown_key_hint

_NULL_TAG = "tag:yaml.org,2002:null"
_DOCUMENT_START = re.compile(r"^---[ \t]*(#.*)?\n", re.MULTILINE)


@dataclass(frozen=True)
class KeyRef:
    """A settable key: its path as written in the YAML file and the schema of its value."""

    path: tuple[str, ...]
    schema: Schema


def resolve_key(dotted: str) -> KeyRef:
    """``compression.threshold`` -> its KeyRef; for a map such as ``model_thresholds`` the rest is the entry name."""
    parts = dotted.split(".")
    if not all(parts):
        raise ConfigError([f"{dotted!r}: not a dotted key such as compression.threshold"])
    section = document(Settings)
    for index, part in enumerate(parts):
        if part not in keys_of(section):
            hint = unknown_key_hint(Settings, parts[:index], part, parts[index + 1 :])
            raise ConfigError([f"{dotted}: unknown key ({hint})"])
        node, rest = field_schema(section["properties"][part], Settings)[0], parts[index + 1 :]
        if "properties" in node:
            if not rest:
                keys = ", ".join(f"{dotted}.{name}" for name in keys_of(node))
                raise ConfigError([f"{dotted}: is a section; set one of its keys: {keys}"])
            section = node
        elif isinstance(node.get("additionalProperties"), dict) and rest:
            return KeyRef((*parts[: index + 1], ".".join(rest)), node["additionalProperties"])
        elif rest:
            raise ConfigError([f"{dotted}: unknown key ({'.'.join(parts[: index + 1])} holds a single value)"])
        else:
            return KeyRef(tuple(parts), section["properties"][part])
    raise AssertionError("unreachable: the loop returns or raises")


def parse_value(text: str, schema: Schema) -> Any:
    """VALUE as a YAML scalar (true, 0.6, null, [1, 2] ...); text fields keep the text as typed."""
    if text == "":
        return ""
    try:
        value = config_yaml().load(text)
    except YAMLError:
        return text
    if field_schema(schema, Settings)[0].get("type") == "string" and value is not None and not isinstance(value, str):
        return text
    return value


# --------------------------------------------------------------------------- the round trip


class _AsWritten(str):
    """A plain null, boolean, number or date as the file spells it (``~``, ``yes``, ``1:30``, ``+1``,
    ``.NaN``): ruamel.yaml writes back its own spelling of the value (nothing, ``true``, ``90``, ``1``,
    ``.nan``), which would change lines the edit is not about. Never equal to text: ``1:`` and ``'1':``
    are two keys."""

    tag: str

    def __new__(cls, text: str, tag: str) -> _AsWritten:
        written = super().__new__(cls, text)
        written.tag = tag
        return written

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _AsWritten) and (str(self), self.tag) == (str(other), other.tag)

    __hash__ = str.__hash__


class _Constructor(RoundTripConstructor):
    def construct_as_written(self, node: ScalarNode) -> Any:
        if node.style or node.anchor or self.resolver.resolve(ScalarNode, node.value, (True, False)) != node.tag:
            # quoted, anchored or tagged (``!!float 3``): ruamel.yaml's own types keep those
            return RoundTripConstructor.yaml_constructors[node.tag](self, node)
        return _AsWritten(node.value, str(node.tag))


class _Representer(RoundTripRepresenter):
    def represent_as_written(self, data: _AsWritten) -> ScalarNode:
        return self.represent_scalar(data.tag, str(data))


for _kind in ("null", "bool", "int", "float", "timestamp"):
    _Constructor.add_constructor(f"tag:yaml.org,2002:{_kind}", _Constructor.construct_as_written)
_Representer.add_representer(_AsWritten, _Representer.represent_as_written)


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, _AsWritten) and value.tag == _NULL_TAG)


def _editor(mapping: int = 2, sequence: int = 2, offset: int = 0) -> YAML:
    editor = config_yaml("rt")
    editor.Constructor, editor.Representer = _Constructor, _Representer
    editor.preserve_quotes = True
    editor.width = 1 << 30  # never fold a long line
    editor.indent(mapping=mapping, sequence=sequence, offset=offset)
    return editor


def _indentation(data: CommentedMap) -> tuple[int, int, int]:
    """(mapping, sequence, offset) indentation as the file's first nested block map and list use it."""
    mapping = sequence = offset = None
    pending = [data]
    while pending and (mapping is None or sequence is None):
        node = pending.pop(0)
        for key, child in node.items():
            if not isinstance(child, (CommentedMap, CommentedSeq)) or not child or child.fa.flow_style():
                continue
            key_column = node.lc.key(key)[1]
            if isinstance(child, CommentedMap):
                mapping = child.lc.key(next(iter(child)))[1] - key_column if mapping is None else mapping
                pending.append(child)
            elif sequence is None:
                offset, sequence = child.lc.col - key_column, child.lc.item(0)[1] - key_column
    return mapping or 2, sequence or mapping or 2, offset or 0


def _node(value: Any) -> Any:
    """A new value as ruamel.yaml should write it: lists and maps inline, null spelled, text with
    unprintable characters in double quotes (in any other style ruamel.yaml folds a line separator)."""
    if value is None:
        return _AsWritten("null", _NULL_TAG)
    if isinstance(value, str):
        if not value.isprintable():
            return DoubleQuotedScalarString(value)  # the one style with escapes
        return value
    if isinstance(value, (list, dict)):
        inline = (
            CommentedSeq(map(_node, value))
            if isinstance(value, list)
            else CommentedMap((_node(key), _node(item)) for key, item in value.items())
        )
        inline.fa.set_flow_style()
        return inline
    return value


def _nested(keys: Sequence[str], value: Any) -> Any:
    for key in reversed(keys):
        value = CommentedMap([(key, value)])
    return value


def _last_entry(container: Any, key: Any) -> tuple[Any, Any]:
    """The deepest last entry under ``container[key]``: ruamel.yaml keeps the blank lines and comments
    that follow a block with that entry."""
    value = container[key]
    while isinstance(value, (CommentedMap, CommentedSeq)) and value and not value.fa.flow_style():
        container, key = value, (next(reversed(value)) if isinstance(value, CommentedMap) else len(value) - 1)
        value = container[key]
    return container, key


def _comment_slot(container: Any) -> int:
    return 2 if isinstance(container, CommentedMap) else 0


def _take_lines_after(container: Any, key: Any, *, whole: bool = False) -> str:
    """Detach the blank lines and comments below an entry's own line and return them.

    ``whole``: all of its comment, which starts on a line of its own (after a ``|`` or ``>`` block).
    """
    container, key = _last_entry(container, key)
    slots, slot = container.ca.items.get(key), _comment_slot(container)
    token = slots[slot] if slots else None
    if token is None:
        return ""
    if whole:
        slots[slot] = None
        return ("" if token.value.startswith("\n") else " " * token.start_mark.column) + token.value
    own, _, rest = token.value.partition("\n")
    slots[slot] = CommentToken(own + "\n", CommentMark(token.start_mark.column)) if own else None
    return rest


def _put_lines_after(container: Any, key: Any, lines: str) -> None:
    if lines:
        container, key = _last_entry(container, key)
        slots, slot = container.ca.items.setdefault(key, [None, None, None, None]), _comment_slot(container)
        token = slots[slot]
        column = token.start_mark.column if token is not None else 0
        slots[slot] = CommentToken((token.value if token is not None else "\n") + lines, CommentMark(column))


def _set(mapping: CommentedMap, key: str, value: Any) -> None:
    """``mapping[key] = value``, the lines that followed the entry (or the section's last one) kept below it."""
    if key in mapping:
        block_scalar = isinstance(mapping[key], (LiteralScalarString, FoldedScalarString))
        lines = _take_lines_after(mapping, key, whole=block_scalar)
        # insert, not item assignment: that would dress the new text in the old one's style (a | block);
        # the key object as read, which remembers its quotes
        index, written = next((index, name) for index, name in enumerate(mapping) if name == key)
        mapping.insert(index, written, value)
    else:
        lines = _take_lines_after(mapping, next(reversed(mapping))) if mapping else ""
        mapping[key] = value
    _put_lines_after(mapping, key, lines)


def _space_comment(mapping: CommentedMap, key: str, old: Any) -> None:
    """The changed line's comment keeps its column where the new value leaves room, else follows it
    after two spaces (ruamel.yaml leaves one); a written null become a section leaves it its place."""
    slots = mapping.ca.items.get(key)
    token = slots[2] if slots else None
    if token is None or not token.value.startswith("#"):
        return
    column = token.start_mark.column
    if _is_null(old) and old and isinstance(mapping[key], CommentedMap) and not mapping[key].fa.flow_style():
        column = mapping.lc.value(key)[1]
    slots[2] = CommentToken(" " + token.value, CommentMark(column - 1))


def _edit(data: CommentedMap, path: Sequence[str], value: Any) -> None:
    mapping, owner = data, None  # owner: the entry whose line shows the change (an inline map's key)
    for index, key in enumerate(path):
        child = mapping.get(key)
        if index == len(path) - 1 or key not in mapping or _is_null(child):
            owner = owner or (mapping, key)
            old = owner[0].get(owner[1])
            _set(mapping, key, _nested(path[index + 1 :], _node(value)))
            _space_comment(*owner, old)
            return
        if not isinstance(child, CommentedMap):
            raise ConfigError([f"{'.'.join(path[: index + 1])}: holds a single value in the file, not a section"])
        owner = owner or ((mapping, key) if child.fa.flow_style() else None)
        mapping = child


def set_in_yaml(text: str, path: Sequence[str], value: Any) -> str:
    """The YAML text with one key set and everything else kept: comments, order, quoting, layout.

    A missing key is added after the last entry of its section, creating the sections on the way;
    a new top-level section is appended below the file's text, which then stays byte for byte.
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    text = text.replace("\r\n", "\n")
    start = _DOCUMENT_START.search(text)  # what precedes it stays as written: ruamel.yaml drops comments there
    head, body = (text[: start.end()], text[start.end() :]) if start else ("", text)
    data = _editor().load(body)
    if data is not None and not isinstance(data, CommentedMap):
        raise ConfigError(["the top level of the file must be a mapping of sections"])
    if not data or path[0] not in data:
        block = dump_yaml(_nested(path, _node(value)), _editor())
        return (text + ("\n" if text and not text.endswith("\n") else "") + block).replace("\n", newline)
    editor = _editor(*_indentation(data))
    editor.explicit_end = any(line.rstrip() == "..." for line in body.splitlines())  # not remembered either
    _edit(data, path, value)
    return (head + dump_yaml(data, editor)).replace("\n", newline)


# --------------------------------------------------------------------------- the command's step


def _with(data: Any, keys: Sequence[str], value: Any) -> dict[Any, Any]:
    result = dict(data) if isinstance(data, dict) else {}
    result[keys[0]] = value if len(keys) == 1 else _with(result.get(keys[0]), keys[1:], value)
    return result


def _problems(file_data: Mapping[str, Any], environ: Mapping[str, str], label: str) -> list[str]:
    try:
        load_layers(file_data, environ, label)
    except ConfigError as err:
        return err.problems
    return []


def _write_atomically(path: Path, text: str) -> None:
    """Replace the file in one rename so a crash never leaves half a config; keep its permissions."""
    target = Path(os.path.realpath(path))
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(text.encode("utf-8"))
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def set_config_value(path: Path, dotted: str, raw_value: str, environ: Mapping[str, str]) -> list[str]:
    """Set one key in the file at path (created when absent), validating the result before writing.

    Refused — with the problems, the file untouched — when the change adds a problem, or when the
    new file would read differently anywhere but at that key. Problems the file already had
    elsewhere do not block fixing one key at a time; they are returned.
    """
    ref = resolve_key(dotted)
    value = parse_value(raw_value, ref.schema)
    label = str(path)
    text = read_text(path) if path.exists() else ""
    old_data = parse_config_text(text, label)
    before = _problems(old_data, environ, label)
    new_text = set_in_yaml(text, ref.path, value)
    new_data = parse_config_text(new_text, label)
    after = _problems(new_data, environ, label)
    added = [problem for problem in after if problem not in before]
    if added:
        raise ConfigError(added, source=label)
    if new_data != _with(old_data, ref.path, value):
        raise ConfigError([f"{dotted}: could not edit {label} safely; change it by hand"], source=label)
    _write_atomically(path, new_text)
    return after
