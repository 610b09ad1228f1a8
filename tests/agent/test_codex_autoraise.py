"""S4.4 Codex autoraise and S4.5 -900k aliases: thresholds by route, the one-time notice, the base id on the wire."""

from __future__ import annotations

import pytest

from agent.codex import AUTORAISE_THRESHOLD, NOTICE_MARKER, AutoraiseNotice, autoraise_applies, route_threshold
from agent.context_compressor import ContextCompressor
from agent.settings import CompressionSettings
from agent.tools import ToolRegistry
from gateway.agents import AgentBuilder
from gateway.config import ConfigError, Settings, load_settings
from tests.fakes.llm_server import FakeLLMServer


class FakeHistory:
    chat = "local:1"
    session_id = "s1"

    async def all_messages(self):
        return []

    async def messages_by_id(self, ids):
        return []


@pytest.mark.parametrize(
    "model", ["gpt-5.5", "gpt-5.4", "gpt-5.6", "gpt-5.6-sol", "gpt-5.6-terra", "gpt-5.6-luna", "openai/gpt-5.5"]
)
def test_272k_models_on_the_codex_route_compact_at_85_percent(model):
    engine = ContextCompressor(model, 272_000, CompressionSettings(), provider="openai-codex")
    assert engine.threshold == AUTORAISE_THRESHOLD
    assert engine.threshold_tokens == 231_200


@pytest.mark.parametrize("provider", ["openai", "openrouter", "custom", "anthropic", None])
def test_other_routes_keep_the_global_threshold(provider):
    engine = ContextCompressor("gpt-5.5", 272_000, CompressionSettings(), provider=provider)
    assert engine.threshold == 0.5
    assert engine.threshold_tokens == 136_000


@pytest.mark.parametrize("alias", ["gpt-5.6-sol-900k", "gpt-5.6-terra-900k", "gpt-5.6-luna-900k", "gpt-5.4-900k"])
def test_900k_aliases_keep_the_global_threshold_on_their_911k_window(alias):
    engine = ContextCompressor(alias, 911_000, CompressionSettings(), provider="openai-codex")
    assert engine.threshold == 0.5
    assert engine.threshold_tokens == 455_500


def test_the_switch_turns_the_raise_off_and_an_explicit_override_wins():
    off = CompressionSettings(codex_gpt55_autoraise=False)
    assert route_threshold("gpt-5.5", "openai-codex", off, 272_000) == 0.5
    override = CompressionSettings(model_thresholds={"gpt-5.5": 0.9})
    assert route_threshold("gpt-5.5", "openai-codex", override, 272_000) == 0.9
    assert not autoraise_applies("gpt-4o", "openai-codex", CompressionSettings())


def test_update_model_re_resolves_with_the_route():
    engine = ContextCompressor("gpt-4o", 128_000, CompressionSettings(), provider="openai-codex")
    assert engine.threshold == 0.5
    engine.update_model("gpt-5.5", 272_000)
    assert engine.threshold_tokens == 231_200
    engine.update_model("gpt-5.6-sol-900k", 911_000)
    assert engine.threshold == 0.5


def test_the_notice_is_shown_once_per_profile_and_again_when_the_value_changes(tmp_path):
    settings = CompressionSettings()
    notice = AutoraiseNotice(tmp_path)
    first = notice.check("gpt-5.5", "openai-codex", settings, 272_000)
    assert first is not None
    assert "231,200" in first and "foldgate config set compression.codex_gpt55_autoraise false" in first
    assert all(notice.check("gpt-5.5", "openai-codex", settings, 272_000) is None for _ in range(99))
    # another process of the same profile reads the marker
    assert AutoraiseNotice(tmp_path).check("gpt-5.5", "openai-codex", settings, 272_000) is None
    # the raised value changes (a different window): once more, then quiet again
    assert notice.check("gpt-5.5", "openai-codex", settings, 300_000) is not None
    assert AutoraiseNotice(tmp_path).check("gpt-5.5", "openai-codex", settings, 300_000) is None
    assert (tmp_path / NOTICE_MARKER).read_text().startswith("threshold=0.8500 tokens=255000")


