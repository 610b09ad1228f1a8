"""Settings: ``config.yaml`` plus the environment, validated; and the ``foldgate config`` command.

Where a value comes from, highest priority first:

1. keyword arguments to ``Settings(...)``;
2. ``FOLDGATE_<SECTION>__<KEY>`` variables (``__`` nests, names are case-insensitive), e.g.
   ``FOLDGATE_COMPRESSION__THRESHOLD=0.6`` or ``FOLDGATE_PLATFORMS__TELEGRAM__TOKEN=...``. Lists and
   maps take JSON (lists also ``1,2,3``), a whole section takes a JSON object, ``null`` means null;
3. the conventional variables a user expects to work: ``TELEGRAM_BOT_TOKEN``, ``DISCORD_BOT_TOKEN``,
   ``FOLDGATE_HOME`` (``gateway.home``), and for ``model.api_key`` / ``auxiliary.compression.api_key``
   the usual key variable of the provider configured there (``OPENAI_API_KEY``,
   ``ANTHROPIC_API_KEY``, ``OPENROUTER_API_KEY``);
4. the YAML file: the explicit path, else ``$FOLDGATE_CONFIG``, else the user's own
   ``~/.foldgate/config.yaml`` (in ``$FOLDGATE_HOME``; ``foldgate init`` writes it), else ``./config.yaml``;
5. the defaults of the models below, which ``config.yaml`` documents key by key.

Every section forbids unknown keys. :func:`load_settings` turns every failure into one
:class:`ConfigError` listing all problems at once, each naming the dotted key, the value given and
what is allowed (read from the field definitions), plus the variable when the value came from the
environment — an operator fixes the whole file in one pass instead of one error per restart.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import stat
import sys
import tempfile
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

import annotated_types
import yaml
from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.models import UnknownAlias, split_large_alias
from agent.settings import (
    AuxiliarySettings,
    ConnectionSettings,
    CompressionSettings,
    ContextSettings,
    PromptCachingSettings,
    StrictModel,
)

ENV_PREFIX = "FOLDGATE_"
ENV_NESTING = "__"
CONFIG_PATH_ENV = "FOLDGATE_CONFIG"
HOME_ENV = "FOLDGATE_HOME"
DEFAULT_CONFIG_FILE = "config.yaml"
#: keys whose values are credentials: redacted by ``config show`` and in error messages
SECRET_KEYS = frozenset({"token", "api_key", "webhook_secret"})
#: what a redacted secret (or the password part of a URL) is shown as
REDACTED = "***"

Port = Annotated[int, Field(ge=0, le=65535)]
PositiveId = Annotated[int, Field(ge=1)]


# --------------------------------------------------------------------------- sections


def _require(missing: list[tuple[str, str]]) -> None:
    """Report every unmet cross-key requirement of one section at once.

    Each entry is (key relative to the section, reason); the formatter turns it into a problem
    naming the full dotted key, because a model validator cannot point at a key by itself.
    """
    if missing:
        raise PydanticCustomError(
            "config_requirement",
            "{summary}",
            {"summary": "; ".join(f"{key}: {reason}" for key, reason in missing), "problems": missing},
        )


def _http_url(value: Optional[str], *, https_only: bool = False) -> Optional[str]:
    if value is None:
        return value
    schemes = ("https://",) if https_only else ("http://", "https://")
    if not value.startswith(schemes) or len(value) <= len(schemes[-1]):
        raise ValueError(f"must be null or a URL starting with {' or '.join(schemes)}")
    return value


class RedisSettings(StrictModel):
    """``redis:`` — where sessions live; an empty url starts the embedded server under home."""

    url: str = ""
    key_prefix: str = Field("fg", pattern=r"^[A-Za-z0-9_.-]+$")
    cluster: bool = False

    @model_validator(mode="after")
    def _cluster_needs_url(self) -> "RedisSettings":
        if self.cluster and not self.url:
            _require([("url", "required when cluster is true (the embedded server is a single node)")])
        return self

    @field_validator("url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        if value and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be empty (embedded server) or a redis://, rediss:// or unix:// URL")
        return value


#: provider -> the variable its API key conventionally lives in
PROVIDER_KEY_ENV: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
}


class ModelSettings(ConnectionSettings):
    """``model:`` — the chat model. ``local`` is an offline demo model, so a fresh machine runs."""

    name: str = Field("foldgate-local", min_length=1)
    provider: Literal["local", "openai", "anthropic", "openrouter", "openai-codex", "custom"] = "local"
    base_url: Optional[str] = None
    api_key: Optional[SecretStr] = None
    context_length: Optional[int] = Field(None, ge=1024)
    max_output_tokens: int = Field(4096, ge=1)
    api_mode: Literal["auto", "chat", "responses", "codex_app_server"] = "auto"
    app_server_command: str = Field("codex app-server", min_length=1)
    stream: bool = True
    max_retries: int = Field(2, ge=0, le=10)

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: Optional[str]) -> Optional[str]:
        return _http_url(value)

    @field_validator("name")
    @classmethod
    def _large_alias_exists(cls, value: str) -> str:
        """``-900k`` is a local alias of a few models only; refuse it at load time, not at the first request."""
        try:
            split_large_alias(value)
        except UnknownAlias as error:
            raise ValueError(str(error)) from None
        return value

    @model_validator(mode="after")
    def _route_is_usable(self) -> "ModelSettings":
        missing: list[tuple[str, str]] = []
        if self.provider == "custom" and not self.base_url:
            missing.append(("base_url", "required when provider is custom (any OpenAI-compatible base URL)"))
        if self.provider in PROVIDER_KEY_ENV and not (self.api_key and self.api_key.get_secret_value()):
            variable = PROVIDER_KEY_ENV[self.provider]
            missing.append(("api_key", f"required when provider is {self.provider} (or set {variable})"))
        _require(missing)
        return self


class TelegramSettings(StrictModel):
    """``platforms.telegram:`` — a Telegram bot through aiogram, by polling or a webhook."""

    enabled: bool = False
    token: Optional[SecretStr] = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: Optional[str] = None
    webhook_path: str = Field("/telegram/webhook", pattern=r"^/")
    webhook_secret: Optional[SecretStr] = None
    listen_host: str = Field("127.0.0.1", min_length=1)
    listen_port: Port = 8443
    api_server: Optional[str] = None
    allowed_user_ids: list[PositiveId] = Field(default_factory=list)
    allowed_chat_ids: list[int] = Field(default_factory=list)

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url_is_https(cls, value: Optional[str]) -> Optional[str]:
        """Telegram delivers webhooks over HTTPS only."""
        return _http_url(value, https_only=True)

    @field_validator("api_server")
    @classmethod
    def _api_server_is_http(cls, value: Optional[str]) -> Optional[str]:
        return _http_url(value)

    @field_validator("webhook_secret")
    @classmethod
    def _telegram_secret_alphabet(cls, value: Optional[SecretStr]) -> Optional[SecretStr]:
        """Telegram accepts 1-256 characters of A-Z a-z 0-9 _ - and rejects the webhook otherwise."""
        if value is None:
            return value
        secret = value.get_secret_value()
        if not 1 <= len(secret) <= 256 or any(not (c.isascii() and (c.isalnum() or c in "_-")) for c in secret):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
        return value

    @model_validator(mode="after")
    def _usable_when_enabled(self) -> "TelegramSettings":
        missing: list[tuple[str, str]] = []
        if self.enabled and not (self.token and self.token.get_secret_value()):
            missing.append(("token", "required when enabled is true (or set TELEGRAM_BOT_TOKEN)"))
        if self.enabled and self.mode == "webhook" and not self.webhook_url:
            missing.append(("webhook_url", "required when mode is webhook"))
        if self.enabled and self.mode == "webhook" and not (self.webhook_secret and self.webhook_secret.get_secret_value()):
            missing.append(("webhook_secret", "required when mode is webhook: Telegram sends it with every update, so"
                            " forged updates are refused (or set FOLDGATE_PLATFORMS__TELEGRAM__WEBHOOK_SECRET)"))
        _require(missing)
        return self


class DiscordSettings(StrictModel):
    """``platforms.discord:`` — a Discord bot through discord.py, optionally sharded."""

    enabled: bool = False
    token: Optional[SecretStr] = None
    allowed_user_ids: list[PositiveId] = Field(default_factory=list)
    allowed_guild_ids: list[PositiveId] = Field(default_factory=list)
    allowed_channel_ids: list[PositiveId] = Field(default_factory=list)
    shard_ids: Optional[list[Annotated[int, Field(ge=0)]]] = None
    shard_count: Optional[int] = Field(None, ge=1)

    @model_validator(mode="after")
    def _usable_when_enabled(self) -> "DiscordSettings":
        missing: list[tuple[str, str]] = []
        if self.enabled and not (self.token and self.token.get_secret_value()):
            missing.append(("token", "required when enabled is true (or set DISCORD_BOT_TOKEN)"))
        if self.shard_ids is not None and self.shard_count is None:
            missing.append(("shard_count", "required when shard_ids is set"))
        if self.shard_ids and self.shard_count is not None and max(self.shard_ids) >= self.shard_count:
            missing.append(("shard_ids", f"every id must be below shard_count ({self.shard_count})"))
        _require(missing)
        return self


class LocalPlatformSettings(StrictModel):
    """``platforms.local:`` — a chat on this machine (terminal or a small web page), no account needed."""

    enabled: bool = True
    web: bool = False
    host: str = Field("127.0.0.1", min_length=1)
    port: Port = 8765


class PlatformsSettings(StrictModel):
    """``platforms:`` — which chat platforms the gateway serves."""

    telegram: TelegramSettings = Field(default_factory=TelegramSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    local: LocalPlatformSettings = Field(default_factory=LocalPlatformSettings)

    @model_validator(mode="after")
    def _something_to_serve(self) -> "PlatformsSettings":
        if not (self.telegram.enabled or self.discord.enabled or self.local.enabled):
            _require([("", "enable at least one of telegram, discord, local")])
        return self


class TelegramSendLimits(StrictModel):
    """``delivery.telegram:`` — what Telegram allows a bot, shared by every gateway process."""

    per_chat_per_second: float = Field(1.0, gt=0)
    per_group_per_minute: float = Field(20.0, ge=4)
    per_bot_per_second: float = Field(30.0, ge=12)


class DiscordSendLimits(StrictModel):
    """``delivery.discord:`` — Discord's per-channel and global limits, shared by every gateway process."""

    per_channel_per_5_seconds: float = Field(5.0, ge=4)
    per_bot_per_second: float = Field(50.0, ge=10)


