"""Strict checks that a request body fits the official SDKs' request types (test-only).

The ``openai`` and ``anthropic`` SDKs describe every request body as a TypedDict, which
is the closest thing to a published schema we can test against offline. Pydantic is lax
about three things that would let a wrong body pass, so each is closed here:

* Unknown keys: pydantic ignores them on TypedDicts. ``TypeAdapter(config=...)`` refuses
  TypedDicts, so the config goes on an empty subclass of the SDK's params class, made with
  ``with_config(ConfigDict(extra="forbid"))``. Pydantic hands a TypedDict's config down
  to every nested TypedDict that has none of its own (the SDK's have none), so the rule
  reaches messages, parts, tools, tool calls, cache_control ... The SDK classes are untouched.
* ``Iterable[...]`` fields are validated lazily (a ``ValidatorIterator``), so nothing in
  ``messages`` or ``tools`` is checked until it is consumed: :func:`_drain` consumes them all,
  depth first. (A union picks its member before such items are checked; the SDK unions a
  foldgate body meets are told apart by a ``type``/``role`` tag, so that changes no verdict.)
* Anthropic's content-block union also takes the SDK's *response* models (a ``TextBlock``
  from an earlier answer), which have their own config allowing any extra key, so a dict no
  request TypedDict takes would pass as one of them. A JSON body holds no model instances,
  so in the generated core schema each model is swapped for an instance check
  (:func:`_instances_only`): a dict must fit a request TypedDict.

Validation is strict (``"100"`` is not an int, ``1`` is not a bool), as a type checker
would read the SDK's annotations.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from typing import Any

from anthropic.types import message_create_params as anthropic_params
from openai.types.chat import completion_create_params as chat_params
from openai.types.responses import response_create_params as responses_params
from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from pydantic_core import SchemaValidator, core_schema

Loc = tuple[str | int, ...]

#: Keys whose literal value picks a union member in these SDKs; a member whose tag does not
#: match is noise in an error report.
_TAG_KEYS = ("type", "role")
_MAX_LINES = 12


class _Invalid(Exception):
    """A problem found after the first validation pass (a lazy item, a coerced literal)."""

    def __init__(self, lines: list[str], cause: ValidationError | None = None) -> None:
        super().__init__(lines)
        self.lines = lines
        self.cause = cause


def _instances_only(schema: Any) -> Any:
    """A copy of a core schema in which each pydantic model takes only its own instances, never a dict."""
    if isinstance(schema, dict):
        if schema.get("type") == "model":
            return core_schema.is_instance_schema(schema["cls"], ref=schema.get("ref"))
        return {key: _instances_only(value) for key, value in schema.items()}
    if isinstance(schema, (list, tuple)):
        return type(schema)(_instances_only(item) for item in schema)
    return schema


@cache
def _strict_validator(params: type) -> SchemaValidator:
    """A validator for an SDK params TypedDict: unknown keys fail at every depth, response models take no dicts."""

    @with_config(ConfigDict(extra="forbid"))
    class Strict(params, total=False):  # type: ignore[misc, valid-type]
        """No new keys: the inherited ones plus a config that every nested TypedDict inherits."""

    Strict.__name__ = Strict.__qualname__ = params.__name__
    return SchemaValidator(_instances_only(TypeAdapter(Strict).core_schema))


def _drain(value: Any, raw: Any, where: Loc, body: Any) -> None:
    """Consume every lazy ``Iterable`` validator below ``value`` (validated from ``raw``) so each item gets checked.

    The first failing item is reported (later ones are not checked). Also catches what
    pydantic's Literal lets through even in strict mode: ``1`` for
    ``True`` (``stream: 1``) and ``True`` for ``1``, seen as a bool on one side only.
    """
    if isinstance(value, bool) is not isinstance(raw, bool):
        raise _Invalid([f"{_split(where, body)[0]}: {raw!r} is not {value!r}"])
    if isinstance(value, Mapping) and isinstance(raw, Mapping):
        for key, item in value.items():
            _drain(item, raw.get(key), (*where, key), body)
    elif isinstance(value, Iterator) or (isinstance(value, (list, tuple)) and isinstance(raw, (list, tuple))):
        try:
            items = list(value)
        except ValidationError as error:
            raise _Invalid(_describe(error.errors(), where, body), error) from None
        for index, (item, raw_item) in enumerate(zip(items, raw)):
            _drain(item, raw_item, (*where, index), body)


def _split(loc: Loc, body: Any, key_at_end: bool = True) -> tuple[str, tuple[str, ...], bool]:
    """``loc`` as a body path (``messages[1].content[0].type``), the union members it went through, and
    whether its last segment is a member.

    Pydantic puts a union member's name into ``loc``; walking the body tells the two apart:
    a segment that is no key or index of the data at that point names a member (except a
    missing key at the end, with ``key_at_end``).
    """
    node, path, members, member_last = body, "", [], False
    for position, segment in enumerate(loc):
        at_end = key_at_end and position == len(loc) - 1
        member_last = False
        if isinstance(segment, int) and isinstance(node, list) and 0 <= segment < len(node):
            node, path = node[segment], f"{path}[{segment}]"
        elif isinstance(segment, str) and isinstance(node, Mapping) and (segment in node or at_end):
            node, path = node.get(segment), f"{path}.{segment}" if path else segment
        else:
            members.append(str(segment))
            member_last = True
    return path or "<body>", tuple(members), member_last


def _member_note(members: tuple[str, ...], word: str) -> str:
    """``  [as ToolParam]``: the innermost named union member (not ``str`` or ``list[...]``)."""
    named = [member for member in members if member[:1].isupper() and member.isidentifier()]
    return f"  [{word} {named[-1]}]" if named else ""


def _under(loc: Loc, prefixes: Iterable[Loc]) -> bool:
    return any(loc[: len(prefix)] == prefix for prefix in prefixes)


def _describe(errors: list[dict[str, Any]], where: Loc, body: Any) -> list[str]:
    """One line per distinct problem.

    Pydantic reports every member of a failed union; a member whose ``type``/``role`` tag
    does not match is noise, and so is "not a string" from ``Union[str, ...]`` when another
    member got further. Where no member's tag matches, one line says which tags would.
    """
    # An instance check is one of the swapped-out response models: never what a JSON body meant.
    errors = [{**error, "loc": (*where, *error["loc"])} for error in errors if error["type"] != "is_instance_of"]
    tags = [
        error
        for error in errors
        if len(error["loc"]) >= 2
        and error["loc"][-1] in _TAG_KEYS
        and error["type"] in ("literal_error", "missing")
        and _split(error["loc"][:-1], body, key_at_end=False)[2]
    ]
    ruled_out = {error["loc"][:-1] for error in tags}
    kept = [error for error in errors if not _under(error["loc"], ruled_out)]
    unmatched: dict[Loc, list[dict[str, Any]]] = {}  # site + tag key -> its members' tag errors
    for error in tags:
        site = error["loc"][:-2]
        if not _under(site, ruled_out) and not any(k["loc"][: len(site)] == site for k in kept):
            unmatched.setdefault((*site, error["loc"][-1]), []).append(error)
    deeper = [error["loc"] for error in kept] + list(unmatched)
    lines: dict[str, None] = {}
    for loc, group in unmatched.items():
        path, members, _ = _split(loc, body)
        literals = [e for e in group if e["type"] == "literal_error"]
        values = ", ".join(dict.fromkeys(e["ctx"]["expected"] for e in literals))
        got = f"got {literals[0]['input']!r}, expected one of {values}" if literals else "Field required"
        lines[f"{path}: {got}{_member_note(members, 'in')}"] = None
    for error in kept:
        loc = error["loc"]
        if (
            error["type"] != "missing"
            and _split(loc, body, key_at_end=False)[2]
            and any(len(other) > len(loc) and other[: len(loc) - 1] == loc[:-1] for other in deeper)
        ):
            continue  # a wrong-kind member (e.g. "str") while another member got further
        path, members, _ = _split(loc, body)
        got = "" if error["type"] == "missing" else f" (got {error.get('input')!r:.80})"
        lines[f"{path}: {error['msg']}{got}{_member_note(members, 'as')}"] = None
    return list(lines)


def _validate(params: type, body: Any, label: str) -> None:
    """Validate ``body`` strictly against ``params``; an AssertionError lists the offending paths."""
    if not isinstance(body, Mapping):
        raise AssertionError(f"{label}: body must be a JSON object, got {type(body).__name__}")
    try:
        _drain(_strict_validator(params).validate_python(body, strict=True), body, (), body)
        return
    except ValidationError as error:
        lines, cause = _describe(error.errors(), (), body), error
    except _Invalid as invalid:
        lines, cause = invalid.lines, invalid.cause
    shown = lines[:_MAX_LINES] + ([f"... and {len(lines) - _MAX_LINES} more"] if len(lines) > _MAX_LINES else [])
    raise AssertionError(
        f"{label} body rejected by {params.__module__}.{params.__name__}:\n  " + "\n  ".join(shown)
    ) from cause


def validate_chat_completions(body: dict[str, Any]) -> None:
    """Against openai's chat-completions create params (streaming or not, by ``stream``)."""
    streaming = bool(body.get("stream")) if isinstance(body, Mapping) else False
    params = (
        chat_params.CompletionCreateParamsStreaming if streaming else chat_params.CompletionCreateParamsNonStreaming
    )
    _validate(params, body, "chat.completions")


