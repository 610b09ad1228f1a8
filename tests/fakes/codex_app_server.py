"""A fake ``codex app-server``: a real process speaking JSON-RPC (JSONL, no ``jsonrpc`` member) on stdio.

Run it as ``python -m tests.fakes.codex_app_server [options]``. It keeps threads in memory
and models what the gateway relies on:

- ``initialize`` / ``initialized``; any other request before them is refused;
- ``thread/start``, ``thread/resume`` (unknown ids are refused);
- ``turn/start``: answers the turn object at once, then streams ``turn/started``, the
  ``agentMessage`` item (``echo: <input>``), ``thread/tokenUsage/updated`` and
  ``turn/completed``. The thread's context grows by the input and the reply; with
  ``--auto-compact-at N`` the app-server compacts on its own inside a turn once the
  context passes N tokens (a ``contextCompaction`` item), as codex does;
- an input containing ``NEEDS-APPROVAL`` first asks the client to approve a command and
  puts the decision in the reply;
- ``thread/compact/start``: answers ``{}`` at once, then runs the compaction as a turn that
  completes ``--compact-delay`` seconds later, shrinking the context to ``--carry`` tokens.

Every message received is appended to ``--log`` (JSONL) so tests can see what was asked;
``--state`` keeps the threads in a JSON file, so a restarted process can resume them (as
codex keeps its threads on disk).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
from typing import Any


class FakeAppServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.auto_compact_at: int | None = args.auto_compact_at
        self.compact_delay: float = args.compact_delay
        self.carry: int = args.carry
        self.log_path: str | None = args.log
        self.state_path: str | None = args.state
        self.initialized = False
        self.threads: dict[str, dict[str, Any]] = {}
        if self.state_path:
            try:
                with open(self.state_path, encoding="utf-8") as handle:
                    self.threads = json.load(handle)
            except FileNotFoundError:
                pass
        self.ids = itertools.count(1)
        self.server_requests = itertools.count(1000)
        self.answers: dict[int, asyncio.Future[Any]] = {}
        self.out = sys.stdout
        self.tasks: set[asyncio.Task[None]] = set()

    # -- io -------------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})
        if self.state_path and method in ("turn/completed", "thread/started"):
            with open(self.state_path, "w", encoding="utf-8") as handle:
                json.dump(self.threads, handle)

    def log(self, message: dict[str, Any]) -> None:
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(message) + "\n")

    async def ask(self, method: str, params: dict[str, Any]) -> Any:
        number = next(self.server_requests)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.answers[number] = future
        self.send({"method": method, "id": number, "params": params})
        return await future

    def spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- protocol ---------------------------------------------------------------------------

    async def handle(self, message: dict[str, Any]) -> None:
        self.log(message)
        if "id" in message and "method" not in message:
            future = self.answers.pop(message["id"], None)
            if future is not None and not future.done():
                future.set_result(message.get("result") if "result" in message else {"error": message.get("error")})
            return
        method = message.get("method")
        number = message.get("id")
        params = message.get("params") or {}
        if method == "initialized":
            self.initialized = True
            return
        if number is None:
            return
        if method == "initialize":
            self.send(
                {
                    "id": number,
                    "result": {
                        "userAgent": "fake-codex/0.0",
                        "codexHome": "/tmp/fake-codex",
                        "platformFamily": "unix",
                        "platformOs": "linux",
                    },
                }
            )
            return
        if not self.initialized:
            self.send({"id": number, "error": {"code": -32002, "message": "Not initialized"}})
            return
        handler = getattr(self, "on_" + str(method).replace("/", "_"), None)
        if handler is None:
            self.send({"id": number, "error": {"code": -32601, "message": f"unknown method {method}"}})
            return
        try:
            self.send({"id": number, "result": handler(params)})
        except KeyError as error:
            self.send({"id": number, "error": {"code": -32600, "message": f"no thread {error}"}})

    def on_thread_start(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id = f"thr_{len(self.threads) + 1}_{next(self.ids)}"
        self.threads[thread_id] = {"tokens": 0, "model": params.get("model"), "turns": 0, "compactions": 0}
        thread = {"id": thread_id, "preview": "", "modelProvider": "openai", "createdAt": 0}
        self.notify("thread/started", {"thread": thread})
        return {"thread": thread}

    def on_thread_resume(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id = params["threadId"]
        self.threads[thread_id]  # KeyError for an unknown thread
        return {"thread": {"id": thread_id}}

    def on_turn_start(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id = params["threadId"]
        thread = self.threads[thread_id]
        turn_id = f"turn_{next(self.ids)}"
        text = " ".join(part.get("text", "") for part in params.get("input") or ())
        self.spawn(self.run_turn(thread_id, thread, turn_id, text))
        return {"turn": {"id": turn_id, "status": "inProgress", "items": [], "error": None}}

    def on_thread_compact_start(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id = params["threadId"]
        thread = self.threads[thread_id]
        self.spawn(self.run_compaction(thread_id, thread))
        return {}

    # -- behaviour --------------------------------------------------------------------------

    def usage(self, thread_id: str, thread: dict[str, Any], turn_id: str, output: int) -> None:
        last = {
            "inputTokens": thread["tokens"],
            "cachedInputTokens": 0,
            "outputTokens": output,
            "reasoningOutputTokens": 0,
            "totalTokens": thread["tokens"] + output,
        }
        self.notify(
            "thread/tokenUsage/updated",
            {
                "threadId": thread_id,
                "turnId": turn_id,
                "tokenUsage": {"last": last, "total": last, "modelContextWindow": 272000},
            },
        )

    def compaction_item(self, thread_id: str, thread: dict[str, Any], turn_id: str) -> None:
        item = {"type": "contextCompaction", "id": f"item_{next(self.ids)}"}
        self.notify("item/started", {"threadId": thread_id, "turnId": turn_id, "item": item})
        thread["tokens"] = self.carry
        thread["compactions"] += 1
        self.notify("item/completed", {"threadId": thread_id, "turnId": turn_id, "item": item})

    async def run_turn(self, thread_id: str, thread: dict[str, Any], turn_id: str, text: str) -> None:
        self.notify(
            "turn/started", {"threadId": thread_id, "turn": {"id": turn_id, "status": "inProgress", "items": []}}
        )
        reply = f"echo: {text}"
        if "NEEDS-APPROVAL" in text:
            answer = await self.ask(
                "item/commandExecution/requestApproval",
                {
                    "threadId": thread_id,
                    "turnId": turn_id,
                    "itemId": "cmd_1",
                    "command": ["rm", "-rf", "/"],
                    "cwd": "/",
                },
            )
            reply = f"approval: {json.dumps(answer)}"
        thread["tokens"] += len(text.split()) + 20
        if self.auto_compact_at is not None and thread["tokens"] > self.auto_compact_at:
            self.compaction_item(thread_id, thread, turn_id)
        output = len(reply.split())
        thread["tokens"] += output
        thread["turns"] += 1
        item = {"type": "agentMessage", "id": f"item_{next(self.ids)}", "text": reply}
        self.notify("item/started", {"threadId": thread_id, "turnId": turn_id, "item": {**item, "text": ""}})
        self.notify(
            "item/agentMessage/delta", {"threadId": thread_id, "turnId": turn_id, "itemId": item["id"], "delta": reply}
        )
        self.notify("item/completed", {"threadId": thread_id, "turnId": turn_id, "item": item})
        self.usage(thread_id, thread, turn_id, output)
        self.notify(
            "turn/completed",
            {"threadId": thread_id, "turn": {"id": turn_id, "status": "completed", "items": [], "error": None}},
        )

    async def run_compaction(self, thread_id: str, thread: dict[str, Any]) -> None:
        turn_id = f"turn_{next(self.ids)}"
        self.notify(
            "turn/started", {"threadId": thread_id, "turn": {"id": turn_id, "status": "inProgress", "items": []}}
        )
        item = {"type": "contextCompaction", "id": f"item_{next(self.ids)}"}
        self.notify("item/started", {"threadId": thread_id, "turnId": turn_id, "item": item})
        await asyncio.sleep(self.compact_delay)
        thread["tokens"] = self.carry
        thread["compactions"] += 1
        self.notify("item/completed", {"threadId": thread_id, "turnId": turn_id, "item": item})
        self.usage(thread_id, thread, turn_id, 0)
        self.notify(
            "turn/completed",
            {"threadId": thread_id, "turn": {"id": turn_id, "status": "completed", "items": [], "error": None}},
        )


async def serve(args: argparse.Namespace) -> None:
    server = FakeAppServer(args)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        try:
            message = json.loads(line)
        except ValueError:
            continue
        await server.handle(message)
    for task in list(server.tasks):
        task.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--auto-compact-at", type=int, default=None)
    parser.add_argument("--compact-delay", type=float, default=0.0)
    parser.add_argument("--carry", type=int, default=50)
    parser.add_argument("--log", default=None)
    parser.add_argument("--state", default=None)
    asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