class DeliverySettings(StrictModel):
    """``delivery:`` — replies shown as they are written, and the send budget (SPEC B9, B10)."""

    stream_replies: bool = True
    telegram: TelegramSendLimits = Field(default_factory=TelegramSendLimits)
    discord: DiscordSendLimits = Field(default_factory=DiscordSendLimits)


class GatewaySettings(StrictModel):
    """``gateway:`` — the process: state directory, locks, dedupe, concurrency, metrics."""

    home: str = Field("~/.foldgate", min_length=1)
    lock_ttl_seconds: int = Field(15, ge=1)
    dedupe_ttl_seconds: int = Field(86_400, ge=86_400)
    max_concurrent_chats: int = Field(32, ge=1)
    transcript_cache_tokens: int = Field(2_000_000, ge=0)
    metrics_port: Port = 0
    metrics_host: str = Field("127.0.0.1", min_length=1)
    coalesce_backlog: bool = True
    coalesce_max_messages: int = Field(500, ge=2)
    coalesce_max_tokens: int = Field(20_000, ge=100)
    max_message_tokens: int = Field(16_000, ge=1_000)
    #: How long a message that failed because the provider is away is retried before the chat is told to give up.
    outage_retry_seconds: float = Field(900, ge=0)


class Settings(BaseSettings):
    """The whole configuration. Build it with :func:`load_settings` to get readable errors."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTING, extra="forbid", validate_assignment=True
    )

    compression: CompressionSettings = Field(default_factory=CompressionSettings)
    auxiliary: AuxiliarySettings = Field(default_factory=AuxiliarySettings)
    prompt_caching: PromptCachingSettings = Field(default_factory=PromptCachingSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    platforms: PlatformsSettings = Field(default_factory=PlatformsSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)

    @property
    def home_path(self) -> Path:
        """``gateway.home`` with ``~`` expanded: where the embedded Redis and notice markers live."""
        return Path(self.gateway.home).expanduser()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        file_data = read_config(resolve_config_path(None, os.environ))
        return (init_settings, *_layered_sources(settings_cls, os.environ, file_data))


# --------------------------------------------------------------------------- errors


class ConfigError(Exception):
    """Everything wrong with a configuration, reported together (SPEC S3.1)."""

    def __init__(self, problems: Sequence[str], *, source: str | Path | None = None) -> None:
        self.problems = list(dict.fromkeys(problems))
        self.source = str(source) if source is not None else None
        super().__init__("\n".join(self.problems))

    def __str__(self) -> str:
        return "\n".join(self.problems)


class ConfigFileError(ConfigError):
    """The config file itself cannot be read (``foldgate config`` exits 2, not 1)."""


# --------------------------------------------------------------------------- schema walking


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without ``None``, whether ``None`` is allowed)."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0], len(members) < len(get_args(annotation))
    return annotation, False


def _model_class(annotation: Any) -> type[BaseModel] | None:
    inner, _ = _unwrap_optional(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _item_field(info: FieldInfo) -> FieldInfo | None:
    """The definition of one item of a list field or one value of a map field."""
    inner, _ = _unwrap_optional(info.annotation)
    if get_origin(inner) in (list, dict) and get_args(inner):
        return FieldInfo.from_annotation(get_args(inner)[-1])
    return None


def _field_at(path: Sequence[str | int]) -> FieldInfo | None:
    """The field definition a path of keys (and list indexes) leads to; None when it leaves the schema."""
    info: FieldInfo | None = None
    model: type[BaseModel] | None = Settings
    for part in path:
        if model is not None:
            info = model.model_fields.get(part) if isinstance(part, str) else None
        elif info is not None:
            info = _item_field(info)
        if info is None:
            return None
        model = _model_class(info.annotation)
    return info


def _model_at(path: Sequence[str | int]) -> type[BaseModel] | None:
    """The section model at path (the whole Settings for the empty path), None when it is not a section."""
    if not path:
        return Settings
    info = _field_at(path)
    return _model_class(info.annotation) if info is not None else None


def _dotted(path: Sequence[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# --------------------------------------------------------------------------- describing what is allowed


def _bounds(metadata: Sequence[Any]) -> str:
    """'between 0.0 and 1.0', 'at least 1', ... from the field's ge/gt/le/lt constraints."""
    found: dict[str, Any] = {}
    for item in metadata:
        for name in ("ge", "gt", "le", "lt"):
            if isinstance(item, getattr(annotated_types, name.capitalize())):
                found[name] = getattr(item, name)
    if "ge" in found and "le" in found:
        return f"between {found['ge']} and {found['le']}"
    words = {"ge": "at least", "gt": "greater than", "le": "at most", "lt": "less than"}
    return " and ".join(f"{words[name]} {value}" for name, value in found.items())


