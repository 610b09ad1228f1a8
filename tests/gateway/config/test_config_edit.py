"""Editing one key of a YAML file in place: only that key's text changes, the value reads back exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml.nodes import MappingNode, Node

from gateway.config import ConfigError, parse_config_text, set_in_yaml
from gateway.config.files import config_yaml
from tests.fakes.paths import REPO

SHIPPED_TEXT = (REPO / "config.yaml").read_text(encoding="utf-8")


def leaf_paths(node: Node, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for key_node, value_node in node.value:
        path = prefix + (key_node.value,)
        if isinstance(value_node, MappingNode) and not value_node.flow_style:
            paths += leaf_paths(value_node, path)
        else:
            paths.append(path)
    return paths


def lookup(data, path):
    for key in path:
        data = data[key]
    return data


def read(text):
    """The text as the gateway reads a config file."""
    return parse_config_text(text, "config.yaml")


SHIPPED_LEAVES = leaf_paths(config_yaml().compose(SHIPPED_TEXT))


@pytest.mark.parametrize("path", SHIPPED_LEAVES, ids=[".".join(p) for p in SHIPPED_LEAVES])
def test_setting_any_documented_key_changes_only_its_own_line(path):
    new_text = set_in_yaml(SHIPPED_TEXT, path, "changed value")
    old_lines, new_lines = SHIPPED_TEXT.splitlines(), new_text.splitlines()
    assert len(old_lines) == len(new_lines)
    changed = [(old, new) for old, new in zip(old_lines, new_lines) if old != new]
    assert len(changed) == 1
    old, new = changed[0]
    assert old.split(":")[0] == new.split(":")[0]  # same key, same indentation
    assert old[old.index("#") :] == new[new.index("#") :]  # comment kept
    assert lookup(read(new_text), path) == "changed value"


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_any_text_value_reads_back_exactly(value):
    new_text = set_in_yaml(SHIPPED_TEXT, ("model", "name"), value)
    assert read(new_text)["model"]["name"] == value
    untouched = [line for line in SHIPPED_TEXT.splitlines() if not line.startswith("  name:")]
    assert [line for line in new_text.splitlines() if not line.startswith("  name:")] == untouched


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.booleans(),
        st.none(),
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False),
        st.lists(st.integers(-(10**6), 10**6), max_size=5),
    )
)
def test_any_scalar_or_list_reads_back_exactly(value):
    text = "platforms:\n  telegram:\n    allowed_chat_ids: []  # ids\n    mode: polling\n"
    new_text = set_in_yaml(text, ("platforms", "telegram", "allowed_chat_ids"), value)
    assert read(new_text)["platforms"]["telegram"]["allowed_chat_ids"] == value
    assert new_text.endswith(" # ids\n    mode: polling\n")


def test_a_block_list_becomes_an_inline_one_and_the_key_comment_stays():
    text = "discord:\n  allowed_user_ids:   # who may talk\n    - 1\n    - 2\n  enabled: true\n"
    assert set_in_yaml(text, ("discord", "allowed_user_ids"), [3]) == (
        "discord:\n  allowed_user_ids: [3]  # who may talk\n  enabled: true\n"
    )


def test_an_inline_map_gets_the_new_entry():
    text = "compression:\n  model_thresholds: {glm-5.2: 0.6}  # per model\n"
    new_text = set_in_yaml(text, ("compression", "model_thresholds", "gpt-5.5"), 0.7)
    assert new_text == "compression:\n  model_thresholds: {glm-5.2: 0.6, gpt-5.5: 0.7}  # per model\n"


def test_an_explicit_null_section_gets_children():
    text = "compression:\n  model_thresholds: null  # none yet\n  enabled: true\n"
    new_text = set_in_yaml(text, ("compression", "model_thresholds", "glm"), 0.6)
    assert new_text == "compression:\n  model_thresholds:  # none yet\n    glm: 0.6\n  enabled: true\n"


def test_a_file_without_a_final_newline_gets_one_before_the_new_key():
    assert (
        set_in_yaml("model:\n  name: m", ("context", "engine"), "lcm") == "model:\n  name: m\ncontext:\n  engine: lcm\n"
    )


def test_keys_that_need_quotes_are_quoted():
    new_text = set_in_yaml("", ("compression", "model_thresholds", "vendor: model"), 0.6)
    assert parse_config_text(new_text, "x")["compression"]["model_thresholds"] == {"vendor: model": 0.6}


def test_a_scalar_cannot_be_descended_into():
    with pytest.raises(ConfigError) as caught:
        set_in_yaml("compression: 5\n", ("compression", "threshold"), 0.6)
    assert "compression: holds a single value in the file, not a section" in str(caught.value)


def test_a_block_scalar_is_replaced_without_touching_the_next_line():
    text = "model:\n  name: |\n    long\n    name\n  # next\n  provider: local\n"
    assert set_in_yaml(text, ("model", "name"), "short") == "model:\n  name: short\n  # next\n  provider: local\n"


def test_an_empty_value_is_filled_and_its_comment_keeps_its_column():
    text = "compression:\n  model_thresholds:      # per model\n"
    assert (
        set_in_yaml(text, ("compression", "model_thresholds"), {})
        == "compression:\n  model_thresholds: {}   # per model\n"
    )


@pytest.mark.parametrize(
    "value", ["yes", "off", "y", "N", "1:30", "0755", "1e3", "~", "null", "true", "-_", "a\u2028b"]
)
def test_text_that_yaml_1_1_reads_as_something_else_is_quoted(value):
    new_text = set_in_yaml("model:\n  name: m  # the model\n", ("model", "name"), value)
    assert read(new_text)["model"]["name"] == value
    assert new_text.startswith(("model:\n  name: '", 'model:\n  name: "')) and new_text.endswith("  # the model\n")


def test_the_other_lines_keep_how_their_values_are_spelled():
    text = (
        "compression:\n  enabled: yes   # on\n  in_place: On\n  threshold: 0.5\n  idle: 1:30\n  ttl: 0755\n"
        "  big: 1e3\n  first: +1\n  nan: .NaN\n  caps: True\n  none: ~\n  empty:\n  when: 2001-12-14 21:59:43.10 -5\n"
        "  anchored: &five 5\n  alias: *five\n"
    )
    assert set_in_yaml(text, ("compression", "threshold"), 0.6) == text.replace("threshold: 0.5", "threshold: 0.6")


def test_a_key_that_reads_as_a_number_is_not_the_text_key():
    text = "compression:\n  model_thresholds:\n    1: 0.5\n    '1': 0.6\n"
    new_text = set_in_yaml(text, ("compression", "model_thresholds", "1"), 0.7)
    assert new_text == text.replace("'1': 0.6", "'1': 0.7")
    assert read(new_text)["compression"]["model_thresholds"] == {1: 0.5, "1": 0.7}
