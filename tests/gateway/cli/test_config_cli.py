"""``foldgate config check|show|set`` through the real command line entry point."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import CONVENTIONAL_ENV, PROVIDER_KEY_ENV, load_settings, parse_config_text
from tests.fakes.paths import REPO

REPO = REPO


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run each command in an empty directory with no configuration variables set."""
    for name in list(os.environ):
        if name.upper().startswith("FOLDGATE_") or name in CONVENTIONAL_ENV or name in PROVIDER_KEY_ENV.values():
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def named(monkeypatch: pytest.MonkeyPatch) -> None:
    """``$FOLDGATE_CONFIG`` names ./config.yaml, as a deployment names its file (``config set`` edits
    only a file that is named or the user's own)."""
    monkeypatch.setenv("FOLDGATE_CONFIG", "config.yaml")


@pytest.fixture
def shipped(tmp_path: Path, named: None) -> Path:
    """A copy of the documented default config.yaml in the working directory, named by ``$FOLDGATE_CONFIG``."""
    path = tmp_path / "config.yaml"
    shutil.copyfile(REPO / "config.yaml", path)
    return path


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    assert len(before.splitlines()) == len(after.splitlines())
    return [(old, new) for old, new in zip(before.splitlines(), after.splitlines()) if old != new]


# --------------------------------------------------------------------------- check


def test_check_accepts_the_shipped_file(shipped, capsys):
    assert main(["config", "check"]) == 0
    assert capsys.readouterr().out.strip() == "config OK: config.yaml"


def test_check_without_any_file_uses_the_defaults(capsys):
    assert main(["config", "check"]) == 0
    assert capsys.readouterr().out.strip() == "config OK: built-in defaults (no config file)"


def test_check_lists_every_problem_and_exits_1(tmp_path, capsys, monkeypatch):
    path = tmp_path / "bad.yaml"
    path.write_text("compression:\n  threshold: 1.5\n  tail_mode: short\n")
    monkeypatch.setenv("FOLDGATE_PROMPT_CACHING__CACHE_TTL", "10m")
    assert main(["--config", str(path), "config", "check"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"config invalid: {path} (3 problems)"
    assert "  compression.threshold = 1.5: must be between 0.0 and 1.0" in err
    assert "  compression.tail_mode = 'short': must be one of lean, legacy" in err
    assert "  prompt_caching.cache_ttl = '10m' (from FOLDGATE_PROMPT_CACHING__CACHE_TTL): must be one of 5m, 1h" in err


def test_check_reads_the_path_from_foldgate_config(tmp_path, capsys, monkeypatch):
    path = tmp_path / "elsewhere.yaml"
    path.write_text("context: {engine: lcm}\n")
    monkeypatch.setenv("FOLDGATE_CONFIG", str(path))
    assert main(["config", "check"]) == 0
    assert capsys.readouterr().out.strip() == f"config OK: {path}"


def test_check_exits_2_when_the_file_cannot_be_read(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "missing.yaml"), "config", "check"]) == 2
    assert "missing.yaml: cannot read the config file" in capsys.readouterr().err
    assert main(["--config", str(tmp_path), "config", "check"]) == 2  # a directory


