"""The sections of ``config.yaml`` as models: every key, its default and what it accepts.

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

Every section forbids unknown keys.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.models import UnknownAlias, split_large_alias
from agent.settings import (
    AuxiliarySettings,
    CompressionSettings,
    ConnectionSettings,
    ContextSettings,
    PromptCachingSettings,
    StrictModel,
)
from gateway.config.access import AccessSettings
from gateway.config.api import ApiSettings
from gateway.config.bots import Bot, BotSettings, resolve_bots
from gateway.config.errors import require
from gateway.config.files import DEFAULT_HOME, ENV_NESTING, ENV_PREFIX, read_config, resolve_config_path
from gateway.config.memory import MemorySettings
from gateway.config.sources import PROVIDER_KEY_ENV, layered_sources
from gateway.config.tools import ToolsSettings

Port = Annotated[int, Field(ge=0, le=65535)]
PositiveId = Annotated[int, Field(ge=1)]


def _http_url(value: str | None, *, https_only: bool = False) -> str | None:
    if value is None:
        return value
    schemes = ("https://",) if https_only else ("http://", "https://")
    if not value.startswith(schemes) or len(value) <= len(schemes[-1]):
        raise ValueError(f"must be null or a URL starting with {' or '.join(schemes)}")
    return value


def _require_route(provider: str, base_url: str | None, api_key: SecretStr | None) -> None:
    """A section that reaches a provider: ``custom`` needs its URL, a known provider its key."""
    missing: list[tuple[str, str]] = []
    if provider == "custom" and not base_url:
        missing.append(("base_url", "required when provider is custom (any OpenAI-compatible base URL)"))
    if provider in PROVIDER_KEY_ENV and not (api_key and api_key.get_secret_value()):
        missing.append(("api_key", f"required when provider is {provider} (or set {PROVIDER_KEY_ENV[provider]})"))
    require(missing)


class RedisSettings(StrictModel):
    """``redis:`` — where sessions live; an empty url starts the embedded server under home."""

    url: str = ""
    key_prefix: str = Field("fg", pattern=r"^[A-Za-z0-9_.-]+$")
    cluster: bool = False

    @model_validator(mode="after")
    def _cluster_needs_url(self) -> RedisSettings:
        if self.cluster and not self.url:
            require([("url", "required when cluster is true (the embedded server is a single node)")])
        return self

    @field_validator("url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        if value and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be empty (embedded server) or a redis://, rediss:// or unix:// URL")
        return value


class ModelSettings(ConnectionSettings):
    """``model:`` — the chat model. ``local`` is an offline demo model, so a fresh machine runs."""

    name: str = Field("foldgate-local", min_length=1)
    provider: Literal["local", "openai", "anthropic", "openrouter", "openai-codex", "custom"] = "local"
    base_url: str | None = None
    api_key: SecretStr | None = None
    context_length: int | None = Field(None, ge=1024)
    max_output_tokens: int = Field(4096, ge=1)
    api_mode: Literal["auto", "chat", "responses", "codex_app_server"] = "auto"
    app_server_command: str = Field("codex app-server", min_length=1)
    stream: bool = True
    max_retries: int = Field(2, ge=0, le=10)
    #: What the model is told before every conversation (the bot's persona); None = nothing.
    system_prompt: str | None = None

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str | None) -> str | None:
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
    def _route_is_usable(self) -> ModelSettings:
        _require_route(self.provider, self.base_url, self.api_key)
        return self


class TelegramSettings(StrictModel):
    """``platforms.telegram:`` — a Telegram bot through aiogram, by polling or a webhook."""

    enabled: bool = False
    token: SecretStr | None = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None
    webhook_path: str = Field("/telegram/webhook", pattern=r"^/")
    webhook_secret: SecretStr | None = None
    listen_host: str = Field("127.0.0.1", min_length=1)
    listen_port: Port = 8443
    api_server: str | None = None
    allowed_user_ids: list[PositiveId] = Field(default_factory=list)
    allowed_chat_ids: list[int] = Field(default_factory=list)

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url_is_https(cls, value: str | None) -> str | None:
        """Telegram delivers webhooks over HTTPS only."""
        return _http_url(value, https_only=True)

    @field_validator("api_server")
    @classmethod
    def _api_server_is_http(cls, value: str | None) -> str | None:
        return _http_url(value)

    @field_validator("webhook_secret")
    @classmethod
    def _telegram_secret_alphabet(cls, value: SecretStr | None) -> SecretStr | None:
        """Telegram accepts 1-256 characters of A-Z a-z 0-9 _ - and rejects the webhook otherwise."""
        if value is None:
            return value
        secret = value.get_secret_value()
        if not 1 <= len(secret) <= 256 or any(not (c.isascii() and (c.isalnum() or c in "_-")) for c in secret):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
        return value

    @model_validator(mode="after")
    def _usable_when_enabled(self) -> TelegramSettings:
        missing: list[tuple[str, str]] = []
        if self.enabled and not (self.token and self.token.get_secret_value()):
            missing.append(("token", "required when enabled is true (or set TELEGRAM_BOT_TOKEN)"))
        if self.enabled and self.mode == "webhook" and not self.webhook_url:
            missing.append(("webhook_url", "required when mode is webhook"))
        if (
            self.enabled
            and self.mode == "webhook"
            and not (self.webhook_secret and self.webhook_secret.get_secret_value())
        ):
            missing.append(
                (
                    "webhook_secret",
                    "required when mode is webhook: Telegram sends it with every update, so"
                    " forged updates are refused (or set FOLDGATE_PLATFORMS__TELEGRAM__WEBHOOK_SECRET)",
                )
            )
        require(missing)
        return self


class DiscordSettings(StrictModel):
    """``platforms.discord:`` — a Discord bot through discord.py, optionally sharded."""

    enabled: bool = False
    token: SecretStr | None = None
    allowed_user_ids: list[PositiveId] = Field(default_factory=list)
    allowed_guild_ids: list[PositiveId] = Field(default_factory=list)
    allowed_channel_ids: list[PositiveId] = Field(default_factory=list)
    shard_ids: list[Annotated[int, Field(ge=0)]] | None = None
    shard_count: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _usable_when_enabled(self) -> DiscordSettings:
        missing: list[tuple[str, str]] = []
        if self.enabled and not (self.token and self.token.get_secret_value()):
            missing.append(("token", "required when enabled is true (or set DISCORD_BOT_TOKEN)"))
        if self.shard_ids is not None and self.shard_count is None:
            missing.append(("shard_count", "required when shard_ids is set"))
        if self.shard_ids and self.shard_count is not None and max(self.shard_ids) >= self.shard_count:
            missing.append(("shard_ids", f"every id must be below shard_count ({self.shard_count})"))
        require(missing)
        return self


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class LocalPlatformSettings(StrictModel):
    """``platforms.local:`` — a chat on this machine (terminal or a small web page), no account needed."""

    enabled: bool = True
    web: bool = False
    host: str = Field("127.0.0.1", min_length=1)
    port: Port = 8765

    @model_validator(mode="after")
    def _web_chat_stays_on_this_machine(self) -> LocalPlatformSettings:
        """The web chat has no login, and anyone who reaches it spends the owner's tokens."""
        if self.enabled and self.web and not is_loopback(self.host):
            require(
                [
                    (
                        "host",
                        "the web chat has no login, so it binds a loopback address only (127.0.0.1, ::1,"
                        " localhost); to share it, put a reverse proxy with authentication in front",
                    )
                ]
            )
        return self


