"""A fake LLM provider: a real HTTP/1.1 server on 127.0.0.1 speaking OpenAI chat completions and Anthropic messages.

Point a real client at it (``server.openai_base_url`` → ``POST …/v1/chat/completions``,
``server.anthropic_base_url`` → ``POST …/v1/messages``) and script what it answers::

    async with FakeLLMServer() as server:
        server.enqueue(Reply.text("hello"), Reply.rate_limited(retry_after=7))
        server.handler = lambda request: Reply.text(f"echo {request.last_user_text}")
        ...
        assert server.requests[0].body["model"] == "gpt-4o"

Each request takes the next queued :class:`Reply`; with the queue empty it asks
``handler``; without a handler it answers ``default`` (``"ok"``). Replies cover the
faults a provider really produces: a delay past the client's timeout, 5xx, 429 with
``retry-after``, a context-length 400, empty content, ``finish_reason: length``,
malformed JSON, and a connection dropped without an answer. Every request body is
recorded (:attr:`FakeLLMServer.requests`).

Usage is realistic: prompt tokens are counted with foldgate's tokenizer, and prompt
caching is simulated — OpenAI-style automatic prefix caching (``cached_tokens`` for a
previously seen message prefix of at least ``min_cache_tokens``, in 128-token steps) and
Anthropic-style explicit breakpoints (``cache_control`` markers: a prefix seen before at a
breakpoint is a cache read, a new one a cache write). ``context_limit`` makes the server
refuse, like a real one, any prompt larger than the window.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from agent.tokens import count_text

Dialect = Literal["openai", "anthropic"]

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 413: "Payload Too Large",
            429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
            529: "Overloaded"}
_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}


@dataclass
class Reply:
    """One scripted answer. Build it with the class methods; fields can be combined (e.g. a delay and a 500)."""

    text: str = "ok"
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    #: A complete error/override body (dict is sent as JSON, bytes/str as they are).
    body: Union[dict[str, Any], bytes, str, None] = None
    delay: float = 0.0
    drop: bool = False
    #: Usage fields to report instead of the computed ones (dialect field names).
    usage: dict[str, Any] | None = None

    @classmethod
    def answer(cls, text: str, **kwargs: Any) -> "Reply":
        return cls(text=text, **kwargs)

    @classmethod
    def tool_call(cls, name: str, arguments: dict[str, Any], call_id: str = "call_fake_1", text: str = "") -> "Reply":
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        return cls(text=text, tool_calls=[call], finish_reason="tool_calls")

    @classmethod
    def error(cls, status: int, message: str = "internal error", kind: str = "api_error", code: str | None = None) -> "Reply":
        return cls(status=status, body={"__error__": {"message": message, "type": kind, "code": code}})

    @classmethod
    def server_error(cls, status: int = 500) -> "Reply":
        return cls.error(status, "The server had an error while processing your request.")

    @classmethod
    def rate_limited(cls, retry_after: float | None = 20) -> "Reply":
        reply = cls.error(429, "Rate limit reached, please retry later.", "rate_limit_error", "rate_limit_exceeded")
        if retry_after is not None:
            reply.headers["retry-after"] = f"{retry_after:g}"
        return reply

    @classmethod
    def context_too_long(cls, limit: int = 128_000, actual: int = 130_000) -> "Reply":
        return cls(status=400, body={"__context__": {"limit": limit, "actual": actual}})

    @classmethod
    def empty(cls) -> "Reply":
        return cls(text="")

    @classmethod
    def truncated(cls, text: str = "## Goal\nThe user wants") -> "Reply":
        return cls(text=text, finish_reason="length")

    @classmethod
    def malformed_json(cls) -> "Reply":
        return cls(body=b'{"id": "broken", "choices": [{"message": ')

    @classmethod
    def slow(cls, seconds: float, then: "Reply | None" = None) -> "Reply":
        reply = then or cls()
        reply.delay = seconds
        return reply

    @classmethod
    def drop_connection(cls) -> "Reply":
        return cls(drop=True)


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    dialect: Dialect

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or []) if isinstance(self.body, dict) else []

    @property
    def system(self) -> str:
        """The system prompt text in either dialect."""
        if self.dialect == "anthropic":
            return _blocks_text(self.body.get("system"))
        return "\n".join(_blocks_text(m.get("content")) for m in self.messages if m.get("role") == "system")

    @property
    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _blocks_text(message.get("content"))
        return ""

    @property
    def text(self) -> str:
        """Everything the request sends as text, for searching in assertions."""
        return self.raw.decode("utf-8", "replace")


Handler = Callable[[RecordedRequest], Union[Reply, Awaitable[Reply]]]


def _blocks_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, dict):
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif block.get("type") == "tool_result":
                parts.append(_blocks_text(block.get("content")))
            elif block.get("type") == "tool_use":
                parts.append(json.dumps(block.get("input"), ensure_ascii=False))
        elif isinstance(block, str):
            parts.append(block)
    return "\n".join(parts)


class _PromptCache:
    """Prefix hashes the server has "cached", shared by both dialects' simulations."""

    def __init__(self) -> None:
        self.prefixes: set[str] = set()

    def clear(self) -> None:
        self.prefixes.clear()