def validate_anthropic_messages(body: dict[str, Any]) -> None:
    """Against anthropic's Messages create params (streaming or not, by ``stream``)."""
    streaming = bool(body.get("stream")) if isinstance(body, Mapping) else False
    params = (
        anthropic_params.MessageCreateParamsStreaming if streaming else anthropic_params.MessageCreateParamsNonStreaming
    )
    _validate(params, body, "anthropic.messages")


def validate_responses(body: dict[str, Any]) -> None:
    """Against openai's Responses create params (streaming or not, by ``stream``)."""
    streaming = bool(body.get("stream")) if isinstance(body, Mapping) else False
    params = (
        responses_params.ResponseCreateParamsStreaming
        if streaming
        else responses_params.ResponseCreateParamsNonStreaming
    )
    _validate(params, body, "responses")


#: OpenRouter's cache marker: ``{"type": "ephemeral"}`` with an optional ``ttl``.
_CACHE_CONTROL_KEYS = frozenset({"type", "ttl"})
_CACHE_TTLS = ("5m", "1h")


def _check_cache_control(marker: Any, path: str) -> None:
    """Exactly OpenRouter's documented marker shape, nothing more."""
    if not isinstance(marker, Mapping):
        raise AssertionError(f"openrouter: {path}.cache_control must be an object, got {marker!r}")
    unknown = sorted(set(marker) - _CACHE_CONTROL_KEYS)
    if unknown:
        raise AssertionError(f"openrouter: {path}.cache_control has unknown keys {unknown}")
    if marker.get("type") != "ephemeral":
        raise AssertionError(f"openrouter: {path}.cache_control.type must be 'ephemeral', got {marker.get('type')!r}")
    if "ttl" in marker and marker["ttl"] not in _CACHE_TTLS:
        raise AssertionError(
            f"openrouter: {path}.cache_control.ttl must be one of {_CACHE_TTLS}, got {marker['ttl']!r}"
        )


