"""The layers under keyword arguments, highest first: ``FOLDGATE_`` variables, the conventional ones
(bot tokens, provider keys, ``FOLDGATE_HOME``), then the file — pydantic-settings' own sources, each
given the environment to read (``load_settings(env=...)``) and recording which variable set which key."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, InitSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

from agent import json_codec
from gateway.config.files import ENV_NESTING, ENV_PREFIX, HOME_ENV
from gateway.config.schema import drop_empty_sections, schema_at

#: provider -> the variable its API key conventionally lives in
PROVIDER_KEY_ENV: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
}
#: conventional variable -> the key it sets (its FOLDGATE_ form wins)
CONVENTIONAL_ENV: dict[str, tuple[str, ...]] = {
    HOME_ENV: ("gateway", "home"),
    "TELEGRAM_BOT_TOKEN": ("platforms", "telegram", "token"),
    "DISCORD_BOT_TOKEN": ("platforms", "discord", "token"),
}
#: sections whose ``api_key`` falls back to the usual variable of the ``provider`` configured there
_KEYED_SECTIONS: tuple[tuple[str, ...], ...] = (("model",), ("auxiliary", "compression"), ("media", "transcription"))
#: key path -> the variable that set it, for "(from VARIABLE)" in problems
Origins = dict[tuple[str, ...], str]


def _put(target: dict[str, Any], path: Sequence[str], value: Any) -> None:
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = value


def _lookup(data: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


def _is_list(field: FieldInfo | None) -> bool:
    annotation = field.annotation if field is not None else None
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    return any(get_origin(member) is list for member in members)


def _is_object(text: str | None) -> bool:
    try:
        return isinstance(json_codec.loads(text or ""), dict)
    except ValueError:
        return False


class _GivenEnvironment(EnvSettingsSource):
    """pydantic-settings' environment source reading a given mapping rather than ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str], **options: Any) -> None:
        self.environ = environ
        super().__init__(settings_cls, **options)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self.environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class FoldgateEnvSource(_GivenEnvironment):
    """``FOLDGATE_<SECTION>__<KEY>`` variables: the library's prefix, ``__`` nesting, case-insensitive
    names, JSON for lists, maps and sections, and ``null`` (all set in ``Settings.model_config``).

    The house rules on top: a list also takes ``1,2,3`` (and empty text: no items); text that is not
    the JSON a list or section needs is passed on as text, so validation names the variable rather
    than the library failing; a variable more specific than another wins where that one holds no
    JSON object; ``null`` may have spaces around it; a misspelt section is reported, not ignored.
    Variables without ``__`` that name no section (``FOLDGATE_CONFIG``, ``FOLDGATE_HOME``) are not keys.
    """

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        spaced_null = {name: "null" for name, value in environ.items() if value.strip() == "null"}
        super().__init__(settings_cls, {**environ, **spaced_null}, case_sensitive=False)
        self.origins: Origins = {}
        for name in environ:
            if name.upper().startswith(ENV_PREFIX):
                path = tuple(name[len(ENV_PREFIX) :].lower().split(ENV_NESTING))
                if len(path) > 1 or path[0] in settings_cls.model_fields:
                    self.origins[path] = name

    def _load_env_vars(self) -> Mapping[str, str | None]:
        found = super()._load_env_vars()
        # FOLDGATE_X beside FOLDGATE_X__Y: the library merges them when X holds a JSON object; anything
        # else in X (empty, null, junk) gives way to the specific variable instead of hiding it
        return {
            name: value
            for name, value in found.items()
            if _is_object(value) or not any(other.startswith(name + self.env_nested_delimiter) for other in found)
        }

    def _field(self, path: Sequence[str]) -> FieldInfo | None:
        field: Any = self.settings_cls.model_fields.get(path[0])
        for key in path[1:]:
            field = self.next_field(field, key, self.case_sensitive)
        return field if isinstance(field, FieldInfo) else None

    def decode_complex_value(self, field_name: str, field: FieldInfo | None, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError:
            if _is_list(field) and not value.lstrip().startswith("["):
                return [part.strip() for part in value.split(",") if part.strip()]
            return value

    def __call__(self) -> dict[str, Any]:
        values = super().__call__()
        for path, name in sorted(self.origins.items()):
            if path[0] not in self.settings_cls.model_fields:
                _put(values, path, self.environ[name])
            elif self.environ[name] == "" and _is_list(self._field(path)):
                _put(values, path, [])  # the library decodes only non-empty text; an empty list is a list too
        return values


class ConventionalEnvSource(_GivenEnvironment):
    """The variables people set by habit (bot tokens, provider API keys), below the ``FOLDGATE_`` ones.

    A provider key applies only where that provider is configured — ``OPENAI_API_KEY`` never ends up
    sent to Anthropic — so the provider is read from the layers above and the file first.
    """

    def __init__(
        self, settings_cls: type[BaseSettings], environ: Mapping[str, str], file_data: Mapping[str, Any]
    ) -> None:
        super().__init__(settings_cls, environ, case_sensitive=True, env_prefix="", env_ignore_empty=True)
        self.file_data = file_data
        self.origins: Origins = {}

    def _provider(self, section: tuple[str, ...]) -> Any:
        path = section + ("provider",)
        for layer in (self.current_state, self.file_data):
            if (provider := _lookup(layer, path)) is not None:
                return provider
        return (schema_at(self.settings_cls, path) or {}).get("default")

    def __call__(self) -> dict[str, Any]:
        wanted = dict(CONVENTIONAL_ENV)
        for section in _KEYED_SECTIONS:
            provider = self._provider(section)
            if isinstance(provider, str) and provider in PROVIDER_KEY_ENV:
                wanted[PROVIDER_KEY_ENV[provider]] = section + ("api_key",)
        values: dict[str, Any] = {}
        for variable, path in wanted.items():
            if self.env_vars.get(variable) is not None:
                _put(values, path, self.env_vars[variable])
                self.origins[path] = variable
        return values


class YamlFileSource(InitSettingsSource):
    """The parsed config file, below the environment; an empty section in it means the defaults."""

    def __init__(self, settings_cls: type[BaseSettings], data: Mapping[str, Any]) -> None:
        super().__init__(settings_cls, init_kwargs=drop_empty_sections(data, settings_cls))


def layered_sources(
    settings_cls: type[BaseSettings], environ: Mapping[str, str], file_data: Mapping[str, Any]
) -> tuple[FoldgateEnvSource, ConventionalEnvSource, YamlFileSource]:
    return (
        FoldgateEnvSource(settings_cls, environ),
        ConventionalEnvSource(settings_cls, environ, file_data),
        YamlFileSource(settings_cls, file_data),
    )


def origins_of(sources: Sequence[Any]) -> Origins:
    """Which variable set which key, the ``FOLDGATE_`` ones winning as they do in the values."""
    found: Origins = {}
    for source in reversed(sources):
        found.update(getattr(source, "origins", {}))
    return found