def _kind(annotation: Any, metadata: Sequence[Any]) -> str:
    """A noun phrase for what a value of this type and constraints must be."""
    inner, nullable = _unwrap_optional(annotation)
    origin = get_origin(inner)
    if origin is Literal:
        choices = [str(choice) for choice in get_args(inner)]
        text = f"{choices[0]} (fixed)" if len(choices) == 1 else "one of " + ", ".join(choices)
    elif inner is bool:
        text = "true or false"
    elif inner in (int, float):
        noun = "a whole number" if inner is int else "a number"
        text = " ".join(filter(None, [noun, _bounds(metadata)]))
    elif inner in (str, SecretStr):
        text = "a string"
        for item in metadata:
            if isinstance(item, annotated_types.MinLen) and item.min_length == 1:
                text = "a non-empty string"
            pattern = getattr(item, "pattern", None)
            if isinstance(pattern, str):
                text += f" matching {pattern}"
    elif origin in (list, dict):
        item = FieldInfo.from_annotation(get_args(inner)[-1])
        container = "a list" if origin is list else "a mapping of names to values"
        text = f"{container} (each: {_kind(item.annotation, item.metadata)})"
    elif _model_class(inner) is not None:
        text = "a mapping with keys " + ", ".join(_model_class(inner).model_fields)
    else:
        text = getattr(inner, "__name__", str(inner))
    return f"{text}, or null" if nullable else text