def test_the_notice_switch_hides_it_and_other_routes_never_show_it(tmp_path):
    notice = AutoraiseNotice(tmp_path)
    hidden = CompressionSettings(codex_gpt55_autoraise_notice=False)
    assert notice.check("gpt-5.5", "openai-codex", hidden, 272_000) is None
    assert not (tmp_path / NOTICE_MARKER).exists()
    assert notice.check("gpt-5.5", "openai", CompressionSettings(), 272_000) is None
    assert notice.check("gpt-5.5", "openai-codex", CompressionSettings(codex_gpt55_autoraise=False), 272_000) is None


def codex_settings(tmp_path, **compression) -> Settings:
    return Settings(
        model={"name": "gpt-5.5", "provider": "openai-codex", "api_mode": "chat", "base_url": "http://127.0.0.1:9/v1"},
        compression=compression,
        gateway={"home": str(tmp_path)},
        platforms={"local": {"enabled": True}},
    )


async def test_a_hundred_agent_constructions_show_the_notice_once(tmp_path):
    shown: list[str] = []
    builder = AgentBuilder(codex_settings(tmp_path), notice=shown.append)
    engines = [builder.build_engine("gpt-5.5", {}, FakeHistory()) for _ in range(100)]
    await builder.aclose()
    assert len(shown) == 1
    assert all(engine.threshold_tokens == 231_200 for engine in engines)
    # a restarted gateway on the same profile stays quiet
    again: list[str] = []
    restarted = AgentBuilder(codex_settings(tmp_path), notice=again.append)
    restarted.build_engine("gpt-5.5", {}, FakeHistory())
    await restarted.aclose()
    assert again == []


async def test_config_switches_reach_the_gateway(tmp_path):
    shown: list[str] = []
    builder = AgentBuilder(codex_settings(tmp_path, codex_gpt55_autoraise=False), notice=shown.append)
    assert builder.build_engine("gpt-5.5", {}, FakeHistory()).threshold_tokens == 136_000
    hidden = AgentBuilder(codex_settings(tmp_path, codex_gpt55_autoraise_notice=False), notice=shown.append)
    assert hidden.build_engine("gpt-5.5", {}, FakeHistory()).threshold_tokens == 231_200
    await builder.aclose()
    await hidden.aclose()
    assert shown == []


@pytest.mark.parametrize("alias", ["gpt-5.5-900k", "gpt-5.4-mini-900k"])
def test_a_900k_alias_that_does_not_exist_is_refused_at_load(tmp_path, alias):
    path = tmp_path / "config.yaml"
    path.write_text(f"model:\n  name: {alias}\n  provider: openai-codex\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_settings(path, env={})
    assert "model.name" in str(error.value) and "has no -900k variant" in str(error.value)


@pytest.mark.parametrize(
    "alias, base",
    [
        ("gpt-5.6-sol-900k", "gpt-5.6-sol"),
        ("gpt-5.6-terra-900k", "gpt-5.6-terra"),
        ("gpt-5.6-luna-900k", "gpt-5.6-luna"),
        ("gpt-5.4-900k", "gpt-5.4"),
    ],
)
async def test_the_provider_sees_the_base_id_for_every_alias(tmp_path, alias, base):
    # provider "custom" is an OpenAI-compatible relay: the generic flavor, which (unlike OpenAI
    # itself) takes max_tokens for GPT-5 models, as the client sends it on this route.
    async with FakeLLMServer(flavor="generic") as server:
        settings = Settings(
            model={"name": alias, "provider": "custom", "base_url": server.openai_base_url},
            gateway={"home": str(tmp_path)},
            platforms={"local": {"enabled": True}},
        )
        builder = AgentBuilder(settings)
        engine = builder.build_engine(alias, {}, FakeHistory())
        assert engine.context_length == 911_000 and engine.threshold_tokens == 455_500
        agent = builder.build_agent(engine, alias, ToolRegistry())
        await agent.run_turn([], {"role": "user", "content": "hello"})
        summary = await builder.summarizer.call_llm(
            task="compression", messages=[{"role": "user", "content": "x"}], max_tokens=50
        )
        await builder.aclose()
    assert summary == "ok"
    assert [request.model for request in server.requests] == [base, base]
    assert builder.summarizer.context_length == 911_000  # planned with the alias's window