class PlatformsSettings(StrictModel):
    """``platforms:`` — which chat platforms the gateway serves."""

    telegram: TelegramSettings = Field(default_factory=TelegramSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    local: LocalPlatformSettings = Field(default_factory=LocalPlatformSettings)
    #: The OpenAI-compatible HTTP API (:mod:`gateway.config.api`).
    api: ApiSettings = Field(default_factory=ApiSettings)

    @property
    def any_enabled(self) -> bool:
        return self.telegram.enabled or self.discord.enabled or self.local.enabled or self.api.enabled


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
    """``delivery:`` — replies shown as they are written, and the send budget."""

    stream_replies: bool = True
    telegram: TelegramSendLimits = Field(default_factory=TelegramSendLimits)
    discord: DiscordSendLimits = Field(default_factory=DiscordSendLimits)


class GatewaySettings(StrictModel):
    """``gateway:`` — the process: state directory, locks, dedupe, concurrency, metrics."""

    home: str = Field(DEFAULT_HOME, min_length=1)
    lock_ttl_seconds: int = Field(15, ge=1)
    dedupe_ttl_seconds: int = Field(86_400, ge=86_400)
    max_concurrent_chats: int = Field(32, ge=1)
    transcript_cache_tokens: int = Field(2_000_000, ge=0)
    metrics_port: Port = 0
    metrics_host: str = Field("127.0.0.1", min_length=1)
    coalesce_backlog: bool = True
    coalesce_max_messages: int = Field(5_000, ge=2)
    coalesce_max_tokens: int = Field(20_000, ge=100)
    max_message_tokens: int = Field(16_000, ge=1_000)
    #: How long a message that failed because the provider is away is retried before the chat is told to give up.
    outage_retry_seconds: float = Field(900, ge=0)
    #: The operator view's password (``/admin`` on the metrics port); without it the view is refused.
    admin_token: SecretStr | None = None
    #: Host names the web pages answer to besides IP addresses and localhost (a reverse proxy's public name).
    allowed_hosts: list[Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9.-]+$")]] = Field(default_factory=list)

    @field_validator("admin_token")
    @classmethod
    def _admin_token_is_strong(cls, value: SecretStr | None) -> SecretStr | None:
        """It guards every chat's transcript: a short one is refused rather than guessed."""
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError(
                "must be null or at least 16 characters (e.g. the output of"
                " `python3 -c 'import secrets; print(secrets.token_urlsafe(24))'`)"
            )
        return value

    @model_validator(mode="after")
    def _admin_view_has_a_port(self) -> GatewaySettings:
        if self.admin_token is not None and not self.metrics_port:
            require(
                [("admin_token", "the operator view is served on gateway.metrics_port, which is 0 (off): set a port")]
            )
        return self


#: The public Bot API's download limit: Telegram refuses a bot any larger file.
TELEGRAM_DOWNLOAD_LIMIT = 20 * 1024 * 1024
#: Where provider ``openai`` sends voice for transcription.
OPENAI_BASE_URL = "https://api.openai.com/v1"


class TranscriptionSettings(StrictModel):
    """``media.transcription:`` — voice and audio to text through an OpenAI-compatible
    ``POST {base_url}/audio/transcriptions``; ``off`` keeps voice as a stored item the model is told it cannot hear."""

    provider: Literal["off", "openai", "custom"] = "off"
    model: str = Field("whisper-1", min_length=1)
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout_seconds: float = Field(60.0, gt=0)

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str | None) -> str | None:
        return _http_url(value)

    @model_validator(mode="after")
    def _route_is_usable(self) -> TranscriptionSettings:
        _require_route(self.provider, self.base_url, self.api_key)
        return self

    @property
    def endpoint(self) -> str:
        """The base URL requests go to: the configured one, else OpenAI's for provider ``openai``."""
        return (self.base_url or OPENAI_BASE_URL).rstrip("/")