_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


def _allowed(error: Mapping[str, Any], info: FieldInfo | None) -> str:
    """What the key accepts: a validator's own words, else the range or type read from the field."""
    if error["type"] == "value_error":
        return error["msg"].removeprefix("Value error, ")
    if info is None:
        return error["msg"]
    if error["type"] in _RANGE_ERRORS and (bounds := _bounds(info.metadata)):
        return f"must be {bounds}"
    return f"must be {_kind(info.annotation, info.metadata)}"


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


def _show(value: Any, path: Sequence[str | int]) -> str:
    """A value as a problem line shows it: short, and never a secret (nor a URL's password)."""
    secret_key = any(part in SECRET_KEYS for part in path if isinstance(part, str))
    if isinstance(value, SecretStr) or (secret_key and value not in (None, "")):
        return REDACTED
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, str):
        text = repr(url_password_hidden(value))
    elif isinstance(value, (dict, list)):
        text = _render(redacted(value))
    else:
        text = str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _origin(path: Sequence[str | int], origins: Mapping[tuple[str, ...], str]) -> str:
    """' (from VARIABLE)' when the environment set this key, a section holding it, or keys inside it."""
    keys = tuple(part for part in path if isinstance(part, str))
    for size in range(len(keys), 0, -1):
        if keys[:size] in origins:
            return f" (from {origins[keys[:size]]})"
    inside = sorted({variable for key, variable in origins.items() if key[: len(keys)] == keys})
    return f" (from {', '.join(inside)})" if keys and inside else ""


def _unknown_key_hint(parent: Sequence[str | int], name: str, rest: Sequence[str] = ()) -> str:
    """'did you mean compression.threshold?' (the closest valid key at that level), else the valid keys."""
    model = _model_at(parent)
    valid = list(model.model_fields) if model is not None else []
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if close:
        return f"did you mean {_dotted((*parent, close[0], *rest))}?"
    return "valid keys here: " + ", ".join(valid) if valid else "this level takes no keys"


