"""A fake LLM provider: a real aiohttp server on loopback speaking OpenAI chat completions and Anthropic messages.

Point a real client at it (``server.openai_base_url`` → ``POST …/v1/chat/completions``,
``server.anthropic_base_url`` → ``POST …/v1/messages``, both → ``GET …/v1/models``) and
script what it answers::

    async with FakeLLMServer() as server:
        server.enqueue(Reply.answer("hello"), Reply.rate_limited(retry_after=7))
        server.handler = lambda request: Reply.answer(f"echo {request.last_user_text}")
        ...
        assert server.requests[0].body["model"] == "gpt-4o"

Each completion request takes the next queued :class:`Reply`; with the queue empty it
asks ``handler``; without a handler it answers ``default`` (``"ok"``). Replies cover the
faults a provider really produces: a delay past the client's timeout, a request accepted and never answered, 5xx, 529
overloaded, 429 with ``retry-after``, a context-length 400, empty content,
``finish_reason: length``, malformed JSON, a connection dropped without an answer, and,
on streams, a connection cut after N events, a mid-stream error event and slow events.
Every request is recorded (:attr:`FakeLLMServer.requests`) with its arrival time and the
time the first byte of its answer left (for latency measurements).

The wire is the providers': ``"stream": true`` is answered with server-sent events
written one by one, exactly in each provider's event vocabulary (OpenAI
``chat.completion.chunk`` objects and ``data: [DONE]``; Anthropic ``message_start`` …
``message_stop``); JSON answers can be gzip/brotli encoded when the client accepts it
(``compress=``); HTTPS comes from a given ``ssl`` context. ``flavor`` picks whose rules the
OpenAI dialect follows: ``"openai"`` refuses what OpenAI refuses (``max_tokens`` or a
non-default ``temperature`` on o-series and GPT-5 models), ``"openrouter"`` accepts both,
precedes a stream with ``: OPENROUTER PROCESSING`` comments and always reports usage with
cache reads/writes and a cost, ``"generic"`` is a permissive OpenAI-compatible server.
The Anthropic dialect refuses a missing ``anthropic-version`` header or ``max_tokens``, more
than four ``cache_control`` breakpoints and ``temperature`` on Claude Opus 4.7/4.8, like the
real API.

Usage is realistic: prompt tokens are counted with foldgate's tokenizer, and prompt
caching is simulated — OpenAI-style automatic prefix caching (``cached_tokens`` for a
previously seen message prefix of at least ``min_cache_tokens``, in 128-token steps) and
Anthropic-style explicit breakpoints (``cache_control`` markers: a prefix seen before at a
breakpoint is a cache read, a new one a cache write; also for Claude models behind the
``openrouter`` flavor, which passes Anthropic's cache through). ``context_limit`` makes
the server refuse, like a real one, any prompt larger than the window; with
``overflow="truncate"`` it behaves instead like the many OpenAI-compatible local servers that
drop the start of a prompt too long for them and answer as if nothing happened (the oldest
non-system messages go first; the handler sees what is left). Every request that arrived
larger than the window, refused or truncated, is in :attr:`FakeLLMServer.overflowed`, and each request carries
what the check weighed it at (:attr:`RecordedRequest.window_tokens`). ``window_counts_answer`` makes the window
hold the prompt and the answer's ``max_tokens`` together, as OpenAI and vLLM count it.

Subclasses (the Responses API, the faithful Anthropic cache) reuse the plumbing: they
override :meth:`FakeLLMServer._respond` (route one request to a ``web.StreamResponse``)
or :meth:`FakeLLMServer._usage` (the prompt/cache accounting), and answer with
:meth:`FakeLLMServer._send_json`, :meth:`FakeLLMServer._send_stream` and
:meth:`FakeLLMServer._drop`.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import inspect
import itertools
import json
import re
import ssl as ssl_module
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from aiohttp import web

from agent.tokens import count_text

Dialect = Literal["openai", "anthropic"]
Flavor = Literal["openai", "openrouter", "generic"]
Coding = Literal["gzip", "br"]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Overloaded",
}
_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
_COMPLETION_PATHS = ("/v1/chat/completions", "/chat/completions", "/v1/messages")
_MODEL_PATHS = ("/v1/models", "/models")
#: A request may carry at most this many ``cache_control`` blocks (Anthropic's limit).
MAX_CACHE_BREAKPOINTS = 4
#: What the ``openrouter`` flavor writes while "waiting for the upstream provider".
PROCESSING_COMMENT = b": OPENROUTER PROCESSING\n\n"

DEFAULT_MODELS: dict[str, tuple[str, ...]] = {
    "openai": ("gpt-4o-mini", "gpt-4o", "gpt-5.5"),
    "generic": ("fake-model",),
    "openrouter": ("openai/gpt-4o-mini", "anthropic/claude-sonnet-4.5", "anthropic/claude-opus-4.7"),
    "anthropic": ("claude-sonnet-4-5", "claude-opus-4-7", "claude-haiku-4-5"),
}


# ------------------------------------------------------------------------------ scripting


@dataclass(frozen=True)
class StreamError:
    """A failure reported inside a stream that already began with a 200 (the provider's own error event).

    ``kind`` is the Anthropic error type (``overloaded_error``, ``api_error``); the OpenAI
    dialect reports it as a ``server_error``. ``after`` is how many events precede it
    (``None``: half the stream). ``responses_event`` picks the Responses API's form:
    ``response.failed`` or a bare ``error`` event.
    """

    kind: str = "overloaded_error"
    message: str = "Overloaded"
    after: int | None = None
    code: str | None = None
    responses_event: Literal["failed", "error"] = "failed"


@dataclass
class Reply:
    """One scripted answer. Build it with the class methods; fields can be combined (e.g. a delay and a 500)."""

    text: str = "ok"
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    #: A complete error/override body (dict is sent as JSON, bytes/str as they are).
    body: dict[str, Any] | bytes | str | None = None
    #: Seconds the server stalls before doing anything with the request (a slow or hung provider).
    delay: float = 0.0
    #: Accept the request and never answer it (until the server stops): a provider that hangs.
    never_answer: bool = False
    drop: bool = False
    #: Usage fields to report instead of the computed ones (dialect field names).
    usage: dict[str, Any] | None = None
    #: Streams: characters of text (and of tool arguments) per delta; ``None`` is one word per delta.
    chunk_size: int | None = None
    #: Streams: send this many events, then close the connection with no terminator.
    cut_after: int | None = None
    #: Streams: seconds between two events.
    event_delay: float = 0.0
    #: Seconds between the decision to answer and the first byte of the answer (time to first token).
    first_byte_delay: float = 0.0
    #: Streams: a mid-stream error event (``True`` is an "Overloaded" half-way through).
    stream_error: StreamError | bool | None = None
    #: Images the answer carries (``data:`` URLs), as an image model behind OpenRouter returns them: in
    #: ``message.images`` (streamed: ``delta.images``), and only when the request asked for ``modalities``
    #: with ``"image"`` in it.
    images: list[str] = field(default_factory=list)

    @classmethod
    def answer(cls, text: str, **kwargs: Any) -> Reply:
        return cls(text=text, **kwargs)

    @classmethod
    def tool_call(cls, name: str, arguments: dict[str, Any], call_id: str = "call_fake_1", text: str = "") -> Reply:
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        return cls(text=text, tool_calls=[call], finish_reason="tool_calls")

    @classmethod
    def error(
        cls, status: int, message: str = "internal error", kind: str = "api_error", code: str | None = None
    ) -> Reply:
        return cls(status=status, body={"__error__": {"message": message, "type": kind, "code": code}})

    @classmethod
    def server_error(cls, status: int = 500) -> Reply:
        return cls.error(status, "The server had an error while processing your request.")

    @classmethod
    def overloaded(cls) -> Reply:
        """Anthropic's 529 ``overloaded_error`` (the OpenAI dialect answers its 503 ``server_error``)."""
        return cls(status=529, body={"__overloaded__": True})

    @classmethod
    def rate_limited(cls, retry_after: float | None = 20) -> Reply:
        reply = cls.error(429, "Rate limit reached, please retry later.", "rate_limit_error", "rate_limit_exceeded")
        if retry_after is not None:
            reply.headers["retry-after"] = f"{retry_after:g}"
        return reply

    @classmethod
    def context_too_long(cls, limit: int = 128_000, actual: int = 130_000) -> Reply:
        return cls(status=400, body={"__context__": {"limit": limit, "actual": actual}})

    @classmethod
    def empty(cls) -> Reply:
        return cls(text="")

    @classmethod
    def truncated(cls, text: str = "## Goal\nThe user wants") -> Reply:
        return cls(text=text, finish_reason="length")

    @classmethod
    def malformed_json(cls) -> Reply:
        return cls(body=b'{"id": "broken", "choices": [{"message": ')

    @classmethod
    def slow(cls, seconds: float, then: Reply | None = None) -> Reply:
        reply = then or cls()
        reply.delay = seconds
        return reply

    @classmethod
    def hang(cls) -> Reply:
        """The request is read, then nothing comes back: no status, no byte, however long the client waits."""
        return cls(never_answer=True)

    @classmethod
    def drop_connection(cls) -> Reply:
        return cls(drop=True)

    @classmethod
    def cut(cls, after: int, then: Reply | None = None) -> Reply:
        """A stream that stops after ``after`` events without its terminator (the connection closes)."""
        reply = then or cls(text="a streamed answer that never finishes")
        reply.cut_after = after
        return reply

    @classmethod
    def stream_failure(
        cls,
        after: int | None = None,
        *,
        kind: str = "overloaded_error",
        message: str = "Overloaded",
        text: str = "a streamed answer that fails half-way",
        **options: Any,
    ) -> Reply:
        """A stream that starts well and then carries the provider's error event."""
        return cls(text=text, stream_error=StreamError(kind=kind, message=message, after=after, **options))

    def fault(self) -> StreamError | None:
        """The mid-stream error this reply asks for, if any."""
        if self.stream_error is True:
            return StreamError()
        return self.stream_error or None


@dataclass
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    dialect: Dialect
    #: ``time.monotonic()`` when the request had been read.
    received_at: float = field(default_factory=time.monotonic)
    #: ``time.monotonic()`` when the first byte of the answer was written (None: no answer).
    first_byte_at: float | None = None
    #: The client's address and port: one per connection, so a reused connection shows as a repeat.
    peer: Any = None
    #: What the window check weighed the request at as it arrived (the prompt, plus the answer's room when the
    #: server counts it); None when the server has no window.
    window_tokens: int | None = None

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or []) if isinstance(self.body, dict) else []

    @property
    def streamed(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

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

    @property
    def time_to_first_byte(self) -> float | None:
        return None if self.first_byte_at is None else self.first_byte_at - self.received_at


Handler = Callable[[RecordedRequest], Reply | Awaitable[Reply]]


def echo(request: RecordedRequest) -> Reply:
    """A handler that answers every request with ``echo: `` and the newest user message."""
    return Reply.answer(f"echo: {request.last_user_text}")


def streaming(text: str, seconds: float = 1.5, chunk_size: int = 40) -> Reply:
    """An answer streamed in pieces over about ``seconds``."""
    count = max(1, len(text) // chunk_size)
    return Reply(text=text, chunk_size=chunk_size, event_delay=seconds / count)


class Usage(NamedTuple):
    """A request's prompt accounting: all prompt tokens, those read from the cache, those written to it."""

    prompt: int
    read: int
    write: int


class Refused(Exception):
    """Raised by a hook to answer with an error instead of a completion."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


# ------------------------------------------------------------------------------ prompt accounting


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


Unit = tuple[str, int, bool]


def _content_units(role: str, content: Any) -> list[Unit]:
    """One unit per content block (``cache_control`` on a block makes it a breakpoint)."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    return [
        (
            role + json.dumps(block, sort_keys=True),
            count_text(_blocks_text([block])) + (4 if index == 0 else 0),
            isinstance(block, dict) and "cache_control" in block,
        )
        for index, block in enumerate(blocks)
    ]


def _segments(request: RecordedRequest, breakpoints: bool | None = None) -> list[Unit]:
    """``(serialised unit, tokens, is_breakpoint)`` for every cacheable unit of the prompt, in order.

    Anthropic bodies (and, with ``breakpoints=True``, OpenAI-format bodies whose content
    parts carry ``cache_control``, as OpenRouter accepts for Claude) are split per block;
    OpenAI bodies otherwise per message, the granularity of automatic prefix caching.
    """
    body = request.body if isinstance(request.body, dict) else {}
    units: list[Unit] = []
    for tool in body.get("tools") or ():
        text = json.dumps(tool, sort_keys=True)
        units.append((text, count_text(text), "cache_control" in tool))
    if request.dialect == "anthropic":
        system = body.get("system")
        for block in [{"type": "text", "text": system}] if isinstance(system, str) else list(system or []):
            units.append(
                (json.dumps(block, sort_keys=True), count_text(_blocks_text([block])), "cache_control" in block)
            )
        for message in body.get("messages") or ():
            units += _content_units(message["role"], message.get("content"))
        return units
    for message in body.get("messages") or ():
        if breakpoints:
            units += _content_units(str(message.get("role")), message.get("content"))
            calls = message.get("tool_calls") or ()
            if calls:
                tokens = sum(8 + count_text(json.dumps(call.get("function") or {})) for call in calls)
                units.append((json.dumps(calls, sort_keys=True), tokens, False))
            continue
        text = json.dumps(message, sort_keys=True)
        tokens = 4 + count_text(_blocks_text(message.get("content")))
        for call in message.get("tool_calls") or ():
            tokens += 8 + count_text(json.dumps(call.get("function") or {}))
        units.append((text, tokens, False))
    return units


def answer_room(body: Any) -> int:
    """The answer tokens a request asks room for (``max_tokens`` in any of its spellings; 0 when it names none)."""
    if not isinstance(body, dict):
        return 0
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def prompt_tokens(request: RecordedRequest) -> int:
    """The request's prompt tokens as the server counts them (tools, system and messages)."""
    return sum(tokens for _, tokens, _ in _segments(request))


def _cache_usage(
    request: RecordedRequest, cache: _PromptCache, min_tokens: int, *, breakpoints: bool | None = None
) -> Usage:
    """The request's prompt tokens and cache read/write, updating the simulated cache.

    ``breakpoints`` (default: Anthropic dialect) selects explicit ``cache_control``
    caching; otherwise it is OpenAI's automatic prefix caching, which never bills writes.
    """
    explicit = request.dialect == "anthropic" if breakpoints is None else breakpoints
    hasher = hashlib.sha256()
    total = 0
    read = write = 0
    points: list[tuple[str, int]] = []
    for text, tokens, breakpoint in _segments(request, explicit):
        hasher.update(text.encode())
        total += tokens
        if not explicit or breakpoint:
            points.append((hasher.hexdigest(), total))
    if not explicit:
        for digest, upto in points:
            if digest in cache.prefixes and upto >= min_tokens:
                read = upto // 128 * 128
        cache.prefixes.update(digest for digest, _ in points)
        return Usage(total, read, 0)
    eligible = [(digest, upto) for digest, upto in points if upto >= min_tokens]
    for digest, upto in eligible:
        if digest in cache.prefixes:
            read = upto
    if eligible and eligible[-1][0] not in cache.prefixes:
        write = eligible[-1][1] - read
    cache.prefixes.update(digest for digest, _ in eligible)
    return Usage(total, read, write)


def _completion_tokens(reply: Reply) -> int:
    return count_text(reply.text) + sum(8 + count_text(call["function"]["arguments"]) for call in reply.tool_calls)


def count_breakpoints(body: dict[str, Any]) -> int:
    """``cache_control`` markers on tools, system blocks and message blocks of an Anthropic body."""
    found = sum(1 for tool in body.get("tools") or () if isinstance(tool, dict) and "cache_control" in tool)
    system = body.get("system")
    if isinstance(system, list):
        found += sum(1 for block in system if isinstance(block, dict) and "cache_control" in block)
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            found += sum(1 for block in content if isinstance(block, dict) and "cache_control" in block)
    return found


def last_breakpoint_ttl(body: Any) -> str:
    """The lifetime (``5m`` or ``1h``) asked by the last ``cache_control`` marker, which decides what a write is
    billed as."""
    ttl = "5m"
    if not isinstance(body, dict):
        return ttl
    blocks: list[Any] = list(body.get("tools") or ())
    system = body.get("system")
    blocks += system if isinstance(system, list) else []
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        blocks += content if isinstance(content, list) else []
    for block in blocks:
        if isinstance(block, dict) and isinstance(block.get("cache_control"), dict):
            ttl = str(block["cache_control"].get("ttl") or "5m")
    return ttl


# ------------------------------------------------------------------------------ provider rules

#: OpenAI's reasoning families (o-series, GPT-5), which take ``max_completion_tokens`` and only the default temperature.
_OPENAI_REASONING = re.compile(r"o\d+(?:-[\w.-]+)?|gpt-5(?:\.\d+)?(?:-[\w.-]+)?")
#: GPT-5 chat snapshots are not reasoning models: they keep ``temperature``.
_OPENAI_CHAT_SNAPSHOT = re.compile(r"gpt-5(?:\.\d+)?-chat(?:-[\w.-]+)?")
#: GPT-5.1 and 5.2 accept sampling parameters when reasoning is switched off (``reasoning_effort: none``).
_OPENAI_EFFORT_NONE_SAMPLING = re.compile(r"gpt-5\.[12](?:-[\w.-]+)?")
#: Claude Opus 4.7 / 4.8 under any provider prefix, with dots or dashes.
_CLAUDE_NO_TEMPERATURE = re.compile(r"claude-opus-4[.-][78](?!\d)")


def _images_asked(request: RecordedRequest, reply: Reply) -> bool:
    """Whether the answer carries its images: an image model returns them only when asked for them."""
    modalities = request.body.get("modalities")
    return bool(reply.images) and isinstance(modalities, list) and "image" in modalities


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def bare_model(model: Any) -> str:
    """The model id without a routing prefix (``openai/gpt-5`` → ``gpt-5``)."""
    return str(model or "").rsplit("/", 1)[-1].lower()


def openai_error(
    message: str, kind: str = "invalid_request_error", *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def anthropic_error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def openai_parameter_error(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's 400 for a chat-completions body its model refuses, or None."""
    if not isinstance(body.get("messages"), list):
        return openai_error(
            "Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter"
        )
    if body.get("stream_options") is not None and body.get("stream") is not True:
        return openai_error(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.", param="stream_options"
        )
    model = bare_model(body.get("model"))
    if not _OPENAI_REASONING.fullmatch(model):
        return None
    if "max_tokens" in body:
        return openai_error(
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            param="max_tokens",
            code="unsupported_parameter",
        )
    temperature = body.get("temperature")
    sampling_allowed = _OPENAI_CHAT_SNAPSHOT.fullmatch(model) or (
        _OPENAI_EFFORT_NONE_SAMPLING.fullmatch(model) and body.get("reasoning_effort") == "none"
    )
    if temperature is not None and temperature != 1 and not sampling_allowed:
        return openai_error(
            f"Unsupported value: 'temperature' does not support {json.dumps(temperature)} with this model. "
            "Only the default (1) value is supported.",
            param="temperature",
            code="unsupported_value",
        )
    return None


def anthropic_parameter_error(body: dict[str, Any]) -> dict[str, Any] | None:
    """Anthropic's 400 for a messages body it refuses, or None."""
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            return anthropic_error(f"{name}: Field required")
    found = count_breakpoints(body)
    if found > MAX_CACHE_BREAKPOINTS:
        return anthropic_error(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."
        )
    if "temperature" in body and _CLAUDE_NO_TEMPERATURE.search(str(body.get("model") or "").lower()):
        return anthropic_error("`temperature` is deprecated for this model.")
    return None


def _is_claude(model: Any) -> bool:
    return "claude" in str(model or "").lower()


#: OpenRouter prices in dollars per token: (input, output); cache reads cost 0.1×, writes 1.25× the input price.
_OPENROUTER_PRICES = {"claude-opus": (5e-6, 25e-6), "claude": (3e-6, 15e-6), "gpt-5": (1.25e-6, 10e-6)}
_DEFAULT_PRICE = (0.15e-6, 0.6e-6)


def openrouter_cost(model: Any, usage: Usage, completion: int) -> float:
    """What OpenRouter would bill (its ``usage.cost``), from a small fixed price table."""
    name = str(model or "").lower()
    prompt_price, completion_price = next(
        (price for key, price in _OPENROUTER_PRICES.items() if key in name), _DEFAULT_PRICE
    )
    uncached = usage.prompt - usage.read - usage.write
    cost = (uncached + 0.1 * usage.read + 1.25 * usage.write) * prompt_price + completion * completion_price
    return round(cost, 10)


# ------------------------------------------------------------------------------ wire helpers


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: an optional ``event:`` line, one ``data:`` line, a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def pieces(text: str, size: int | None) -> list[str]:
    """``text`` cut into stream deltas: ``size`` characters each, or one word (with its trailing blank) each."""
    if not text:
        return []
    if size:
        return [text[start : start + size] for start in range(0, len(text), size)]
    return re.findall(r"\s*\S+\s*|\s+", text)


def accepted_codings(header: str | None) -> set[str]:
    """Content codings an ``Accept-Encoding`` header allows (q > 0); ``*`` allows any not named."""
    allowed: set[str] = set()
    refused: set[str] = set()
    for item in (header or "").split(","):
        name, _, params = item.strip().partition(";")
        name = name.strip().lower()
        if not name:
            continue
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        (allowed if quality > 0 else refused).add(name)
    if "*" in allowed:
        allowed |= {"gzip", "br", "deflate"} - refused
    return allowed


def _compress(payload: bytes, coding: Coding) -> bytes:
    if coding == "gzip":
        return gzip.compress(payload)
    import brotli  # a test dependency only needed for compress="br"

    return brotli.compress(payload)


# ------------------------------------------------------------------------------ the server


class FakeLLMServer:
    """See the module docstring. Use as ``async with FakeLLMServer() as server``."""

    def __init__(
        self,
        *,
        handler: Handler | None = None,
        default: Reply | None = None,
        context_limit: int | None = None,
        min_cache_tokens: int = 1024,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl: ssl_module.SSLContext | None = None,
        server_name: str | None = None,
        flavor: Flavor = "openai",
        compress: Coding | None = None,
        models: Sequence[str] | None = None,
        processing_comments: int = 2,
        processing_interval: float = 0.02,
        overflow: Literal["refuse", "truncate"] = "refuse",
        context_limits: Mapping[str, int] | None = None,
        window_counts_answer: bool = False,
    ) -> None:
        self.handler = handler
        self.default = default or Reply()
        self.context_limit = context_limit
        #: Windows of particular models (a summarizer smaller than the chat model), over ``context_limit``.
        self.context_limits = dict(context_limits or {})
        self.overflow = overflow
        #: ``(request, prompt tokens as it arrived)`` for every request larger than ``context_limit``.
        self.overflowed: list[tuple[RecordedRequest, int]] = []
        #: Whether the window must hold the answer's room too (the request's ``max_tokens``), as OpenAI's and
        #: vLLM's servers count it, rather than the prompt alone: the stricter of the two rules providers follow.
        self.window_counts_answer = window_counts_answer
        self.min_cache_tokens = min_cache_tokens
        self.host = host
        self.port = port
        self.ssl = ssl
        self.server_name = server_name
        self.flavor: Flavor = flavor
        self.compress: Coding | None = compress
        self.models = list(models) if models is not None else None
        #: ``openrouter`` flavor: how many ``: OPENROUTER PROCESSING`` comments precede a stream, and their spacing.
        self.processing_comments = processing_comments
        self.processing_interval = processing_interval
        self.queue: list[Reply] = []
        self.requests: list[RecordedRequest] = []
        self.cache = _PromptCache()
        self._runner: web.AppRunner | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._ids = itertools.count(1)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> FakeLLMServer:
        app = web.Application(client_max_size=512 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Cut whatever is still being answered (e.g. a scripted delay), then close every connection."""
        inflight = list(self._inflight)
        for task in inflight:
            task.cancel()
        if inflight:
            await asyncio.gather(*inflight, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLLMServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        scheme = "https" if self.ssl is not None else "http"
        name = self.server_name or self.host
        if ":" in name:  # an IPv6 literal
            name = f"[{name}]"
        return f"{scheme}://{name}:{self.port}"

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

    # -- dispatch ------------------------------------------------------------------------

    async def _dispatch(self, http: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            raw = await http.read()
            recorded = self._record(http, raw)
            self.requests.append(recorded)
            return await self._respond(recorded, http)
        finally:
            self._inflight.discard(task)

    def _record(self, http: web.Request, raw: bytes) -> RecordedRequest:
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in http.headers.items()}
        path = http.path.rstrip("/")
        anthropic = path.endswith("/messages") or (path not in _COMPLETION_PATHS and "anthropic-version" in headers)
        peer = http.transport.get_extra_info("peername") if http.transport is not None else None
        return RecordedRequest(
            http.method,
            http.raw_path,
            headers,
            raw,
            body,
            "anthropic" if anthropic else "openai",
            peer=tuple(peer) if peer else None,
        )

    async def _next_reply(self, request: RecordedRequest) -> Reply:
        if self.queue:
            return self.queue.pop(0)
        if self.handler is not None:
            reply = self.handler(request)
            return await reply if inspect.isawaitable(reply) else reply
        return self.default

    async def _respond(self, request: RecordedRequest, http: web.Request) -> web.StreamResponse:
        """Route one request: the model list, a completion, or the provider's 404."""
        path = http.path.rstrip("/")
        if http.method == "GET" and (path in _MODEL_PATHS or path.startswith("/v1/models/")):
            return await self._models(request, http, path)
        if http.method != "POST" or path not in _COMPLETION_PATHS:
            return await self._send_json(http, request, 404, self._not_found(request, http))
        return await self._complete(request, http)

    # -- completions ---------------------------------------------------------------------

    async def _complete(self, request: RecordedRequest, http: web.Request) -> web.StreamResponse:
        if not isinstance(request.body, dict):
            message = (
                "We could not parse the JSON body of your request."
                if request.dialect == "openai"
                else "request body is not JSON"
            )
            return await self._send_json(
                http, request, 400, self._error_body(request, message, "invalid_request_error", None)
            )
        refusal = self._refusal(request)
        if refusal is not None:
            return await self._send_json(http, request, 400, refusal)
        self._check_window(request)
        reply = await self._next_reply(request)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.never_answer:
            await asyncio.Event().wait()  # ended by the server's stop, which cancels what is in flight
        if reply.drop:
            return self._drop(http)
        try:
            usage = self._usage(request)
        except Refused as refused:
            return await self._send_json(http, request, refused.status, refused.body)
        limit = self.limit_for(request)
        weighed = usage.prompt + (answer_room(request.body) if self.window_counts_answer else 0)
        if limit is not None and weighed > limit and reply.status == 200:
            reply = Reply.context_too_long(limit, weighed)
        if reply.status != 200 or reply.body is not None:
            status, body = self._error_reply(request, reply, usage)
            return await self._send_json(http, request, status, body, reply.headers, delay=reply.first_byte_delay)
        if request.streamed:
            events, failure = self._stream_events(request, reply, usage)
            return await self._send_stream(http, request, reply, events, failure)
        return await self._send_json(
            http, request, 200, self._body(request, reply, usage), reply.headers, delay=reply.first_byte_delay
        )

    def limit_for(self, request: RecordedRequest) -> int | None:
        """The window of the model ``request`` asks: its own in ``context_limits``, else ``context_limit``."""
        return self.context_limits.get(request.model, self.context_limit)

    def _check_window(self, request: RecordedRequest) -> None:
        """Record a prompt over the model's window; in ``truncate`` mode cut its oldest messages until it fits."""
        limit = self.limit_for(request)
        if limit is None:
            return
        arrived = prompt_tokens(request) + (answer_room(request.body) if self.window_counts_answer else 0)
        request.window_tokens = arrived
        if arrived <= limit:
            return
        self.overflowed.append((request, arrived))
        if self.overflow != "truncate":
            return  # refused once its usage is computed, with the provider's own error
        messages = list(request.body.get("messages") or [])
        keep_system = [m for m in messages if m.get("role") == "system"]
        rest = [m for m in messages if m.get("role") != "system"]
        while len(rest) > 1:
            rest.pop(0)
            request.body = {**request.body, "messages": keep_system + rest}
            if prompt_tokens(request) <= limit:
                break

    def _refusal(self, request: RecordedRequest) -> dict[str, Any] | None:
        """The provider's 400 body for a request it will not take, checked before any reply is used."""
        if request.dialect == "anthropic":
            if "anthropic-version" not in request.headers:
                return anthropic_error("anthropic-version: header is required")
            return anthropic_parameter_error(request.body)
        if self.flavor == "openai":
            return openai_parameter_error(request.body)
        return None

    def _breakpoint_caching(self, request: RecordedRequest) -> bool:
        """Whether ``cache_control`` markers decide caching: Anthropic, or a Claude model behind OpenRouter."""
        return request.dialect == "anthropic" or (self.flavor == "openrouter" and _is_claude(request.model))

    def _usage(self, request: RecordedRequest) -> Usage:
        """Prompt tokens and cache read/write for a completion request (a hook: raise :class:`Refused` to refuse)."""
        return _cache_usage(request, self.cache, self.min_cache_tokens, breakpoints=self._breakpoint_caching(request))

    # -- bodies --------------------------------------------------------------------------

    def _error_body(
        self,
        request: RecordedRequest,
        message: str,
        kind: str,
        code: str | None,
        *,
        status: int = 400,
        param: str | None = None,
    ) -> dict[str, Any]:
        if request.dialect == "anthropic":
            return anthropic_error(message, kind)
        if self.flavor == "openrouter":
            return {"error": {"code": status, "message": message, "metadata": {"provider_name": None}}}
        return openai_error(message, kind, param=param, code=code)

    def _error_reply(self, request: RecordedRequest, reply: Reply, usage: Usage) -> tuple[int, Any]:
        """Status and body of a scripted non-completion (an error, or an override body)."""
        body = reply.body
        if isinstance(body, dict) and "__overloaded__" in body:
            if request.dialect == "anthropic":
                return 529, anthropic_error("Overloaded", "overloaded_error")
            return 503, self._error_body(
                request, "The server is overloaded, please try again later.", "server_error", None, status=503
            )
        if isinstance(body, dict) and "__error__" in body:
            error = body["__error__"]
            return reply.status, self._error_body(
                request, error["message"], error["type"], error["code"], status=reply.status
            )
        if isinstance(body, dict) and "__context__" in body:
            return reply.status, self._context_error(
                request, body["__context__"]["limit"], body["__context__"]["actual"]
            )
        return reply.status, body if body is not None else self._body(request, reply, usage)

    def _context_error(self, request: RecordedRequest, limit: int, actual: int) -> dict[str, Any]:
        if request.dialect == "anthropic":
            return anthropic_error(f"prompt is too long: {actual} tokens > {limit} maximum")
        if self.flavor == "openrouter":
            return self._error_body(
                request,
                f"This endpoint's maximum context length is {limit} tokens. However, you "
                f"requested about {actual} tokens. Please reduce the length of the messages.",
                "invalid_request_error",
                None,
            )
        message = (
            f"This model's maximum context length is {limit} tokens. However, your messages resulted "
            f"in {actual} tokens. Please reduce the length of the messages."
        )
        return self._error_body(request, message, "invalid_request_error", "context_length_exceeded", param="messages")

    def _body(self, request: RecordedRequest, reply: Reply, usage: Usage) -> dict[str, Any]:
        """A complete (non-streamed) answer in the request's dialect."""
        if request.dialect == "anthropic":
            return self._anthropic_message(request, reply, usage, self._new_id("msg_fake_"))
        completion_id = self._new_id("gen-fake-" if self.flavor == "openrouter" else "chatcmpl-fake-")
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if self.flavor == "openai":
            message["annotations"] = []
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        if _images_asked(request, reply):
            message["images"] = [_image_part(url) for url in reply.images]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": reply.finish_reason,
        }
        if self.flavor == "openrouter":
            choice["native_finish_reason"] = self._native_finish(request, reply)
        return {
            **self._completion_envelope(request, completion_id, "chat.completion"),
            "choices": [choice],
            "usage": self._openai_usage(request, reply, usage),
        }

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    def _native_finish(self, request: RecordedRequest, reply: Reply) -> str:
        if _is_claude(request.model):
            return _ANTHROPIC_STOP.get(reply.finish_reason, reply.finish_reason)
        return reply.finish_reason

    def _completion_envelope(self, request: RecordedRequest, completion_id: str, kind: str) -> dict[str, Any]:
        """The fields every chat completion (or chunk) of this flavor carries besides choices and usage."""
        envelope: dict[str, Any] = {
            "id": completion_id,
            "object": kind,
            "created": int(time.time()),
            "model": request.model or "fake-model",
        }
        if self.flavor == "openai":
            envelope.update(service_tier="default", system_fingerprint="fp_fake0001")
        elif self.flavor == "openrouter":
            envelope["provider"] = "Anthropic" if _is_claude(request.model) else "OpenAI"
        return envelope

    def _openai_usage(self, request: RecordedRequest, reply: Reply, usage: Usage) -> dict[str, Any]:
        if reply.usage:
            return reply.usage
        completion = _completion_tokens(reply)
        counts: dict[str, Any] = {
            "prompt_tokens": usage.prompt,
            "completion_tokens": completion,
            "total_tokens": usage.prompt + completion,
        }
        if self.flavor == "openrouter":
            counts.update(
                cost=openrouter_cost(request.model, usage, completion),
                is_byok=False,
                prompt_tokens_details={
                    "cached_tokens": usage.read,
                    "cache_write_tokens": usage.write,
                    "audio_tokens": 0,
                },
                cost_details={"upstream_inference_cost": None},
                completion_tokens_details={"reasoning_tokens": 0, "image_tokens": 0},
            )
        elif self.flavor == "openai":
            counts.update(
                prompt_tokens_details={"cached_tokens": usage.read, "audio_tokens": 0},
                completion_tokens_details={
                    "reasoning_tokens": 0,
                    "audio_tokens": 0,
                    "accepted_prediction_tokens": 0,
                    "rejected_prediction_tokens": 0,
                },
            )
        else:
            counts["prompt_tokens_details"] = {"cached_tokens": usage.read}
        return counts

    def _anthropic_usage(self, request: RecordedRequest, reply: Reply, usage: Usage) -> dict[str, Any]:
        if reply.usage:
            return reply.usage
        hour = last_breakpoint_ttl(request.body) == "1h"
        return {
            "input_tokens": usage.prompt - usage.read - usage.write,
            "output_tokens": _completion_tokens(reply),
            "cache_read_input_tokens": usage.read,
            "cache_creation_input_tokens": usage.write,
            "cache_creation": {
                "ephemeral_5m_input_tokens": 0 if hour else usage.write,
                "ephemeral_1h_input_tokens": usage.write if hour else 0,
            },
            "service_tier": "standard",
        }

    def _anthropic_message(
        self, request: RecordedRequest, reply: Reply, usage: Usage, message_id: str
    ) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content += [
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": json.loads(call["function"]["arguments"] or "{}"),
            }
            for call in reply.tool_calls
        ]
        return {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": request.model or "fake-model",
            "content": content,
            "stop_reason": _ANTHROPIC_STOP.get(reply.finish_reason, reply.finish_reason),
            "stop_sequence": None,
            "usage": self._anthropic_usage(request, reply, usage),
        }

    # -- streams -------------------------------------------------------------------------

    def _stream_events(
        self, request: RecordedRequest, reply: Reply, usage: Usage
    ) -> tuple[list[bytes], Callable[[int], bytes]]:
        """The stream's events, and the error event that would replace its tail (built for that position)."""
        if request.dialect == "anthropic":
            return self._anthropic_events(request, reply, usage), lambda _: self._stream_error_event(request, reply)
        prefix = "gen-fake-" if self.flavor == "openrouter" else "chatcmpl-fake-"
        envelope = self._completion_envelope(request, self._new_id(prefix), "chat.completion.chunk")
        return self._openai_chunks(request, reply, usage, envelope), lambda _: self._stream_error_event(
            request, reply, envelope
        )

    def _openai_chunks(
        self, request: RecordedRequest, reply: Reply, usage: Usage, envelope: dict[str, Any]
    ) -> list[bytes]:
        """``chat.completion.chunk`` events as OpenAI streams them.

        The role first, the text in pieces, each tool call's head then its argument
        fragments, the finish reason, the usage (when asked, or always on OpenRouter), ``[DONE]``.
        """
        options = request.body.get("stream_options") or {}
        with_usage = self.flavor == "openrouter" or options.get("include_usage") is True
        obfuscate = self.flavor == "openai" and options.get("include_obfuscation", True) is not False

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if self.flavor == "openrouter":
                choice["native_finish_reason"] = self._native_finish(request, reply) if finish else None
            data: dict[str, Any] = {**envelope, "choices": [choice]}
            if with_usage and self.flavor != "openrouter":
                data["usage"] = None
            if obfuscate:
                data["obfuscation"] = "x" * (1 + len(json.dumps(delta)) % 7)
            return sse(data)

        opening = "" if reply.text or not reply.tool_calls else None
        first: dict[str, Any] = {"role": "assistant", "content": opening, "refusal": None}
        events = [chunk(first)]
        events += [chunk({"content": piece}) for piece in pieces(reply.text, reply.chunk_size)]
        for index, call in enumerate(reply.tool_calls):
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            events.append(chunk({"tool_calls": [head]}))
            events += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                for fragment in pieces(call["function"]["arguments"], reply.chunk_size)
            ]
        if _images_asked(request, reply):
            events += [chunk({"images": [_image_part(url)]}) for url in reply.images]
        events.append(chunk({}, reply.finish_reason))
        if with_usage:
            tail = {**envelope, "choices": [], "usage": self._openai_usage(request, reply, usage)}
            if obfuscate:
                tail["obfuscation"] = "xyz"
            events.append(sse(tail))
        events.append(sse("[DONE]"))
        return events

    def _anthropic_events(self, request: RecordedRequest, reply: Reply, usage: Usage) -> list[bytes]:
        """Anthropic's stream: message_start, per block start/deltas/stop (with a ping), message_delta, message_stop."""
        message = self._anthropic_message(request, reply, usage, self._new_id("msg_fake_"))
        totals = message["usage"]
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**totals, "output_tokens": 1},
        }
        events = [sse({"type": "message_start", "message": start}, "message_start")]
        for index, block in enumerate(message["content"]):
            events += self._anthropic_block(index, block, reply.chunk_size)
        events.insert(2 if message["content"] else 1, sse({"type": "ping"}, "ping"))  # after the first block opens
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {
                key: totals[key]
                for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
                if key in totals
            },
        }
        events.append(sse(delta, "message_delta"))
        events.append(sse({"type": "message_stop"}, "message_stop"))
        return events

    @staticmethod
    def _anthropic_block(index: int, block: dict[str, Any], size: int | None) -> list[bytes]:
        if block["type"] == "text":
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in pieces(block["text"], size)]
        else:
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            arguments = json.dumps(block["input"], ensure_ascii=False) if block["input"] else ""
            deltas = [
                {"type": "input_json_delta", "partial_json": fragment} for fragment in ["", *pieces(arguments, size)]
            ]
        events = [sse({"type": "content_block_start", "index": index, "content_block": opened}, "content_block_start")]
        events += [
            sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
            for delta in deltas
        ]
        events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        return events

    def _stream_error_event(
        self, request: RecordedRequest, reply: Reply, envelope: dict[str, Any] | None = None
    ) -> bytes:
        """The provider's own mid-stream error event (OpenRouter's is a chunk of the same completion)."""
        fault = reply.fault() or StreamError()
        if request.dialect == "anthropic":
            return sse(anthropic_error(fault.message, fault.kind), "error")
        if self.flavor == "openrouter":
            return sse(
                {
                    **(envelope or {}),
                    "error": {"code": fault.code or "server_error", "message": fault.message},
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": ""},
                            "finish_reason": "error",
                            "native_finish_reason": "error",
                        }
                    ],
                }
            )
        kind = "server_error" if fault.kind == "overloaded_error" else fault.kind
        return sse(openai_error(fault.message, kind, code=fault.code))

    # -- writing answers -----------------------------------------------------------------

    def _drop(self, http: web.Request) -> web.StreamResponse:
        """Close the connection without a byte of answer (the client sees it dropped)."""
        if http.transport is not None:
            http.transport.abort()
        return web.Response()  # never written: aiohttp finds the transport closed

    async def _send_json(
        self,
        http: web.Request,
        request: RecordedRequest,
        status: int,
        body: Any,
        headers: dict[str, str] | None = None,
        *,
        delay: float = 0.0,
    ) -> web.StreamResponse:
        """Write a whole JSON (or scripted raw) answer, compressed when configured and accepted."""
        payload = (
            body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
        )
        response = web.Response(
            status=status,
            reason=_REASONS.get(status, "Status"),
            body=payload,
            content_type="application/json",
            headers=self._answer_headers(request),
        )
        if self.compress and self.compress in accepted_codings(http.headers.get("Accept-Encoding")):
            response.body = _compress(payload, self.compress)
            response.headers["Content-Encoding"] = self.compress
            response.headers["Vary"] = "Accept-Encoding"
        response.headers.update(headers or {})
        if delay:
            await asyncio.sleep(delay)
        try:
            request.first_byte_at = time.monotonic()
            await response.prepare(http)
            await response.write_eof()
        except ConnectionError:
            pass  # the client left; nothing to answer
        return response

    def _answer_headers(self, request: RecordedRequest) -> dict[str, str]:
        number = f"req_fake_{len(self.requests)}"
        if request.dialect == "anthropic":
            return {"request-id": number}
        if self.flavor == "openrouter":
            return {"x-generation-id": number}
        return {"x-request-id": number}

    async def _send_stream(
        self,
        http: web.Request,
        request: RecordedRequest,
        reply: Reply,
        events: list[bytes],
        error_event: Callable[[int], bytes] | None = None,
    ) -> web.StreamResponse:
        """Write ``events`` one by one as ``text/event-stream``, applying the reply's stream faults.

        A mid-stream error replaces the rest of the stream; ``error_event(position)`` builds
        it (default: this dialect's error event).
        """
        fault = reply.fault()
        if fault is not None:
            at = len(events) // 2 if fault.after is None else max(0, min(fault.after, len(events)))
            failure = error_event(at) if error_event else self._stream_error_event(request, reply)
            events = [*events[:at], failure]
        cut = reply.cut_after is not None and reply.cut_after < len(events)
        if cut:
            events = events[: reply.cut_after]
        response = web.StreamResponse(
            status=200,
            reason="OK",
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                **self._answer_headers(request),
                **reply.headers,
            },
        )
        try:
            await self._stream_head(http, request, response, reply)
            for number, event in enumerate(events):
                if number and reply.event_delay:
                    await asyncio.sleep(reply.event_delay)
                await response.write(event)
            if cut:
                if http.transport is not None:
                    http.transport.close()  # what was written still goes out; the terminator never does
                return response
            await response.write_eof()
        except ConnectionError:
            pass
        return response

    async def _stream_head(
        self, http: web.Request, request: RecordedRequest, response: web.StreamResponse, reply: Reply
    ) -> None:
        """Send the status and headers: OpenRouter at once, then its processing comments while "the upstream thinks"."""
        if self.flavor == "openrouter" and request.dialect == "openai" and self.processing_comments > 0:
            request.first_byte_at = time.monotonic()
            await response.prepare(http)
            for number in range(self.processing_comments):
                if number:
                    await asyncio.sleep(self.processing_interval)
                await response.write(PROCESSING_COMMENT)
            await asyncio.sleep(max(reply.first_byte_delay, self.processing_interval))
            return
        if reply.first_byte_delay:
            await asyncio.sleep(reply.first_byte_delay)
        request.first_byte_at = time.monotonic()
        await response.prepare(http)

    # -- models and unknown routes -------------------------------------------------------

    def model_names(self, dialect: str) -> list[str]:
        """The models ``GET /v1/models`` lists: the configured ones, else the flavor's defaults."""
        if self.models is not None:
            return list(self.models)
        return list(DEFAULT_MODELS["anthropic" if dialect == "anthropic" else self.flavor])

    async def _models(self, request: RecordedRequest, http: web.Request, path: str) -> web.StreamResponse:
        names = self.model_names(request.dialect)
        entries = [self._model_entry(request.dialect, name) for name in names]
        if not path.startswith("/v1/models/"):
            if request.dialect == "anthropic":
                page = {
                    "data": entries,
                    "has_more": False,
                    "first_id": names[0] if names else None,
                    "last_id": names[-1] if names else None,
                }
            elif self.flavor == "openrouter":
                page = {"data": entries}
            else:
                page = {"object": "list", "data": entries}
            return await self._send_json(http, request, 200, page)
        wanted = path[len("/v1/models/") :]
        for name, entry in zip(names, entries, strict=True):
            if name == wanted:
                return await self._send_json(http, request, 200, entry)
        if request.dialect == "anthropic":
            return await self._send_json(http, request, 404, anthropic_error(f"model: {wanted}", "not_found_error"))
        missing = self._error_body(
            request,
            f"The model '{wanted}' does not exist",
            "invalid_request_error",
            "model_not_found",
            status=404,
            param="model",
        )
        return await self._send_json(http, request, 404, missing)

    def _model_entry(self, dialect: str, name: str) -> dict[str, Any]:
        if dialect == "anthropic":
            return {
                "type": "model",
                "id": name,
                "display_name": name.replace("-", " ").title(),
                "created_at": "2025-09-29T00:00:00Z",
            }
        if self.flavor == "openrouter":
            prompt, completion = next((p for key, p in _OPENROUTER_PRICES.items() if key in name), _DEFAULT_PRICE)
            return {
                "id": name,
                "canonical_slug": name,
                "name": name,
                "created": 1_750_000_000,
                "context_length": self.context_limits.get(name, self.context_limit or 200_000),
                "architecture": {"modality": "text->text", "input_modalities": ["text"], "output_modalities": ["text"]},
                "pricing": {"prompt": f"{prompt:.10f}", "completion": f"{completion:.10f}"},
                "top_provider": {
                    "context_length": self.context_limits.get(name, self.context_limit or 200_000),
                    "is_moderated": False,
                },
                "supported_parameters": ["max_tokens", "temperature", "tools", "tool_choice", "stream"],
            }
        owner = "openai" if self.flavor == "openai" else "system"
        return {"id": name, "object": "model", "created": 1_750_000_000, "owned_by": owner}

    def _not_found(self, request: RecordedRequest, http: web.Request) -> dict[str, Any]:
        if request.dialect == "anthropic":
            return anthropic_error("Not Found", "not_found_error")
        return self._error_body(
            request, f"Invalid URL ({http.method} {http.path})", "invalid_request_error", None, status=404
        )