class MediaSettings(StrictModel):
    """``media:`` — photos, documents and voice: how big, how many kept, how many sent, how voice is heard."""

    max_bytes: int = Field(TELEGRAM_DOWNLOAD_LIMIT, ge=1024)
    max_total_bytes: int = Field(200 * 1024 * 1024, ge=1024)
    max_images_per_request: int = Field(4, ge=0)
    image_max_side: int = Field(2048, ge=64, le=8192)
    #: Bytes the whole process takes in at once (items being fetched, read and stored); None = 4 × max_bytes.
    max_bytes_in_flight: int | None = Field(None, ge=1024)
    transcription: TranscriptionSettings = Field(default_factory=TranscriptionSettings)

    @model_validator(mode="after")
    def _one_item_fits_the_chat(self) -> MediaSettings:
        """An item larger than the chat's whole allowance could never be kept, nor one larger than the
        process's in-flight allowance ever start."""
        if self.max_bytes > self.max_total_bytes:
            require([("max_bytes", f"must not exceed max_total_bytes ({self.max_total_bytes})")])
        if self.max_bytes_in_flight is not None and self.max_bytes_in_flight < self.max_bytes:
            require([("max_bytes_in_flight", f"must be at least max_bytes ({self.max_bytes}), or null")])
        return self

    @property
    def bytes_in_flight(self) -> int:
        """The process's bound on bytes being taken in at once: the configured one, else 4 × ``max_bytes``."""
        return self.max_bytes_in_flight if self.max_bytes_in_flight is not None else 4 * self.max_bytes


class Settings(BaseSettings):
    """The whole configuration. Build it with :func:`gateway.config.load_settings` to get readable errors;
    built directly, it reads the same layers (keyword arguments first)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTING,
        env_parse_none_str="null",
        case_sensitive=True,  # the file's keys; the FOLDGATE_ variables are read case-insensitively
        extra="forbid",
        validate_assignment=True,
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
    media: MediaSettings = Field(default_factory=MediaSettings)
    tools: ToolsSettings = Field(default_factory=ToolsSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    #: What the bot remembers beyond the live transcript (:mod:`gateway.config.memory`).
    memory: MemorySettings = Field(default_factory=MemorySettings)
    #: Several bots in one deployment; empty = one bot, the settings above (see :mod:`gateway.config.bots`).
    bots: list[BotSettings] = Field(default_factory=list)

    @model_validator(mode="after")
    def _bots_are_whole(self) -> Settings:
        """Each bot's merged settings are checked now, so ``config check`` and a reload see its problems; a bot
        (or the one bot a file without ``bots:`` is) serves at least one platform, the top level of bots need not."""
        if self.bots:
            resolve_bots(self)
        elif not self.platforms.any_enabled:
            require([("platforms", "enable at least one of telegram, discord, local, api")])
        return self

    def each_bot(self) -> list[Bot]:
        """The bots to run: those of ``bots:``, else one made of the settings themselves."""
        return resolve_bots(self)

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
        return (init_settings, *layered_sources(settings_cls, os.environ, file_data))