def describe_validation_error(error: ValidationError, origins: Mapping[tuple[str, ...], str]) -> list[str]:
    """One line per problem: dotted key, value (redacted for secrets), origin variable, what is allowed."""
    problems: list[str] = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        if item["type"] == "config_requirement":
            for key, reason in item["ctx"]["problems"]:
                path = loc + tuple(key.split(".")) if key else loc
                problems.append(f"{_dotted(path)}{_origin(path, origins)}: {reason}")
        elif item["type"] == "extra_forbidden":
            hint = _unknown_key_hint(loc[:-1], str(loc[-1]))
            problems.append(f"{_dotted(loc)}{_origin(loc, origins)}: unknown key ({hint})")
        else:
            shown = _show(item["input"], loc)
            problems.append(f"{_dotted(loc)} = {shown}{_origin(loc, origins)}: {_allowed(item, _field_at(loc))}")
    return problems


# --------------------------------------------------------------------------- the file


def user_config_path(environ: Mapping[str, str]) -> Path:
    """The user's own config file, ``config.yaml`` in ``$FOLDGATE_HOME`` (default ``~/.foldgate``),
    where ``foldgate init`` writes it: found from any directory, never a repository's tracked file."""
    home = (environ.get(f"{ENV_PREFIX}GATEWAY{ENV_NESTING}HOME") or environ.get(HOME_ENV)
            or GatewaySettings.model_fields["home"].default)
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
    """A safe loader that refuses a key given twice in one mapping instead of keeping the last silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in first_line:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r} (first at line {first_line[key] + 1})",
                        key_node.start_mark,
                    )
                first_line[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _read_text(path: Path) -> str:
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
            [f"{label}: the top level must be a mapping of sections (compression:, model:, ...), not {type(data).__name__}"],
            source=label,
        )
    return _drop_empty_sections(data, Settings)


def _drop_empty_sections(data: dict[Any, Any], model: type[BaseModel]) -> dict[Any, Any]:
    """A section or map left empty (all its keys commented out) reads as null: it means 'the defaults'."""
    cleaned: dict[Any, Any] = {}
    for key, value in data.items():
        info = model.model_fields.get(key) if isinstance(key, str) else None
        if info is not None:
            inner, nullable = _unwrap_optional(info.annotation)
            section = _model_class(inner)
            if value is None and not nullable and (section is not None or get_origin(inner) in (list, dict)):
                continue
            if section is not None and isinstance(value, dict):
                value = _drop_empty_sections(value, section)
        cleaned[key] = value
    return cleaned


def read_config(path: Path | None) -> dict[str, Any]:
    """The parsed file at path ({} when there is none)."""
    return {} if path is None else parse_config_text(_read_text(path), str(path))


# --------------------------------------------------------------------------- sources


def _put(target: dict[str, Any], path: Sequence[str], value: Any) -> None:
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    if isinstance(value, dict) and isinstance(target.get(path[-1]), dict):
        target[path[-1]] = {**target[path[-1]], **value}
    else:
        target[path[-1]] = value


def _lookup(data: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


class YamlFileSource(PydanticBaseSettingsSource):
    """The parsed config file: below the environment, above the defaults."""

    def __init__(self, settings_cls: type[BaseSettings], data: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self.data = dict(data)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.data)


def _env_value(path: Sequence[str], raw: str) -> Any:
    """A variable's text -> the value for that key: JSON for lists/maps/sections, ``null`` -> None."""
    if raw.strip() == "null":
        return None
    info = _field_at(path)
    if info is None:
        return raw
    inner, _ = _unwrap_optional(info.annotation)
    if get_origin(inner) in (list, dict) or _model_class(inner) is not None:
        try:
            return json.loads(raw)
        except ValueError:
            if get_origin(inner) is list and not raw.lstrip().startswith("["):
                return [part.strip() for part in raw.split(",") if part.strip()]
    return raw  # text; pydantic converts it and reports it, naming the variable, if it does not fit


class FoldgateEnvSource(PydanticBaseSettingsSource):
    """``FOLDGATE_<SECTION>__<KEY>`` variables. Unknown keys are kept so they are reported, not ignored.

    Variables without ``__`` that name no section (``FOLDGATE_CONFIG``, ``FOLDGATE_HOME``) are not keys.
    """

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.values: dict[str, Any] = {}
        #: key path -> the variable that set it
        self.origins: dict[tuple[str, ...], str] = {}
        found = []
        for name, raw in environ.items():
            if not name.upper().startswith(ENV_PREFIX):
                continue
            path = tuple(name[len(ENV_PREFIX):].lower().split(ENV_NESTING))
            if len(path) == 1 and path[0] not in settings_cls.model_fields:
                continue
            found.append((path, name, raw))
        for path, name, raw in sorted(found, key=lambda entry: len(entry[0])):  # specific beats whole-section JSON
            _put(self.values, path, _env_value(path, raw))
            self.origins[path] = name

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.values)


