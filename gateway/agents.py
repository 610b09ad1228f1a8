"""Builds what a turn needs from the configuration: the chat model, the summarizer, the engine, the agent.

The runner asks for these per turn (a gateway serves many chats and builds one engine
per message, restoring its guard state from the session meta); the expensive parts —
HTTP clients with their connection pools, the codex app-server process — are built once
here and shared.

Routes (``model.api_mode``): ``chat`` — chat completions, or the Anthropic messages API
for ``provider: anthropic``, with prompt-cache breakpoints where the route supports them;
``responses`` — the Responses API, with native compaction where it is allowed;
``codex_app_server`` — a codex app-server process owns each chat's thread.
``auto`` picks ``responses`` for ``openai-codex`` and ``chat`` otherwise.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import shlex
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from agent.codex import AutoraiseNotice
from agent.codex_chat import CodexAppServer, CodexAppServerChat, CodexThreadEngine
from agent.compaction.summarizer import SUMMARIZER_RETRIES, LLMSummarizer, build_summarizer
from agent.context_engine import ContextEngine
from agent.engine_registry import resolve_context_engine
from agent.items import DEFAULT_MAX_IMAGES, MediaSource
from agent.llm.client import ChatClient, Dialect
from agent.llm.local import LocalDemoModel
from agent.llm.responses import ResponsesClient, classify_route
from agent.llm.retry import RetryPolicy
from agent.loop import Agent, ChatModel, ResultArchive
from agent.metering import Meter, MeteredModel
from agent.models import api_model_id
from agent.prompt_caching import CachingPlan, plan_prompt_caching
from agent.tools import ToolRegistry
from agent.windows import WindowBook
from gateway.config import Settings
from gateway.model_windows import ModelWindows, Route
from gateway.session_source import ChatHistory

log = logging.getLogger(__name__)

#: provider -> (default base URL, API dialect)
PROVIDER_ROUTES: dict[str, tuple[str, Dialect]] = {
    "openai": ("https://api.openai.com/v1", "openai"),
    "anthropic": ("https://api.anthropic.com", "anthropic"),
    "openrouter": ("https://openrouter.ai/api/v1", "openai"),
    "openai-codex": ("https://chatgpt.com/backend-api/codex", "openai"),
}


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None and hasattr(value, "get_secret_value") else value


def resolve_api_mode(provider: str, api_mode: str) -> str:
    """``chat``, ``responses`` or ``codex_app_server`` for the configured mode (``auto`` decides by provider)."""
    if api_mode != "auto":
        return api_mode
    return "responses" if provider == "openai-codex" else "chat"


def _asking(client: object) -> tuple[Any, dict[str, str] | None]:
    """The pooled HTTP client and headers to ask a provider about its models with, when ``client`` has them."""
    endpoint = getattr(client, "endpoint", None)
    return getattr(client, "http", None), getattr(endpoint, "headers", None)


def _accepts_keyword(factory: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


class AgentBuilder:
    """``gateway.worker.chat_turn.AgentFactory`` over a :class:`gateway.config.Settings`.

    ``notice`` receives one-time operator notices (the Codex autoraise); by default they
    are logged as warnings.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        chat_model: ChatModel | None = None,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        model = settings.model
        self.default_model = model.name
        self.provider = model.provider
        self.api_mode = "chat" if model.provider == "local" else resolve_api_mode(model.provider, model.api_mode)
        self.base_url, self.dialect = PROVIDER_ROUTES.get(model.provider, (model.base_url or "", "openai"))
        self.base_url = model.base_url or self.base_url
        self.api_key = _secret(model.api_key)
        self.notice = notice or log.warning
        self.autoraise_notice = AutoraiseNotice(settings.home_path)
        self._sessions: weakref.WeakKeyDictionary[ContextEngine, str] = weakref.WeakKeyDictionary()
        self._caching_plans: dict[str, CachingPlan] = {}
        self.app_server: CodexAppServer | None = None
        if self.api_mode == "codex_app_server":
            self.app_server = CodexAppServer(shlex.split(model.app_server_command))
        self.chat_model: ChatModel = chat_model or self._build_chat_model()
        self.windows = self._model_windows()
        #: One line per model saying its window and where it came from, once :meth:`settle_windows` ran.
        self.window_lines: list[str] = []
        self.summarizer = None if self.api_mode == "codex_app_server" else self._build_summarizer()
        self.engine_factory, warning = resolve_context_engine(settings.context.engine)
        self._engine_takes_provider = _accepts_keyword(self.engine_factory, "provider")
        if warning:
            log.warning(warning)
        if self.api_mode == "codex_app_server" and settings.context.engine != "compressor":
            log.warning(
                "context.engine %s is not used on api_mode codex_app_server: the app-server owns the thread",
                settings.context.engine,
            )

    # -- the shared clients --------------------------------------------------------------

    def _responses_client(self, *, native: bool, summarizer: bool = False) -> ResponsesClient:
        codex = self.provider == "openai-codex"
        model = self.settings.model
        connection = self.settings.auxiliary.compression if summarizer else model
        return ResponsesClient(
            self.base_url,
            api_key=self.api_key,
            route=classify_route(self.provider, self.base_url),
            native_compaction=native,
            compact_threshold=self.settings.compression.codex_responses_compact_threshold,
            stream=codex or model.stream,  # the ChatGPT Codex backend answers with server-sent events only
            send_token_limit=not codex,
            options=connection.http_options(),
            retry=RetryPolicy(max_retries=SUMMARIZER_RETRIES if summarizer else model.max_retries),
            config_key="auxiliary.compression" if summarizer else "model",
        )

    def _build_chat_model(self) -> ChatModel:
        model = self.settings.model
        if model.provider == "local":
            return LocalDemoModel(model.name)
        if self.api_mode == "codex_app_server":
            return LocalDemoModel(model.name)  # unused: each agent gets its thread's chat model
        if self.api_mode == "responses":
            return self._responses_client(native=self.settings.compression.codex_responses_native)
        return ChatClient(
            self.base_url,
            api_key=self.api_key,
            dialect=self.dialect,
            route=model.provider,
            stream=model.stream,
            options=model.http_options(),
            retry=RetryPolicy(max_retries=model.max_retries),
        )

    def _build_summarizer(self) -> LLMSummarizer | None:
        model = self.settings.model
        auxiliary = self.settings.auxiliary.compression
        summarizer: LLMSummarizer | None
        window = self.windows.summarizer_start()
        teacher = self.windows.summarizer_teacher()
        if window is None:
            return None
        if self.api_mode == "responses" and not auxiliary.base_url:
            # The main route speaks the Responses API only; the summarizer shares it, without native compaction.
            client = self._responses_client(native=False, summarizer=True)
            summarizer = LLMSummarizer(
                client,  # type: ignore[arg-type]
                auxiliary.model or model.name,
                window.tokens,
                teacher=teacher,
            )
        else:
            summarizer = build_summarizer(
                auxiliary,
                main_model=model.name,
                main_base_url=None if model.provider == "local" else self.base_url,
                main_api_key=self.api_key,
                main_dialect=self.dialect,
                main_route=model.provider,
                stream=model.stream,
                window=window,
                teacher=teacher,
            )
        if summarizer is not None:
            # A -900k alias keeps its large window for planning but is sent as its base id.
            summarizer.model = api_model_id(summarizer.model)
            route = self.windows.summarizer_route
            if route is not None and route.http is None:
                route.http, route.headers = _asking(summarizer.client)
        return summarizer

    def _model_windows(self) -> ModelWindows:
        """Where the chat model's and the summarizer's windows come from. A summarizer that is the same model
        on the same route plans its requests for the window the operator set for the chat model."""
        model, auxiliary = self.settings.model, self.settings.auxiliary.compression
        same_model = not auxiliary.base_url and auxiliary.model in (None, model.name)
        chat = Route(self.base_url, self.dialect, *_asking(self.chat_model))
        summarizer_endpoint = auxiliary.base_url or (None if model.provider == "local" else self.base_url)
        # A summarizer elsewhere is asked through its own client (and key), set once it is built.
        summarizer = (
            Route(
                summarizer_endpoint,
                "anthropic" if "anthropic.com" in summarizer_endpoint else self.dialect,
                *(_asking(self.chat_model) if not auxiliary.base_url else (None, None)),
            )
            if summarizer_endpoint
            else None
        )
        return ModelWindows(
            chat_model=model.name,
            chat_configured=model.context_length,
            chat_route=chat,
            summarizer_model=(auxiliary.model or model.name) if summarizer else None,
            summarizer_configured=auxiliary.context_length or (model.context_length if same_model else None),
            summarizer_route=summarizer,
        )

    async def settle_windows(self, book: WindowBook | None = None) -> list[str]:
        """Ask the provider for every window the configuration leaves open and keep refusals in ``book``;
        returns one line per model saying its window and where it came from."""
        if book is not None:
            self.windows.book = book
        if self.settings.model.provider != "local" and self.api_mode != "codex_app_server":
            await self.windows.discover()
        if isinstance(self.summarizer, LLMSummarizer):
            self.summarizer.teacher = self.windows.summarizer_teacher()
        self.window_lines = self.windows.lines() if self.settings.model.provider != "local" else []
        for line in self.window_lines:
            log.info("%s", line)
        return self.window_lines

    async def refresh_windows(self) -> None:
        """Read what refusals taught other processes, when the book is shared and its copy is old."""
        refresh = getattr(self.windows.book, "refresh", None)
        if callable(refresh):
            await refresh()

    # -- per model -------------------------------------------------------------------------

    def context_length(self, model: str) -> int:
        if self.settings.model.provider == "local":
            return self.settings.model.context_length or LocalDemoModel.context_length
        return self.windows.chat_window(model)

    def caching_plan(self, model: str) -> CachingPlan:
        """Prompt caching for ``model`` on this route: breakpoints only for Claude where the route takes them.

        Decided once per model (every turn asks; the route and settings are fixed for the process).
        """
        plan = self._caching_plans.get(model)
        if plan is None:
            if self.api_mode != "chat":
                plan = CachingPlan(
                    False, f"api_mode {self.api_mode} has no cache_control", self.settings.prompt_caching.cache_ttl
                )
            else:
                plan = plan_prompt_caching(
                    model,
                    self.provider,
                    enabled=self.settings.prompt_caching.enabled,
                    cache_ttl=self.settings.prompt_caching.cache_ttl,
                    base_url=self.base_url,
                )
            self._caching_plans[model] = plan
        return plan

    @property
    def caching_status(self) -> str:
        """The start-up status line for the default model."""
        return self.caching_plan(self.default_model).status_line

    # -- per turn --------------------------------------------------------------------------

    def build_engine(
        self, model: str, state: Mapping[str, Any], history: ChatHistory, meter: Meter | None = None
    ) -> ContextEngine:
        context_length = self.context_length(model)
        compression = self.settings.compression
        engine: ContextEngine
        if self.api_mode == "codex_app_server":
            assert self.app_server is not None
            engine = CodexThreadEngine(
                model, context_length, compression, server=self.app_server, provider=self.provider
            )
        else:
            kwargs: dict[str, Any] = {
                "model": model,
                "context_length": context_length,
                "settings": compression,
                "summarizer": self.summarizer,
            }
            if meter is not None and isinstance(self.summarizer, LLMSummarizer):  # its calls count against the budget
                kwargs["summarizer"] = self.summarizer.on_client(MeteredModel(self.summarizer.client, meter))  # type: ignore[arg-type]
            if self.summarizer is not None:
                kwargs["summarizer_context_length"] = self.summarizer.context_length
            if self._engine_takes_provider:
                kwargs["provider"] = self.provider
            engine = self.engine_factory(**kwargs)
        engine.load_state(dict(state))
        attach = getattr(engine, "attach_history", None)
        if callable(attach):  # engines with their own recovery tools read the chat's archive
            attach(history)
        if getattr(engine, "provider", None) == self.provider:
            notice = self.autoraise_notice.check(model, self.provider, compression, context_length)
            if notice:
                self.notice(notice)
        with contextlib.suppress(TypeError):  # an engine that is not hashable just shares the default session
            self._sessions[engine] = f"{history.chat}/{history.session_id}"
        return engine

    def build_agent(
        self,
        engine: ContextEngine,
        model: str,
        tools: ToolRegistry,
        *,
        media: MediaSource | None = None,
        max_images: int = DEFAULT_MAX_IMAGES,
        results: ResultArchive | None = None,
        result_limit: int | None = None,
        meter: Meter | None = None,
        system_prompt: str | None = None,
        memory: str = "",
        turn_note: str = "",
    ) -> Agent:
        """The agent of one turn; ``media`` is the chat's stored items, of which the newest ``max_images``
        images go into each request; a tool result over ``result_limit`` tokens is archived whole in ``results``;
        ``system_prompt`` is the session's own (an API client's), sent instead of ``model.system_prompt``;
        ``memory`` follows the system prompt and ``turn_note`` goes with the turn's message
        (:mod:`gateway.memory.block`)."""
        chat_model: ChatModel = self.chat_model
        if isinstance(engine, CodexThreadEngine):
            chat_model = CodexAppServerChat(engine.server, engine)
        elif isinstance(chat_model, ResponsesClient):
            try:
                session = self._sessions.get(engine, "")
            except TypeError:
                session = ""
            chat_model = chat_model.for_session(session, local_trigger_tokens=engine.threshold_tokens)
        if meter is not None:
            chat_model = MeteredModel(chat_model, meter)
        return Agent(
            chat_model,
            engine,
            model=api_model_id(model),
            tools=tools,
            max_output_tokens=self.settings.model.max_output_tokens,
            request_hook=self.caching_plan(model).request_hook(),
            media=media,
            max_images=max_images,
            results=results,
            result_limit=result_limit,
            system_prompt="\n\n".join(filter(None, [system_prompt or self.settings.model.system_prompt, memory])),
            turn_note=turn_note,
            window_teacher=None if self.settings.model.provider == "local" else self.windows.chat_teacher(model),
        )

    async def aclose(self) -> None:
        for client in (self.chat_model, getattr(self.summarizer, "client", None), self.app_server):
            close = getattr(client, "aclose", None)
            if callable(close):
                await close()
