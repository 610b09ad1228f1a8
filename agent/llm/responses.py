"""OpenAI Responses API client (``POST {base_url}/responses``) with native server-side compaction.

It has :class:`agent.llm.client.ChatClient`'s ``complete()`` interface, so the agent loop
and the summarizer use it unchanged; messages stay OpenAI chat dicts everywhere else.

Native compaction: with ``context_management: [{type: "compaction", compact_threshold: N}]``
the server folds old context into an opaque, encrypted ``compaction`` output item once the
input passes N tokens. Requests are stateless (``store: false``, no ``previous_response_id``),
so the item is kept on the assistant message it came with (under :data:`REPLAY_KEY`, which
the session store persists like any ``_`` key) and sent back on later requests; what came
before the newest compaction item is not sent again, because the item carries it.

The field is sent only where it works: gpt-5.6-family models (others fail server-side with
an HTTP 500 or a stalled stream rather than a clean refusal) on the direct OpenAI API or the
ChatGPT Codex backend — never through xAI, Copilot, OpenRouter, relays or local servers.
Its threshold sits :data:`SERVER_THRESHOLD_MARGIN` tokens below the local compressor's
trigger, so the server acts first and local compaction stays armed as the backstop. A
structured refusal of the field turns it off for that session and the request is retried
without it. Opaque items are tagged with their issuer (route, endpoint, key fingerprint) and
never replayed to another: encrypted content only decrypts where it was made. A session
switched to a model without native compaction gets neither the field nor the compaction
items, but the full transcript, which the store never stopped keeping.

This module is the client: gating per session, the retry without the field, and the
per-conversation view. The gates are :mod:`agent.llm.responses_routes`; bodies and answers
are :mod:`agent.llm.responses_wire`. Their names are importable from here as before.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from agent import json_codec
from agent.http_options import HttpOptions
from agent.llm.endpoint import Endpoint
from agent.llm.errors import InvalidRequest
from agent.llm.pooled import PooledClient
from agent.llm.responses_routes import (
    NATIVE_COMPACTION_ROUTES,
    SERVER_THRESHOLD_MARGIN,
    RouteKind,
    classify_route,
    native_compaction_model,
    server_compact_threshold,
)
from agent.llm.responses_wire import (
    OPAQUE_ITEM_TYPES,
    PATH,
    REPLAY_KEY,
    ResponsesCompletion,
    ResponsesStream,
    convert_messages,
    convert_tools,
    is_compaction_rejection,
    parse_response,
)
from agent.llm.retry import RetryPolicy
from agent.llm.stream import EventSink
from agent.llm.types import Completion
from agent.messages import api_problems
from agent.models import request_rules

__all__ = [
    "MAX_REMEMBERED_SESSIONS",
    "NATIVE_COMPACTION_ROUTES",
    "OPAQUE_ITEM_TYPES",
    "PATH",
    "REPLAY_KEY",
    "SERVER_THRESHOLD_MARGIN",
    "ResponsesClient",
    "ResponsesCompletion",
    "ResponsesSession",
    "ResponsesStream",
    "RouteKind",
    "classify_route",
    "convert_messages",
    "convert_tools",
    "is_compaction_rejection",
    "native_compaction_model",
    "parse_response",
    "server_compact_threshold",
]

log = logging.getLogger(__name__)

#: Sessions whose native-compaction refusal is remembered (oldest forgotten first).
MAX_REMEMBERED_SESSIONS = 10_000


class _Rejected(Exception):
    """The server refused the native-compaction field (internal: triggers the retry)."""


class ResponsesClient(PooledClient):
    """Responses API for one endpoint on the shared provider client; reuse one instance (it pools connections).

    ``route`` says where ``base_url`` leads (see :func:`classify_route`); native compaction
    is only ever sent on ``openai`` and ``openai-codex``. ``stream=True`` reads the answer
    as server-sent events (the ChatGPT Codex backend answers only that way);
    ``send_token_limit=False`` leaves ``max_output_tokens`` out for backends that refuse it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        route: RouteKind = "other",
        native_compaction: bool = False,
        compact_threshold: int = 200_000,
        stream: bool = False,
        send_token_limit: bool = True,
        options: HttpOptions | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
        config_key: str = "model",
    ) -> None:
        super().__init__(options, http)
        self.base_url = base_url.rstrip("/")
        self.route: RouteKind = route
        self.native_compaction = native_compaction
        self.compact_threshold = compact_threshold
        self.stream = stream
        self.send_token_limit = send_token_limit
        auth = dict(headers or {})
        if api_key:
            auth["authorization"] = f"Bearer {api_key}"
        fingerprint = hashlib.sha256((api_key or "").encode()).hexdigest()[:12]
        #: Who made the opaque items this client receives; items from anyone else are not replayed.
        self.issuer = f"{route}|{self.base_url}|{fingerprint}"
        self._rejected_sessions: OrderedDict[str, None] = OrderedDict()
        self.endpoint = Endpoint(
            self.url,
            auth,
            http=self.http,
            retry=retry or RetryPolicy(),
            timeout_seconds=self.options.timeout_seconds,
            config_key=config_key,
        )

    @property
    def url(self) -> str:
        return self.base_url + PATH

    # -- gating ----------------------------------------------------------------------

    def native_disabled(self, session: str | None) -> bool:
        return session is not None and session in self._rejected_sessions

    def _disable_native(self, session: str | None) -> None:
        key = session if session is not None else ""
        self._rejected_sessions[key] = None
        self._rejected_sessions.move_to_end(key)
        while len(self._rejected_sessions) > MAX_REMEMBERED_SESSIONS:
            self._rejected_sessions.popitem(last=False)

    def native_eligible(self, model: str, session: str | None = None) -> bool:
        """Whether this request may carry ``context_management``: native compaction on, a route and model that
        take it, not turned off for the session; checked per request."""
        return (
            self.native_compaction
            and self.route in NATIVE_COMPACTION_ROUTES
            and native_compaction_model(model)
            and not self.native_disabled(session if session is not None else "")
        )

    # -- requests --------------------------------------------------------------------

    def build_body(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        session: str | None = None,
        local_trigger_tokens: int | None = None,
        native: bool | None = None,
    ) -> dict[str, Any]:
        """The request body :meth:`complete` would send; raises :class:`InvalidRequest` first."""
        problems = api_problems(messages)
        if problems:
            raise InvalidRequest(problems)
        instructions, items = convert_messages(messages, self.issuer, model)
        body: dict[str, Any] = {"model": model, "input": items, "store": False}
        if instructions:
            body["instructions"] = instructions
        if self.send_token_limit:
            body["max_output_tokens"] = max_tokens
        if tools:
            body["tools"] = convert_tools(tools)
        if (
            temperature is not None
            and request_rules(model, self.route if self.route != "other" else "custom").temperature
        ):
            body["temperature"] = temperature
        if self.stream:
            body["stream"] = True
        if native if native is not None else self.native_eligible(model, session):
            threshold = server_compact_threshold(self.compact_threshold, local_trigger_tokens)
            body["context_management"] = [{"type": "compaction", "compact_threshold": threshold}]
        return body

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        on_event: EventSink | None = None,
        session: str | None = None,
        local_trigger_tokens: int | None = None,
    ) -> Completion:
        """One response; on a structured refusal of native compaction, the session stops sending it and retries."""
        session_key = session if session is not None else ""
        native = self.native_eligible(model, session_key)
        body = self.build_body(
            messages,
            model=model,
            max_tokens=max_tokens,
            tools=tools,
            temperature=temperature,
            local_trigger_tokens=local_trigger_tokens,
            native=native,
        )
        try:
            return await self._send(body, native, on_event)
        except _Rejected as rejection:
            log.warning(
                "native compaction refused for %s on %s (%s); continuing without it", model, self.url, rejection
            )
            self._disable_native(session_key)
            body.pop("context_management", None)
            return await self._send(body, False, on_event)

    async def _send(self, body: dict[str, Any], native: bool, on_event: EventSink | None) -> Completion:
        model = body.get("model")

        def refusal(status: int, data: Any) -> Exception | None:
            if native and is_compaction_rejection(status, data):
                return _Rejected(f"HTTP {status}: {json_codec.dumps_text(data)[:300]}")
            return None

        return await self.endpoint.send(
            body,
            parse=lambda data: parse_response(data, self.issuer, model),
            assembler=(lambda: ResponsesStream(self.issuer, model)) if self.stream else None,
            on_event=on_event,
            refusal=refusal,
        )

    def for_session(self, session: str, *, local_trigger_tokens: int | None = None) -> ResponsesSession:
        """A ``ChatModel`` view bound to one conversation (its native-compaction state and local trigger)."""
        return ResponsesSession(self, session, local_trigger_tokens)


@dataclass
class ResponsesSession:
    """The shared client seen by one conversation's agent: same ``complete()``, session-scoped gating."""

    client: ResponsesClient
    session: str
    local_trigger_tokens: int | None = None

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
        return await self.client.complete(
            messages,
            model=model,
            max_tokens=max_tokens,
            tools=tools,
            temperature=temperature,
            on_event=on_event,
            session=self.session,
            local_trigger_tokens=self.local_trigger_tokens,
        )
