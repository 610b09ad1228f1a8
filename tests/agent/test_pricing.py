"""Cost accounting: one price table, Anthropic's cache multipliers, savings, and -900k aliases billed as their base."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agent.pricing import (
    Money,
    UnknownPrice,
    billing_model,
    breakdown,
    cost,
    price_for,
    price_key,
    savings,
    uncached_cost,
)
from agent.usage import Usage
from gateway.config import Settings
from tests.fakes.anthropic_cache import AnthropicCacheServer
from tests.fakes.gateway import message, running_gateway
from tests.fakes.llm_server import Reply


def test_anthropic_cache_prices_follow_the_documented_multipliers():
    price = price_for("claude-sonnet-4-5-20250929")
    assert price is not None
    assert price.input == Decimal("3") and price.output == Decimal("15")
    assert price.cache_write_5m == Decimal("3.75")  # 1.25x
    assert price.cache_write_1h == Decimal("6")  # 2x
    assert price.cache_read == Decimal("0.3")  # 0.1x


@pytest.mark.parametrize(
    "model, key",
    [
        ("anthropic/claude-sonnet-4.5", "claude-sonnet-4"),
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("claude-opus-4-1", "claude-opus-4"),
        ("openai/gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-4.1-nano", "gpt-4.1-nano"),
        ("gpt-5.2", "gpt-5.2"),
        ("foldgate-local", None),
    ],
)
def test_the_longest_matching_key_prices_a_model(model, key):
    assert price_key(model) == key


def test_cost_of_an_anthropic_usage_part_by_part():
    # 10,000 prompt tokens: 8,000 read from cache, 1,500 written, 500 uncached; 1,000 out
    usage = {
        "prompt_tokens": 10_000,
        "cache_read_tokens": 8_000,
        "cache_write_tokens": 1_500,
        "completion_tokens": 1_000,
    }
    parts = breakdown(usage, "claude-sonnet-4")
    assert parts.uncached_input == Money(Decimal("0.0015"))  # 500 x $3/M
    assert parts.cache_read == Money(Decimal("0.0024"))  # 8,000 x $0.30/M
    assert parts.cache_write == Money(Decimal("0.005625"))  # 1,500 x $3.75/M
    assert parts.output == Money(Decimal("0.015"))
    assert cost(usage, "claude-sonnet-4") == Money(Decimal("0.024525"))
    assert cost(usage, "claude-sonnet-4", ttl="1h").amount - cost(usage, "claude-sonnet-4").amount == Decimal(
        "0.003375"
    )


def test_savings_are_what_the_same_tokens_cost_without_caching_minus_what_they_cost():
    usage = Usage(prompt_tokens=10_000, completion_tokens=1_000, cache_read_tokens=8_000, cache_write_tokens=1_500)
    without = uncached_cost(usage, "claude-sonnet-4")
    assert without == Money(Decimal("0.045"))  # 10,000 x $3/M + 1,000 x $15/M
    assert savings(usage, "claude-sonnet-4") == Money(Decimal("0.020475"))
    assert str(savings(usage, "claude-sonnet-4")) == "$0.0205"


def test_writes_without_reads_cost_more_than_no_caching():
    usage = {"prompt_tokens": 4_000, "cache_write_tokens": 4_000}
    assert savings(usage, "claude-sonnet-4").amount == Decimal("-0.003")


def test_openai_reads_are_billed_at_the_cached_input_price_and_writes_cost_nothing_extra():
    usage = {"prompt_tokens": 100_000, "prompt_tokens_details": {"cached_tokens": 60_000}, "completion_tokens": 0}
    assert cost(usage, "gpt-4o") == Money(Decimal("0.175"))  # 40,000 x 2.50 + 60,000 x 1.25, per million
    assert savings(usage, "gpt-4o") == Money(Decimal("0.075"))


@pytest.mark.parametrize(
    "alias, base",
    [
        ("gpt-5.6-sol-900k", "gpt-5.6-sol"),
        ("gpt-5.4-900k", "gpt-5.4"),
        ("gpt-5.6-terra-900k", "gpt-5.6-terra"),
        ("gpt-5.6-luna-900k", "gpt-5.6-luna"),
    ],
)
def test_900k_aliases_are_billed_as_their_base_model(alias, base):
    usage = {"prompt_tokens": 500_000, "cache_read_tokens": 300_000, "completion_tokens": 2_000}
    assert billing_model(alias) == base
    assert price_key(alias) == price_key(base)
    assert cost(usage, alias) == cost(usage, base)


def test_an_unpriced_model_is_an_error_not_a_zero():
    with pytest.raises(UnknownPrice):
        cost({"prompt_tokens": 10}, "foldgate-local")


def test_money_formats_small_and_large_amounts():
    assert str(Money(Decimal("0.00004"))) == "$0.0000"
    assert str(Money(Decimal("12.345"))) == "$12.35"
    assert Money(Decimal("1")).ratio(Money(Decimal("4"))) == 0.25


async def test_usage_shows_money_spent_and_saved_and_model_warns_about_the_cold_cache(
    tmp_path, redis, redis_url, key_prefix
):
    async with AnthropicCacheServer() as server:
        server.default = Reply.answer("noted")
        server.models = [
            "claude-sonnet-4-20250514",
            "claude-opus-4-20250514",
        ]  # /model checks the list (dated ids, as Anthropic lists them)
        settings = Settings(
            redis={"url": redis_url, "key_prefix": key_prefix},
            model={
                "name": "claude-sonnet-4",
                "provider": "anthropic",
                "base_url": server.anthropic_base_url,
                "api_key": "k",
            },
            platforms={"local": {"enabled": True}},
            gateway={"home": str(tmp_path)},
        )
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for index in range(4):
                await runner.intake(message("c", f"u{index}", f"part {index}: " + "context " * 1200))
                await runner.wait_idle()
            for update, text in [
                ("usage", "/usage"),
                ("bad", "/model gpt-5.5-900k"),
                ("switch", "/model claude-opus-4"),
            ]:
                await runner.intake(message("c", update, text))
                await runner.wait_idle()
    usage, refused, switched = (text for _, text in adapter.sent[-3:])
    completion = int(usage.split("completion tokens ")[1].splitlines()[0].replace(",", ""))
    totals = {
        "prompt_tokens": sum(e.prompt_tokens for e in server.ledger),
        "cache_read_tokens": sum(e.cache_read for e in server.ledger),
        "cache_write_tokens": sum(e.cache_write for e in server.ledger),
        "completion_tokens": completion,
    }
    assert (
        f"Cache: read {totals['cache_read_tokens']:,} tokens, written {totals['cache_write_tokens']:,} tokens" in usage
    )
    spent, saved = cost(totals, "claude-sonnet-4"), savings(totals, "claude-sonnet-4")
    assert saved.amount > 0
    assert usage.splitlines()[-1] == (
        f"Cost: {spent} spent, priced as claude-sonnet-4; caching saved {saved}"
        f" ({saved.ratio(uncached_cost(totals, 'claude-sonnet-4')):.0%} less than without caching)"
    )
    assert "has no -900k variant" in refused
    assert switched.startswith("Switched claude-sonnet-4 → claude-opus-4")
    assert "the next request re-reads this conversation's" in switched and "at claude-opus-4's input price" in switched
    assert "writes a new cache" in switched