def _segments(request: RecordedRequest) -> list[tuple[str, int, bool]]:
    """``(serialised unit, tokens, is_breakpoint)`` for every cacheable unit of the prompt, in order."""
    body = request.body if isinstance(request.body, dict) else {}
    units: list[tuple[str, int, bool]] = []
    for tool in body.get("tools") or ():
        text = json.dumps(tool, sort_keys=True)
        units.append((text, count_text(text), "cache_control" in tool))
    if request.dialect == "anthropic":
        system = body.get("system")
        blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
        for block in blocks:
            units.append((json.dumps(block, sort_keys=True), count_text(_blocks_text([block])) , "cache_control" in block))
        for message in body.get("messages") or ():
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            for index, block in enumerate(blocks):
                extra = 4 if index == 0 else 0
                units.append((message["role"] + json.dumps(block, sort_keys=True), count_text(_blocks_text([block])) + extra,
                              isinstance(block, dict) and "cache_control" in block))
    else:
        for message in body.get("messages") or ():
            text = json.dumps(message, sort_keys=True)
            tokens = 4 + count_text(_blocks_text(message.get("content")))
            for call in message.get("tool_calls") or ():
                tokens += 8 + count_text(json.dumps(call.get("function") or {}))
            units.append((text, tokens, False))
    return units


def _cache_usage(request: RecordedRequest, cache: _PromptCache, min_tokens: int) -> tuple[int, int, int]:
    """``(prompt tokens, cache read, cache write)`` for the request, updating the simulated cache."""
    hasher = hashlib.sha256()
    total = 0
    read = write = 0
    points: list[tuple[str, int]] = []
    for text, tokens, breakpoint in _segments(request):
        hasher.update(text.encode())
        total += tokens
        if request.dialect == "openai" or breakpoint:
            points.append((hasher.hexdigest(), total))
    if request.dialect == "openai":
        for digest, upto in points:
            if digest in cache.prefixes and upto >= min_tokens:
                read = upto // 128 * 128
        cache.prefixes.update(digest for digest, _ in points)
        return total, read, 0
    eligible = [(digest, upto) for digest, upto in points if upto >= min_tokens]
    for digest, upto in eligible:
        if digest in cache.prefixes:
            read = upto
    if eligible and eligible[-1][0] not in cache.prefixes:
        write = eligible[-1][1] - read
    cache.prefixes.update(digest for digest, _ in eligible)
    return total, read, write


