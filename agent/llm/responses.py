"""OpenAI Responses API client (``POST {base_url}/responses``) with native server-side compaction (SPEC S7.2).

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
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

import httpx

from agent.llm.client import Endpoint, PooledClient
from agent.llm.errors import BadResponse, InvalidRequest, ProviderError, StreamInterrupted, classify_failure, empty_answer
from agent.llm.http import HttpOptions
from agent.llm.retry import RetryPolicy
from agent.llm.stream import event_object, EventSink, StreamEvent, TextDelta, ToolCallStarted
from agent.llm.types import Completion
from agent.llm.usage import Usage
from agent.messages import api_problems
from agent.models import bare_model_id, request_rules
from agent.tokens import content_text

log = logging.getLogger(__name__)

PATH = "/responses"
#: Assistant-message key holding the opaque output items to replay (``{"issuer", "items"}``).
REPLAY_KEY = "_responses_items"
#: Output item types that are opaque state to carry forward (only with their encrypted content).
OPAQUE_ITEM_TYPES = frozenset({"compaction", "reasoning"})
#: The server's compaction threshold sits this far below the local trigger.
SERVER_THRESHOLD_MARGIN = 8_000
#: Sessions whose native-compaction refusal is remembered (oldest forgotten first).
MAX_REMEMBERED_SESSIONS = 10_000

#: Where the route goes: the direct OpenAI API, the ChatGPT Codex backend, or anything else.
RouteKind = Literal["openai", "openai-codex", "other"]
NATIVE_COMPACTION_ROUTES = frozenset({"openai", "openai-codex"})
_OPENAI_HOST = "api.openai.com"
_CODEX_HOST = "chatgpt.com"
_GPT56 = re.compile(r"gpt-5\.6(?:-[a-z0-9.]+)*")


def classify_route(provider: str, base_url: str) -> RouteKind:
    """``openai`` / ``openai-codex`` only for those providers at their own hosts; a relay or local server is ``other``."""
    host = (urlparse(base_url).hostname or "").lower()
    if provider == "openai" and host == _OPENAI_HOST:
        return "openai"
    if provider == "openai-codex" and host == _CODEX_HOST:
        return "openai-codex"
    return "other"


def native_compaction_model(model: str) -> bool:
    """gpt-5.6 and its named variants (``gpt-5.6-sol`` …), with or without a provider prefix or ``-900k``."""
    return bool(_GPT56.fullmatch(bare_model_id(model)))


def server_compact_threshold(configured: int, local_trigger_tokens: int | None) -> int:
    """The ``compact_threshold`` to send: the configured one, kept ≈8K below the local trigger."""
    if local_trigger_tokens is None:
        return configured
    return max(1, min(configured, local_trigger_tokens - SERVER_THRESHOLD_MARGIN))


# --------------------------------------------------------------------------- request body


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str) or content is None:
        return content or ""
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "input_text", "text": part})
        elif isinstance(part, Mapping) and part.get("type") == "image_url":
            image = part.get("image_url") or {}
            parts.append({"type": "input_image", "image_url": str(image.get("url") or ""),
                          "detail": str(image.get("detail") or "auto")})
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            parts.append({"type": "input_text", "text": part["text"]})
    return parts


def _replayable(message: Mapping[str, Any], issuer: str, model: str | None) -> list[dict[str, Any]]:
    """The opaque items stored on an assistant message that may go to ``model`` at this issuer.

    Encrypted content only decrypts where it was made, so another issuer's items are never
    sent. A compaction item goes only to a model that compacts natively (a model without it
    gets the full transcript instead, which the local store still has); a reasoning item
    only to the model that produced it.
    """
    stored = message.get(REPLAY_KEY)
    if not isinstance(stored, Mapping) or stored.get("issuer") != issuer:
        return []
    items = []
    for item in stored.get("items") or ():
        if not isinstance(item, Mapping):
            continue
        if model is not None and item.get("type") == "compaction" and not native_compaction_model(model):
            continue
        if model is not None and item.get("type") == "reasoning" and stored.get("model") not in (None, model):
            continue
        items.append(dict(item))
    return items


def convert_messages(
    messages: Sequence[Mapping[str, Any]], issuer: str, model: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """``(instructions, input items)`` for OpenAI chat messages (``_`` keys still present, for replay)."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            text = content_text(message.get("content"))
            if text:
                instructions.append(text)
        elif role == "user":
            items.append({"type": "message", "role": "user", "content": _user_content(message.get("content"))})
        elif role == "assistant":
            items += _replayable(message, issuer, model)
            text = content_text(message.get("content"))
            if text:  # an earlier answer goes back as a plain assistant message (stateless: no output item ids)
                items.append({"type": "message", "role": "assistant", "content": text})
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                arguments = function.get("arguments")
                items.append({
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": function.get("name") or "",
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
                })
        elif role == "tool":
            items.append({
                "type": "function_call_output",
                "call_id": message["tool_call_id"],
                "output": content_text(message.get("content")),
            })
    latest = max((i for i, item in enumerate(items) if item.get("type") == "compaction"), default=None)
    if latest is not None:
        items = items[latest:]  # the newest compaction item carries everything before it
    return "\n\n".join(instructions), items


