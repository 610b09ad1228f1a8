"""What tokens cost: one price table per model, the cost of a usage, and what caching saved.

Prices are list prices in US dollars per million tokens. Each model has five: input,
output, cache write (5-minute and 1-hour lifetime) and cache read. Anthropic bills a
5-minute cache write at 1.25× the input price, a 1-hour write at 2× and a read at 0.1×;
OpenAI caches automatically, charges nothing extra to write and bills a read at the
model's cached-input price. Names match like the model catalog: the longest table key
contained in the model name wins, so provider prefixes and dated snapshots resolve.

A ``-900k`` alias is billed as its base model (the same model with a larger window). Usage is read in foldgate's
own terms (:class:`agent.usage.Usage`): ``prompt_tokens`` is the whole prompt, the
cache reads and writes included, so the uncached part is what is left over.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from agent.models import api_model_id, longest_key_match
from agent.usage import Usage

PER_MILLION = Decimal(1_000_000)

#: Anthropic's documented multipliers of the input price.
ANTHROPIC_WRITE_5M = Decimal("1.25")
ANTHROPIC_WRITE_1H = Decimal("2")
ANTHROPIC_READ = Decimal("0.1")


@dataclass(frozen=True)
class Money:
    """An amount in US dollars, exact (``Decimal``) so sums over many turns do not drift."""

    amount: Decimal = Decimal(0)

    def __add__(self, other: Money) -> Money:
        return Money(self.amount + other.amount)

    def __sub__(self, other: Money) -> Money:
        return Money(self.amount - other.amount)

    def __float__(self) -> float:
        return float(self.amount)

    def ratio(self, other: Money) -> float:
        """This amount as a share of ``other`` (0 when ``other`` is zero)."""
        return float(self.amount / other.amount) if other.amount else 0.0

    def __str__(self) -> str:
        places = Decimal("0.01") if abs(self.amount) >= 1 else Decimal("0.0001")
        return f"${self.amount.quantize(places, rounding=ROUND_HALF_UP)}"


@dataclass(frozen=True)
class ModelPrice:
    """Dollars per million tokens for one model."""

    input: Decimal
    output: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal

    def cache_write(self, ttl: str) -> Decimal:
        if ttl == "5m":
            return self.cache_write_5m
        if ttl == "1h":
            return self.cache_write_1h
        raise ValueError(f"cache ttl must be '5m' or '1h', got {ttl!r}")


def anthropic_price(input_price: str, output_price: str) -> ModelPrice:
    """An Anthropic model's prices from its input and output list prices and the documented multipliers."""
    base = Decimal(input_price)
    return ModelPrice(
        input=base,
        output=Decimal(output_price),
        cache_write_5m=base * ANTHROPIC_WRITE_5M,
        cache_write_1h=base * ANTHROPIC_WRITE_1H,
        cache_read=base * ANTHROPIC_READ,
    )


def openai_price(input_price: str, cached_input_price: str, output_price: str) -> ModelPrice:
    """An OpenAI model's prices: writes cost the plain input price, reads the cached-input price."""
    base = Decimal(input_price)
    return ModelPrice(
        input=base,
        output=Decimal(output_price),
        cache_write_5m=base,
        cache_write_1h=base,
        cache_read=Decimal(cached_input_price),
    )


#: name fragment (lower case) -> prices. Longest matching fragment wins.
PRICES: dict[str, ModelPrice] = {
    # Anthropic
    "claude-3-haiku": anthropic_price("0.25", "1.25"),
    "claude-3-opus": anthropic_price("15", "75"),
    "claude-3-5-haiku": anthropic_price("0.80", "4"),
    "claude-3.5-haiku": anthropic_price("0.80", "4"),
    "claude-3-5-sonnet": anthropic_price("3", "15"),
    "claude-3.5-sonnet": anthropic_price("3", "15"),
    "claude-3-7-sonnet": anthropic_price("3", "15"),
    "claude-3.7-sonnet": anthropic_price("3", "15"),
    "claude-sonnet-4": anthropic_price("3", "15"),
    "claude-haiku-4": anthropic_price("1", "5"),
    "claude-opus-4": anthropic_price("15", "75"),
    "claude-opus-4-5": anthropic_price("5", "25"),
    "claude-opus-4.5": anthropic_price("5", "25"),
    # OpenAI
    "gpt-4o": openai_price("2.50", "1.25", "10"),
    "gpt-4o-mini": openai_price("0.15", "0.075", "0.60"),
    "gpt-4.1": openai_price("2.00", "0.50", "8.00"),
    "gpt-4.1-mini": openai_price("0.40", "0.10", "1.60"),
    "gpt-4.1-nano": openai_price("0.10", "0.025", "0.40"),
    "o3": openai_price("2.00", "0.50", "8.00"),
    "o4-mini": openai_price("1.10", "0.275", "4.40"),
    "gpt-5": openai_price("1.25", "0.125", "10"),
    "gpt-5-mini": openai_price("0.25", "0.025", "2"),
    "gpt-5-nano": openai_price("0.05", "0.005", "0.40"),
    "gpt-5.2": openai_price("1.75", "0.175", "14"),
}