class FakeLLMServer:
    """See the module docstring. Use as ``async with FakeLLMServer() as server``."""

    def __init__(
        self,
        *,
        handler: Handler | None = None,
        default: Reply | None = None,
        context_limit: int | None = None,
        min_cache_tokens: int = 1024,
    ) -> None:
        self.handler = handler
        self.default = default or Reply()
        self.context_limit = context_limit
        self.min_cache_tokens = min_cache_tokens
        self.queue: list[Reply] = []
        self.requests: list[RecordedRequest] = []
        self.cache = _PromptCache()
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self.port = 0

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> "FakeLLMServer":
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> "FakeLLMServer":
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Base URL for OpenAI-compatible clients (they append ``/chat/completions``)."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for Anthropic clients (they append ``/v1/messages``)."""
        return self.base_url

    def enqueue(self, *replies: Reply) -> None:
        self.queue.extend(replies)

    # -- HTTP ----------------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                keep_open = await self._respond(request, writer)
                if not keep_open:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # stop() ends connections still waiting (e.g. on a scripted delay)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        line = await reader.readline()
        if not line:
            return None
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b""):
                break
            name, _, value = header.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length") or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        dialect: Dialect = "anthropic" if path.rstrip("/").endswith("/messages") else "openai"
        return RecordedRequest(method, path, headers, raw, body, dialect)

    async def _next_reply(self, request: RecordedRequest) -> Reply:
        if self.queue:
            return self.queue.pop(0)
        if self.handler is not None:
            reply = self.handler(request)
            return await reply if inspect.isawaitable(reply) else reply
        return self.default

    async def _respond(self, request: RecordedRequest, writer: asyncio.StreamWriter) -> bool:
        self.requests.append(request)
        known = request.path.rstrip("/") in ("/v1/chat/completions", "/chat/completions", "/v1/messages")
        if request.method != "POST" or not known:
            await self._write(writer, 404, {"error": {"message": f"no route {request.method} {request.path}"}})
            return True
        reply = await self._next_reply(request)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.drop:
            writer.transport.abort()
            return False
        if not isinstance(request.body, dict):
            await self._write(writer, 400, self._error_body(request, "request body is not JSON", "invalid_request_error", None))
            return True
        prompt, read, write = _cache_usage(request, self.cache, self.min_cache_tokens)
        if self.context_limit is not None and prompt > self.context_limit and reply.status == 200:
            reply = Reply.context_too_long(self.context_limit, prompt)
        status, body = reply.status, self._body(request, reply, prompt, read, write)
        await self._write(writer, status, body, reply.headers)
        return True

    def _error_body(self, request: RecordedRequest, message: str, kind: str, code: str | None) -> dict[str, Any]:
        if request.dialect == "anthropic":
            return {"type": "error", "error": {"type": kind, "message": message}}
        return {"error": {"message": message, "type": kind, "code": code, "param": None}}

    def _body(self, request: RecordedRequest, reply: Reply, prompt: int, read: int, write: int) -> Any:
        if isinstance(reply.body, dict) and "__error__" in reply.body:
            error = reply.body["__error__"]
            return self._error_body(request, error["message"], error["type"], error["code"])
        if isinstance(reply.body, dict) and "__context__" in reply.body:
            limit, actual = reply.body["__context__"]["limit"], reply.body["__context__"]["actual"]
            if request.dialect == "anthropic":
                return self._error_body(request, f"prompt is too long: {actual} tokens > {limit} maximum", "invalid_request_error", None)
            message = (f"This model's maximum context length is {limit} tokens. However, your messages resulted "
                       f"in {actual} tokens. Please reduce the length of the messages.")
            return self._error_body(request, message, "invalid_request_error", "context_length_exceeded")
        if reply.body is not None:
            return reply.body
        completion = count_text(reply.text) + sum(
            8 + count_text(call["function"]["arguments"]) for call in reply.tool_calls
        )
        number = next(self._ids)
        model = request.model or "fake-model"
        if request.dialect == "anthropic":
            content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
            content += [
                {"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                 "input": json.loads(call["function"]["arguments"] or "{}")}
                for call in reply.tool_calls
            ]
            usage = reply.usage or {
                "input_tokens": prompt - read - write,
                "output_tokens": completion,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": write,
            }
            return {
                "id": f"msg_fake_{number}", "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": _ANTHROPIC_STOP.get(reply.finish_reason, reply.finish_reason),
                "stop_sequence": None, "usage": usage,
            }
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        usage = reply.usage or {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": read},
        }
        return {
            "id": f"chatcmpl-fake-{number}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}], "usage": usage,
        }

    async def _write(self, writer: asyncio.StreamWriter, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        payload = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", "content-type: application/json",
                f"content-length: {len(payload)}"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        try:
            await writer.drain()
        except ConnectionError:
            pass
