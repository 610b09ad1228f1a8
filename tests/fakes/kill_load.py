"""Gateway worker processes under load, killed with SIGKILL at chosen kinds of moment, and what that left.

Two worker processes (:mod:`tests.fakes.worker_process`) share one Redis and are the real
Telegram intakes of two bots on the fake Bot API (:class:`FakeBotAPI`): one polls getUpdates
for its bot, the other serves the webhook its bot posts every update to (a token has either a
webhook or getUpdates, never both — hence a bot each). Either process answers either bot's
chats, streaming its replies through the shared send budget, and calls the model on a
:class:`FakeLLMServer` of its own slot, so the fake knows which process asked. Every chat is a
user who sends a message through the Bot API and sends the next once the answer shows in the
chat; every third message makes the model call a tool on a prompt reported at 60% of the
window, so an in-loop compaction (with a model summary) follows, and every fifth is answered at
the length of two Telegram messages.

A kill is armed for one kind of moment at a time and fired at a random offset after the fakes see
it: ``model_call`` (a request sent, no byte back yet), ``stream`` (the answer half streamed),
``tool_call`` (the model's tool call answered and the next request not yet sent: the tool runs),
``compaction`` (the summary request in flight or just answered), ``commit`` (around the model's
last byte, while the turn is written), ``between_chunks`` (the first of a two-message reply
accepted by Telegram, the second not yet), ``reply`` (a reply's last message just accepted by
Telegram: the one-round-trip window in which it can show twice). A kill whose moment has passed
by the time it is due (the tool already done, the second chunk already accepted) is let go and
the kind armed again, so each kill is the kind it is counted as. The killed slot is started
again at once: a restarted poller asks for every update not yet confirmed, and the webhook bot
posts again whatever its process did not answer with a 2xx. After the kills, the Redis server
may be restarted under the same load (cleanly and with SIGKILL in turn) through a callback. At
the end each chat's visible messages are compared with what each of its user messages should
have got, and its stored session is checked.

The workers run foldgate's shipped ``gateway`` settings (coalescing of a backlog on, as users
get it); only the lock's ttl can be set, and a run that sets it says why: a killed worker's chat
is taken over when its lock expires, so a soak of many kills runs at a 2 s lock to measure that
takeover many times rather than wait out the default lock each time.

Used by ``tests/reliability/test_kill_anywhere.py`` (30 kills) and ``foldgate bench chaos`` (the
longer soak).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import random
import re
import signal
import socket
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from redis.asyncio import Redis

from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT
from agent.messages import is_real_user_message, text_of
from agent.transcript_repair import repair_transcript
from gateway.config import GatewaySettings
from gateway.platforms.split import split_message
from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from tests.fakes import worker_process
from tests.fakes.bot_api import MESSAGE_LIMIT, FakeBotAPI, WebhookRetry
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("model_call", "stream", "tool_call", "compaction", "commit", "between_chunks", "reply")
Kind = Literal["model_call", "stream", "tool_call", "compaction", "commit", "between_chunks", "reply"]
#: How each bot's updates reach the gateway; slot 0 takes the first bot's in, slot 1 the second's.
INTAKES: tuple[Literal["polling", "webhook"], ...] = ("polling", "webhook")
#: The webhook bot posts an update again 0.2 s after a failure, doubling to 2 s: Telegram does not
#: publish its schedule, and a soak that waited Telegram-like minutes would measure the schedule.
WEBHOOK_RETRY = WebhookRetry(first=0.2, longest=2.0, timeout=30.0)
#: Seconds after the model's tool call is written within which a ``tool_call`` kill lands.
TOOL_WINDOW = 0.03
#: Seconds before a model answer's first byte, so a kill can land while the call is in flight.
FIRST_BYTE = 0.15
#: Seconds the summary request takes.
SUMMARY_DELAY = 0.25
NOTES = "\n".join(f"{heading}\n- noted" for heading in SECTION_HEADINGS)
TAG = re.compile(r"\[chat (-?\d+)\] message (\d+):")


def reply_text(user_text: str) -> str:
    """The answer a user message gets: a function of its text only, so a rerun after a kill says the same."""
    found = TAG.search(user_text)
    assert found, user_text
    chat, number = found.groups()
    rng = random.Random(f"{chat}/{number}")
    sentences = 110 if int(number) % 5 == 4 else 10  # two Telegram messages, or one
    words = ("canary", "ledger", "replica", "backlog", "queue", "deploy", "rollback", "shard")
    body = " ".join(
        f"{rng.choice(words)} {rng.randint(1, 999)} is {rng.choice(('green', 'drained', 'late'))}"
        f" after {rng.randint(1, 60)} minutes, checked twice."
        for _ in range(sentences)
    )
    return f"answer to chat {chat} message {number}: {body}"


def user_text(chat: str, number: int) -> str:
    ask = "look it up in the archive first. " if number % 3 == 2 else ""
    return f"[chat {chat}] message {number}: {ask}how are the deploys doing now?"


def reply_chunks(user_text: str) -> list[str]:
    """The Telegram messages the answer to ``user_text`` shows as."""
    return split_message(reply_text(user_text), MESSAGE_LIMIT, units="utf16")


def free_port() -> int:
    """A loopback port nothing listens on now (the webhook's: it must stay the same across restarts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class TelegramBot:
    """One bot of the load: its fake Bot API, how its updates reach the gateway, the chats that talk to it."""

    intake: Literal["polling", "webhook"]
    api: FakeBotAPI
    chats: list[str]
    port: int = 0
    secret: str = ""

    def spec(self, taken_in_here: bool) -> dict[str, object]:
        """The bot as ``worker_process --bots`` reads it."""
        return {
            "token": self.api.token,
            "api": self.api.base_url,
            "chats": self.chats,
            "intake": self.intake if taken_in_here else None,
            "port": self.port,
            "secret": self.secret,
        }

    def update(self, chat: str, text: str) -> dict[str, object]:
        """What Telegram sends when the chat's user writes ``text`` (in a group, addressed to the bot)."""
        if chat.startswith("-"):
            return self.api.group_message(int(chat), 5000 + abs(int(chat)) % 1000, f"@{self.api.username} {text}")
        return self.api.private_message(int(chat), text)


@dataclass
class Kill:
    kind: str
    slot: int
    chat: str
    #: ``time.monotonic()`` when SIGKILL was sent.
    at: float
    #: Seconds until the chat's next message, draft or edit was accepted (the chat taken over); None: none came.
    recovered_after: float | None = None


@dataclass
class RedisRestart:
    #: SIGKILL (True) or a clean stop (False).
    hard: bool
    down_at: float
    up_at: float
    #: When the server was started again (the old one gone); its data load counts from here.
    started_at: float = 0.0
    #: Seconds from ``started_at`` until Telegram accepted the first complete reply message, in any chat.
    first_answer_after: float | None = None
    #: Seconds from the server being back until every chat had a message, draft or edit accepted again.
    every_chat_back_after: float | None = None
    #: The same for the private chats only (a group's next message may wait for Telegram's per-group limit).
    private_back_after: float | None = None
    #: The longest ``retry_after`` Telegram imposed on a chat between the server being back and that
    #: chat's first accepted call: a wait the platform asked for, not the gateway's own delay (a budget
    #: write lost with a SIGKILL before it reached the append-only file can cost one such 429).
    longest_flood_wait: float = 0.0


@dataclass
class Extra:
    """A message a chat shows twice, or a preview left behind."""

    chat: str
    what: Literal["duplicate", "left behind"]
    text: str
    #: Seconds from Telegram accepting the message (the first copy, for a duplicate) to the nearest kill;
    #: negative when the kill came first and the message was already on its way.
    kill_offset: float | None


@dataclass
class KillReport:
    kills: list[Kill]
    #: Messages the users sent through the Bot API.
    user_messages: int
    reply_messages: int
    #: "chat: what is missing" for every expected reply message that never showed.
    lost: list[str]
    extras: list[Extra]
    #: "chat: what is wrong" for every stored session that is not what its user sent.
    broken_sessions: list[str]
    summaries: int
    seconds: float
    peak_rss_mb: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)
    redis_restarts: list[RedisRestart] = field(default_factory=list)
    #: What the worker processes logged (INFO and up), every process's lines in one text.
    logs: str = ""
    #: Model requests whose newest user message was not a person's.
    odd_requests: list[str] = field(default_factory=list)
    #: User messages whose every reply message showed exactly once.
    answered_once: int = 0
    #: Kills armed whose moment had passed when they were due, by kind (let go, armed again).
    let_go: dict[str, int] = field(default_factory=dict)
    #: Per intake ("polling", "webhook"), the chats whose updates came in that way.
    intakes: dict[str, int] = field(default_factory=dict)
    #: Webhook posts that got no 2xx (the process was down or killed mid-request), each posted again.
    webhook_failed_posts: int = 0

    @property
    def widest_window(self) -> float:
        """The farthest a message shown twice (or left behind) was accepted from the kill that caused it."""
        return max((abs(extra.kill_offset) for extra in self.extras if extra.kill_offset is not None), default=0.0)


