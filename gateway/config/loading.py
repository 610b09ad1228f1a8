"""Loading the layers into :class:`Settings`, and saying what is wrong when they do not validate.

:func:`load_settings` turns every failure into one :class:`ConfigError` listing all problems at once,
each naming the dotted key, the value given and what is allowed (read from the JSON schema),
plus the variable when the value came from the environment — an operator fixes the whole file in one
pass instead of one error per restart. Secrets, and the passwords in URLs, are never shown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr, ValidationError

from gateway.config.errors import ConfigError
from gateway.config.files import dump_yaml, read_config, resolve_config_path
from gateway.config.models import Settings
from gateway.config.schema import Schema, bounds, dotted, kind, schema_at, unknown_key_hint
from gateway.config.sources import Origins, layered_sources, origins_of

#: keys whose values are credentials: redacted by ``config show`` and in error messages
SECRET_KEYS = frozenset({"token", "api_key", "webhook_secret", "admin_token", "key"})
#: Keys whose values are maps of secrets (an MCP server's ``env`` and ``headers``): each value is hidden
#: unless it only names variables of the environment (``${TRACKER_TOKEN}``), which is worth seeing.
SECRET_MAPS = frozenset({"env", "headers"})
#: what a redacted secret (or the password part of a URL) is shown as
REDACTED = "***"
_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


def url_password_hidden(text: str) -> str:
    """``text`` with the password of a URL's user part replaced by ``***``.

    Redis, base and proxy URLs may carry a password (``redis://:pw@host``); they are not
    secret keys as a whole (the host is worth seeing), so only the credential is hidden. A
    user part without a password can be a token itself (``https://TOKEN@host``) and is hidden too.
    """
    if "@" not in text or "://" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:  # not parseable as a URL: hide everything before the last @, to be safe
        scheme, _, rest = text.partition("://")
        return f"{scheme}://{REDACTED}@{rest.rsplit('@', 1)[1]}" if "@" in rest else text
    if "@" not in parts.netloc:
        return text
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, colon, _password = userinfo.partition(":")
    hidden = f"{user}:{REDACTED}" if colon else REDACTED
    return urlunsplit(parts._replace(netloc=f"{hidden}@{host}"))


def redacted(value: Any, key: str = "") -> Any:
    """A dumped configuration with every set secret, and every URL's password, replaced by ``***``."""
    if isinstance(value, dict) and key in SECRET_MAPS:
        return {name: item if _only_references(item) else REDACTED for name, item in value.items()}
    if isinstance(value, dict):
        return {name: redacted(item, str(name)) for name, item in value.items()}
    if isinstance(value, list):
        return [redacted(item, key) for item in value]
    if isinstance(value, SecretStr) or key in SECRET_KEYS:
        return REDACTED if value else (None if value is None else "")
    if isinstance(value, str):
        return url_password_hidden(value)
    return value


def _only_references(value: Any) -> bool:
    """Whether a value is nothing but ``${NAME}`` references (with text around them that is no secret)."""
    return isinstance(value, str) and bool(re.fullmatch(r"(?:[A-Za-z ]*\$\{[A-Za-z_][A-Za-z0-9_]*\})+", value))


def show_value(value: Any, path: Sequence[str | int]) -> str:
    """A value as a problem line shows it: short, and never a secret (nor a URL's password)."""
    secret_key = any(part in SECRET_KEYS or part in SECRET_MAPS for part in path if isinstance(part, str))
    if isinstance(value, SecretStr) or (secret_key and value not in (None, "")):
        return REDACTED
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, str):
        text = repr(url_password_hidden(value))
    elif isinstance(value, (dict, list)):
        text = dump_yaml(
            redacted(value), default_flow_style=True, width=1 << 30, sort_base_mapping_type_on_output=True
        ).strip()
    else:
        text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _origin(path: Sequence[str | int], origins: Origins) -> str:
    """' (from VARIABLE)' when the environment set this key, a section holding it, or keys inside it."""
    keys = tuple(part for part in path if isinstance(part, str))
    for size in range(len(keys), 0, -1):
        if keys[:size] in origins:
            return f" (from {origins[keys[:size]]})"
    inside = sorted({variable for key, variable in origins.items() if key[: len(keys)] == keys})
    return f" (from {', '.join(inside)})" if keys and inside else ""


def _allowed(error: Mapping[str, Any], node: Schema | None) -> str:
    """What the key accepts: a validator's own words, else the range or type the schema gives."""
    if error["type"] == "value_error":
        return error["msg"].removeprefix("Value error, ")
    if node is None:
        return error["msg"]
    if error["type"] in _RANGE_ERRORS and (limits := bounds(node)):
        return f"must be {limits}"
    return f"must be {kind(Settings, node)}"


def describe_validation_error(error: ValidationError, origins: Origins) -> list[str]:
    """One line per problem: dotted key, value (redacted for secrets), origin variable, what is allowed."""
    problems: list[str] = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        if item["type"] == "config_requirement":
            for key, reason in item["ctx"]["problems"]:
                path = loc + tuple(key.split(".")) if key else loc
                problems.append(f"{dotted(path)}{_origin(path, origins)}: {reason}")
        elif item["type"] == "extra_forbidden":
            hint = unknown_key_hint(Settings, loc[:-1], str(loc[-1]))
            problems.append(f"{dotted(loc)}{_origin(loc, origins)}: unknown key ({hint})")
        else:
            allowed = _allowed(item, schema_at(Settings, loc))
            problems.append(f"{dotted(loc)} = {show_value(item['input'], loc)}{_origin(loc, origins)}: {allowed}")
    return problems


def load_layers(file_data: Mapping[str, Any], environ: Mapping[str, str], label: str) -> tuple[Settings, Origins]:
    """Validate the file layer under the environment: the settings and which variables set what."""
    sources = layered_sources(Settings, environ, file_data)
    try:
        settings = Settings(_build_sources=(sources, {}))
    except ValidationError as err:
        raise ConfigError(describe_validation_error(err, origins_of(sources)), source=label) from None
    return settings, origins_of(sources)


def source_label(path: Path | None) -> str:
    return str(path) if path is not None else "built-in defaults (no config file)"


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Read, merge and validate the configuration; every problem at once in one :class:`ConfigError`.

    ``env`` replaces ``os.environ`` (for tests and for embedding); the path resolves as in
    :func:`resolve_config_path` against that same environment.
    """
    environ = os.environ if env is None else env
    config_path = resolve_config_path(path, environ)
    return load_layers(read_config(config_path), environ, source_label(config_path))[0]
