"""``/model [name]``: the chat's model and its window, or a switch to another model the provider serves."""

from __future__ import annotations

import difflib
import logging
from typing import Protocol, runtime_checkable

from agent import pricing
from agent.llm.client import lists_model
from agent.llm.errors import ProviderError, plain_reason
from agent.models import UnknownAlias, api_model_id, split_large_alias
from agent.prompt_caching import CachingPlan
from gateway.agents import AgentBuilder
from gateway.commands.context import CommandContext
from gateway.commands.usage import UNBILLED_PROVIDERS
from gateway.worker import hygiene
from gateway.worker.chat_turn import ChatTurn

log = logging.getLogger(__name__)


def _cold_cache_warning(caching: CachingPlan, tokens: int, new_model: str) -> str:
    """What a switch costs: the provider's cache is per model, so the next request reads everything uncached.

    ``caching`` is the new model's caching plan: with breakpoints, that request also writes a new cache.
    """
    text = (
        " ⚠️ The prompt cache belongs to the model: "
        f"the next request re-reads this conversation's {tokens:,} tokens uncached"
    )
    price = pricing.price_for(new_model)
    if price is not None and tokens:
        full = pricing.cost({"prompt_tokens": tokens}, new_model)
        text += f" (≈{full} at {new_model}'s input price)"
    if caching.enabled:
        text += " and writes a new cache"
    return text + "; later replies are cheap again once it is warm."


@runtime_checkable
class ListsModels(Protocol):
    """A chat model that can say which models its provider serves (the chat completions client, the local
    demo model); the Responses and codex routes cannot, and ``/model`` then switches unchecked."""

    async def list_models(self) -> list[str]: ...


async def _provider_models(agents: AgentBuilder) -> tuple[list[str] | None, str]:
    """The models the configured provider serves, or ``(None, why not)`` when that cannot be known."""
    if agents.api_mode == "codex_app_server":
        return None, "the codex app-server route has no model list here"
    if not isinstance(agents.chat_model, ListsModels):
        return None, "this route offers no model list"
    try:
        return list(await agents.chat_model.list_models()), ""
    except ProviderError as error:  # any failure only means the name stays unchecked
        # The provider's own text can echo the key or name an internal address: the chat gets plain words.
        log.warning("listing the provider's models failed: %s", error)
        return None, f"the provider {plain_reason(error)}"
    except Exception as error:
        log.warning("listing the provider's models failed: %s: %s", type(error).__name__, error)
        return None, f"the model list could not be read ({type(error).__name__})"


def _not_served(provider: str, name: str, current: str, served: list[str]) -> str:
    """The refusal of a switch to a model the provider does not list, with the names closest to it."""
    close = difflib.get_close_matches(api_model_id(name), served, n=5, cutoff=0.4)
    hint = (
        f" Close names it serves: {', '.join(close)}."
        if close
        else (f" It serves: {', '.join(served[:10])}{' …' if len(served) > 10 else ''}." if served else "")
    )
    return f"⚠️ {provider} does not serve {name}; staying on {current}.{hint}"


async def model(context: CommandContext, turn: ChatTurn, name: str) -> str:
    """Show the model, or switch this chat to another one the provider serves (a cold prompt cache: it costs
    more at first)."""
    agents = context.agents
    current = context.model(turn)
    window = agents.context_length(current)
    if not name:
        engine = context.engine(turn, current)
        return (
            f"Model: {current} — window {window:,} tokens, compaction at {engine.threshold:.0%}"
            f" ({engine.threshold_tokens:,} tokens), hygiene at 85%."
        )
    try:
        split_large_alias(name)
    except UnknownAlias as error:
        return f"⚠️ {error}"
    if name == current:
        return f"Already on {current}."
    provider = agents.provider or "the provider"
    served, why = await _provider_models(agents)
    if served is not None and not lists_model(served, api_model_id(name)):
        return _not_served(provider, name, current, served)
    await context.store.update_meta(turn.chat, turn.session_id, lock=turn.lock, model=name)
    engine = context.engine(turn, name)
    tokens, _source = hygiene.estimate_session_tokens(turn.meta)
    text = (
        f"Switched {current} → {name} (window {agents.context_length(name):,} tokens, compaction at"
        f" {engine.threshold:.0%})."
    )
    if provider not in UNBILLED_PROVIDERS:
        text += _cold_cache_warning(agents.caching_plan(name), tokens, name)
    if served is None:
        text += f" ⚠️ Could not verify that {provider} serves {name} ({why}); the next reply will tell."
    return text