def convert_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat-completions function tools as Responses function tools (the function's fields one level up).

    ``strict`` is sent as false: left out, the Responses API treats a tool as strict and then
    requires every property and ``additionalProperties: false``, which optional arguments break.
    """
    converted = []
    for tool in tools:
        function = tool.get("function") if tool.get("type") == "function" else tool
        function = function or {}
        converted.append({
            "type": "function",
            "name": function.get("name"),
            "description": function.get("description") or "",
            "parameters": function.get("parameters") or {"type": "object", "properties": {}},
            "strict": False,
        })
    return converted


# --------------------------------------------------------------------------- response


@dataclass(frozen=True)
class ResponsesCompletion(Completion):
    """A completion that also carries the opaque items to replay with the assistant message."""

    replay: dict[str, Any] | None = None
    compacted: bool = False

    def as_message(self) -> dict[str, Any]:
        message = super().as_message()
        if self.replay and self.replay.get("items"):
            message[REPLAY_KEY] = self.replay
        return message


def _usage(data: Any) -> Usage:
    if not isinstance(data, Mapping):
        return Usage()
    details = data.get("input_tokens_details") or {}
    output_details = data.get("output_tokens_details") or {}
    return Usage.from_mapping({
        "prompt_tokens": data.get("input_tokens"),
        "completion_tokens": data.get("output_tokens"),
        "total_tokens": data.get("total_tokens"),
        "prompt_tokens_details": {"cached_tokens": details.get("cached_tokens") if isinstance(details, Mapping) else 0},
        "completion_tokens_details": {
            "reasoning_tokens": output_details.get("reasoning_tokens") if isinstance(output_details, Mapping) else 0
        },
    })


def parse_response(data: Any, issuer: str, model: str | None = None) -> ResponsesCompletion:
    """A completion from a Responses body; opaque items with encrypted content are kept for replay."""
    if not isinstance(data, Mapping) or not isinstance(data.get("output"), list):
        raise BadResponse("response has no output list")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    opaque: list[dict[str, Any]] = []
    for item in data["output"]:
        if not isinstance(item, Mapping):
            raise BadResponse("output item is not an object")
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                if isinstance(part, Mapping) and part.get("type") in ("output_text", "text"):
                    texts.append(str(part.get("text") or ""))
        elif kind == "function_call":
            arguments = item.get("arguments")
            calls.append({
                "id": str(item.get("call_id") or item.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(item.get("name") or ""),
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
                },
            })
        elif kind in OPAQUE_ITEM_TYPES and item.get("encrypted_content"):
            opaque.append(dict(item))
    text = "".join(texts)
    incomplete = (data.get("incomplete_details") or {}) if data.get("status") == "incomplete" else {}
    finish = "length" if incomplete.get("reason") == "max_output_tokens" else ("tool_calls" if calls else "stop")
    if incomplete.get("reason") == "content_filter":
        finish = "content_filter"
    if not text.strip() and not calls:
        raise empty_answer(finish)
    return ResponsesCompletion(
        text=text,
        tool_calls=calls,
        finish_reason=finish,
        usage=_usage(data.get("usage")),
        raw=dict(data),
        replay={"issuer": issuer, "model": model or data.get("model"), "items": opaque} if opaque else None,
        compacted=any(item.get("type") == "compaction" for item in opaque),
    )


def is_compaction_rejection(status: int, body: Any) -> bool:
    """A structured refusal of ``context_management`` (a 4xx naming the field), not a crash."""
    if status not in (400, 404, 422) or not isinstance(body, Mapping):
        return False
    error = body.get("error")
    if not isinstance(error, Mapping):
        return False
    if error.get("param") == "context_management":
        return True
    text = f"{error.get('code') or ''} {error.get('message') or ''}".lower()
    return "context_management" in text or ("compaction" in text and "unsupported" in text)


# --------------------------------------------------------------------------- stream


def _stream_failure(event: Mapping[str, Any]) -> ProviderError:
    """The typed error for ``response.failed`` / ``error``: by the error's code (a context-length one included)."""
    error = (event.get("response") or {}).get("error") or event.get("error") or event
    if not isinstance(error, Mapping):
        error = {"message": str(error)}
    detail = str(error.get("message") or json.dumps(error)[:300])
    kind = str(error.get("code") or error.get("type") or "")
    return classify_failure(f"the response failed mid-stream: {kind} {detail}"[:500], status=None, detail=detail, kind=kind)


class ResponsesStream:
    """Assembles a streamed response: text deltas on the way, the final ``response`` object at the end."""

    def __init__(self, issuer: str, model: str | None) -> None:
        self.done = False
        self._issuer = issuer
        self._model = model
        self._final: Any = None

    def feed(self, event: str, data: str) -> list[StreamEvent]:
        if data == "[DONE]":
            return []
        payload = event_object(data)
        kind = payload.get("type") or event
        if kind == "response.output_text.delta":
            text = payload.get("delta")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "response.output_item.added":
            item = payload.get("item") or {}
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                return [ToolCallStarted(str(item.get("name") or ""))]
        elif kind in ("response.completed", "response.incomplete"):
            self._final = payload.get("response")
            self.done = True
        elif kind in ("response.failed", "error"):
            raise _stream_failure(payload)
        return []

    def result(self) -> Completion:
        if not self.done:
            raise StreamInterrupted("the stream ended before the response completed")
        return parse_response(self._final, self._issuer, self._model)


# --------------------------------------------------------------------------- client


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
        self.endpoint = Endpoint(self.url, auth, http=self._http, retry=retry or RetryPolicy(),
                                 timeout_seconds=self.options.timeout_seconds, config_key=config_key)

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
        """Whether this request may carry ``context_management`` (S7.2's gates, checked per request)."""
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
        if temperature is not None and request_rules(model, self.route if self.route != "other" else "custom").temperature:
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
            messages, model=model, max_tokens=max_tokens, tools=tools, temperature=temperature,
            local_trigger_tokens=local_trigger_tokens, native=native,
        )
        try:
            return await self._send(body, native, on_event)
        except _Rejected as rejection:
            log.warning("native compaction refused for %s on %s (%s); continuing without it", model, self.url, rejection)
            self._disable_native(session_key)
            body.pop("context_management", None)
            return await self._send(body, False, on_event)

    async def _send(self, body: dict[str, Any], native: bool, on_event: EventSink | None) -> Completion:
        model = body.get("model")

        def refusal(status: int, data: Any) -> Exception | None:
            if native and is_compaction_rejection(status, data):
                return _Rejected(f"HTTP {status}: {json.dumps(data)[:300]}")
            return None

        return await self.endpoint.send(
            body,
            parse=lambda data: parse_response(data, self.issuer, model),
            assembler=(lambda: ResponsesStream(self.issuer, model)) if self.stream else None,
            on_event=on_event,
            refusal=refusal,
        )

    def for_session(self, session: str, *, local_trigger_tokens: int | None = None) -> "ResponsesSession":
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
            messages, model=model, max_tokens=max_tokens, tools=tools, temperature=temperature,
            on_event=on_event, session=self.session, local_trigger_tokens=self.local_trigger_tokens,
        )
