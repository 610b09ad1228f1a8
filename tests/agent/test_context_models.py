"""The model catalog: windows for the common models, aliases, overrides."""

import pytest

from agent.models import (
    DEFAULT_CONTEXT_LENGTH,
    UnknownAlias,
    api_model_id,
    context_length_for,
)


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-sonnet-4-20250514", 200_000),
        ("anthropic/claude-3-5-sonnet-20241022", 200_000),
        ("gpt-4o", 128_000),
        ("gpt-4o-mini", 128_000),
        ("gpt-4.1", 1_047_576),
        ("openai/gpt-4.1-mini", 1_047_576),
        ("gpt-5.5", 272_000),
        ("gpt-5.6-sol", 272_000),
        ("glm-4.6", 200_000),
        ("glm-5.2-1M", 1_000_000),
    ],
)
def test_known_windows(model, window):
    assert context_length_for(model) == window


def test_unknown_model_gets_the_default():
    assert context_length_for("my-local-finetune") == DEFAULT_CONTEXT_LENGTH
    assert context_length_for(None) == DEFAULT_CONTEXT_LENGTH


def test_configured_override_beats_the_catalog():
    assert context_length_for("gpt-4o", {"gpt-4o": 64_000}) == 64_000
    assert context_length_for("my-local-finetune", {"local": 32_768}) == 32_768


def test_900k_aliases_have_the_large_window_and_send_the_base_id():
    assert context_length_for("gpt-5.6-sol-900k") == 911_000
    assert context_length_for("gpt-5.4-900k") == 911_000
    assert api_model_id("gpt-5.6-terra-900k") == "gpt-5.6-terra"
    assert api_model_id("gpt-4o") == "gpt-4o"


@pytest.mark.parametrize("model", ["gpt-5.5-900k", "gpt-5.4-mini-900k"])
def test_models_without_a_900k_variant_are_refused(model):
    with pytest.raises(UnknownAlias, match="no -900k variant"):
        context_length_for(model)
