"""``bots:`` — several bots in one deployment, each the top-level settings with its own changes on top.

A bot names the sections it changes (its platforms, model and prompt, summarizer, compression, caching,
context engine, tools, access rules); every key it leaves out is the top level's, so a file without
``bots:`` is one bot, exactly as before. Each bot's keys in Redis live under a prefix of its own
(``<redis.key_prefix>.<name>`` unless it sets ``key_prefix``), so two bots never see each other's
sessions, searches, inboxes, send budgets or activity. Redis, the web servers, delivery limits and media
bounds are the process's and stay at the top level.

Each bot's merged settings are validated when the file is loaded: a problem names the bot's place in
the list (``bots[1].model.base_url: ...``), and so do two bots that would be one (the same name, key
prefix, bot token or webhook port).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import InitSettingsSource

from agent.settings import StrictModel
from gateway.config.errors import require
from gateway.config.schema import drop_empty_sections
from gateway.config.sources import PROVIDER_KEY_ENV

#: :class:`gateway.config.Settings`, which holds ``bots:`` and so imports this module (not the other way round).
Settings = Any

#: The sections a bot may set; the rest of the file is the process's.
BOT_SECTIONS = ("model", "auxiliary", "compression", "prompt_caching", "context", "platforms", "tools", "access")
#: What a deployment without ``bots:`` calls its one bot (in logs, metrics labels and the operator view).
DEFAULT_BOT = "main"
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"


class BotSettings(StrictModel):
    """One entry of ``bots:``; each section holds only the keys that differ from the top level."""

    name: str = Field(pattern=NAME_PATTERN)
    #: Where the bot's keys live in Redis; None = ``<redis.key_prefix>.<name>``.
    key_prefix: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    model: dict[str, Any] = Field(default_factory=dict)
    auxiliary: dict[str, Any] = Field(default_factory=dict)
    compression: dict[str, Any] = Field(default_factory=dict)
    prompt_caching: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)
    platforms: dict[str, Any] = Field(default_factory=dict)
    tools: dict[str, Any] = Field(default_factory=dict)
    access: dict[str, Any] = Field(default_factory=dict)

    @field_validator(*BOT_SECTIONS, mode="before")
    @classmethod
    def _empty_is_nothing_changed(cls, value: Any) -> Any:
        """A section left empty (its keys commented out) changes nothing, as at the top level."""
        return {} if value is None else value


@dataclass(frozen=True)
class Bot:
    """A bot as it runs: its name and its whole settings (the top level with its changes merged in)."""

    name: str
    settings: Settings

    @property
    def key_prefix(self) -> str:
        return self.settings.redis.key_prefix


#: Maps a bot replaces whole instead of merging into the top level's: a budget is one limit, not a patch of one.
WHOLE = frozenset({("access", "budgets", "per_user"), ("access", "budgets", "per_chat")})


def merged(base: Mapping[str, Any], changes: Mapping[str, Any], path: tuple[str, ...] = ()) -> dict[str, Any]:
    """``base`` with ``changes`` laid over it, maps merged key by key (but those in :data:`WHOLE`); lists and
    values are replaced."""
    out = dict(base)
    for key, value in changes.items():
        inner = (*path, str(key))
        mergeable = isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and inner not in WHOLE
        out[key] = merged(out[key], value, inner) if mergeable else value
    return out


def resolve_bots(settings: Settings) -> list[Bot]:
    """The bots ``settings`` describes, each validated whole; without ``bots:``, one bot: the settings themselves.

    Raises the config requirement error naming every problem of every bot at once.
    """
    if not settings.bots:
        return [Bot(DEFAULT_BOT, settings)]
    base = settings.model_dump(exclude={"bots"})
    bots: list[tuple[int, Bot]] = []
    problems: list[tuple[str, str]] = []
    for index, entry in enumerate(settings.bots):
        given = drop_empty_sections(entry.model_dump(include=set(BOT_SECTIONS), exclude_unset=True), type(settings))
        changes = _own_provider_keys(given, base)
        prefix = entry.key_prefix or f"{settings.redis.key_prefix}.{entry.name}"
        layered = merged(base, {**changes, "redis": {"key_prefix": prefix}})
        try:
            bots.append((index, Bot(entry.name, _validated(type(settings), {**layered, "bots": []}))))
        except ValidationError as error:
            problems += [(f"bots[{index}].{key}", reason) for key, reason in _problems(error)]
    problems += _clashes(bots)
    require(problems)
    return [bot for _, bot in bots]


def _validated(settings_class: Any, values: dict[str, Any]) -> Settings:
    """``values`` as settings, and nothing else: the file and the environment were read once, for the top level
    (validating through the class's own sources would read them again, and lay them under the bot's values)."""
    return settings_class(_build_sources=((InitSettingsSource(settings_class, init_kwargs=values),), {}))


def _own_provider_keys(changes: dict[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """A bot that names another provider or endpoint than the top level, and no key, uses that provider's usual
    variable, never the top level's key (an OpenAI key is not sent to Anthropic, nor one endpoint's to another)."""
    pairs = [
        (changes.get("model"), base["model"]),
        ((changes.get("auxiliary") or {}).get("compression"), base["auxiliary"]["compression"]),
    ]
    for section, inherited in pairs:
        if not isinstance(section, dict) or "api_key" in section:
            continue
        provider = section.get("provider", inherited.get("provider"))
        if provider != inherited.get("provider") or section.get("base_url", inherited.get("base_url")) != inherited.get(
            "base_url"
        ):  # another endpoint: the top level's key is not for it
            variable = PROVIDER_KEY_ENV.get(str(provider))
            section["api_key"] = os.environ.get(variable) if variable else None
    return changes


def _problems(error: ValidationError) -> list[tuple[str, str]]:
    """A bot's validation errors as (dotted key, reason), the way the loader words the top level's."""
    out: list[tuple[str, str]] = []
    for item in error.errors(include_url=False):
        path = ".".join(str(part) for part in item["loc"])
        if item["type"] == "config_requirement":
            out += [(f"{path}.{key}" if path else key, reason) for key, reason in item["ctx"]["problems"]]
        elif item["type"] == "extra_forbidden":
            out.append((path, "unknown key"))
        else:
            out.append((path, item["msg"].removeprefix("Value error, ")))
    return out


def _clashes(bots: list[tuple[int, Bot]]) -> list[tuple[str, str]]:
    """Two bots that would be one: a name, a key prefix, a token or a webhook port used twice."""
    problems: list[tuple[str, str]] = []
    seen: dict[tuple[str, str], int] = {}

    def once(index: int, what: str, value: Any, key: str, advice: str) -> None:
        first = seen.setdefault((what, str(value)), index)
        if first != index:
            problems.append((f"bots[{index}].{key}", f"the same as bots[{first}]'s — {advice}"))

    for index, bot in bots:
        once(index, "name", bot.name, "name", "each bot needs a name of its own")
        once(index, "prefix", bot.key_prefix, "key_prefix", "two bots on one key prefix would share every session")
        telegram, discord = bot.settings.platforms.telegram, bot.settings.platforms.discord
        if telegram.enabled and telegram.token is not None:
            once(
                index,
                "telegram",
                telegram.token.get_secret_value(),
                "platforms.telegram.token",
                "one token is one Telegram bot; give each bot its own from @BotFather",
            )
            if telegram.mode == "webhook":
                once(
                    index,
                    "port",
                    f"{telegram.listen_host}:{telegram.listen_port}",
                    "platforms.telegram.listen_port",
                    "each webhook needs a port of its own",
                )
        if discord.enabled and discord.token is not None:
            once(
                index,
                "discord",
                discord.token.get_secret_value(),
                "platforms.discord.token",
                "one token is one Discord bot; give each bot its own",
            )
    return problems
