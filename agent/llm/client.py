"""The one provider client: every model call goes out through :class:`Endpoint`.

An :class:`Endpoint` is one provider URL with its headers on a pooled httpx client
(:mod:`agent.llm.http`). It sends a route's JSON body, whole or streamed, retries what
the official SDKs retry (:mod:`agent.llm.retry`), and turns every failure into a typed
:mod:`agent.llm.errors` exception whose message says what to fix. The routes —
:mod:`agent.llm.openai_chat` (OpenAI, OpenRouter, custom endpoints),
:mod:`agent.llm.anthropic` and :mod:`agent.llm.responses` — only build bodies and read
answers.

:class:`ChatClient` is the chat-completions and Anthropic-messages client the agent loop
and the summarizer use. Messages are validated with
:func:`agent.messages.checked_api_messages` before anything is sent, so a broken tool
pairing fails here, not as a provider 400. What each model accepts (the token-limit
field, whether a temperature may be sent) comes from :func:`agent.models.request_rules`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal, Self

import aiohttp
import httpx
from httpx_sse import EventSource

from agent import json_codec
from agent.llm import anthropic, openai_chat
from agent.llm.errors import (
    BadResponse,
    InvalidRequest,
    ProviderError,
    ProviderRejected,
    ProviderTimeout,
    RetryWaitTooLong,
    StreamInterrupted,
    classify_failure,
)
from agent.llm.http import TRANSPORT_ERRORS, HttpOptions, open_http_client, transport_failure
from agent.llm.retry import RetryPolicy, parse_retry_after, should_retry_header
from agent.llm.stream import EventSink, StreamAssembler, StreamEvent, StreamReset
from agent.llm.types import Completion
from agent.messages import checked_api_messages
from agent.models import RequestRules, request_rules

log = logging.getLogger(__name__)

Dialect = Literal["openai", "anthropic"]

#: What to check for a refusal that no retry cures, by status.
_STATUS_HINTS = {
    401: "the API key was refused: check {key}.api_key (or the provider's API key variable)",
    403: "the API key may not use this model or endpoint: check {key}.api_key and {key}.name",
    404: "no such model or endpoint: check {key}.name and {key}.base_url",
}


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


def error_for_status(response: httpx.Response, *, config_key: str = "model") -> ProviderError:
    """The typed exception for a non-2xx response (its body already read)."""
    status = response.status_code
    detail = _error_text(response)
    hint = _STATUS_HINTS.get(status)
    message = f"HTTP {status} from {response.request.url}: {detail}"[:1000]
    if hint:
        message = f"{message} — {hint.format(key=config_key)}"
    error = classify_failure(message, status=status, detail=detail)
    error.retry_after = parse_retry_after(response.headers)
    error.should_retry = should_retry_header(response.headers)
    return error


#: How long a fetched model list is reused: ``/model`` asks it, and providers change it rarely.
MODEL_LIST_TTL_SECONDS = 300.0
#: Pages of an Anthropic model list followed at most (1,000 models each).
MAX_MODEL_PAGES = 10
#: What a listed id may carry that a request may leave off: an Anthropic date stamp, or its ``-0``/``-latest`` alias.
_MODEL_SNAPSHOT = re.compile(r"-(\d{8}|latest|0)$")


def lists_model(listed: Sequence[str], model: str) -> bool:
    """Whether a provider's model list serves ``model``: listed as such, or as a dated snapshot of it.

    Anthropic lists ``claude-sonnet-4-20250514`` and answers ``claude-sonnet-4-0`` too; a bare
    family name never matches another family's snapshot (``claude-opus-4`` is not ``claude-opus-4-7``).
    """
    if model in listed:
        return True
    base = _MODEL_SNAPSHOT.sub("", model)
    return any(_MODEL_SNAPSHOT.sub("", name) == base for name in listed)


#: How long a finished stream may take to send its last bytes; read to the end, its connection is reused.
DRAIN_SECONDS = 1.0


class _SinkFailure(Exception):
    """The stream's watcher raised: re-raised as it was, never taken for a provider failure and retried."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _Relay:
    """Hands stream events to the watcher, remembering whether any went out (a retry must reset them)."""

    def __init__(self, sink: EventSink | None) -> None:
        self.sink = sink
        self.emitted = False

    async def __call__(self, event: StreamEvent) -> None:
        self.emitted = True
        if self.sink is not None:
            try:
                await self.sink(event)
            except Exception as error:
                raise _SinkFailure(error) from error


