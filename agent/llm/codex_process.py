"""The ``codex app-server`` process and its JSON-RPC connection: threads, turns, compactions.

Wire protocol: JSON-RPC 2.0 without the ``jsonrpc`` member, one JSON object per line on
the process's stdin/stdout; ``initialize`` then the ``initialized`` notification; turns
and compactions stream ``turn/*``, ``item/*`` and ``thread/tokenUsage/updated``
notifications. Requests the server makes of us (approvals) are declined: a chat gateway
has nobody to ask.

This is the transport side of the codex app-server route and knows nothing of foldgate's
transcripts; :mod:`agent.codex_chat` is the chat model over it and
:mod:`agent.codex_engine` decides when to ask it to compact.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent import json_codec
from agent.llm.errors import BadResponse, ContextTooLong, ProviderError, ProviderTimeout, ProviderUnavailable
from agent.llm.window_refusals import read_window_refusal
from agent.usage import Usage

# The route's log: one logger, the chat model's, for the app-server's process and its turns.
log = logging.getLogger("agent.codex_chat")

#: Largest JSON line accepted from the process (an agent message can be long).
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Server requests answered with a refusal (the gateway cannot ask anyone to approve).
APPROVAL_METHODS = frozenset(
    {
        "item/commandExecution/requestApproval",
        "item/fileChange/requestApproval",
        "item/permissions/requestApproval",
        "execCommandApproval",
        "applyPatchApproval",
    }
)


class AppServerError(ProviderError):
    """The app-server answered a request with an error, failed a turn, or went away."""


@dataclass(frozen=True)
class ThreadUsage:
    """``thread/tokenUsage/updated``'s last model call: how big the thread's context is now."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ThreadUsage:
        usage = params.get("tokenUsage") or {}
        last = usage.get("last") or usage.get("total") or {}
        return cls(
            input_tokens=int(last.get("inputTokens") or 0),
            cached_input_tokens=int(last.get("cachedInputTokens") or 0),
            output_tokens=int(last.get("outputTokens") or 0),
            reasoning_tokens=int(last.get("reasoningOutputTokens") or 0),
        )

    def as_usage(self) -> Usage:
        return Usage(
            prompt_tokens=self.input_tokens,
            completion_tokens=self.output_tokens,
            total_tokens=self.input_tokens + self.output_tokens,
            cache_read_tokens=self.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens,
        )


@dataclass(frozen=True)
class TurnOutcome:
    """One turn on a thread: the agent's reply, the context size after it, and compactions inside it."""

    thread_id: str
    turn_id: str
    text: str
    usage: ThreadUsage
    compactions: int


@dataclass(frozen=True)
class NativeCompaction:
    """One app-server compaction foldgate started and waited for."""

    thread_id: str
    tokens_before: int
    tokens_after: int