#: conventional variable -> the key it sets (its FOLDGATE_ form wins)
CONVENTIONAL_ENV: dict[str, tuple[str, ...]] = {
    HOME_ENV: ("gateway", "home"),
    "TELEGRAM_BOT_TOKEN": ("platforms", "telegram", "token"),
    "DISCORD_BOT_TOKEN": ("platforms", "discord", "token"),
}
#: sections whose ``api_key`` falls back to the usual variable of the ``provider`` configured there
_KEYED_SECTIONS: tuple[tuple[str, ...], ...] = (("model",), ("auxiliary", "compression"))


class ConventionalEnvSource(PydanticBaseSettingsSource):
    """The variables people set by habit (bot tokens, provider API keys), below the ``FOLDGATE_`` ones.

    A provider key applies only where that provider is configured — ``OPENAI_API_KEY`` never ends up
    sent to Anthropic — so the provider is read from the layers above and the file first.
    """

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str], file_data: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self.environ = environ
        self.file_data = file_data
        self.origins: dict[tuple[str, ...], str] = {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        wanted = dict(CONVENTIONAL_ENV)
        for section in _KEYED_SECTIONS:
            provider_path = section + ("provider",)
            provider = _lookup(self.current_state, provider_path)
            if provider is None:
                provider = _lookup(self.file_data, provider_path)
            if provider is None:
                provider = _field_at(provider_path).default
            if isinstance(provider, str) and provider in PROVIDER_KEY_ENV:
                wanted[PROVIDER_KEY_ENV[provider]] = section + ("api_key",)
        for variable, path in wanted.items():
            if self.environ.get(variable):
                _put(values, path, self.environ[variable])
                self.origins[path] = variable
        return values


def _layered_sources(
    settings_cls: type[BaseSettings], environ: Mapping[str, str], file_data: Mapping[str, Any]
) -> tuple[FoldgateEnvSource, ConventionalEnvSource, YamlFileSource]:
    return (
        FoldgateEnvSource(settings_cls, environ),
        ConventionalEnvSource(settings_cls, environ, file_data),
        YamlFileSource(settings_cls, file_data),
    )


def _load(file_data: Mapping[str, Any], environ: Mapping[str, str], label: str) -> tuple[Settings, dict[tuple[str, ...], str]]:
    """Validate the file layer under the environment: the settings and which variables set what."""
    sources = _layered_sources(Settings, environ, file_data)
    env_source, conventional = sources[0], sources[1]
    try:
        settings = Settings(_build_sources=(sources, {}))
    except ValidationError as err:
        origins = {**conventional.origins, **env_source.origins}
        raise ConfigError(describe_validation_error(err, origins), source=label) from None
    return settings, {**conventional.origins, **env_source.origins}


def _label(path: Path | None) -> str:
    return str(path) if path is not None else "built-in defaults (no config file)"


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Read, merge and validate the configuration; every problem at once in one :class:`ConfigError`.

    ``env`` replaces ``os.environ`` (for tests and for embedding); the path resolves as in
    :func:`resolve_config_path` against that same environment.
    """
    environ = os.environ if env is None else env
    config_path = resolve_config_path(path, environ)
    return _load(read_config(config_path), environ, _label(config_path))[0]


# --------------------------------------------------------------------------- showing


def redacted(value: Any, key: str = "") -> Any:
    """A dumped configuration with every set secret, and every URL's password, replaced by ``***``."""
    if isinstance(value, dict):
        return {name: redacted(item, str(name)) for name, item in value.items()}
    if isinstance(value, list):
        return [redacted(item, key) for item in value]
    if isinstance(value, SecretStr) or key in SECRET_KEYS:
        return REDACTED if value else (None if value is None else "")
    if isinstance(value, str):
        return url_password_hidden(value)
    return value


def render_effective(settings: Settings, label: str, origins: Mapping[tuple[str, ...], str]) -> str:
    lines = [f"# effective configuration: {label} + environment"]
    if origins:
        lines.append("# set from the environment: " + ", ".join(sorted(set(origins.values()))))
    body = yaml.safe_dump(redacted(settings.model_dump()), sort_keys=False, allow_unicode=True, default_flow_style=False)
    return "\n".join(lines) + "\n" + body


# --------------------------------------------------------------------------- editing one key in place


@dataclass(frozen=True)
class KeyRef:
    """A settable key: its path as written in the YAML file and the definition of its value."""

    path: tuple[str, ...]
    field: FieldInfo


def resolve_key(dotted: str) -> KeyRef:
    """``compression.threshold`` -> its KeyRef; for a map such as ``model_thresholds`` the rest is the entry name."""
    parts = dotted.split(".")
    if not all(parts):
        raise ConfigError([f"{dotted!r}: not a dotted key such as compression.threshold"])
    model: type[BaseModel] = Settings
    for index, part in enumerate(parts):
        if part not in model.model_fields:
            hint = _unknown_key_hint(parts[:index], part, parts[index + 1:])
            raise ConfigError([f"{dotted}: unknown key ({hint})"])
        info = model.model_fields[part]
        inner, _ = _unwrap_optional(info.annotation)
        rest = parts[index + 1:]
        section = _model_class(inner)
        if section is not None:
            if not rest:
                keys = ", ".join(f"{dotted}.{name}" for name in section.model_fields)
                raise ConfigError([f"{dotted}: is a section; set one of its keys: {keys}"])
            model = section
            continue
        if get_origin(inner) is dict and rest:
            return KeyRef(tuple(parts[: index + 1]) + (".".join(rest),), FieldInfo.from_annotation(get_args(inner)[-1]))
        if rest:
            raise ConfigError([f"{dotted}: unknown key ({'.'.join(parts[: index + 1])} holds a single value)"])
        return KeyRef(tuple(parts), info)
    raise AssertionError("unreachable: the loop returns or raises")


def parse_value(text: str, info: FieldInfo) -> Any:
    """VALUE as a YAML scalar (true, 0.6, null, [1, 2] ...); text fields keep the text as typed."""
    if text == "":
        return ""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    inner, _ = _unwrap_optional(info.annotation)
    if inner in (str, SecretStr) and value is not None and not isinstance(value, str):
        return text
    return value


def _double_quoted(text: str) -> str:
    """A YAML double-quoted scalar with everything outside printable ASCII escaped."""
    escaped = []
    for char in text:
        code = ord(char)
        if char in '\\"':
            escaped.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            escaped.append(char)
        else:
            escaped.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return '"' + "".join(escaped) + '"'


def _render(value: Any) -> str:
    """One value as inline YAML (one line) that reads back to exactly that value."""
    out = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1 << 30)
    out = out.removesuffix("\n...\n").removesuffix("\n")
    if isinstance(value, str) and not (value.isprintable() and "\n" not in out and yaml.safe_load(out) == value):
        return _double_quoted(value)
    return out