def _always() -> bool:
    return True


@dataclass
class _Shot:
    slot: int
    chat: str
    #: ``time.monotonic()`` when the kill is due.
    at: float
    #: Asked when the kill is due: is the moment aimed at still the one? (False: the kill is let go.)
    still: Callable[[], bool] = _always


@dataclass
class _Armed:
    kind: str
    fired: asyncio.Future[_Shot]


def _forkserver() -> multiprocessing.context.ForkServerContext:
    """Worker processes forked from a server that imported the gateway once: a restart after a kill
    takes a fraction of a second instead of the seconds importing aiogram takes."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.fakes.worker_process"])
    return context


async def start_worker(
    redis_url: str,
    prefix: str,
    base_url: str,
    *,
    context_length: int,
    lock_ttl: float | None = None,
    bots: list[dict[str, object]] | None = None,
    log_file: Path | None = None,
) -> multiprocessing.process.BaseProcess:
    """One gateway worker process (see :mod:`tests.fakes.worker_process`), answering as ``bots`` when given;
    its lock ttl is ``gateway.lock_ttl_seconds`` as shipped unless ``lock_ttl`` sets it."""
    argv = ["--redis", redis_url, "--prefix", prefix, "--base-url", base_url, "--context-length", str(context_length)]
    if lock_ttl is not None:
        argv += ["--gateway", json.dumps({"lock_ttl_seconds": lock_ttl})]
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    if bots is not None:
        argv += ["--bots", json.dumps(bots)]
    process = _forkserver().Process(target=worker_process.run, args=(argv,), daemon=True)
    # Off the event loop: the first start waits for the fork server to import the gateway (seconds),
    # and a loop blocked that long would time out its own Redis reads.
    await asyncio.to_thread(process.start)
    return process


def rss_mb(pid: int, field: Literal["VmRSS", "VmHWM"] = "VmHWM") -> float:
    """The process's resident set now (VmRSS) or at its highest (VmHWM), in MB; 0 when /proc does not say."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


