"""Settings: ``config.yaml`` plus the environment, validated; and the ``foldgate config`` command.

- :mod:`.models` — the sections and :class:`Settings`, with the order of the layers;
- :mod:`.sources` — the environment and file layers, on pydantic-settings' own sources;
- :mod:`.files` — where the file is and parsing it; :mod:`.schema` — what each key allows;
- :mod:`.loading` — :func:`load_settings` and the problem lines of a :class:`ConfigError`;
- :mod:`.edit` — ``config set`` on ruamel.yaml's round trip; :mod:`.command` — the subcommand.
"""

from agent.settings import (
    AuxiliarySettings,
    CompressionSettings,
    ConnectionSettings,
    ContextSettings,
    PromptCachingSettings,
    StrictModel,
)
from gateway.config import schema
from gateway.config.command import config_command, config_file_to_change, render_effective
from gateway.config.edit import KeyRef, parse_value, resolve_key, set_config_value, set_in_yaml
from gateway.config.errors import ConfigError, ConfigFileError
from gateway.config.files import (
    CONFIG_PATH_ENV,
    DEFAULT_CONFIG_FILE,
    ENV_NESTING,
    ENV_PREFIX,
    HOME_ENV,
    parse_config_text,
    read_config,
    resolve_config_path,
    user_config_path,
)
from gateway.config.loading import (
    REDACTED,
    SECRET_KEYS,
    describe_validation_error,
    load_settings,
    redacted,
    url_password_hidden,
)
from gateway.config.models import (
    DeliverySettings,
    DiscordSendLimits,
    DiscordSettings,
    GatewaySettings,
    LocalPlatformSettings,
    ModelSettings,
    PlatformsSettings,
    Port,
    PositiveId,
    RedisSettings,
    Settings,
    TelegramSendLimits,
    TelegramSettings,
)
from gateway.config.sources import (
    CONVENTIONAL_ENV,
    PROVIDER_KEY_ENV,
    ConventionalEnvSource,
    FoldgateEnvSource,
    YamlFileSource,
)

_model_class = schema._model_class  # tests/reliability/test_config_fuzz.py walks the model classes with it

__all__ = [
    "AuxiliarySettings",
    "CompressionSettings",
    "ConnectionSettings",
    "ContextSettings",
    "PromptCachingSettings",
    "StrictModel",
    "DeliverySettings",
    "DiscordSendLimits",
    "DiscordSettings",
    "GatewaySettings",
    "LocalPlatformSettings",
    "ModelSettings",
    "PlatformsSettings",
    "Port",
    "PositiveId",
    "RedisSettings",
    "Settings",
    "TelegramSendLimits",
    "TelegramSettings",
    "ConfigError",
    "ConfigFileError",
    "describe_validation_error",
    "load_settings",
    "redacted",
    "url_password_hidden",
    "REDACTED",
    "SECRET_KEYS",
    "CONFIG_PATH_ENV",
    "DEFAULT_CONFIG_FILE",
    "ENV_NESTING",
    "ENV_PREFIX",
    "HOME_ENV",
    "parse_config_text",
    "read_config",
    "resolve_config_path",
    "user_config_path",
    "CONVENTIONAL_ENV",
    "PROVIDER_KEY_ENV",
    "ConventionalEnvSource",
    "FoldgateEnvSource",
    "YamlFileSource",
    "KeyRef",
    "parse_value",
    "resolve_key",
    "set_config_value",
    "set_in_yaml",
    "config_command",
    "config_file_to_change",
    "render_effective",
]