def _line_after(text: str, index: int) -> int:
    """The start of the line after the one holding index (index itself when it already starts a line)."""
    if index > 0 and text[index - 1] == "\n":
        return index
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline + 1


def _last_leaf_end(node: yaml.Node) -> int:
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        node = node.value[-1][1] if isinstance(node, yaml.MappingNode) else node.value[-1]
    return node.end_mark.index


def _insert_lines(text: str, at: int, keys: Sequence[str], value: Any, indent: int, newline: str) -> str:
    lines = []
    for depth, key in enumerate(keys):
        tail = f" {_render(value)}" if depth == len(keys) - 1 else ""
        lines.append(" " * (indent + 2 * depth) + f"{_render(key)}:{tail}")
    block = newline.join(lines) + newline
    if at == len(text) and text and not text.endswith("\n"):
        block = newline + block
    return text[:at] + block + text[at:]


def _replace_value(text: str, key_node: yaml.Node, value_node: yaml.Node, value: Any, newline: str) -> str:
    start, end = value_node.start_mark.index, value_node.end_mark.index
    rendered = _render(value)
    if isinstance(value_node, yaml.ScalarNode) or value_node.flow_style:
        if text[start:end].endswith("\n"):  # a block scalar (| or >) runs to the next line
            return text[:start] + rendered + newline + text[end:]
        if start == end:  # `key:` with nothing after it
            rendered = " " + rendered
        rest = text[end:]
        gap = len(rest) - len(rest.lstrip(" "))
        if rest[gap:gap + 1] == "#":  # keep the trailing comment in its column where there is room
            gap = max(1, gap - (len(rendered) - (end - start)))
            return text[:start] + rendered + " " * gap + rest.lstrip(" ")
        return text[:start] + rendered + rest
    # a block list or map on the following lines: the value moves onto the key's line, its comment stays
    colon = text.index(":", key_node.end_mark.index)
    line_end = text.index("\n", colon)
    comment = text[colon + 1:line_end].strip()
    block_end = _line_after(text, _last_leaf_end(value_node))
    return text[: colon + 1] + " " + rendered + (f"  {comment}" if comment else "") + newline + text[block_end:]


def _with(mapping: Any, keys: Sequence[str], value: Any) -> dict[str, Any]:
    result = dict(mapping) if isinstance(mapping, dict) else {}
    result[keys[0]] = value if len(keys) == 1 else _with(result.get(keys[0]), keys[1:], value)
    return result