class KillLoad:
    """See the module docstring: ``await KillLoad(redis, url, prefix, kills=28).run()``."""

    def __init__(
        self,
        redis: Redis,
        redis_url: str,
        prefix: str,
        *,
        kills: int = 28,
        workers: int = 2,
        private_chats: int = 8,
        groups: int = 4,
        lock_ttl: float | None = None,
        window: int = 20_000,
        seed: int = 15,
        redis_restarts: int = 0,
        restart_redis: Callable[[bool], Awaitable[float | None]] | None = None,
        on_fault: Callable[[int], None] | None = None,
    ) -> None:
        self.redis = redis
        self.redis_url = redis_url
        self.prefix = prefix
        self.kill_count = kills
        self.slots = workers
        self.chats = [str(8100 + i) for i in range(private_chats)] + [str(-1008100 - i) for i in range(groups)]
        #: The workers' ``gateway.lock_ttl_seconds``: the shipped one unless the run sets it (see the module docstring).
        self.lock_ttl = lock_ttl
        self.window = window
        self.rng = random.Random(seed)
        self.inbox = Inbox(redis, prefix)
        self.sent: dict[str, list[str]] = defaultdict(list)
        self.kills: list[Kill] = []
        self.restart_count = redis_restarts
        self.restart_redis = restart_redis
        self.restarts: list[RedisRestart] = []
        #: Called with how many kills and restarts are done after each (a soak's progress).
        self.on_fault = on_fault
        self.kinds: dict[str, int] = defaultdict(int)
        self.let_go: dict[str, int] = defaultdict(int)
        self.summaries = 0
        #: The newest user message of model requests that was not a person's (it should always be).
        self.odd_requests: list[str] = []
        self.peak_rss = 0.0
        self.bots: list[TelegramBot] = []
        self._bot_of: dict[str, TelegramBot] = {}
        self._armed: _Armed | None = None
        self._serving: dict[str, int] = {}
        #: Model requests seen per chat, summaries included (a tool's run ends with the next one).
        self._requests: dict[str, int] = defaultdict(int)
        self._call_ids = itertools.count(1)
        self._stopping = False
        self._processes: list[multiprocessing.process.BaseProcess | None] = [None] * workers
        self.log_file: Path | None = None

    @property
    def _lock_seconds(self) -> float:
        """The workers' lock ttl in seconds, the shipped default when the run does not set one."""
        return self.lock_ttl if self.lock_ttl is not None else float(GatewaySettings().lock_ttl_seconds)

    # ------------------------------------------------------------------ the model

    def _fire(self, kind: str, slot: int, chat: str, at: float, still: Callable[[], bool] = _always) -> None:
        armed = self._armed
        if armed is not None and armed.kind == kind and not armed.fired.done():
            armed.fired.set_result(_Shot(slot, chat, at, still))

    def _answer(self, slot: int, request: RecordedRequest) -> Reply:
        now = time.monotonic()
        found = TAG.search(request.text)
        chat = found.group(1) if found else ""
        self._requests[chat] += 1
        if SYSTEM_PROMPT[:40] in request.system:
            self.summaries += 1
            self._fire("compaction", slot, chat, now + self.rng.uniform(0, SUMMARY_DELAY + 0.05))
            return Reply.slow(SUMMARY_DELAY, Reply.answer(NOTES))
        self._serving[chat] = slot
        self._fire("model_call", slot, chat, now + self.rng.uniform(0, FIRST_BYTE))
        question = request.last_user_text
        if not TAG.search(question):  # the newest user message is not a person's: note it, answer the newest that is
            self.odd_requests.append(question[:200])
            question = next(
                (
                    text
                    for text in (text_of(m) for m in reversed(request.messages) if m.get("role") == "user")
                    if TAG.search(text)
                ),
                "",
            )
            if not question:
                return Reply.answer("(no user message to answer)")
        last = request.messages[-1] if request.messages else {}
        if last.get("role") == "user" and "look it up" in question:
            return self._tool_call(slot, chat, request, now)
        text = reply_text(question)
        chunk = 80 if len(text) < 2000 else 500
        events = -(-len(text) // chunk)
        reply = Reply(text=text, chunk_size=chunk, event_delay=0.05, first_byte_delay=FIRST_BYTE)
        streaming = events * reply.event_delay
        self._fire("stream", slot, chat, now + FIRST_BYTE + self.rng.uniform(0.1, 0.9) * streaming)
        self._fire("commit", slot, chat, now + FIRST_BYTE + streaming + self.rng.uniform(-0.01, 0.05))
        return reply

    def _tool_call(self, slot: int, chat: str, request: RecordedRequest, now: float) -> Reply:
        """The model asks for the archive; a ``tool_call`` kill lands once the call is written, before the next
        request."""
        reply = Reply.tool_call(
            "session_search", {"query": f"chat {chat} deploys"}, call_id=f"call_{next(self._call_ids)}"
        )
        prompt = int(self.window * 0.6)
        reply.usage = {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}
        reply.first_byte_delay = FIRST_BYTE
        asked = self._requests[chat]

        def running() -> bool:
            written = request.first_byte_at
            return written is not None and time.monotonic() > written and self._requests[chat] == asked

        self._fire("tool_call", slot, chat, now + FIRST_BYTE + self.rng.uniform(0.0, TOOL_WINDOW), running)
        return reply

    def _on_answer(self, method: str, params: dict[str, str], status: int) -> None:
        """A Bot API answer about to go out: aims the kills at a reply's messages being accepted."""
        chat = params.get("chat_id", "")
        if status != 200 or method not in ("sendmessage", "editmessagetext") or chat not in self._serving:
            return
        chunks = reply_chunks(self.sent[chat][-1]) if self.sent.get(chat) else []
        text, now, slot = params.get("text", ""), time.monotonic(), self._serving[chat]
        if len(chunks) > 1 and text == chunks[0]:
            self._fire(
                "between_chunks",
                slot,
                chat,
                now + self.rng.uniform(0, 0.02),
                lambda: not self._accepted(chat, chunks[1]),
            )
        elif chunks and text == chunks[-1]:
            self._fire("reply", slot, chat, now + self.rng.uniform(0, 0.02))

    def _accepted(self, chat: str, text: str) -> bool:
        """Whether Telegram has accepted a message (or an edit) in ``chat`` that reads ``text``."""
        return any(
            attempt.status == 200 and attempt.params.get("text") == text
            for attempt in self._bot_of[chat].api.attempts
            if attempt.chat_id == chat
        )

    # ------------------------------------------------------------------ the processes

    async def _start(self, slot: int, llm: FakeLLMServer) -> None:
        before = await self.redis.lrange(f"{self.prefix}:workers", 0, -1)
        bots = [bot.spec(taken_in_here=index == slot) for index, bot in enumerate(self.bots)]
        process = await start_worker(
            self.redis_url,
            self.prefix,
            llm.openai_base_url,
            lock_ttl=self.lock_ttl,
            context_length=self.window,
            bots=bots,
            log_file=self.log_file,
        )
        self._processes[slot] = process
        deadline = time.monotonic() + 60
        while str(process.pid) not in await self.redis.lrange(f"{self.prefix}:workers", len(before), -1):
            if process.exitcode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {slot} did not start (exit {process.exitcode})")
            await asyncio.sleep(0.05)

    def _stop_all(self) -> None:
        for process in self._processes:
            if process is not None and process.is_alive():
                process.terminate()
        for process in self._processes:
            if process is None:
                continue
            process.join(timeout=20)
            if process.is_alive():
                process.kill()
                process.join()

    # ------------------------------------------------------------------ the load

    async def _user(self, chat: str) -> None:
        """One person: a message through the Bot API, its answer shown, a pause, the next, until the kills are done."""
        bot = self._bot_of[chat]
        for number in itertools.count():
            if self._stopping:
                return
            text = user_text(chat, number)
            self.sent[chat].append(text)
            bot.api.push(bot.update(chat, text))
            last = reply_chunks(text)[-1]
            while not any(shown.text == last for shown in bot.api.messages(chat)):
                await asyncio.sleep(0.05)
            await asyncio.sleep(self.rng.uniform(0, 0.3))

    async def _aim(self, kind: str) -> _Shot:
        """Arm a kill of ``kind`` and wait until it is due at a moment that is still that kind's."""
        while True:
            self._armed = _Armed(kind, asyncio.get_running_loop().create_future())
            shot = await asyncio.wait_for(self._armed.fired, timeout=120)
            await asyncio.sleep(max(0.0, shot.at - time.monotonic()))
            if shot.still():
                return shot
            self.let_go[kind] += 1

    async def _killer(self, llms: list[FakeLLMServer]) -> None:
        for number in range(self.kill_count):
            kind = KINDS[number % len(KINDS)]
            shot = await self._aim(kind)
            process = self._processes[shot.slot]
            assert process is not None
            self.peak_rss = max(self.peak_rss, rss_mb(process.pid))
            process.kill()  # SIGKILL: no release, no goodbye
            self.kills.append(Kill(kind, shot.slot, shot.chat, time.monotonic()))
            self.kinds[kind] += 1
            await asyncio.get_running_loop().run_in_executor(None, process.join)
            await self._start(shot.slot, llms[shot.slot])
            self._faulted()
            await asyncio.sleep(self.rng.uniform(0.2, 0.8))
        self._armed = None
        for number in range(self.restart_count):
            assert self.restart_redis is not None, "redis_restarts needs restart_redis"
            await asyncio.sleep(self.rng.uniform(1.0, 2.0))
            down = time.monotonic()
            started = await self.restart_redis(number % 2 == 1)
            restart = RedisRestart(number % 2 == 1, down, time.monotonic(), started_at=started or down)
            self.restarts.append(restart)
            self._faulted()
            try:
                await self._any_api().wait_until(lambda restart=restart: not self._not_back(restart.up_at), timeout=60)
            except TimeoutError:
                stuck = self._not_back(restart.up_at)
                raise AssertionError(
                    "chats never answered again after the Redis restart:\n" + await self._describe(stuck)
                ) from None

    def _any_api(self) -> FakeBotAPI:
        return self.bots[0].api

    def _faulted(self) -> None:
        if self.on_fault is not None:
            self.on_fault(len(self.kills) + len(self.restarts))

    async def run(self) -> KillReport:
        with tempfile.TemporaryDirectory(prefix="fgkill-") as logs:
            self.log_file = Path(logs) / "workers.log"
            report = await self._run()
            report.logs = self.log_file.read_text(encoding="utf-8") if self.log_file.exists() else ""
        report.odd_requests = self.odd_requests
        return report

    async def _open_bots(self, stack: contextlib.AsyncExitStack) -> None:
        """The two bots, each on its own fake Bot API, with the chats split between them."""
        for index, intake in enumerate(INTAKES):
            api = await stack.enter_async_context(
                FakeBotAPI(
                    f"{7001 + index}:{intake}-bot-token", username=f"foldgate_{intake}_bot", webhook_retry=WEBHOOK_RETRY
                )
            )
            api.on_answer = self._on_answer
            bot = TelegramBot(intake, api, self.chats[index :: len(INTAKES)])
            if intake == "webhook":
                bot.port, bot.secret = free_port(), f"soak-{self.rng.getrandbits(64):x}"
            self.bots.append(bot)
            self._bot_of.update((chat, bot) for chat in bot.chats)

    async def _run(self) -> KillReport:
        began = time.monotonic()
        async with contextlib.AsyncExitStack() as stack:
            await self._open_bots(stack)
            llms = [
                FakeLLMServer(handler=lambda request, slot=slot: self._answer(slot, request), context_limit=self.window)
                for slot in range(self.slots)
            ]
            for llm in llms:
                await llm.start()
            try:
                await asyncio.gather(*(self._start(slot, llm) for slot, llm in enumerate(llms)))
                users = [asyncio.create_task(self._user(chat)) for chat in self.chats]
                try:
                    await self._killer(llms)
                finally:
                    self._stopping = True
                    done, pending = await asyncio.wait(users, timeout=max(120.0, self._lock_seconds * 20))
                    for task in pending:
                        task.cancel()
                for process in self._processes:
                    if process is not None:
                        self.peak_rss = max(self.peak_rss, rss_mb(process.pid))
                if pending:
                    stuck = [chat for chat, task in zip(self.chats, users) if task in pending]
                    raise AssertionError(
                        f"{len(stuck)} chats were still waiting for an answer after the kills:\n"
                        + await self._describe(stuck)
                    )
                for task in done:
                    task.result()
                await self._settle()
            finally:
                self._stop_all()
                for llm in llms:
                    await llm.stop()
            self._measure_recovery()
            lost, extras, replies, once = self._compare()
            failed_posts = sum(1 for bot in self.bots for post in bot.api.webhook_deliveries if not post.delivered)
        broken = await self._check_sessions()
        return KillReport(
            self.kills,
            sum(len(texts) for texts in self.sent.values()),
            replies,
            lost,
            extras,
            broken,
            self.summaries,
            time.monotonic() - began,
            self.peak_rss,
            dict(self.kinds),
            self.restarts,
            answered_once=once,
            let_go=dict(self.let_go),
            intakes={bot.intake: len(bot.chats) for bot in self.bots},
            webhook_failed_posts=failed_posts,
        )

    async def _settle(self, timeout: float = 30.0) -> None:
        """Wait until every answer is recorded (the inboxes empty) and every update confirmed to Telegram."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            heads = [await self.inbox.head(f"tg:{chat}") for chat in self.chats]
            if all(head is None for head in heads) and all(bot.api.pending_updates == 0 for bot in self.bots):
                return
            await asyncio.sleep(0.1)

    # ------------------------------------------------------------------ what it left

    async def _describe(self, chats: list[str]) -> str:
        """Where each of ``chats`` stands: its inbox, lock and lease, its last Telegram calls, what the workers
        logged."""
        for process in self._processes:  # each logs where its tasks wait (tests/fakes/worker_process.py)
            if process is not None and process.is_alive():
                os.kill(process.pid, signal.SIGUSR1)
        await asyncio.sleep(0.5)
        now, wall = time.monotonic(), time.time()
        logs = (
            self.log_file.read_text(encoding="utf-8").splitlines() if self.log_file and self.log_file.exists() else []
        )
        lines = [
            f"{bot.intake} bot: {bot.api.pending_updates} updates not confirmed; last webhook posts "
            f"{[(post.status, post.error) for post in bot.api.webhook_deliveries[-3:]]}"
            for bot in self.bots
        ]
        for chat in chats:
            key = f"tg:{chat}"
            base = f"{self.prefix}:{{{key}}}"
            lease = await self.redis.zscore(self.inbox.ready_key, key)
            calls = [
                f"{attempt.method} {attempt.status} {now - attempt.at:.1f}s ago"
                for attempt in self._bot_of[chat].api.attempts
                if attempt.chat_id == chat
            ][-3:]
            lines += [
                f"{chat}: {await self.inbox.pending(key)} waiting; "
                f"lock ttl {await self.redis.pttl(f'{base}:lock')} ms; "
                f"lease {'none' if lease is None else f'{lease - wall:+.1f}s'}; last calls {calls}",
                *(f"    {line}" for line in [line for line in logs if key in line][-8:]),
            ]
        lines += [line for line in logs if "waits at" in line and "chat-" in line]
        return "\n".join(lines)

    def _first_call_after(self, chat: str, moment: float) -> float | None:
        """When Telegram next accepted a message, draft or edit in ``chat`` after ``moment``."""
        later = [
            attempt.at
            for attempt in self._bot_of[chat].api.attempts
            if attempt.chat_id == chat and attempt.status == 200 and attempt.at > moment
        ]
        return min(later) if later else None

    def _not_back(self, moment: float) -> list[str]:
        return [chat for chat in self.chats if self._first_call_after(chat, moment) is None]

    def _first_answer_after(self, moment: float) -> float | None:
        """When Telegram first accepted, after ``moment``, a message or edit that is a whole reply message."""
        complete = {chunk for texts in self.sent.values() for text in texts for chunk in reply_chunks(text)}
        accepted = [
            attempt.at
            for bot in self.bots
            for attempt in bot.api.attempts
            if attempt.status == 200
            and attempt.at > moment
            and attempt.params.get("text") in complete
            and attempt.method in ("sendMessage", "editMessageText")
        ]
        return min(accepted) if accepted else None

    def _measure_recovery(self) -> None:
        for kill in self.kills:
            answered = self._first_call_after(kill.chat, kill.at)
            kill.recovered_after = None if answered is None else answered - kill.at
        for restart in self.restarts:
            first = self._first_answer_after(restart.started_at)
            restart.first_answer_after = None if first is None else first - restart.started_at
            back = {chat: self._first_call_after(chat, restart.up_at) for chat in self.chats}
            if all(moment is not None for moment in back.values()):
                restart.every_chat_back_after = max(back.values()) - restart.up_at  # type: ignore[type-var]
                restart.private_back_after = (
                    max(
                        moment
                        for chat, moment in back.items()  # type: ignore[type-var]
                        if not chat.startswith("-")
                    )
                    - restart.up_at
                )
                restart.longest_flood_wait = max(
                    (
                        float(limited.retry_after)
                        for bot in self.bots
                        for limited in bot.api.rate_limited
                        if limited.chat_id in back and restart.up_at <= limited.at <= back[limited.chat_id]
                    ),  # type: ignore[operator]
                    default=0.0,
                )

    def _kill_offset(self, accepted: float) -> float | None:
        offsets = [kill.at - accepted for kill in self.kills]
        return min(offsets, key=abs) if offsets else None

    def _compare(self) -> tuple[list[str], list[Extra], int, int]:
        """What each chat shows against what its user messages should have got: lost, extra, counted."""
        lost: list[str] = []
        extras: list[Extra] = []
        replies = once = 0
        for chat in self.chats:
            answers = [reply_chunks(text) for text in self.sent[chat]]
            expected = [chunk for chunks in answers for chunk in chunks]
            replies += len(expected)
            matched: dict[str, float] = {}
            position = 0
            for shown in self._bot_of[chat].api.messages(chat):
                if position < len(expected) and shown.text == expected[position]:
                    matched[shown.text] = shown.sent_at
                    position += 1
                elif shown.text in matched:
                    extras.append(Extra(chat, "duplicate", shown.text, self._kill_offset(matched[shown.text])))
                else:
                    extras.append(Extra(chat, "left behind", shown.text, self._kill_offset(shown.sent_at)))
            lost += [f"{chat}: {text[:60]}…" for text in expected[position:]]
            twice = {extra.text for extra in extras if extra.chat == chat and extra.what == "duplicate"}
            once += sum(1 for chunks in answers if all(chunk in matched and chunk not in twice for chunk in chunks))
        return lost, extras, replies, once

    async def _check_sessions(self) -> list[str]:
        store = SessionStore(self.redis, self.prefix)
        broken: list[str] = []
        for chat in self.chats:
            key = f"tg:{chat}"
            if await self.inbox.head(key) is not None:
                broken.append(f"{chat}: the inbox still holds a message")
            sid = await store.stored_session(key)
            if sid is None:
                broken.append(f"{chat}: no session")
                continue
            active = await store.active(key, sid)
            stored = {str(m["_id"]): m for m in [*await store.archive(key, sid), *active]}
            users = [
                TAG.search(text_of(m))
                for _, m in sorted(stored.items(), key=lambda item: int(item[0]))
                if is_real_user_message(m)
            ]
            numbers = [int(found.group(2)) for found in users if found]
            if numbers != list(range(len(self.sent[chat]))):
                broken.append(f"{chat}: stored user messages {numbers}, sent 0..{len(self.sent[chat]) - 1}")
            repair = repair_transcript(active)
            if repair.changed:
                broken.append(f"{chat}: the live transcript needs repair: {repair.describe()}")
            if await store.quarantined(key):
                broken.append(f"{chat}: messages quarantined")
        for bot in self.bots:
            if bot.api.pending_updates:
                broken.append(f"{bot.intake} bot: {bot.api.pending_updates} updates never confirmed")
        return broken


def summary_lines(report: KillReport) -> list[str]:
    """The figures a run gives, one line each."""
    kinds = ", ".join(f"{kind} {count}" for kind, count in report.kinds.items())
    duplicates = sum(1 for extra in report.extras if extra.what == "duplicate")
    left = len(report.extras) - duplicates
    intakes = ", ".join(f"{count} chats by {intake}" for intake, count in report.intakes.items())
    let_go = ", ".join(f"{kind} {count}" for kind, count in report.let_go.items() if count)
    lines = [
        f"{len(report.kills)} kills ({kinds}) over {report.user_messages} user messages sent through the Bot API "
        f"({intakes}), {report.reply_messages} reply messages, {report.summaries} summaries, in {report.seconds:.0f} s",
        f"answered exactly once {report.answered_once} of {report.user_messages}; lost {len(report.lost)}; "
        f"broken sessions {len(report.broken_sessions)}; model requests not ending with a person's message "
        f"{len(report.odd_requests)}",
        f"sent twice {duplicates}, previews left behind {left}; widest window {report.widest_window * 1000:.0f} ms",
        f"webhook posts without a 2xx, posted again: {report.webhook_failed_posts}; kills let go as their moment "
        f"had passed: {let_go or 'none'}",
    ]
    for label, group in (("a private chat", False), ("a group", True)):
        times = sorted(
            kill.recovered_after
            for kill in report.kills
            if kill.recovered_after is not None and kill.chat.startswith("-") == group
        )
        if times:
            lines.append(
                f"{label} taken over after a kill: median {times[len(times) // 2]:.1f} s, "
                f"slowest {times[-1]:.1f} s ({len(times)} kills)"
            )
    lines.append(
        f"peak worker RSS {report.peak_rss_mb:.0f} MB; worker logs: {report.logs.count(chr(10))} lines, "
        f"{report.logs.count('Traceback')} tracebacks"
    )
    lines += [
        f"Redis {'SIGKILL' if restart.hard else 'SIGTERM'}: down {restart.up_at - restart.down_at:.2f} s; "
        f"first answered message {_seconds(restart.first_answer_after, 2)} after it was started again; "
        f"private chats answered again within {_seconds(restart.private_back_after)}, all chats within "
        f"{_seconds(restart.every_chat_back_after)}"
        + (f" (Telegram asked a chat to wait {restart.longest_flood_wait:.0f} s)" if restart.longest_flood_wait else "")
        for restart in report.redis_restarts
    ]
    return lines


def _seconds(value: float | None, digits: int = 1) -> str:
    return "never" if value is None else f"{value:.{digits}f} s"
