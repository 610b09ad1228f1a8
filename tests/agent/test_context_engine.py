"""The context-engine interface (S1): defaults every engine gets, usage normalisation, and engine resolution."""

import json
import sys

import pytest

from agent.context_compressor import ContextCompressor
from agent.context_engine import ContextEngine
from agent.engine_registry import register_context_engine, resolve_context_engine, unregister_context_engine
from agent.usage import Usage


class KeepEverything(ContextEngine):
    name = "keep"

    def should_compress(self, prompt_tokens=None):
        return False

    async def compress(self, messages, current_tokens=None, focus_topic=None, force=False):
        return list(messages)


def test_openai_usage_is_normalised():
    engine = KeepEverything("gpt-4o", 128_000)
    usage = engine.update_from_response(
        {
            "prompt_tokens": 1200,
            "completion_tokens": 80,
            "total_tokens": 1280,
            "prompt_tokens_details": {"cached_tokens": 1024},
            "completion_tokens_details": {"reasoning_tokens": 30},
        }
    )
    assert usage == Usage(1200, 80, 1280, cache_read_tokens=1024, reasoning_tokens=30)
    assert engine.last_prompt_tokens == 1200


def test_anthropic_usage_counts_cached_input_in_the_prompt_size():
    engine = KeepEverything("claude-sonnet-4", 200_000)
    usage = engine.update_from_response(
        {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 9000, "cache_creation_input_tokens": 1000}
    )
    assert usage.prompt_tokens == 10_050 and usage.total_tokens == 10_070
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (9000, 1000)
    assert engine.last_prompt_tokens == 10_050


def test_session_usage_accumulates_and_round_trips_through_state():
    engine = KeepEverything("gpt-4o", 128_000)
    engine.update_from_response({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    engine.update_from_response({"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25})
    state = json.loads(json.dumps(engine.export_state()))
    fresh = KeepEverything("gpt-4o", 128_000)
    fresh.load_state(state)
    assert fresh.session_usage.total_tokens == 40 and fresh.last_prompt_tokens == 20
    fresh.on_session_reset()
    assert fresh.session_usage.total_tokens == 0 and fresh.last_prompt_tokens is None


async def test_engines_offer_no_tools_by_default_and_answer_unknown_calls_with_json():
    engine = KeepEverything("gpt-4o", 128_000)
    assert engine.get_tool_schemas() == []
    assert "error" in json.loads(await engine.handle_tool_call("lcm_grep", {"q": "x"}))


def test_compressor_is_always_the_builtin():
    factory, warning = resolve_context_engine("compressor")
    assert factory is ContextCompressor and warning is None
    assert resolve_context_engine(None)[0] is ContextCompressor
    with pytest.raises(ValueError):
        register_context_engine("compressor", KeepEverything)


def test_a_missing_engine_falls_back_to_the_builtin_with_a_warning_naming_what_was_looked_for(tmp_path):
    factory, warning = resolve_context_engine("nosuch", plugins_dir=tmp_path)
    assert factory is ContextCompressor
    assert "'nosuch'" in warning and str(tmp_path / "nosuch") in warning and "register_context_engine" in warning


def test_registered_engine_is_found():
    register_context_engine("keep_registered", KeepEverything)
    try:
        factory, warning = resolve_context_engine("keep_registered")
        assert factory is KeepEverything and warning is None
    finally:
        unregister_context_engine("keep_registered")


@pytest.fixture
def plugin_dir(tmp_path):
    package = tmp_path / "tiny"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from agent.context_engine import ContextEngine\n"
        "class Tiny(ContextEngine):\n"
        "    name = 'tiny'\n"
        "    def should_compress(self, prompt_tokens=None):\n"
        "        return False\n"
        "    async def compress(self, messages, current_tokens=None, focus_topic=None, force=False):\n"
        "        return list(messages)\n"
        "def create_engine(**kwargs):\n"
        "    return Tiny(kwargs['model'], kwargs['context_length'])\n"
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise RuntimeError('plugin bug')\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "__init__.py").write_text("X = 1\n")
    yield tmp_path
    for name in ("tiny", "broken", "empty"):
        sys.modules.pop(f"plugins.context_engine.{name}", None)


def test_a_plugin_directory_wins_and_its_factory_builds_the_engine(plugin_dir):
    register_context_engine("tiny", KeepEverything)
    try:
        factory, warning = resolve_context_engine("tiny", plugins_dir=plugin_dir)
    finally:
        unregister_context_engine("tiny")
    assert warning is None
    engine = factory(model="m", context_length=1000)
    assert engine.name == "tiny" and engine.context_length == 1000


@pytest.mark.parametrize(
    ("name", "problem"), [("broken", "plugin bug"), ("empty", "neither create_engine() nor ENGINE")]
)
def test_a_broken_plugin_falls_back_with_the_reason(plugin_dir, name, problem):
    factory, warning = resolve_context_engine(name, plugins_dir=plugin_dir)
    assert factory is ContextCompressor and problem in warning


def test_invalid_names_are_refused_without_importing_anything(tmp_path):
    factory, warning = resolve_context_engine("../etc", plugins_dir=tmp_path)
    assert factory is ContextCompressor and "not a valid engine name" in warning
