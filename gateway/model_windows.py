"""The windows of a bot's chat model and summarizer: where each came from, and what refusals taught since.

Built with the agent builder and settled once at start (:meth:`ModelWindows.discover` asks the
provider about every model whose window the configuration does not give), then read on every turn.
What a refusal teaches goes into the book — in Redis for a running gateway, so every process learns
it once and a restart keeps it — and lowers the window wherever it is read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from agent.llm.model_windows import reported_window
from agent.windows import MemoryWindowBook, ModelWindow, WindowBook, WindowTeacher, resolve_window

log = logging.getLogger(__name__)

#: Seconds the start may spend asking a provider for one model's window (a silent host must not hold it up).
DISCOVERY_SECONDS = 3.0


@dataclass
class Route:
    """Where one model is asked, so its window can be asked of the provider and kept per endpoint."""

    endpoint: str
    dialect: str
    http: httpx.AsyncClient | None = None
    headers: dict[str, str] | None = None


class ModelWindows:
    """The windows of one bot's models, from its settings, the provider's word, the catalog and refusals."""

    def __init__(
        self,
        *,
        chat_model: str,
        chat_configured: int | None,
        chat_route: Route,
        summarizer_model: str | None = None,
        summarizer_configured: int | None = None,
        summarizer_route: Route | None = None,
        book: WindowBook | None = None,
    ) -> None:
        self.book: WindowBook = book or MemoryWindowBook()
        self.chat_model = chat_model
        self.chat_configured = chat_configured
        self.chat_route = chat_route
        self.summarizer_model = summarizer_model
        self.summarizer_configured = summarizer_configured
        self.summarizer_route = summarizer_route
        self._reported: dict[tuple[str, str], tuple[int, str]] = {}
        self._asked: set[tuple[str, str]] = set()
        self._teachers: dict[str, WindowTeacher] = {}
        self._summarizer: WindowTeacher | None = None

    # -- where each window starts --------------------------------------------------------------

    def chat_start(self, model: str) -> ModelWindow:
        """Where ``model``'s window starts on the chat route, before any refusal."""
        configured = self.chat_configured if model == self.chat_model else None
        return resolve_window(
            model,
            configured=configured,
            configured_key="model.context_length",
            reported=self._reported.get((self.chat_route.endpoint, model)),
        )

    def summarizer_start(self) -> ModelWindow | None:
        """Where the summarizer's window starts: never a guess larger than the chat model's window."""
        if self.summarizer_model is None or self.summarizer_route is None:
            return None
        reported = self._reported.get((self.summarizer_route.endpoint, self.summarizer_model))
        return resolve_window(
            self.summarizer_model,
            configured=self.summarizer_configured,
            configured_key="auxiliary.compression.context_length",
            reported=reported,
            default_cap=self.chat_teacher(self.chat_model).window,
        )

    # -- what turns read -----------------------------------------------------------------------

    def chat_teacher(self, model: str) -> WindowTeacher:
        """The chat route's window for ``model``, and where its refusals are kept."""
        teacher = self._teachers.get(model)
        if teacher is None:
            teacher = WindowTeacher(
                self.book, self.chat_route.endpoint, model, start=self.chat_start(model), setting="model.context_length"
            )
            self._teachers[model] = teacher
        return teacher

    def summarizer_teacher(self) -> WindowTeacher | None:
        start = self.summarizer_start()
        if start is None or self.summarizer_route is None or self.summarizer_model is None:
            return None
        if self._summarizer is None or self._summarizer.start != start:
            self._summarizer = WindowTeacher(
                self.book,
                self.summarizer_route.endpoint,
                self.summarizer_model,
                start=start,
                setting="auxiliary.compression.context_length",
            )
        return self._summarizer

    def chat_window(self, model: str) -> int:
        return self.chat_teacher(model).window.tokens

    # -- at start --------------------------------------------------------------------------------

    async def discover(self) -> None:
        """Ask the provider for the window of each model the configuration leaves open (once, at start)."""
        asks = [(self.chat_route, self.chat_model, self.chat_configured)]
        if self.summarizer_model is not None and self.summarizer_route is not None:
            asks.append((self.summarizer_route, self.summarizer_model, self.summarizer_configured))
        for route, model, configured in asks:
            if configured or route.http is None or (route.endpoint, model) in self._asked:
                continue
            self._asked.add((route.endpoint, model))
            found = await reported_window(
                route.http,
                route.endpoint,
                model,
                headers=route.headers or {},
                dialect=route.dialect,
                timeout=DISCOVERY_SECONDS,
            )
            if found is not None:
                source = found.source + (" (until the model is loaded)" if found.provisional else "")
                self._reported[(route.endpoint, model)] = (found.tokens, source)
        self._teachers.clear()
        self._summarizer = None

    def lines(self) -> list[str]:
        """One line per model saying its window and where it came from (the start line and ``foldgate doctor``)."""
        lines = [f"window of {self.chat_model}: {self.chat_teacher(self.chat_model).window.describe()}"]
        summarizer = self.summarizer_teacher()
        if summarizer is not None:
            lines.append(f"window of the summarizer {summarizer.model}: {summarizer.window.describe()}")
        return lines
