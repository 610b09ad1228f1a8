"""The chat-completions and Anthropic-messages client the agent loop and the summarizer use.

:class:`ChatClient` builds a route's body (:mod:`agent.llm.openai_chat` for OpenAI,
OpenRouter and custom endpoints, :mod:`agent.llm.anthropic`) and sends it through its
:class:`~agent.llm.endpoint.Endpoint`, which retries and maps every failure to a typed
:mod:`agent.llm.errors` exception. Messages are validated with
:func:`agent.messages.checked_api_messages` before anything is sent, so a broken tool
pairing fails here, not as a provider 400. What each model accepts (the token-limit
field, whether a temperature may be sent) comes from :func:`agent.models.request_rules`.

The sending machinery lives beside it, one concern each, and is importable from here as
it always was: :mod:`agent.llm.endpoint` (send, stream, retry), :mod:`agent.llm.status_errors`
(a non-2xx answer as a typed error), :mod:`agent.llm.pooled` (the shared httpx client)
and :mod:`agent.llm.model_list` (what a provider serves, for ``/model``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import httpx

from agent.http_options import HttpOptions
from agent.llm import anthropic, openai_chat
from agent.llm.endpoint import DRAIN_SECONDS, Endpoint, Refusal
from agent.llm.errors import InvalidRequest
from agent.llm.model_list import MAX_MODEL_PAGES, MODEL_LIST_TTL_SECONDS, fetch_model_ids, lists_model
from agent.llm.pooled import PooledClient
from agent.llm.retry import RetryPolicy
from agent.llm.status_errors import error_for_status
from agent.llm.stream import EventSink, StreamAssembler
from agent.llm.types import Completion
from agent.messages import checked_api_messages
from agent.models import RequestRules, request_rules

__all__ = [
    "DRAIN_SECONDS",
    "MAX_MODEL_PAGES",
    "MODEL_LIST_TTL_SECONDS",
    "ChatClient",
    "Dialect",
    "Endpoint",
    "PooledClient",
    "Refusal",
    "error_for_status",
    "lists_model",
]

Dialect = Literal["openai", "anthropic"]


class ChatClient(PooledClient):
    """Chat completions or Anthropic messages for one endpoint; reuse one instance (it pools connections).

    ``dialect="openai"`` posts to ``{base_url}/chat/completions`` (base_url usually ends in
    ``/v1``); ``dialect="anthropic"`` posts to ``{base_url}/v1/messages`` with ``x-api-key``
    and ``anthropic-version`` headers. ``route`` is the provider (``openai``, ``anthropic``,
    ``openrouter``, ``custom`` …) whose request rules apply. ``stream=True`` asks for
    server-sent events; the call still returns the whole answer, and hands deltas to an
    ``on_event`` sink on the way. ``http`` shares a pooled client (the caller closes it);
    by default the client opens one from ``options``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        dialect: Dialect = "openai",
        route: str = "custom",
        stream: bool = False,
        options: HttpOptions | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        anthropic_version: str = anthropic.DEFAULT_VERSION,
        http: httpx.AsyncClient | None = None,
        config_key: str = "model",
    ) -> None:
        if dialect not in ("openai", "anthropic"):
            raise ValueError(f"dialect must be 'openai' or 'anthropic', got {dialect!r}")
        super().__init__(options, http)
        self.base_url = base_url.rstrip("/")
        self.dialect: Dialect = dialect
        self.route = route
        self.stream = stream
        auth = dict(headers or {})
        if dialect == "anthropic":
            auth["anthropic-version"] = anthropic_version
            if api_key:
                auth["x-api-key"] = api_key
        elif api_key:
            auth["authorization"] = f"Bearer {api_key}"
        self.endpoint = Endpoint(
            self.url,
            auth,
            http=self.http,
            retry=retry or RetryPolicy(),
            timeout_seconds=self.options.timeout_seconds,
            config_key=config_key,
        )
        self._auth = auth
        self._config_key = config_key
        self._models: tuple[float, list[str]] | None = None  # (monotonic time fetched, ids)

    async def list_models(self) -> list[str]:
        """The model ids the provider lists (``GET {base_url}/models``; Anthropic: ``/v1/models``).

        Kept for :data:`MODEL_LIST_TTL_SECONDS`, so checking a ``/model`` switch costs one request
        now and then. Raises a :mod:`agent.llm.errors` exception when the list cannot be read.
        """
        now = time.monotonic()
        if self._models is not None and now - self._models[0] < MODEL_LIST_TTL_SECONDS:
            return list(self._models[1])
        ids = await fetch_model_ids(
            self.http, self.base_url, dialect=self.dialect, headers=self._auth, config_key=self._config_key
        )
        self._models = (now, ids)
        return list(ids)

    @property
    def url(self) -> str:
        path = anthropic.PATH if self.dialect == "anthropic" else openai_chat.PATH
        return self.base_url + path

    def rules(self, model: str) -> RequestRules:
        """The request rules for ``model`` on this route (:func:`agent.models.request_rules`)."""
        return request_rules(model, self.route)

    def build_body(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
    ) -> dict[str, Any]:
        """The request body that :meth:`complete` would send; raises :class:`InvalidRequest` first."""
        api_messages, problems = checked_api_messages(messages)
        if problems:
            raise InvalidRequest(problems)
        route = anthropic if self.dialect == "anthropic" else openai_chat
        return route.build_request(
            api_messages,
            model=model,
            max_tokens=max_tokens,
            tools=tools,
            temperature=temperature,
            rules=self.rules(model),
            stream=self.stream,
        )

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
        """One completion; raises a :mod:`agent.llm.errors` exception on any failure."""
        body = self.build_body(messages, model=model, max_tokens=max_tokens, tools=tools, temperature=temperature)
        assembler: Callable[[], StreamAssembler]
        if self.dialect == "anthropic":
            parse, assembler = anthropic.parse_response, anthropic.MessagesStream
        else:
            parse, assembler = openai_chat.parse_response, openai_chat.ChatStream
        return await self.endpoint.send(
            body, parse=parse, assembler=assembler if self.stream else None, on_event=on_event
        )
