"""One provider URL: every model call goes out through :class:`Endpoint`.

An :class:`Endpoint` is one provider URL with its headers on a pooled httpx client
(:mod:`agent.llm.http`). It sends a route's JSON body, whole or streamed, retries what
the official SDKs retry (the policy is :mod:`agent.llm.retry`, the loop
:func:`agent.retrying.retried`), and turns every failure into a typed
:mod:`agent.llm.errors` exception whose message says what to fix. The route
modules only build bodies and read answers; the clients (:mod:`agent.llm.client`,
:mod:`agent.llm.responses`) hand both to an endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import httpx
from httpx_sse import EventSource

from agent import json_codec
from agent.llm.errors import (
    BadResponse,
    InvalidRequest,
    ProviderError,
    ProviderRejected,
    ProviderTimeout,
    RetryWaitTooLong,
    StreamInterrupted,
)
from agent.llm.http import TRANSPORT_ERRORS, transport_failure
from agent.llm.retry import RetryPolicy, server_wait, worth_retrying
from agent.llm.status_errors import error_for_status
from agent.llm.stream import EventSink, StreamAssembler, StreamEvent, StreamReset
from agent.llm.types import Completion
from agent.retrying import retried

# The provider client's log, under the name it has always had: retry warnings are filtered on it.
log = logging.getLogger("agent.llm.client")

#: How long a finished stream may take to send its last bytes; read to the end, its connection is reused.
DRAIN_SECONDS = 1.0

#: A route's check of a refused request before the generic mapping (e.g. Responses' native-compaction refusal).
Refusal = Callable[[int, Any], Exception | None]


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
                raise ProviderRejected(
                    f"cannot send to {self.url}: {error} — check {self.config_key}.base_url"
                ) from error
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
        relay = _Relay(on_event)

        async def attempt() -> Completion:
            nonlocal relay
            relay = _Relay(on_event)  # each try's events, so a retry resets only what its try showed
            if assembler is None:
                return await self._post(payload, parse, refusal)
            return await self._stream(payload, parse, assembler(), relay, refusal)

        async def before_retry(error: Exception, retry: int, wait: float) -> None:
            log.warning(
                "%s: %s; retry %d of %d in %.2fs", self.url, _first_line(error), retry, self.retry.max_retries, wait
            )
            if relay.emitted and on_event is not None:
                await on_event(StreamReset(f"{type(error).__name__}: {_first_line(error)}"))

        try:
            return await retried(
                self.retry.policy,
                attempt,
                retryable=worth_retrying,
                server_wait=server_wait,
                too_long=self._wait_too_long,
                before_retry=before_retry,
                sleep=self.retry.sleep,
                draw=self.retry.jitter,
            )
        except _SinkFailure as failure:
            raise failure.error from None

    def _wait_too_long(self, error: Exception, seconds: float) -> RetryWaitTooLong:
        """The failure of a call whose server asked for a longer wait than foldgate makes a turn wait."""
        assert isinstance(error, ProviderError)
        return RetryWaitTooLong(
            f"{self.url} asked to wait {seconds:g}s before trying again, longer than the "
            f"{self.retry.max_retry_after:g}s foldgate waits; try again later",
            retry_after=seconds,
            status=error.status,
            body=error.body,
        )

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
            async with self.http.stream(
                "POST", self._target(), content=payload, headers=self.stream_headers
            ) as response:
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
                raise StreamInterrupted(
                    f"the stream from {self.url} broke off: {type(error).__name__}: {error}"
                ) from error
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