#: A route's check of a refused request before the generic mapping (e.g. Responses' native-compaction refusal).
Refusal = Callable[[int, Any], Exception | None]


class Endpoint:
    """One provider URL on a pooled httpx client: sends bodies, streams answers, retries, maps failures.

    ``config_key`` names the settings section the URL came from, for messages that say what to fix.
    """

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        http: httpx.AsyncClient,
        retry: RetryPolicy,
        timeout_seconds: float,
        config_key: str = "model",
    ) -> None:
        self.url = url
        self.headers = {"content-type": "application/json", **dict(headers)}
        self.stream_headers = {**self.headers, "accept": "text/event-stream"}
        self.http = http
        self.retry = retry
        self.timeout_seconds = timeout_seconds
        self.config_key = config_key
        self._parsed: httpx.URL | None = None  # parsed on the first call, where a bad URL fails the call

    def _target(self) -> httpx.URL:
        """The URL, parsed once (httpx re-parses a string on every request)."""
        if self._parsed is None:
            try:
                self._parsed = httpx.URL(self.url)
            except httpx.InvalidURL as error:
                raise ProviderRejected(f"cannot send to {self.url}: {error} — check {self.config_key}.base_url") from error
        return self._parsed

    async def send(
        self,
        body: Mapping[str, Any],
        *,
        parse: Callable[[Any], Completion],
        assembler: Callable[[], StreamAssembler] | None = None,
        on_event: EventSink | None = None,
        refusal: Refusal | None = None,
    ) -> Completion:
        """The answer to ``body``: streamed through ``assembler`` when given, else read whole and ``parse``d.

        Retries transient failures; before a retry whose stream already produced events, ``on_event``
        gets a :class:`StreamReset`. Raises a :mod:`agent.llm.errors` exception when it gives up.
        """
        try:
            payload = json_codec.dumps(body)
        except json_codec.EncodeError as error:
            raise InvalidRequest([f"the request cannot be sent as JSON: {error}"]) from error
        attempt = 0
        while True:
            relay = _Relay(on_event)
            try:
                if assembler is None:
                    return await self._post(payload, parse, refusal)
                return await self._stream(payload, parse, assembler(), relay, refusal)
            except _SinkFailure as failure:
                raise failure.error from None
            except ProviderError as error:
                wait = self._retry_wait(error, attempt)
                if wait is None:
                    raise
                log.warning("%s: %s; retry %d of %d in %.2fs", self.url, _first_line(error), attempt + 1,
                            self.retry.max_retries, wait)
                if relay.emitted and on_event is not None:
                    await on_event(StreamReset(f"{type(error).__name__}: {_first_line(error)}"))
                await self.retry.sleep(wait)
                attempt += 1

    def _retry_wait(self, error: ProviderError, attempt: int) -> float | None:
        """Seconds until the next try, or None to give up (raising :class:`RetryWaitTooLong` for a long ask)."""
        wanted = error.should_retry if error.should_retry is not None else error.retryable
        if not wanted:
            return None
        if error.retry_after is not None and error.retry_after > self.retry.max_retry_after:
            raise RetryWaitTooLong(
                f"{self.url} asked to wait {error.retry_after:g}s before trying again, longer than the "
                f"{self.retry.max_retry_after:g}s foldgate waits; try again later",
                retry_after=error.retry_after, status=error.status, body=error.body,
            ) from error
        if attempt >= self.retry.max_retries:
            return None
        return self.retry.wait(attempt, error.retry_after)

    async def _post(self, payload: bytes, parse: Callable[[Any], Completion], refusal: Refusal | None) -> Completion:
        try:
            response = await self.http.post(self._target(), content=payload, headers=self.headers)
        except TRANSPORT_ERRORS as error:
            raise transport_failure(error, self.url, config_key=self.config_key) from error
        if response.status_code >= 300:
            raise self._refused(response, refusal)
        return parse(self._json(response))

    async def _stream(
        self,
        payload: bytes,
        parse: Callable[[Any], Completion],
        assembler: StreamAssembler,
        relay: _Relay,
        refusal: Refusal | None,
    ) -> Completion:
        try:
            async with self.http.stream("POST", self._target(), content=payload, headers=self.stream_headers) as response:
                if response.status_code >= 300:
                    await response.aread()
                    raise self._refused(response, refusal)
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    await response.aread()  # an endpoint that ignores ``stream: true`` answers whole
                    return parse(self._json(response))
                events = EventSource(response).aiter_sse()
                async with contextlib.aclosing(events):
                    async for sse in events:
                        for event in assembler.feed(sse.event, sse.data):
                            await relay(event)
                        if assembler.done:
                            await _drain(events)
                            break
        except httpx.ReadTimeout as error:
            raise ProviderTimeout(f"{self.url} went quiet: nothing arrived for {self.timeout_seconds:g}s") from error
        except (httpx.RemoteProtocolError, httpx.ReadError, aiohttp.ClientPayloadError) as error:
            if relay.emitted:
                raise StreamInterrupted(f"the stream from {self.url} broke off: {type(error).__name__}: {error}") from error
            raise transport_failure(error, self.url, config_key=self.config_key) from error
        except TRANSPORT_ERRORS as error:
            raise transport_failure(error, self.url, config_key=self.config_key) from error
        return assembler.result()

    def _refused(self, response: httpx.Response, refusal: Refusal | None) -> Exception:
        if refusal is not None:
            try:
                data = response.json()
            except ValueError:
                data = None
            special = refusal(response.status_code, data)
            if special is not None:
                return special
        return error_for_status(response, config_key=self.config_key)

    def _json(self, response: httpx.Response) -> Any:
        try:
            return json_codec.loads(response.content)
        except ValueError as error:
            text = response.content[:200].decode("utf-8", "replace")
            raise BadResponse(f"malformed JSON from {self.url}: {text!r}", status=response.status_code) from error


