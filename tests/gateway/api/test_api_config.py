"""``platforms.api``: the keys it takes, refused as ``config check`` refuses them, never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_settings
from gateway.config.loading import redacted

GOOD = "good-key-0123456789abcdefghij"


def problems_of(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    return caught.value.problems


def loaded(tmp_path: Path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return load_settings(path, env={})


def test_the_api_is_off_by_default_on_loopback(tmp_path):
    api = loaded(tmp_path, "{}").platforms.api
    assert (api.enabled, api.host, api.port, api.keys) == (False, "127.0.0.1", 8645, [])


def test_an_enabled_api_needs_a_key(tmp_path):
    (problem,) = problems_of(tmp_path, "platforms: {api: {enabled: true}}")
    assert problem.startswith("platforms.api.keys: at least one key is required")


def test_a_short_key_is_refused_naming_its_entry_never_the_key(tmp_path):
    (problem,) = problems_of(tmp_path, "platforms: {api: {keys: [{name: laptop, key: hunter2-short}]}}")
    assert problem.startswith("platforms.api.keys[0].key: key 'laptop' is shorter than 24 characters")
    assert "hunter2" not in problem


def test_a_key_of_the_wrong_type_is_not_echoed(tmp_path):
    problems = problems_of(tmp_path, "platforms: {api: {keys: [{name: laptop, key: [hunter2secretvalue]}]}}")
    assert problems and not any("hunter2" in problem for problem in problems)


def test_names_are_unique_and_plain(tmp_path):
    text = f"platforms: {{api: {{keys: [{{name: a, key: {GOOD}}}, {{name: a, key: {GOOD}x}}]}}}}"
    (problem,) = problems_of(tmp_path, text)
    assert problem.startswith("platforms.api.keys[1].name: 'a' names another key too")
    (problem,) = problems_of(tmp_path, f"platforms: {{api: {{keys: [{{name: 'a b', key: {GOOD}}}]}}}}")
    assert problem.startswith("platforms.api.keys[0].name = 'a b': must be a string matching")


def test_a_key_may_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FG_TEST_API_KEY", GOOD)
    api = loaded(
        tmp_path, "platforms: {api: {enabled: true, keys: [{name: ci, key: '${FG_TEST_API_KEY}'}]}}"
    ).platforms.api
    assert api.secrets() == {"ci": GOOD}
    monkeypatch.delenv("FG_TEST_API_KEY")
    (problem,) = problems_of(tmp_path, "platforms: {api: {keys: [{name: ci, key: '${FG_TEST_API_KEY}'}]}}")
    assert problem == "platforms.api.keys[0].key: ${FG_TEST_API_KEY} is not set in the environment"


def test_config_show_hides_the_keys(tmp_path):
    settings = loaded(tmp_path, f"platforms: {{api: {{keys: [{{name: laptop, key: {GOOD}}}]}}}}")
    shown = redacted(settings.model_dump())
    assert shown["platforms"]["api"]["keys"] == [{"name": "laptop", "key": "***"}]


def test_the_api_alone_is_a_platform_served(tmp_path):
    text = f"platforms: {{local: {{enabled: false}}, api: {{enabled: true, keys: [{{name: a, key: {GOOD}}}]}}}}"
    assert loaded(tmp_path, text).platforms.any_enabled


def test_a_key_person_may_be_named_in_access_rules(tmp_path):
    assert loaded(tmp_path, "access: {blocked: ['api:laptop']}").access.blocked == ["api:laptop"]
