"""The agent-side settings: compression, the summarizer, prompt caching, the context engine.

These are the sections of ``config.yaml`` the agent reads. They live here, not in
``gateway/``, so the agent and plugin engines can be built without the gateway;
``gateway.config`` composes them into the whole file with environment overrides.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.http_options import HttpOptions, proxy_problem


class StrictModel(BaseModel):
    """Refuses unknown keys so a typo is reported instead of silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ConnectionSettings(StrictModel):
    """How a model's endpoint is reached: timeouts and an explicit proxy (else the environment's)."""

    timeout_seconds: float = Field(120.0, gt=0)
    connect_timeout_seconds: float = Field(10.0, gt=0)
    proxy: str | None = None

    @field_validator("proxy")
    @classmethod
    def _proxy_is_usable(cls, value: str | None) -> str | None:
        """HTTP(S) proxies (aiohttp's own) or SOCKS 4/5 ones (aiohttp-socks): any other scheme would
        fail only at the first model call, so ``config check`` refuses it."""
        problem = None if value is None else proxy_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value or None

    def http_options(self) -> HttpOptions:
        return HttpOptions(self.timeout_seconds, self.connect_timeout_seconds, self.proxy)


class CompressionSettings(StrictModel):
    """``compression:`` — when and how the context is compacted."""

    enabled: bool = True
    threshold: float = Field(0.50, ge=0.0, le=1.0)
    model_thresholds: dict[str, Annotated[float, Field(ge=0.0, le=1.0)]] = Field(default_factory=dict)
    target_ratio: float = Field(0.20, ge=0.10, le=0.80)
    tail_mode: Literal["lean", "legacy"] = "lean"
    protect_last_n: int = Field(20, ge=1)
    min_tail_user_messages: int = Field(1, ge=1)
    protect_first_n: Literal[3] = 3
    idle_compact_after_seconds: float = Field(0, ge=0)
    codex_gpt55_autoraise: bool = True
    codex_gpt55_autoraise_notice: bool = True
    codex_app_server_auto: Literal["native", "hermes", "off"] = "native"
    codex_responses_native: bool = False
    codex_responses_compact_threshold: int = Field(200_000, ge=1)
    in_place: bool = True

    @field_validator("codex_app_server_auto", mode="before")
    @classmethod
    def _foldgate_alias(cls, value: object) -> object:
        """``foldgate`` names the gateway-threshold mode too (the seed calls it ``hermes``)."""
        return "hermes" if value == "foldgate" else value


class AuxiliaryModelSettings(ConnectionSettings):
    """One auxiliary task's model (``auxiliary.compression``): null model = auto-detect."""

    model: str | None = None
    provider: str = "auto"
    base_url: str | None = None
    api_key: str | None = None
    context_length: int | None = Field(None, ge=1024)

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith(("http://", "https://")) or len(value) <= len("https://")):
            raise ValueError("must be null or a URL starting with http:// or https://")
        return value


class AuxiliarySettings(StrictModel):
    compression: AuxiliaryModelSettings = Field(default_factory=AuxiliaryModelSettings)


class PromptCachingSettings(StrictModel):
    """``prompt_caching:`` — Anthropic cache markers."""

    enabled: bool = True
    cache_ttl: Literal["5m", "1h"] = "5m"


class ContextSettings(StrictModel):
    """``context:`` — which context engine runs."""

    engine: str = Field("compressor", min_length=1)