async def _drain(events: AsyncIterator[Any]) -> None:
    """Read what a finished stream still sends (its terminator), briefly, so its connection returns to the pool."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in events:
                pass


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [""])[0][:300]


class PooledClient:
    """What every provider client shares: a pooled httpx client, its own unless one is handed in (then the
    caller closes that one)."""

    def __init__(self, options: HttpOptions | None, http: httpx.AsyncClient | None) -> None:
        self.options = options or HttpOptions()
        self._owns_http = http is None
        self._http = http or open_http_client(self.options)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


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
        self.endpoint = Endpoint(self.url, auth, http=self._http, retry=retry or RetryPolicy(),
                                 timeout_seconds=self.options.timeout_seconds, config_key=config_key)
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
        url = self.base_url + ("/v1/models" if self.dialect == "anthropic" else "/models")
        ids: list[str] = []
        params: dict[str, str] = {"limit": "1000"} if self.dialect == "anthropic" else {}
        for _page in range(MAX_MODEL_PAGES):
            try:
                response = await self._http.get(url, params=params, headers=self._auth)
            except TRANSPORT_ERRORS as error:
                raise transport_failure(error, url, config_key=self._config_key) from error
            if response.status_code >= 300:
                raise error_for_status(response, config_key=self._config_key)
            try:
                page = json_codec.loads(response.content)
            except ValueError as error:
                raise BadResponse(f"malformed JSON from {url}", status=response.status_code) from error
            entries = page.get("data") if isinstance(page, dict) else None
            if not isinstance(entries, list):
                raise BadResponse(f"{url} answered without a model list (no 'data' array)", status=response.status_code)
            ids += [str(entry["id"]) for entry in entries if isinstance(entry, dict) and entry.get("id")]
            if not (self.dialect == "anthropic" and page.get("has_more") and page.get("last_id")):
                break
            params = {"limit": "1000", "after_id": str(page["last_id"])}
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
        return route.build_request(api_messages, model=model, max_tokens=max_tokens, tools=tools,
                                   temperature=temperature, rules=self.rules(model), stream=self.stream)

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
        if self.dialect == "anthropic":
            parse, assembler = anthropic.parse_response, anthropic.MessagesStream
        else:
            parse, assembler = openai_chat.parse_response, openai_chat.ChatStream
        return await self.endpoint.send(body, parse=parse, assembler=assembler if self.stream else None,
                                        on_event=on_event)