def validate_openrouter_chat(body: dict[str, Any]) -> None:
    """The chat-completions shape plus the OpenRouter extensions foldgate sends.

    Why: OpenRouter has no official Python SDK types to test against; it documents itself as
    the OpenAI chat API plus extensions, and foldgate relies on two: the Anthropic-style
    ``cache_control`` breakpoint it passes through for Claude models, and ``modalities`` with
    ``"image"`` for an image model (the openai types take only text and audio there; it is
    checked against OpenRouter's values and removed first). Each marker on a message or on a *text* content
    part is checked against OpenRouter's documented shape and removed from a copy, and the
    rest is validated as strictly as any chat body. A marker anywhere else (an ``image_url``
    part, the top level) and any other extension (``provider``, ``transforms`` ...) still fail.
    """
    if not isinstance(body, Mapping):
        raise AssertionError(f"openrouter: body must be a JSON object, got {type(body).__name__}")
    stripped = copy.deepcopy(dict(body))
    if "modalities" in stripped:  # OpenRouter's image models: asked to answer with images too
        modalities = stripped.pop("modalities")
        if not isinstance(modalities, list) or not set(modalities) <= {"text", "image"} or "text" not in modalities:
            raise AssertionError(f"openrouter: modalities must list 'text' and may add 'image', got {modalities!r}")
    messages = stripped.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        if not isinstance(message, dict):
            continue
        if "cache_control" in message:
            _check_cache_control(message.pop("cache_control"), f"messages[{index}]")
        content = message.get("content")
        for position, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, dict) and part.get("type") == "text" and "cache_control" in part:
                _check_cache_control(part.pop("cache_control"), f"messages[{index}].content[{position}]")
    validate_chat_completions(stripped)
