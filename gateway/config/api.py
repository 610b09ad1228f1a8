"""``platforms.api:`` — the OpenAI-compatible HTTP API: where it listens and the keys it takes.

Each key is a person of its own (``api:<name>``) for access rules, budgets and rate limits, and the
sessions it opens are its own chats: two keys never share one. A key may be written ``${NAME}`` so the
secret sits in the environment rather than the file; it is read when the configuration is loaded, and a
variable that is not set fails ``config check`` naming the key's entry. A key shorter than
:data:`MIN_KEY_CHARS` is refused: it guards every conversation its holder has had, and the bot's spending.
"""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import Field, SecretStr, model_validator

from agent.settings import StrictModel
from gateway.config.errors import require
from gateway.config.tools import VARIABLE, expand

#: The fewest characters a key may have (144 bits from ``secrets.token_urlsafe(18)``).
MIN_KEY_CHARS = 24
#: A key's name: it names the person (``api:<name>``) and starts each of its chats' ids.
KEY_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
KeyName = Annotated[str, Field(pattern=KEY_NAME_PATTERN)]


class ApiKey(StrictModel):
    """``platforms.api.keys[]`` — one client's key and the name it goes by."""

    name: KeyName
    key: SecretStr

    def secret(self) -> str:
        """The key as clients send it, ``${NAME}`` read from the environment (empty when it is not set)."""
        try:
            return expand(self.key.get_secret_value(), os.environ)
        except KeyError:
            return ""


class ApiSettings(StrictModel):
    """``platforms.api:`` — the OpenAI-compatible API (``/v1/chat/completions``, ``/v1/models``)."""

    enabled: bool = False
    host: str = Field("127.0.0.1", min_length=1)
    port: Annotated[int, Field(ge=0, le=65535)] = 8645
    keys: list[ApiKey] = Field(default_factory=list)
    #: Whether a request's https image may be fetched from any address: off, only public addresses are (a key
    #: holder could otherwise have the gateway fetch loopback, private-network or cloud metadata addresses).
    fetch_private_urls: bool = False

    @model_validator(mode="after")
    def _keys_are_usable(self) -> ApiSettings:
        """Names unique, each key set and long enough; an enabled API has at least one (without a key it would
        answer nobody, or worse, everybody)."""
        problems: list[tuple[str, str]] = []
        seen: set[str] = set()
        for index, entry in enumerate(self.keys):
            where = f"keys[{index}]"
            if entry.name in seen:
                problems.append((f"{where}.name", f"{entry.name!r} names another key too: names must be unique"))
            seen.add(entry.name)
            unset = sorted(set(VARIABLE.findall(entry.key.get_secret_value())) - set(os.environ))
            if unset:
                problems.append((f"{where}.key", f"${{{unset[0]}}} is not set in the environment"))
            elif len(entry.secret()) < MIN_KEY_CHARS:
                problems.append(
                    (
                        f"{where}.key",
                        f"key {entry.name!r} is shorter than {MIN_KEY_CHARS} characters (e.g. the output of"
                        " `python3 -c 'import secrets; print(secrets.token_urlsafe(24))'`)",
                    )
                )
        if self.enabled and not self.keys:
            problems.append(
                ("keys", "at least one key is required when enabled is true: the API takes no request without one")
            )
        require(problems)
        return self

    def secrets(self) -> dict[str, str]:
        """Each key's secret by its name, as the server compares them."""
        return {entry.name: entry.secret() for entry in self.keys}