def test_check_reports_a_yaml_syntax_error_with_its_line(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  name: x\n  provider: [local\n")
    assert main(["--config", str(path), "config", "check"]) == 1
    err = capsys.readouterr().err
    assert f"{path}: line 4, column 1: invalid YAML" in err


# --------------------------------------------------------------------------- show


def test_show_prints_the_effective_configuration_with_secrets_redacted(shipped, capsys, monkeypatch):
    text = shipped.read_text().replace(
        "    token: null                             # bot token from @BotFather",
        "    token: 123456:file-secret               # bot token from @BotFather",
    )
    shipped.write_text(text)
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "discord-env-secret")
    monkeypatch.setenv("FOLDGATE_MODEL__PROVIDER", "openrouter")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-env-secret")
    monkeypatch.setenv("FOLDGATE_COMPRESSION__THRESHOLD", "0.65")
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    for secret in ("file-secret", "discord-env-secret", "sk-or-env-secret"):
        assert secret not in out
    shown = parse_config_text(out, "shown")
    assert shown["platforms"]["telegram"]["token"] == "***"
    assert shown["platforms"]["discord"]["token"] == "***"
    assert shown["model"]["api_key"] == "***"
    assert shown["platforms"]["telegram"]["webhook_secret"] is None  # unset stays null, not "***"
    assert shown["compression"]["threshold"] == 0.65
    assert shown["model"]["provider"] == "openrouter"
    assert "# set from the environment: DISCORD_BOT_TOKEN, FOLDGATE_COMPRESSION__THRESHOLD" in out


def test_show_output_round_trips_to_the_same_settings(shipped, capsys, tmp_path):
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "\n    provider: 'off'\n" in out and "%YAML" not in out  # quoted where YAML 1.1 reads a boolean
    dumped = tmp_path / "dumped.yaml"
    dumped.write_text(out)
    assert load_settings(dumped, env={}) == load_settings(shipped, env={})


def test_show_refuses_an_invalid_configuration(shipped, capsys, monkeypatch):
    monkeypatch.setenv("FOLDGATE_GATEWAY__DEDUPE_TTL_SECONDS", "60")
    assert main(["config", "show"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "gateway.dedupe_ttl_seconds = '60' (from FOLDGATE_GATEWAY__DEDUPE_TTL_SECONDS)" in captured.err


# --------------------------------------------------------------------------- set


def test_set_edits_one_line_in_place_keeping_every_comment(shipped, capsys):
    before = shipped.read_text()
    assert main(["config", "set", "compression.codex_gpt55_autoraise", "false"]) == 0
    assert capsys.readouterr().out.strip() == "set compression.codex_gpt55_autoraise = false in config.yaml"
    after = shipped.read_text()
    ((old, new),) = changed_lines(before, after)
    assert old.split("#")[1] == new.split("#")[1]  # the comment is kept ...
    assert old.index("#") == new.index("#")  # ... in its column
    assert new.startswith("  codex_gpt55_autoraise: false ")
    assert load_settings(shipped, env={}).compression.codex_gpt55_autoraise is False


def test_set_parses_the_value_as_a_yaml_scalar(shipped):
    assert main(["config", "set", "compression.threshold", "0.65"]) == 0
    assert main(["config", "set", "model.context_length", "200000"]) == 0
    assert main(["config", "set", "auxiliary.compression.model", "gpt-4o-mini"]) == 0
    assert main(["config", "set", "model.name", "1.5"]) == 0  # a text key keeps the text as typed
    assert main(["config", "set", "platforms.telegram.allowed_user_ids", "[7, 8]"]) == 0
    assert main(["config", "set", "model.context_length", "null"]) == 0
    settings = load_settings(shipped, env={})
    assert settings.compression.threshold == 0.65
    assert settings.auxiliary.compression.model == "gpt-4o-mini"
    assert settings.model.name == "1.5"
    assert settings.platforms.telegram.allowed_user_ids == [7, 8]
    assert settings.model.context_length is None


def test_set_refuses_an_invalid_value_and_leaves_the_file_byte_identical(shipped, capsys):
    before = shipped.read_bytes()
    assert main(["config", "set", "compression.threshold", "1.5"]) == 1
    err = capsys.readouterr().err
    assert "compression.threshold not set, config.yaml left unchanged" in err
    assert "compression.threshold = 1.5: must be between 0.0 and 1.0" in err
    assert main(["config", "set", "prompt_caching.cache_ttl", "10m"]) == 1
    assert "prompt_caching.cache_ttl = '10m': must be one of 5m, 1h" in capsys.readouterr().err
    assert main(["config", "set", "platforms.telegram.enabled", "true"]) == 1  # no token anywhere
    assert "platforms.telegram.token: required when enabled is true" in capsys.readouterr().err
    assert shipped.read_bytes() == before
    assert [p.name for p in shipped.parent.iterdir()] == ["config.yaml"]  # no temporary left behind


def test_set_accepts_what_the_environment_completes(shipped, monkeypatch):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:abc")
    assert main(["config", "set", "platforms.telegram.enabled", "true"]) == 0
    assert "123:abc" not in shipped.read_text()  # the secret stays in the environment


def test_set_refuses_an_unknown_key_with_a_suggestion(shipped, capsys):
    before = shipped.read_bytes()
    assert main(["config", "set", "compression.treshold", "0.6"]) == 1
    assert "compression.treshold: unknown key (did you mean compression.threshold?)" in capsys.readouterr().err
    assert main(["config", "set", "compresion.threshold", "0.6"]) == 1
    assert "compresion.threshold: unknown key (did you mean compression.threshold?)" in capsys.readouterr().err
    assert main(["config", "set", "compression", "0.6"]) == 1
    assert "compression: is a section; set one of its keys" in capsys.readouterr().err
    assert shipped.read_bytes() == before


def test_set_inserts_a_missing_key_under_its_section(tmp_path, named):
    path = tmp_path / "config.yaml"
    path.write_text(
        "# mine\n"
        "compression:\n"
        "    threshold: 0.6   # four-space indent here\n"
        "\n"
        "# the model\n"
        "model:\n"
        "    name: foldgate-local\n"
    )
    assert main(["config", "set", "compression.tail_mode", "legacy"]) == 0
    assert main(["config", "set", "platforms.discord.shard_count", "2"]) == 0
    assert path.read_text() == (
        "# mine\n"
        "compression:\n"
        "    threshold: 0.6   # four-space indent here\n"
        "    tail_mode: legacy\n"
        "\n"
        "# the model\n"
        "model:\n"
        "    name: foldgate-local\n"
        "platforms:\n"
        "  discord:\n"
        "    shard_count: 2\n"
    )
    settings = load_settings(path, env={})
    assert settings.compression.tail_mode == "legacy" and settings.platforms.discord.shard_count == 2


def test_set_adds_per_model_thresholds_under_the_documented_example(shipped):
    before = shipped.read_text()
    assert main(["config", "set", "compression.model_thresholds.glm-5.2", "0.6"]) == 0
    assert main(["config", "set", "compression.model_thresholds.glm-5.2-1M", "0.8"]) == 0
    after = shipped.read_text()
    assert "    glm-5.2: 0.6\n    glm-5.2-1M: 0.8\n  #  glm-5.2: 0.60" in after
    assert [line for line in after.splitlines() if line not in before.splitlines()] == [
        "    glm-5.2: 0.6",
        "    glm-5.2-1M: 0.8",
    ]
    assert load_settings(shipped, env={}).compression.model_thresholds == {"glm-5.2": 0.6, "glm-5.2-1M": 0.8}
    assert main(["config", "set", "compression.model_thresholds.glm-5.2", "1.2"]) == 1


def test_set_refuses_when_there_is_no_config_file_and_points_to_init(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FOLDGATE_HOME", str(tmp_path / "home"))
    assert main(["config", "set", "context.engine", "lcm"]) == 2
    assert "`foldgate init` writes it to" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.yaml"))  # no one-key file appeared anywhere
    tracked = tmp_path / "config.yaml"  # e.g. a repository's own file in the working directory
    tracked.write_text("context:\n  engine: compressor\n")
    assert main(["config", "set", "context.engine", "lcm"]) == 2  # read, but never edited by chance
    assert tracked.read_text() == "context:\n  engine: compressor\n"
    assert main(["config", "set", "--config", str(tracked), "context.engine", "lcm"]) == 0  # named: edited
    assert "engine: lcm" in tracked.read_text()


def test_init_writes_the_users_own_file_which_is_then_found_from_any_directory(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("FOLDGATE_HOME", str(home))
    (tmp_path / "config.yaml").write_text("model: {name: from-the-working-directory}\n")
    assert main(["init"]) == 0
    own = home / "config.yaml"
    assert own.stat().st_mode & 0o777 == 0o600 and f"wrote {own}" in capsys.readouterr().out
    assert main(["config", "set", "model.name", "gpt-4.1"]) == 0  # edits the user's file, not ./config.yaml
    assert "in " + str(own) in capsys.readouterr().out
    assert load_settings().model.name == "gpt-4.1"
    assert "from-the-working-directory" in (tmp_path / "config.yaml").read_text()
    assert main(["init"]) == 1  # never overwrites what the user has
    assert "already exists" in capsys.readouterr().err
    assert load_settings().model.name == "gpt-4.1"
    assert main(["init", "--force"]) == 0 and load_settings().model.name == "foldgate-local"


def test_set_fixes_one_key_of_a_file_that_has_other_problems(tmp_path, capsys, named):
    path = tmp_path / "config.yaml"
    path.write_text("compression:\n  threshold: 1.5\n  tail_mode: short\n")
    assert main(["config", "set", "compression.threshold", "0.5"]) == 0
    err = capsys.readouterr().err
    assert "config.yaml still has problems elsewhere (1 problem)" in err
    assert "compression.tail_mode = 'short'" in err
    assert path.read_text() == "compression:\n  threshold: 0.5\n  tail_mode: short\n"


def test_set_refuses_to_edit_a_file_with_a_syntax_error(tmp_path, capsys, named):
    path = tmp_path / "config.yaml"
    path.write_text("compression:\n  threshold: [0.5\n")
    before = path.read_bytes()
    assert main(["config", "set", "compression.threshold", "0.6"]) == 1
    assert "invalid YAML" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_set_through_the_config_option_keeps_windows_line_endings(tmp_path):
    path = tmp_path / "win.yaml"
    path.write_bytes(b"compression:\r\n  threshold: 0.5\r\nmodel:\r\n  name: m\r\n")
    assert main(["--config", str(path), "config", "set", "compression.threshold", "0.7"]) == 0
    assert main(["--config", str(path), "config", "set", "compression.in_place", "false"]) == 0
    assert path.read_bytes() == b"compression:\r\n  threshold: 0.7\r\n  in_place: false\r\nmodel:\r\n  name: m\r\n"
