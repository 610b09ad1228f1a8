"""``memory:`` — what the bot remembers beyond the live transcript.

``memory.embeddings`` turns on a meaning-based ranking beside the keyword search of a chat's history:
every real user and assistant message is sent, in batches and off the reply path, to an
OpenAI-compatible ``POST {base_url}/embeddings``, and its vector is kept in Redis beside the chat's
messages. With ``provider: off`` (the default) nothing is sent, nothing is stored and search reads
keywords only.

The key may be written ``${NAME}`` so the secret sits in the environment; with ``provider: openai`` and
no key, ``OPENAI_API_KEY`` is used. A variable that is not set fails ``config check`` naming the key.

``memory.max_entry_chars`` bounds how long one entry the bot keeps about a person may be
(:mod:`gateway.store.memory`): a longer one is refused with the limit named, never cut, so what a person is told
was kept is what was kept.

``memory.max_tokens`` bounds the block of a person's memory each request carries (:mod:`gateway.memory.block`):
entries past it stay kept and findable with the model's ``memory_search``, and the person is told once.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from agent.settings import StrictModel
from gateway.config.errors import require
from gateway.config.tools import VARIABLE, expand

#: Where provider ``openai`` sends texts to be embedded.
OPENAI_EMBEDDINGS_URL = "https://api.openai.com/v1"
#: The variable provider ``openai`` takes its key from when ``api_key`` is not set.
OPENAI_KEY_VARIABLE = "OPENAI_API_KEY"


class EmbeddingSettings(StrictModel):
    """``memory.embeddings:`` — the endpoint that turns messages into vectors (``off``: keywords only)."""

    provider: Literal["off", "openai", "custom"] = "off"
    #: The embedding model, e.g. ``text-embedding-3-small``; changing it re-embeds every chat.
    model: str | None = Field(None, min_length=1)
    base_url: str | None = None
    api_key: SecretStr | None = None
    #: Texts sent in one request at most.
    batch_size: int = Field(64, ge=1, le=2048)
    #: Vector length to ask for (models that can shorten theirs, as text-embedding-3-*); None: the model's own.
    dimensions: int | None = Field(None, ge=1, le=8192)
    timeout_seconds: float = Field(30.0, gt=0)

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith(("http://", "https://")) or len(value) <= len("https://")):
            raise ValueError("must be null or a URL starting with http:// or https://")
        return value

    @model_validator(mode="after")
    def _usable_when_on(self) -> EmbeddingSettings:
        if self.provider == "off":
            return self
        missing: list[tuple[str, str]] = []
        if not self.model:
            missing.append(("model", f"required when provider is {self.provider} (e.g. text-embedding-3-small)"))
        if self.provider == "custom" and not self.base_url:
            missing.append(("base_url", "required when provider is custom (any OpenAI-compatible base URL)"))
        written = self.api_key.get_secret_value() if self.api_key else ""
        unset = sorted(set(VARIABLE.findall(written)) - set(os.environ))
        if unset:
            missing.append(("api_key", f"${{{unset[0]}}} is not set in the environment"))
        elif self.provider == "openai" and not self.key():
            missing.append(("api_key", f"required when provider is openai (or set {OPENAI_KEY_VARIABLE})"))
        require(missing)
        return self

    @property
    def enabled(self) -> bool:
        return self.provider != "off"

    @property
    def endpoint(self) -> str:
        """The base URL requests go to: the configured one, else OpenAI's for provider ``openai``."""
        return (self.base_url or OPENAI_EMBEDDINGS_URL).rstrip("/")

    def key(self) -> str:
        """The key as sent: ``${NAME}`` read from the environment, else ``OPENAI_API_KEY`` for provider
        ``openai``; empty when there is none (a local server may want none)."""
        written = self.api_key.get_secret_value() if self.api_key else ""
        if written:
            try:
                return expand(written, os.environ)
            except KeyError:
                return ""
        return os.environ.get(OPENAI_KEY_VARIABLE, "") if self.provider == "openai" else ""


class MemorySettings(StrictModel):
    """``memory:`` — what the bot remembers beyond the live transcript."""

    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    #: Characters at most of one entry: a longer one is refused, saying so, rather than cut.
    max_entry_chars: int = Field(500, ge=1)
    #: Tokens at most of the memory block a request carries (0: no block; entries are still kept and searchable).
    max_tokens: int = Field(1000, ge=0)
