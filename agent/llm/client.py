"""``ChatClient``: one reusable httpx client for OpenAI-compatible and Anthropic chat endpoints.

It does one request per :meth:`ChatClient.complete` and turns every way that can go
wrong into a typed :mod:`agent.llm.errors` exception; it never retries by itself,
because the right reaction differs by caller (the agent loop retries, the summarizer
backs off and falls back). Messages are validated with :func:`agent.messages.checked_api_messages`
before anything is sent, so a broken tool pairing fails here, not as a provider 400.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import httpx

from agent import json_codec
from agent.llm.transport import Http1Transport, PostTarget
from agent.llm import anthropic, openai_chat
from agent.llm.errors import (
    BadResponse,
    ContextTooLong,
    InvalidRequest,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
)
from agent.llm.types import Completion
from agent.messages import checked_api_messages

Dialect = Literal["openai", "anthropic"]

#: Phrases providers use when a prompt does not fit the window (lower case).
CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "reduce the length",
    "request too large",
    "exceeds the maximum",
)


def _seconds(text: str, scale: float = 1.0) -> float | None:
    """A finite, non-negative number of seconds, or None (``inf`` or ``nan`` from a server is no wait time)."""
    try:
        seconds = float(text) * scale
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        seconds = _seconds(millis, 0.001)
        if seconds is not None:
            return seconds
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:2000]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        parts = [str(error.get(key) or "") for key in ("type", "code", "message")]
        return " ".join(part for part in parts if part) or response.text[:2000]
    if isinstance(error, str):
        return error
    return response.text[:2000]


def error_for_status(response: httpx.Response) -> Exception:
    """The typed exception for a non-2xx response."""
    status = response.status_code
    detail = _error_text(response)
    message = f"HTTP {status} from {response.request.url}: {detail}"[:1000]
    if status == 429:
        return RateLimited(message, retry_after=parse_retry_after(response.headers), body=detail)
    if status >= 500:
        return ProviderUnavailable(message, status=status, body=detail)
    lowered = detail.lower()
    if status in (400, 413, 422) and any(marker in lowered for marker in CONTEXT_LENGTH_MARKERS):
        return ContextTooLong(message, status=status, body=detail)
    return ProviderRejected(message, status=status, body=detail)


class ChatClient:
    """Chat completions over httpx for one endpoint; reuse one instance (it pools connections).

    ``dialect="openai"`` posts to ``{base_url}/chat/completions`` (base_url usually ends in
    ``/v1``); ``dialect="anthropic"`` posts to ``{base_url}/v1/messages`` with ``x-api-key``
    and ``anthropic-version`` headers. ``transport``, when given, is an
    :class:`agent.llm.transport.Http1Transport` (to share its connections); by default the
    client owns one.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        dialect: Dialect = "openai",
        timeout: float = 120.0,
        headers: Mapping[str, str] | None = None,
        anthropic_version: str = anthropic.DEFAULT_VERSION,
        token_limit_field: str = "max_tokens",
        transport: Http1Transport | None = None,
    ) -> None:
        if dialect not in ("openai", "anthropic"):
            raise ValueError(f"dialect must be 'openai' or 'anthropic', got {dialect!r}")
        self.base_url = base_url.rstrip("/")
        self.dialect: Dialect = dialect
        self.timeout = timeout
        self.token_limit_field = token_limit_field
        self._headers = {"content-type": "application/json", **dict(headers or {})}
        if dialect == "anthropic":
            self._headers["anthropic-version"] = anthropic_version
            if api_key:
                self._headers["x-api-key"] = api_key
        elif api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._owns_transport = transport is None
        self._transport = transport or Http1Transport()
        self._target: PostTarget | None = None  # built on the first call, where a bad URL or header fails the call
        self._timeouts = httpx.Timeout(timeout).as_dict()

    @property
    def url(self) -> str:
        path = anthropic.PATH if self.dialect == "anthropic" else openai_chat.PATH
        return self.base_url + path

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
        if self.dialect == "anthropic":
            return anthropic.build_request(
                api_messages, model=model, max_tokens=max_tokens, tools=tools, temperature=temperature
            )
        return openai_chat.build_request(
            api_messages,
            model=model,
            max_tokens=max_tokens,
            tools=tools,
            temperature=temperature,
            token_limit_field=self.token_limit_field,
        )

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
    ) -> Completion:
        """One completion; raises a :mod:`agent.llm.errors` exception on any failure."""
        body = self.build_body(messages, model=model, max_tokens=max_tokens, tools=tools, temperature=temperature)
        try:
            payload = json_codec.dumps(body)
        except json_codec.EncodeError as error:
            raise InvalidRequest([f"the request cannot be sent as JSON: {error}"]) from error
        try:
            answer = await self._transport.post(self._post_target(), payload, self._timeouts)
        except httpx.TimeoutException as error:
            raise ProviderTimeout(f"no answer from {self.url} within {self.timeout:g}s") from error
        except httpx.TransportError as error:
            raise ProviderUnavailable(f"connection to {self.url} failed: {type(error).__name__}: {error}") from error
        if answer.status >= 300:
            raise error_for_status(httpx.Response(answer.status, headers=answer.headers, content=answer.body,
                                                  request=self._post_target().request))
        try:
            data = json_codec.loads(answer.body)
        except ValueError as error:
            text = answer.body[:200].decode("utf-8", "replace")
            raise BadResponse(f"malformed JSON from {self.url}: {text!r}", status=answer.status) from error
        if self.dialect == "anthropic":
            return anthropic.parse_response(data)
        return openai_chat.parse_response(data)

    def _post_target(self) -> PostTarget:
        if self._target is None:
            try:
                self._target = PostTarget(self.url, self._headers)
            except (httpx.InvalidURL, ValueError) as error:  # TransportErrors are mapped by the caller
                raise ProviderUnavailable(f"cannot send to {self.url}: {type(error).__name__}: {error}") from error
        return self._target

    async def aclose(self) -> None:
        if self._owns_transport:
            await self._transport.aclose()

    async def __aenter__(self) -> "ChatClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
