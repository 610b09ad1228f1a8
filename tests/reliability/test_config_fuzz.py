"""Whatever a config file or the environment holds — wrong types, unicode, huge numbers, nested junk,
keys that do not exist — ``foldgate config check`` answers with a clear error or success, never a traceback."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from gateway.cli import main
from gateway.config import ConfigError, Settings, _model_class, load_settings
from gateway.config.files import dump_yaml


def _leaf_paths(model: Any = Settings, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every dotted key the schema has, sections included (a section may be given junk too)."""
    paths: list[tuple[str, ...]] = []
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        paths.append(path)
        section = _model_class(info.annotation)
        if section is not None:
            paths += _leaf_paths(section, path)
    return paths


PATHS = _leaf_paths()

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**20, max_value=10**400),
    st.integers(max_value=-(10**20)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "\u202e",
            "\x00",
            "0.5",
            "true",
            "null",
            "[1, 2]",
            "{a: 1}",
            "~",
            "1e309",
            "-0",
            "redis://:pw@host:6379",
            "http://u:p@h",
            "unix://",
            "https://",
            "💾" * 50,
            "a" * 5000,
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), inner, max_size=4)
    ),
    max_leaves=12,
)
keys = st.one_of(st.sampled_from(PATHS), st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3).map(tuple))


def _build(entries: list[tuple[tuple[str, ...], Any]]) -> dict[Any, Any]:
    data: dict[Any, Any] = {}
    for path, value in entries:
        target = data
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = value
    return data


def _env_text(value: Any) -> str:
    return value if isinstance(value, str) else dump_yaml(value, default_flow_style=True).strip()


files = st.one_of(
    st.lists(st.tuples(keys, values), max_size=6).map(lambda entries: dump_yaml(_build(entries), allow_unicode=False)),
    st.text(max_size=200),  # raw text: broken YAML, tabs, anything
    st.sampled_from(
        [
            "- a\n- b\n",
            "42",
            "redis: [",
            "a: &x [*x]",
            "model:\n  model:\n    name: x\n",
            "\ufeffmodel: {}\n",
            "gateway: {metrics_port: 99999999999999999999999}",
            "redis: {url: 1}\nredis: {url: 2}\n",
        ]
    ),
)
environments = st.dictionaries(
    st.sampled_from(PATHS).map(lambda path: "FOLDGATE_" + "__".join(path).upper()), values.map(_env_text), max_size=3
)

FUZZ = hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def _write(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))  # a lone surrogate reaches the file as invalid UTF-8


@FUZZ
@given(text=files, env=environments)
def test_load_settings_gives_settings_or_a_config_error(tmp_path: Path, text: str, env: dict[str, str]) -> None:
    path = tmp_path / "config.yaml"
    _write(path, text)
    try:
        load_settings(path, env=env)
    except ConfigError as error:
        assert error.problems and all(isinstance(problem, str) and problem for problem in error.problems)
        str(error).encode("utf-8", "backslashreplace")  # printable as it is reported


@FUZZ
@given(text=files)
def test_config_check_answers_with_an_exit_code_never_a_traceback(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.yaml"
    _write(path, text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["config", "check", "--config", str(path)])
    assert code in (0, 1, 2)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    if code:
        assert err.getvalue().strip()  # a refusal always says why
