"""What the configuration allows, read from the models' JSON schema (pydantic's own account of every
field's type, range, choices and pattern), for messages that say what a key accepts."""

from __future__ import annotations

import difflib
import functools
import types
from collections.abc import Mapping, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

Schema = dict[str, Any]
_NULL = {"type": "null"}


@functools.cache
def document(model: type[BaseModel]) -> Schema:
    """``model``'s JSON schema (made once; sections are ``$ref``s into its ``$defs``)."""
    return model.model_json_schema()


def field_schema(node: Schema, model: type[BaseModel]) -> tuple[Schema, bool]:
    """(the schema of one value, its ``$ref`` followed and ``null`` taken out; whether null is allowed)."""
    options = node.get("anyOf", [])
    nullable = _NULL in options and len(options) == 2
    if nullable:
        node = next(option for option in options if option != _NULL)
    while "$ref" in node:
        node = document(model)["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node, nullable


def keys_of(node: Schema) -> list[str]:
    """The keys a section takes ([] for anything else)."""
    return list(node.get("properties", {}))


def schema_at(model: type[BaseModel], path: Sequence[str | int]) -> Schema | None:
    """The schema a path of keys (and list indexes) leads to in ``model``; None when it leaves the schema."""
    node: Schema | None = document(model)
    for part in path:
        node, _ = field_schema(node, model)
        if "properties" in node:
            node = node["properties"].get(part) if isinstance(part, str) else None
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif "items" in node and isinstance(part, int):
            node = node["items"]
        else:
            node = None
        if node is None:
            return None
    return node


def _model_class(annotation: Any) -> type[BaseModel] | None:
    """The section model an annotation holds (``X`` or ``Optional[X]``), else None; for code walking the
    model classes themselves (tests/reliability/test_config_fuzz.py)."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    return next((member for member in members if isinstance(member, type) and issubclass(member, BaseModel)), None)


def dotted(path: Sequence[str | int]) -> str:
    """``("platforms", "discord", "allowed_guild_ids", 1)`` -> ``platforms.discord.allowed_guild_ids[1]``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def bounds(node: Schema) -> str:
    """'between 0.0 and 1.0', 'at least 1', ... from a number's minimum and maximum."""
    if "minimum" in node and "maximum" in node:
        return f"between {node['minimum']} and {node['maximum']}"
    words = {
        "minimum": "at least",
        "exclusiveMinimum": "greater than",
        "maximum": "at most",
        "exclusiveMaximum": "less than",
    }
    return " and ".join(f"{word} {node[name]}" for name, word in words.items() if name in node)


def kind(model: type[BaseModel], node: Schema) -> str:
    """A noun phrase for what a value of this schema must be."""
    node, nullable = field_schema(node, model)
    kind_of = node.get("type")
    if "const" in node:
        text = f"{node['const']} (fixed)"
    elif "enum" in node:
        text = "one of " + ", ".join(str(choice) for choice in node["enum"])
    elif kind_of == "boolean":
        text = "true or false"
    elif kind_of in ("integer", "number"):
        text = " ".join(filter(None, ["a whole number" if kind_of == "integer" else "a number", bounds(node)]))
    elif kind_of == "string":
        text = "a non-empty string" if node.get("minLength") == 1 else "a string"
        text += f" matching {node['pattern']}" if "pattern" in node else ""
    elif kind_of == "array":
        text = f"a list (each: {kind(model, node['items'])})"
    elif "properties" in node:
        text = "a mapping with keys " + ", ".join(keys_of(node))
    elif isinstance(node.get("additionalProperties"), dict):
        text = f"a mapping of names to values (each: {kind(model, node['additionalProperties'])})"
    else:
        text = str(kind_of or "any value")
    return f"{text}, or null" if nullable else text


def unknown_key_hint(model: type[BaseModel], parent: Sequence[str | int], name: str, rest: Sequence[str] = ()) -> str:
    """'did you mean compression.threshold?' (the closest valid key at that level), else the valid keys."""
    node = schema_at(model, parent)
    valid = keys_of(field_schema(node, model)[0]) if node is not None else []
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if close:
        return f"did you mean {dotted((*parent, close[0], *rest))}?"
    return "valid keys here: " + ", ".join(valid) if valid else "this level takes no keys"


def drop_empty_sections(data: Mapping[Any, Any], model: type[BaseModel], node: Schema | None = None) -> dict[Any, Any]:
    """A section, list or map left empty (all its keys commented out) reads as null: it means 'the defaults'."""
    node = field_schema(node or document(model), model)[0]
    cleaned: dict[Any, Any] = {}
    for key, value in data.items():
        child = node.get("properties", {}).get(key) if isinstance(key, str) else None
        if child is not None:
            inner, nullable = field_schema(child, model)
            if value is None and not nullable and inner.get("type") in ("object", "array"):
                continue
            if "properties" in inner and isinstance(value, dict):
                value = drop_empty_sections(value, model, inner)
        cleaned[key] = value
    return cleaned