class UnknownPrice(KeyError):
    """No price is known for the model (``cost`` cannot be computed)."""


def billing_model(model: str) -> str:
    """The model a provider bills: local ``-900k`` aliases are billed as their base model."""
    return api_model_id(model)


@functools.lru_cache(maxsize=256)
def price_key(model: str) -> str | None:
    """The table key that prices ``model`` (after alias stripping), or None when none matches.

    Cached: every turn prices its usage, and the table is fixed at import.
    """
    return longest_key_match(billing_model(model), PRICES)


def price_for(model: str) -> ModelPrice | None:
    key = price_key(model)
    return PRICES[key] if key is not None else None


def _usage(usage: Usage | Mapping[str, Any]) -> Usage:
    return Usage.from_mapping(usage)


@dataclass(frozen=True)
class CostBreakdown:
    """A usage's cost in its four parts."""

    uncached_input: Money
    cache_read: Money
    cache_write: Money
    output: Money

    @property
    def input(self) -> Money:
        return self.uncached_input + self.cache_read + self.cache_write

    @property
    def total(self) -> Money:
        return self.input + self.output


def _money(tokens: int, per_million: Decimal) -> Money:
    return Money(Decimal(tokens) * per_million / PER_MILLION)


def breakdown(usage: Usage | Mapping[str, Any], model: str, ttl: str = "5m") -> CostBreakdown:
    """The cost of ``usage`` on ``model``, part by part; cache writes at the ``ttl`` price."""
    price = price_for(model)
    if price is None:
        raise UnknownPrice(model)
    used = _usage(usage)
    uncached = max(0, used.prompt_tokens - used.cache_read_tokens - used.cache_write_tokens)
    return CostBreakdown(
        uncached_input=_money(uncached, price.input),
        cache_read=_money(used.cache_read_tokens, price.cache_read),
        cache_write=_money(used.cache_write_tokens, price.cache_write(ttl)),
        output=_money(used.completion_tokens, price.output),
    )


def cost(usage: Usage | Mapping[str, Any], model: str, ttl: str = "5m") -> Money:
    """What ``usage`` cost on ``model`` (raises :class:`UnknownPrice` for an unpriced model)."""
    return breakdown(usage, model, ttl).total


def uncached_cost(usage: Usage | Mapping[str, Any], model: str) -> Money:
    """What the same tokens would have cost with no prompt caching at all."""
    price = price_for(model)
    if price is None:
        raise UnknownPrice(model)
    used = _usage(usage)
    return _money(used.prompt_tokens, price.input) + _money(used.completion_tokens, price.output)


def savings(usage: Usage | Mapping[str, Any], model: str, ttl: str = "5m") -> Money:
    """What caching saved against no caching (negative when writes cost more than reads saved)."""
    return uncached_cost(usage, model) - cost(usage, model, ttl)


#: Dollars a minute of audio costs to transcribe, by model (OpenAI's published prices).
TRANSCRIPTION_PER_MINUTE: dict[str, Decimal] = {
    "whisper-1": Decimal("0.006"),
    "gpt-4o-transcribe": Decimal("0.006"),
    "gpt-4o-mini-transcribe": Decimal("0.003"),
}


def transcription_usd(model: str, seconds: float) -> float:
    """What transcribing ``seconds`` of audio with ``model`` costs (0 for a model this table does not know)."""
    per_minute = TRANSCRIPTION_PER_MINUTE.get(model.rsplit("/", 1)[-1].lower())
    return float(per_minute) * max(0.0, seconds) / 60 if per_minute is not None else 0.0