def set_in_yaml(text: str, path: Sequence[str], value: Any) -> str:
    """The YAML text with one key set, every other byte (comments, order, layout) unchanged.

    An existing value is replaced where it stands; a missing key is inserted after the last entry
    of its section, creating the sections on the way, at the indentation the section already uses.
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return _insert_lines(text, len(text), path, value, 0, newline)
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(["the top level of the file must be a mapping of sections"])
    node: yaml.Node = root
    owner: yaml.Node | None = None
    for index, part in enumerate(path):
        rest = path[index:]
        if isinstance(node, yaml.MappingNode) and node.flow_style:
            start, end = node.start_mark.index, node.end_mark.index
            merged = _with(yaml.safe_load(text[start:end]), rest, value)
            return text[:start] + _render(merged) + text[end:]
        if isinstance(node, yaml.MappingNode):
            found = next(
                ((key, item) for key, item in node.value if isinstance(key, yaml.ScalarNode) and key.value == part),
                None,
            )
            if found is None:
                at = _line_after(text, _last_leaf_end(node))
                return _insert_lines(text, at, rest, value, node.value[0][0].start_mark.column, newline)
            owner, node = found
            if index == len(path) - 1:
                return _replace_value(text, owner, node, value, newline)
        elif isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null" and owner is not None:
            end = node.end_mark.index  # drop an explicit `null` / `~` and the space before it
            start = len(text[: node.start_mark.index].rstrip(" "))
            at = _line_after(text, end) - (end - start)
            text = text[:start] + text[end:]
            return _insert_lines(text, at, rest, value, owner.start_mark.column + 2, newline)
        else:
            raise ConfigError([f"{'.'.join(path[:index])}: holds a single value in the file, not a section"])
    raise AssertionError("unreachable: the loop returns or raises")


def _problems(file_data: Mapping[str, Any], environ: Mapping[str, str], label: str) -> list[str]:
    try:
        _load(file_data, environ, label)
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

    Refused — with the problems, the file untouched — when the change adds a problem. Problems the
    file already had elsewhere do not block fixing one key at a time; they are returned.
    """
    ref = resolve_key(dotted)
    value = parse_value(raw_value, ref.field)
    label = str(path)
    text = _read_text(path) if path.exists() else ""
    before = _problems(parse_config_text(text, label), environ, label)
    new_text = set_in_yaml(text, ref.path, value)
    after = _problems(parse_config_text(new_text, label), environ, label)
    added = [problem for problem in after if problem not in before]
    if added:
        raise ConfigError(added, source=label)
    if _lookup(yaml.safe_load(new_text), ref.path) != value:
        raise ConfigError([f"{dotted}: could not edit {label} safely; change it by hand"], source=label)
    _write_atomically(path, new_text)
    return after


# --------------------------------------------------------------------------- the command


def _print_problems(header: str, problems: Sequence[str]) -> None:
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    print(f"{header} ({count})", *(f"  {problem}" for problem in problems), sep="\n", file=sys.stderr)


def _set_action(config_path: Path | None, key: str, raw_value: str) -> int:
    if config_path is None:  # a one-key file made here would hide that the user has no config of their own
        print(f"no config file of your own to change: `foldgate init` writes it to {user_config_path(os.environ)}"
              " (or name a file with --config)", file=sys.stderr)
        return 2
    target = config_path
    try:
        ref = resolve_key(key)
        remaining = set_config_value(target, key, raw_value, os.environ)
    except ConfigFileError as err:
        print(err, file=sys.stderr)
        return 2
    except ConfigError as err:
        _print_problems(f"{key} not set, {target} left unchanged", err.problems)
        return 1
    print(f"set {key} = {_show(parse_value(raw_value, ref.field), ref.path)} in {target}")
    if remaining:
        _print_problems(f"{target} still has problems elsewhere", remaining)
    return 0


def config_file_to_change(path: str | Path | None, environ: Mapping[str, str]) -> Path | None:
    """The file ``config set`` edits: the one named (``--config``, ``$FOLDGATE_CONFIG``), else the user's
    own if it exists. Never a ``./config.yaml`` found by chance: that may be a repository's tracked file."""
    resolved = resolve_config_path(path, environ)
    if path is None and not environ.get(CONFIG_PATH_ENV) and resolved != user_config_path(environ):
        return None
    return resolved


def config_command(args: argparse.Namespace) -> int:
    """``foldgate config check|show|set``: 0 fine, 1 invalid (or refused), 2 the file cannot be read."""
    config_path = resolve_config_path(args.config, os.environ)
    if args.action == "set":
        return _set_action(config_file_to_change(args.config, os.environ), args.key, args.value)
    try:
        settings, origins = _load(read_config(config_path), os.environ, _label(config_path))
    except ConfigFileError as err:
        print(err, file=sys.stderr)
        return 2
    except ConfigError as err:
        _print_problems(f"config invalid: {err.source}", err.problems)
        return 1
    if args.action == "show":
        print(render_effective(settings, _label(config_path), origins), end="")
    else:
        print(f"config OK: {_label(config_path)}")
        # stdout stays the one verdict line scripts read; the note on what was not checked goes beside it
        print("checked the file and the environment only; `foldgate doctor` also reaches Redis, the model "
              "provider and each enabled platform", file=sys.stderr)
    return 0
