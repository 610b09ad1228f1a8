"""Loading and validating the configuration: defaults, every refusal, environment overrides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel, SecretStr
from ruamel.yaml.nodes import MappingNode, Node

from agent.settings import CompressionSettings
from gateway.config import ConfigError, ConfigFileError, Settings, load_settings
from gateway.config.files import config_yaml
from tests.fakes.paths import REPO

REPO = REPO
SHIPPED = REPO / "config.yaml"


@pytest.fixture
def write(tmp_path: Path):
    """Write YAML text to a config file and return its path."""

    def _write(text: str, name: str = "config.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write


def problems_of(path: Path, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env=env or {})
    return caught.value.problems


def model_leaf_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= model_leaf_keys(annotation, f"{prefix}{name}.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


def yaml_keys(node: Node, prefix: str = "") -> set[str]:
    keys = set()
    for key_node, value_node in node.value:
        dotted = f"{prefix}{key_node.value}"
        if isinstance(value_node, MappingNode) and not value_node.flow_style:
            keys |= yaml_keys(value_node, dotted + ".")
        else:
            keys.add(dotted)
    return keys


# --------------------------------------------------------------------------- the shipped file


def test_shipped_config_yaml_loads_to_the_model_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./config.yaml here: built-in defaults
    defaults = load_settings(env={})
    shipped = load_settings(SHIPPED, env={})
    assert shipped.model_dump() == defaults.model_dump()
    # and the defaults are the documented ones
    assert shipped.compression == CompressionSettings()
    assert shipped.model.provider == "local" and shipped.model.api_key is None
    assert shipped.platforms.local.enabled and not shipped.platforms.telegram.enabled
    assert shipped.redis.url == "" and shipped.redis.key_prefix == "fg"
    assert shipped.gateway.dedupe_ttl_seconds >= 86_400
    assert shipped.home_path == Path("~/.foldgate").expanduser()


def test_shipped_config_yaml_documents_exactly_the_model_keys():
    documented = yaml_keys(config_yaml().compose(SHIPPED.read_text(encoding="utf-8")))
    assert documented == model_leaf_keys(Settings)


def test_every_key_in_the_shipped_file_has_a_comment():
    text = SHIPPED.read_text(encoding="utf-8")
    key_lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert key_lines, "config.yaml has no keys"
    uncommented = [line for line in key_lines if "#" not in line]
    assert uncommented == []
    # the per-model map is shown as a commented-out example
    assert "#  glm-5.2: 0.60" in text


# --------------------------------------------------------------------------- refusals


INVALID = [
    ("compression: {threshold: 1.5}", "compression.threshold = 1.5", "between 0.0 and 1.0"),
    ("compression: {threshold: -0.1}", "compression.threshold = -0.1", "between 0.0 and 1.0"),
    ("compression: {target_ratio: 0.05}", "compression.target_ratio = 0.05", "between 0.1 and 0.8"),
    ("compression: {target_ratio: 0.9}", "compression.target_ratio = 0.9", "between 0.1 and 0.8"),
    ("compression: {tail_mode: short}", "compression.tail_mode = 'short'", "one of lean, legacy"),
    ("compression: {protect_last_n: 0}", "compression.protect_last_n = 0", "at least 1"),
    ("compression: {min_tail_user_messages: 0}", "compression.min_tail_user_messages = 0", "at least 1"),
    ("compression: {protect_first_n: 5}", "compression.protect_first_n = 5", "3 (fixed)"),
    ("compression: {idle_compact_after_seconds: -1}", "compression.idle_compact_after_seconds = -1", "at least 0"),
    (
        "compression: {codex_app_server_auto: sometimes}",
        "compression.codex_app_server_auto = 'sometimes'",
        "one of native, hermes, off",
    ),
    (
        "compression: {codex_responses_compact_threshold: 0}",
        "compression.codex_responses_compact_threshold = 0",
        "at least 1",
    ),
    (
        "compression: {model_thresholds: {glm-5.2: 1.2}}",
        "compression.model_thresholds.glm-5.2 = 1.2",
        "between 0.0 and 1.0",
    ),
    ("compression: {threshold: half}", "compression.threshold = 'half'", "a number between 0.0 and 1.0"),
    ("compression: {enabled: maybe}", "compression.enabled = 'maybe'", "true or false"),
    ("prompt_caching: {cache_ttl: 10m}", "prompt_caching.cache_ttl = '10m'", "one of 5m, 1h"),
    ("platforms: {local: {port: 70000}}", "platforms.local.port = 70000", "between 0 and 65535"),
    ("platforms: {telegram: {listen_port: -1}}", "platforms.telegram.listen_port = -1", "between 0 and 65535"),
    ("gateway: {dedupe_ttl_seconds: 3600}", "gateway.dedupe_ttl_seconds = 3600", "at least 86400"),
    ("gateway: {lock_ttl_seconds: 0}", "gateway.lock_ttl_seconds = 0", "at least 1"),
    ("gateway: {max_concurrent_chats: many}", "gateway.max_concurrent_chats = 'many'", "a whole number at least 1"),
    ("auxiliary: {compression: {timeout_seconds: 0}}", "auxiliary.compression.timeout_seconds = 0", "greater than 0"),
    ("auxiliary: {compression: {context_length: 512}}", "auxiliary.compression.context_length = 512", "at least 1024"),
    ("model: {context_length: 100}", "model.context_length = 100", "at least 1024"),
    (
        "model: {provider: gemini}",
        "model.provider = 'gemini'",
        "one of local, openai, anthropic, openrouter, openai-codex, custom",
    ),
    ("redis: {url: 'http://localhost:6379'}", "redis.url = 'http://localhost:6379'", "redis://, rediss:// or unix://"),
    ("redis: {key_prefix: 'a:b'}", "redis.key_prefix = 'a:b'", "matching"),
    ("platforms: {telegram: {mode: push}}", "platforms.telegram.mode = 'push'", "one of polling, webhook"),
    ("platforms: {discord: {allowed_guild_ids: [5, -1]}}", "platforms.discord.allowed_guild_ids[1] = -1", "at least 1"),
    ("gateway: {admin_token: short, metrics_port: 9100}", "gateway.admin_token = ***", "at least 16 characters"),
]


@pytest.mark.parametrize(("text", "key_and_value", "allowed"), INVALID, ids=[case[1] for case in INVALID])
def test_invalid_value_is_refused_naming_key_value_and_range(write, text, key_and_value, allowed):
    problems = problems_of(write(text))
    assert len(problems) == 1, problems
    assert problems[0].startswith(key_and_value + ": "), problems[0]
    assert allowed in problems[0]


def test_the_operator_token_needs_the_port_it_is_served_on(write):
    assert problems_of(write("gateway: {admin_token: a-long-enough-operator-token}")) == [
        "gateway.admin_token: the operator view is served on gateway.metrics_port, which is 0 (off): set a port"
    ]
    settings = load_settings(
        write("gateway: {metrics_port: 9100}"), env={"FOLDGATE_GATEWAY__ADMIN_TOKEN": "a-long-enough-operator-token"}
    )
    assert settings.gateway.admin_token.get_secret_value() == "a-long-enough-operator-token"


def test_the_web_chat_binds_this_machine_only(write):
    (problem,) = problems_of(write("platforms: {local: {web: true, host: 0.0.0.0}}"))
    assert problem.startswith("platforms.local.host: the web chat has no login, so it binds a loopback address only")
    for host in ("127.0.0.1", "::1", "localhost"):
        assert load_settings(write(f"platforms: {{local: {{web: true, host: '{host}'}}}}"), env={}).platforms.local.web
    assert load_settings(write("platforms: {local: {web: false, host: 0.0.0.0}}"), env={})  # the terminal binds nothing


def test_foldgate_is_accepted_as_the_gateway_threshold_mode(write):
    settings = load_settings(write("compression: {codex_app_server_auto: foldgate}"), env={})
    assert settings.compression.codex_app_server_auto == "hermes"


def test_unknown_key_gets_a_close_suggestion(write):
    assert problems_of(write("compression:\n  treshold: 0.6\n")) == [
        "compression.treshold: unknown key (did you mean compression.threshold?)"
    ]
    assert problems_of(write("compresion:\n  threshold: 0.6\n")) == [
        "compresion: unknown key (did you mean compression?)"
    ]


def test_unknown_key_without_a_close_match_lists_the_valid_keys(write):
    (problem,) = problems_of(write("redis:\n  password: x\n"))
    assert problem.startswith("redis.password: unknown key (valid keys here: url, key_prefix, cluster)")


def test_all_problems_are_reported_together(write):
    path = write(
        "compression:\n"
        "  threshold: 1.5\n"
        "  tail_mode: short\n"
        "  treshold: 0.4\n"
        "prompt_caching:\n"
        "  cache_ttl: 10m\n"
        "gateway:\n"
        "  dedupe_ttl_seconds: 60\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={"FOLDGATE_PLATFORMS__LOCAL__PORT": "99999"})
    problems = caught.value.problems
    assert len(problems) == 6
    expected = [
        "compression.threshold = 1.5",
        "compression.tail_mode = 'short'",
        "compression.treshold: unknown key",
        "prompt_caching.cache_ttl = '10m'",
        "gateway.dedupe_ttl_seconds = 60",
        "platforms.local.port = '99999' (from FOLDGATE_PLATFORMS__LOCAL__PORT)",
    ]
    for start in expected:
        assert any(problem.startswith(start) for problem in problems), (start, problems)
    assert str(caught.value).splitlines() == problems


def test_cross_key_requirements_name_the_missing_key(write):
    problems = problems_of(write("platforms:\n  telegram: {enabled: true, mode: webhook}\nmodel: {provider: custom}\n"))
    assert "platforms.telegram.token: required when enabled is true (or set TELEGRAM_BOT_TOKEN)" in problems
    assert "platforms.telegram.webhook_url: required when mode is webhook" in problems
    assert any(
        problem.startswith("platforms.telegram.webhook_secret: required when mode is webhook") for problem in problems
    )
    assert any(problem.startswith("model.base_url: required when provider is custom") for problem in problems)


def test_a_provider_that_needs_a_key_is_refused_without_one(write):
    (problem,) = problems_of(write("model: {provider: anthropic, name: claude-sonnet-4}"))
    assert problem == "model.api_key: required when provider is anthropic (or set ANTHROPIC_API_KEY)"


def test_at_least_one_platform_must_be_served(write):
    (problem,) = problems_of(write("platforms: {local: {enabled: false}}"))
    assert problem == "platforms: enable at least one of telegram, discord, local, api"


def test_a_secret_is_never_echoed_in_an_error(write):
    (problem,) = problems_of(write("platforms: {telegram: {webhook_secret: 'hunter 2!'}}"))
    assert problem.startswith("platforms.telegram.webhook_secret = ***: must be 1-256 characters")
    assert "hunter" not in problem


def test_yaml_syntax_error_names_the_file_and_line(write):
    path = write("compression:\n  threshold: 0.5\n   tail_mode: lean\n")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}: line 3, column ")
    assert "invalid YAML" in problem


def test_a_key_given_twice_is_refused_with_both_lines(write):
    path = write("compression:\n  threshold: 0.5\n  enabled: true\n  threshold: 0.7\n")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}: line 4, column 3: ")
    assert "duplicate key 'threshold' (first at line 2)" in problem


def test_the_file_is_read_as_yaml_1_1(write):
    settings = load_settings(write("compression: {enabled: no, in_place: on, codex_responses_native: yes}"), env={})
    assert not settings.compression.enabled and settings.compression.in_place
    assert settings.compression.codex_responses_native
    assert (
        load_settings(write("media: {transcription: {provider: 'off'}}"), env={}).media.transcription.provider == "off"
    )
    assert problems_of(write("media: {transcription: {provider: off}}")) == [
        "media.transcription.provider = false: must be one of off, openai, custom"
    ]


def test_a_plain_value_that_only_looks_like_a_number_is_refused_with_its_line(write):
    path = write("redis:\n  key_prefix: -_\n")
    assert problems_of(path) == [
        f"{path}: line 2, column 15: invalid YAML: '-_' looks like a number but is none; quote it if it is text"
    ]


def test_a_top_level_that_is_not_a_mapping_is_refused(write):
    (problem,) = problems_of(write("- compression\n- model\n"))
    assert "the top level must be a mapping of sections" in problem
    (problem,) = problems_of(write("n: 1\n"))  # YAML 1.1 reads n as false
    assert problem.endswith("top-level key False is not a section name (compression:, model:, ...)")


def test_a_section_with_every_key_commented_out_means_the_defaults(write):
    settings = load_settings(write("compression:\n  # threshold: 0.7\nplatforms:\n  telegram:\n"), env={})
    assert settings.compression == CompressionSettings()
    assert settings.platforms.telegram.enabled is False


def test_an_unreadable_file_is_a_file_error(tmp_path):
    with pytest.raises(ConfigFileError) as caught:
        load_settings(tmp_path / "missing.yaml", env={})
    assert "missing.yaml: cannot read the config file" in str(caught.value)
    with pytest.raises(ConfigFileError):
        load_settings(tmp_path, env={})  # a directory


# --------------------------------------------------------------------------- environment


def test_environment_beats_the_file_nested_and_top_level(write):
    path = write(
        "compression:\n  threshold: 0.6\n  tail_mode: lean\n"
        "prompt_caching:\n  cache_ttl: 5m\n"
        "platforms:\n  telegram:\n    enabled: true\n    token: from-file\n"
    )
    settings = load_settings(
        path,
        env={
            "FOLDGATE_COMPRESSION__THRESHOLD": "0.7",
            "FOLDGATE_PLATFORMS__TELEGRAM__TOKEN": "from-env",
            "FOLDGATE_PROMPT_CACHING": '{"cache_ttl": "1h"}',  # a whole section as JSON
        },
    )
    assert settings.compression.threshold == 0.7
    assert settings.compression.tail_mode == "lean"  # the rest of the section still comes from the file
    assert settings.platforms.telegram.token.get_secret_value() == "from-env"
    assert settings.prompt_caching.cache_ttl == "1h"


def test_environment_names_are_case_insensitive_and_lists_take_commas_or_json(write):
    settings = load_settings(
        write(""),
        env={
            "foldgate_compression__tail_mode": "legacy",
            "FOLDGATE_PLATFORMS__TELEGRAM__ALLOWED_USER_IDS": "11, 12",
            "FOLDGATE_PLATFORMS__DISCORD__ALLOWED_GUILD_IDS": "[21, 22]",
            "FOLDGATE_COMPRESSION__MODEL_THRESHOLDS": '{"glm-5.2": 0.6}',
            "FOLDGATE_MODEL__CONTEXT_LENGTH": "null",
        },
    )
    assert settings.compression.tail_mode == "legacy"
    assert settings.platforms.telegram.allowed_user_ids == [11, 12]
    assert settings.platforms.discord.allowed_guild_ids == [21, 22]
    assert settings.compression.model_thresholds == {"glm-5.2": 0.6}
    assert settings.model.context_length is None


def test_environment_problems_name_the_variable(write):
    env = {
        "FOLDGATE_COMPRESSION__THRESHOLD": "1.5",
        "FOLDGATE_COMPRESSION__TRESHOLD": "0.5",
        "FOLDGATE_GATEWAY__METRICS_PORT": "http",
    }
    problems = problems_of(write(""), env)
    assert (
        "compression.threshold = '1.5' (from FOLDGATE_COMPRESSION__THRESHOLD): must be between 0.0 and 1.0" in problems
    )
    assert (
        "compression.treshold (from FOLDGATE_COMPRESSION__TRESHOLD): unknown key (did you mean compression.threshold?)"
        in problems
    )
    assert (
        "gateway.metrics_port = 'http' (from FOLDGATE_GATEWAY__METRICS_PORT): "
        "must be a whole number between 0 and 65535" in problems
    )


def test_an_unknown_section_in_the_environment_is_reported(write):
    (problem,) = problems_of(write(""), {"FOLDGATE_COMPRESSON__THRESHOLD": "0.5"})
    assert problem == "compresson (from FOLDGATE_COMPRESSON__THRESHOLD): unknown key (did you mean compression?)"


def test_conventional_variables_fill_in_and_foldgate_ones_win(write):
    path = write("platforms:\n  telegram: {enabled: true}\n  discord: {enabled: true}\n")
    settings = load_settings(
        path,
        env={
            "TELEGRAM_BOT_TOKEN": "tg-conventional",
            "DISCORD_BOT_TOKEN": "dc-conventional",
            "FOLDGATE_PLATFORMS__DISCORD__TOKEN": "dc-foldgate",
            "FOLDGATE_HOME": "/srv/foldgate",
            "FOLDGATE_CONFIG": "ignored-because-a-path-is-given.yaml",
        },
    )
    assert settings.platforms.telegram.token.get_secret_value() == "tg-conventional"
    assert settings.platforms.discord.token.get_secret_value() == "dc-foldgate"
    assert settings.home_path == Path("/srv/foldgate")


def test_provider_key_variables_apply_only_to_their_provider(write):
    env = {"OPENAI_API_KEY": "sk-openai", "ANTHROPIC_API_KEY": "sk-ant"}
    openai = load_settings(write("model: {provider: openai, name: gpt-4o}"), env=env)
    assert openai.model.api_key.get_secret_value() == "sk-openai"
    anthropic = load_settings(write("model: {provider: anthropic, name: claude-sonnet-4}"), env=env)
    assert anthropic.model.api_key.get_secret_value() == "sk-ant"
    # the provider may itself come from the environment
    routed = load_settings(write(""), env={**env, "FOLDGATE_MODEL__PROVIDER": "openai"})
    assert routed.model.api_key.get_secret_value() == "sk-openai"
    local = load_settings(write(""), env=env)
    assert local.model.api_key is None
    summarizer = load_settings(
        write("auxiliary: {compression: {provider: openrouter}}"), env={"OPENROUTER_API_KEY": "sk-or"}
    )
    assert summarizer.auxiliary.compression.api_key == "sk-or"
    assert summarizer.model.api_key is None


def test_unrelated_foldgate_variables_are_not_keys(write):
    settings = load_settings(write(""), env={"FOLDGATE_CONFIG": "x.yaml", "FOLDGATE_DEBUG": "1"})
    assert settings.compression.enabled


# --------------------------------------------------------------------------- where the file comes from


def test_config_path_resolution(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={}).compression.threshold == 0.5  # no file anywhere: built-in defaults
    (tmp_path / "config.yaml").write_text("compression: {threshold: 0.6}\n")
    assert load_settings(env={}).compression.threshold == 0.6  # ./config.yaml
    other = tmp_path / "other.yaml"
    other.write_text("compression: {threshold: 0.7}\n")
    assert load_settings(env={"FOLDGATE_CONFIG": str(other)}).compression.threshold == 0.7
    explicit = tmp_path / "explicit.yaml"
    explicit.write_text("compression: {threshold: 0.8}\n")
    assert load_settings(explicit, env={"FOLDGATE_CONFIG": str(other)}).compression.threshold == 0.8
    with pytest.raises(ConfigFileError):
        load_settings(env={"FOLDGATE_CONFIG": str(tmp_path / "gone.yaml")})


def test_settings_constructed_directly_layer_kwargs_over_env_over_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("compression: {threshold: 0.6, tail_mode: legacy}\nmodel: {name: m1}\n")
    monkeypatch.setenv("FOLDGATE_COMPRESSION__THRESHOLD", "0.7")
    monkeypatch.setenv("FOLDGATE_MODEL__NAME", "m2")
    settings = Settings(model={"name": "m3"})
    assert settings.model.name == "m3"
    assert settings.compression.threshold == 0.7
    assert settings.compression.tail_mode == "legacy"


def test_secrets_are_secret_strings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(env={})
    settings.platforms.telegram.token = "123:abc"
    assert isinstance(settings.platforms.telegram.token, SecretStr)
    assert "123:abc" not in repr(settings)


def test_every_yaml_example_of_the_readme_loads(tmp_path, monkeypatch):
    """What the README shows a reader to put in the file is a valid file (secrets from the environment)."""
    for name in ("TRACKER_TOKEN", "SEARCH_KEY"):  # the MCP example reads these at start
        monkeypatch.setenv(name, "set")
    monkeypatch.setenv("FOLDGATE_API_KEY_LAPTOP", "an-api-key-of-24-characters-or-more")  # the API example's key
    readme = (SHIPPED.parent / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.S)
    assert len(blocks) >= 3
    env = {"OPENAI_API_KEY": "sk-test", "TRACKER_TOKEN": "t"}
    bot_counts = []
    for block in blocks:
        path = tmp_path / "config.yaml"
        path.write_text(block, encoding="utf-8")
        bot_counts.append(len(load_settings(path, env=env).each_bot()))
    assert max(bot_counts) >= 2  # the several-bots example is among them
