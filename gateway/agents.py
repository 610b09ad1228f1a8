"""Builds what a turn needs from the configuration: the chat model, the summarizer, the engine, the agent.

The runner asks for these per turn (a gateway serves many chats and builds one engine
per message, restoring its guard state from the session meta); the expensive parts —
HTTP clients with their connection pools — are built once here and shared.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from agent.context_engine import ContextEngine, resolve_context_engine
from agent.compaction.summarizer import build_summarizer
from agent.llm.client import ChatClient
from agent.llm.local import LocalDemoModel
from agent.loop import Agent, ChatModel
from agent.models import api_model_id, context_length_for
from agent.tools import ToolRegistry
from gateway.config import Settings
from gateway.session_source import ChatHistory

log = logging.getLogger(__name__)

#: provider -> (default base URL, API dialect)
PROVIDER_ROUTES: dict[str, tuple[str, str]] = {
    "openai": ("https://api.openai.com/v1", "openai"),
    "anthropic": ("https://api.anthropic.com", "anthropic"),
    "openrouter": ("https://openrouter.ai/api/v1", "openai"),
    "openai-codex": ("https://chatgpt.com/backend-api/codex", "openai"),
}


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None and hasattr(value, "get_secret_value") else value


class AgentBuilder:
    """``gateway.runner.AgentFactory`` over a :class:`gateway.config.Settings`."""

    def __init__(self, settings: Settings, *, chat_model: ChatModel | None = None) -> None:
        self.settings = settings
        model = settings.model
        self.default_model = model.name
        self.base_url, self.dialect = PROVIDER_ROUTES.get(model.provider, (model.base_url or "", "openai"))
        self.base_url = model.base_url or self.base_url
        self.api_key = _secret(model.api_key)
        self.chat_model: ChatModel = chat_model or self._build_chat_model()
        self.summarizer = build_summarizer(
            settings.auxiliary.compression,
            main_model=model.name,
            main_base_url=None if model.provider == "local" else self.base_url,
            main_api_key=self.api_key,
            main_dialect=self.dialect,
        )
        self.engine_factory, warning = resolve_context_engine(settings.context.engine)
        if warning:
            log.warning(warning)

    def _build_chat_model(self) -> ChatModel:
        if self.settings.model.provider == "local":
            return LocalDemoModel(self.settings.model.name)
        return ChatClient(self.base_url, api_key=self.api_key, dialect=self.dialect)  # type: ignore[arg-type]

    def context_length(self, model: str) -> int:
        configured = self.settings.model.context_length
        if configured and model == self.settings.model.name:
            return configured
        if self.settings.model.provider == "local":
            return LocalDemoModel.context_length
        return context_length_for(model)

    def build_engine(self, model: str, state: Mapping[str, Any], history: ChatHistory) -> ContextEngine:
        kwargs: dict[str, Any] = {
            "model": model,
            "context_length": self.context_length(model),
            "settings": self.settings.compression,
            "summarizer": self.summarizer,
        }
        if self.summarizer is not None:
            kwargs["summarizer_context_length"] = self.summarizer.context_length
        engine = self.engine_factory(**kwargs)
        engine.load_state(dict(state))
        attach = getattr(engine, "attach_history", None)
        if callable(attach):  # engines with their own recovery tools read the chat's archive
            attach(history)
        return engine

    def build_agent(self, engine: ContextEngine, model: str, tools: ToolRegistry) -> Agent:
        return Agent(
            self.chat_model,
            engine,
            model=api_model_id(model),
            tools=tools,
            max_output_tokens=self.settings.model.max_output_tokens,
        )

    async def aclose(self) -> None:
        for client in (self.chat_model, getattr(self.summarizer, "client", None)):
            close = getattr(client, "aclose", None)
            if callable(close):
                await close()