class CodexAppServer:
    """One ``codex app-server`` process and its JSON-RPC connection, shared by every chat of a gateway.

    Start it with :meth:`start` (or let the first call do it); every call is safe to make
    from concurrent chats — each thread's turns and compactions are serialized.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        client_name: str = "foldgate",
        request_timeout: float = 60.0,
        turn_timeout: float = 1_800.0,
    ) -> None:
        if not command:
            raise ValueError("the app-server command is empty")
        self.command = list(command)
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.client_name = client_name
        self.request_timeout = request_timeout
        self.turn_timeout = turn_timeout
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._listeners: dict[str, list[asyncio.Queue[tuple[str, dict[str, Any]]]]] = defaultdict(list)
        self._thread_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._start_lock = asyncio.Lock()
        self._loaded: set[str] = set()
        #: thread id -> compactions seen (``contextCompaction`` items completed), whoever started them
        self.compactions: dict[str, int] = defaultdict(int)
        #: thread id -> the latest reported context size
        self.usage: dict[str, ThreadUsage] = {}
        self.server_info: dict[str, Any] = {}

    # -- process and connection ----------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        """Spawn the process and complete the ``initialize`` handshake (idempotent)."""
        async with self._start_lock:
            if self.running:
                return
            try:
                self._process = await asyncio.create_subprocess_exec(
                    *self.command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    cwd=self.cwd,
                    env=self.env,
                    limit=MAX_LINE_BYTES,  # stderr (its logs) goes where ours goes
                )
            except OSError as error:
                raise ProviderUnavailable(f"cannot start the codex app-server {self.command!r}: {error}") from error
            self._loaded.clear()
            self._reader = asyncio.create_task(self._read_loop(self._process), name="codex-app-server-reader")
            self.server_info = (
                await self._request(
                    "initialize",
                    {
                        "clientInfo": {"name": self.client_name, "title": "foldgate gateway", "version": "1"},
                    },
                )
                or {}
            )
            await self._send({"method": "initialized"})

    async def aclose(self) -> None:
        """Stop the process: close its stdin, then terminate it if it does not exit."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 5)
        except TimeoutError:
            process.terminate()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), 5)
            if process.returncode is None:
                process.kill()
                await process.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._fail_pending(AppServerError("the codex app-server was stopped"))

    async def _send(self, message: Mapping[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None or process.returncode is not None:
            raise ProviderUnavailable("the codex app-server is not running")
        process.stdin.write(json_codec.dumps(message) + b"\n")
        try:
            await process.stdin.drain()
        except (ConnectionError, BrokenPipeError) as error:
            raise ProviderUnavailable(f"the codex app-server closed its input: {error}") from error

    async def _request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        number = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[number] = future
        try:
            await self._send({"method": method, "id": number, "params": dict(params or {})})
            return await asyncio.wait_for(future, self.request_timeout)
        except TimeoutError as error:
            raise ProviderTimeout(
                f"codex app-server: no answer to {method} within {self.request_timeout:g}s"
            ) from error
        finally:
            self._pending.pop(number, None)

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """One JSON-RPC request; the result, or :class:`AppServerError` with the server's message."""
        await self.start()
        return await self._request(method, params)

    def _fail_pending(self, error: Exception) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        for queues in self._listeners.values():
            for queue in queues:
                queue.put_nowait(("$closed", {}))

    async def _read_loop(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        try:
            while True:
                line = await process.stdout.readline()
                if not line:
                    break
                try:
                    message = json_codec.loads(line)
                except ValueError:
                    log.warning("codex app-server wrote a line that is not JSON: %r", line[:200])
                    continue
                if isinstance(message, dict):
                    await self._dispatch(message)
        finally:
            self._fail_pending(AppServerError(f"the codex app-server exited (code {process.returncode})"))

    async def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            await self._answer_server_request(message)
        elif "id" in message:
            self._settle(message)
        else:
            self._notify(message)

    def _settle(self, response: Mapping[str, Any]) -> None:
        """Hand an answer to the request waiting for it (one that timed out or was failed is past caring)."""
        future = self._pending.get(response["id"])
        if future is None or future.done():
            return
        if "error" in response:
            error = response["error"] or {}
            future.set_exception(AppServerError(f"codex app-server: {error.get('message') or error}"))
        else:
            future.set_result(response.get("result"))

    def _notify(self, notification: Mapping[str, Any]) -> None:
        """Note what a thread's notification says about compactions and usage, then pass it to its listeners."""
        method = str(notification.get("method") or "")
        params = notification.get("params") or {}
        thread_id = params.get("threadId") or (params.get("thread") or {}).get("id")
        if not thread_id:
            return
        item = params.get("item") or {}
        if method == "item/completed" and item.get("type") == "contextCompaction":
            self.compactions[thread_id] += 1
        elif method == "thread/tokenUsage/updated":
            self.usage[thread_id] = ThreadUsage.from_params(params)
        for queue in self._listeners.get(thread_id, ()):
            queue.put_nowait((method, params))

    async def _answer_server_request(self, message: Mapping[str, Any]) -> None:
        method = message.get("method")
        if method in APPROVAL_METHODS:
            log.info("codex app-server asked for approval (%s); declined", method)
            answer: dict[str, Any] = {"id": message["id"], "result": {"decision": "decline"}}
        else:
            answer = {"id": message["id"], "error": {"code": -32601, "message": f"foldgate does not handle {method}"}}
        with contextlib.suppress(ProviderError):
            await self._send(answer)

    @contextlib.contextmanager
    def _listen(self, thread_id: str) -> Any:
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self._listeners[thread_id].append(queue)
        try:
            yield queue
        finally:
            self._listeners[thread_id].remove(queue)
            if not self._listeners[thread_id]:
                del self._listeners[thread_id]

    async def _next_event(
        self, queue: asyncio.Queue[tuple[str, dict[str, Any]]], what: str
    ) -> tuple[str, dict[str, Any]]:
        try:
            method, params = await asyncio.wait_for(queue.get(), self.turn_timeout)
        except TimeoutError as error:
            raise ProviderTimeout(f"codex app-server: {what} did not finish within {self.turn_timeout:g}s") from error
        if method == "$closed":
            raise AppServerError(f"codex app-server: the process ended during {what}")
        return method, params

    # -- threads, turns, compaction ------------------------------------------------------

    async def start_thread(self, model: str | None = None) -> str:
        params: dict[str, Any] = {"approvalPolicy": "never"}
        if model:
            params["model"] = model
        if self.cwd:
            params["cwd"] = self.cwd
        result = await self.request("thread/start", params)
        thread_id = str(((result or {}).get("thread") or {}).get("id") or "")
        if not thread_id:
            raise BadResponse(f"codex app-server: thread/start returned no thread id: {result!r}")
        self._loaded.add(thread_id)
        return thread_id

    async def _ensure_loaded(self, thread_id: str) -> None:
        """Resume a thread this process has not loaded (after a gateway or app-server restart)."""
        await self.start()
        if thread_id not in self._loaded:
            await self.request("thread/resume", {"threadId": thread_id})
            self._loaded.add(thread_id)

    @staticmethod
    def _turn_failure(turn: Mapping[str, Any]) -> ProviderError:
        error = turn.get("error") or {}
        text = f"codex app-server turn {turn.get('status')}: {error.get('message') or 'no detail'}"
        info = error.get("codexErrorInfo")
        if info == "ContextWindowExceeded" or (isinstance(info, Mapping) and "ContextWindowExceeded" in info):
            return ContextTooLong.from_refusal(text, read_window_refusal(json_codec.dumps_text(error, default=str)))
        return AppServerError(text)

    async def run_turn(self, thread_id: str, text: str, *, model: str | None = None) -> TurnOutcome:
        """Send ``text`` as a turn and wait for ``turn/completed``; the agent's reply and the context size after it."""
        await self._ensure_loaded(thread_id)
        async with self._thread_locks[thread_id]:
            before = self.compactions[thread_id]
            with self._listen(thread_id) as queue:
                params: dict[str, Any] = {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
                if model:
                    params["model"] = model
                result = await self.request("turn/start", params)
                turn_id = str(((result or {}).get("turn") or {}).get("id") or "")
                replies = await self._replies_until_done(queue, turn_id)
        reply = "\n\n".join(text for text in replies.values() if text)
        return TurnOutcome(
            thread_id, turn_id, reply, self.usage.get(thread_id, ThreadUsage()), self.compactions[thread_id] - before
        )

    async def _replies_until_done(
        self, queue: asyncio.Queue[tuple[str, dict[str, Any]]], turn_id: str
    ) -> dict[str, str]:
        """The agent messages of turn ``turn_id`` by item id, once it completed; its failure raised if it did not.

        A ``turn/completed`` naming another turn is not this one's end and is passed over.
        """
        replies: dict[str, str] = {}
        while True:
            method, event = await self._next_event(queue, "a turn")
            item = event.get("item") or {}
            if method == "item/completed" and item.get("type") == "agentMessage":
                replies[str(item.get("id"))] = str(item.get("text") or "")
            elif method == "turn/completed":
                turn = event.get("turn") or {}
                if turn_id and turn.get("id") not in (None, turn_id):
                    continue
                if turn.get("status") != "completed":
                    raise self._turn_failure(turn)
                return replies

    async def compact(self, thread_id: str) -> NativeCompaction:
        """``thread/compact/start`` and wait for the compaction item and its turn to complete."""
        await self._ensure_loaded(thread_id)
        async with self._thread_locks[thread_id]:
            tokens_before = self.usage.get(thread_id, ThreadUsage()).input_tokens
            with self._listen(thread_id) as queue:
                await self.request("thread/compact/start", {"threadId": thread_id})
                compacted = turn_open = False
                while not compacted or turn_open:
                    method, event = await self._next_event(queue, "a compaction")
                    item = event.get("item") or {}
                    if method == "turn/started":
                        turn_open = True
                    elif method == "item/completed" and item.get("type") == "contextCompaction":
                        compacted = True
                    elif method == "turn/completed":
                        turn = event.get("turn") or {}
                        if turn.get("status") != "completed":
                            raise self._turn_failure(turn)
                        turn_open = False
                        if not compacted:
                            raise AppServerError("codex app-server: the compaction turn ended without compacting")
        tokens_after = self.usage.get(thread_id, ThreadUsage()).input_tokens
        return NativeCompaction(thread_id, tokens_before, tokens_after)
