"""``/usage [PERSON]``: the context's size, compactions, tokens, money spent and saved by caching, and the
budgets left."""

from __future__ import annotations

from datetime import UTC, datetime

from agent import pricing
from gateway.access.budgets import budget_amount, reset_time, subjects
from gateway.access.roles import named_person, person_of
from gateway.agents import AgentBuilder
from gateway.commands.context import CommandContext
from gateway.config.access import period_bounds
from gateway.platforms.base import IncomingMessage
from gateway.worker import hygiene
from gateway.worker.chat_turn import ChatTurn
from gateway.worker.parts import Spending

#: Routes whose tokens are not billed per token (a subscription, or nothing at all).
UNBILLED_PROVIDERS = {
    "local": "the local demo model is free",
    "openai-codex": "a ChatGPT subscription, not per-token billing",
}


def _percent(tokens: int, window: int) -> str:
    return f"{100 * tokens / window:.1f}%" if window else "?"


def _money_line(agents: AgentBuilder, model: str, totals: dict) -> str:
    """Money spent on the session and what prompt caching saved, priced for the route ``agents`` sends on."""
    if agents.provider in UNBILLED_PROVIDERS:
        return f"Cost: not billed per token ({UNBILLED_PROVIDERS[agents.provider]})"
    if pricing.price_for(model) is None:
        return f"Cost: no price known for {model}"
    spent = pricing.cost(totals, model, agents.settings.prompt_caching.cache_ttl)
    without = pricing.uncached_cost(totals, model)
    saved = without - spent
    share = f" ({saved.ratio(without):.0%} less than without caching)" if saved.amount > 0 else ""
    return f"Cost: {spent} spent, priced as {pricing.price_key(model)}; caching saved {saved}{share}"


async def usage(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """Context size, compactions, token usage (cache reads and writes), money spent and saved by caching, and what
    is left of the budgets (an admin may name anyone: /usage tg:123)."""
    if arg.strip():
        return await _someones_budgets(context, turn, arg)
    meta = turn.meta
    model = context.model(turn)
    window = context.agents.context_length(model)
    tokens, source = hygiene.estimate_session_tokens(meta)
    totals = meta.usage_totals
    compactions = f"Compactions: {meta.compaction_count}"
    native = (meta.engine_state or {}).get("native_compactions")
    if native:
        compactions += (
            f" (codex thread: {native.get('manual', 0)} by /compress, {native.get('gateway', 0)} at foldgate's"
            f" threshold, {native.get('app_server', 0)} by the app-server itself)"
        )
    lines = [
        f"Context: {tokens:,} / {window:,} tokens ({_percent(tokens, window)}; {source}), {meta.count} messages",
        compactions,
        f"Turns: {totals.get('turns', 0)}; prompt tokens {totals.get('prompt_tokens', 0):,},"
        f" completion tokens {totals.get('completion_tokens', 0):,}",
        f"Cache: read {totals.get('cache_read_tokens', 0):,} tokens,"
        f" written {totals.get('cache_write_tokens', 0):,} tokens",
        _money_line(context.agents, model, totals),
        *await budget_lines(context.spend, turn.message, "you"),
    ]
    return "\n".join(lines)


async def _someones_budgets(context: CommandContext, turn: ChatTurn, arg: str) -> str:
    """``/usage PERSON``: what the named person spent against their budgets (admins only)."""
    if not context.roles.is_admin(person_of(turn.message)):
        return "Only an admin may see someone else's usage."
    person = named_person(arg, turn.message.platform)
    if person is None:
        return "Name the person: their id (123456789, or tg:123456789) or their mention."
    platform, _, user_id = person.partition(":")
    shown = turn.message.model_copy(update={"platform": platform, "user_id": user_id})
    return "\n".join(await budget_lines(context.spend, shown, person)) or "No budget applies (access.budgets)."


async def budget_lines(spend: Spending, message: IncomingMessage, person: str) -> list[str]:
    """What the sender of ``message`` (and its chat) spent this period, against each budget that applies."""
    lines = []
    now = datetime.now(UTC)
    for subject, _who, limit in subjects(message, spend.budgets):
        period, ends = period_bounds(now, limit.period, spend.budgets.timezone)
        spent = await spend.store.spent(subject, period)
        owner = person if subject.startswith("user:") else "this chat"
        lines.append(
            f"Budget ({owner}, {limit.period}): {budget_amount(limit, spent.usd, spent.tokens)}; "
            f"resets {reset_time(ends)}"
        )
    return lines
