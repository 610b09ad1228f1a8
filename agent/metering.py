"""Every model call a turn makes, metered against the budgets of who caused it: reserved before, settled after.

:class:`MeteredModel` wraps a provider client (anything with ``complete``, the agent's model or the summarizer's):
before each request it asks its :class:`Meter` to reserve the call's worst case — the prompt as counted, every
output token it may write — and after the answer it settles to the usage the provider reported (a call that failed
settles to nothing). A meter that refuses raises :class:`BudgetExceeded`, which the loop treats like a provider that
refuses: what the turn did before is kept, and no request goes out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Protocol

from agent.llm.errors import ProviderError
from agent.llm.stream import EventSink
from agent.llm.types import Completion
from agent.tokens import count_request
from agent.usage import Usage

log = logging.getLogger(__name__)


class BudgetExceeded(ProviderError):
    """The person (or chat) has spent their budget for the period: ``notice`` says what and when it resets;
    ``key`` names the budget and period (a chat is told once per key)."""

    def __init__(self, notice: str, key: str = "") -> None:
        super().__init__(notice)
        self.notice = notice
        self.key = key


class Meter(Protocol):
    """Reserves and settles model calls against budgets (the gateway keeps them in Redis)."""

    async def reserve(self, model: str, prompt_tokens: int, max_output_tokens: int) -> object:
        """Reserve one call's worst case; a handle for :meth:`settle`. Raises :class:`BudgetExceeded`."""

    async def settle(self, handle: object, model: str, usage: Usage | None, *, whole: bool = False) -> None:
        """Settle the call to ``usage``; None: it failed and cost nothing, unless ``whole`` (it was stopped while
        the provider answered: what it wrote was paid for, so the whole reservation is)."""


class MeteredModel:
    """A client whose every ``complete`` is reserved and settled through ``meter``."""

    def __init__(self, client: Any, meter: Meter) -> None:
        self.client = client
        self.meter = meter

    def __getattr__(self, name: str) -> Any:  # the client's other attributes (its route, its close) stay reachable
        return getattr(self.client, name)

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        on_event: EventSink | None = None,
    ) -> Completion:
        handle = await self.meter.reserve(model, count_request(messages, tools), max_tokens)
        try:
            completion = await self.client.complete(
                messages, model=model, max_tokens=max_tokens, tools=tools, temperature=temperature, on_event=on_event
            )
        except ProviderError:  # refused, or never answered: nothing was written to pay for
            await settled(self.meter.settle(handle, model, None))
            raise
        except BaseException:  # stopped while it answered (a /stop, a shutdown): what it wrote was paid for
            await settled(self.meter.settle(handle, model, None, whole=True))
            raise
        await settled(self.meter.settle(handle, model, completion.usage))
        return completion


async def settled(settling: Awaitable[None]) -> None:
    """A settlement run to its end even when the turn is being cancelled, and never an answer's undoing: the
    answer was paid for, so a settlement that fails (Redis away) is logged, and its reservation lapses."""
    try:
        await asyncio.shield(settling)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        log.warning("a model call could not be settled against its budget: %s: %s", type(error).__name__, error)
