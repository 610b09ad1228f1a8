"""One gateway worker process for multi-process tests: ``python -m tests.fakes.worker_process …``.

It runs a real GatewayRunner against the given Redis and model endpoint. Its platform is
Redis itself: every reply it sends is pushed to ``<prefix>:sent`` as JSON, so the test sees
what every process delivered, in order, and can kill a process at any moment. With
``--telegram-api`` it delivers to that (fake) Bot API instead, streaming replies through the
send budget every process shares, as ``foldgate run`` does; the test puts the messages in
the Redis inbox itself (one bot token cannot be polled by two processes).

With ``--bots`` (a JSON list of ``{"token", "api", "chats", "intake", "port", "secret"}``) it
talks to several bots: a chat's replies go out as the bot that chat talks to, and the one bot
whose ``intake`` is ``"polling"`` or ``"webhook"`` (on ``127.0.0.1:<port>``, registered with
setWebhook) has its updates taken in by this process through the real Telegram adapter. A
token has either a webhook or getUpdates, never both, so a polling process and a webhook
process sharing one Redis serve a bot each, and both answer either bot's chats.

The gateway is opened as ``foldgate run`` opens it (:func:`gateway.run.assembly.open_on`): every
``gateway`` setting is the shipped default unless ``--gateway`` (a JSON object of that section's
keys, as ``config.yaml`` writes them) names it, so a test that runs with a 2 s lock or without
coalescing says so on the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import signal
from typing import Any

from redis.asyncio import Redis

from gateway.config import TelegramSettings
from gateway.platforms.base import Intake, Journal, PlatformAdapter, SendGate, Surface
from gateway.platforms.telegram import TELEGRAM_MESSAGE_LIMIT, TelegramAdapter
from gateway.run import assembly
from gateway.run.assembly import open_on
from tests.fakes.dying_channel import DiesAfter
from tests.fakes.gateway import make_settings


class ChatRouter(PlatformAdapter):
    """Telegram with several bots in one process: each call goes to the adapter of the bot the chat talks to."""

    platform = "tg"
    max_message_length = TELEGRAM_MESSAGE_LIMIT

    def __init__(self, bots: list[TelegramAdapter], chats: dict[str, int], intake: TelegramAdapter | None) -> None:
        self.bots = bots
        self.chats = chats
        self.intake = intake

    def of(self, chat_id: str) -> TelegramAdapter:
        return self.bots[self.chats[chat_id]]

    async def start(self, intake: Intake) -> None:
        if self.intake is not None:
            await self.intake.start(intake)

    async def stop(self) -> None:
        for bot in self.bots:
            await bot.stop()

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        await self.of(chat_id).send(chat_id, text, reply_to=reply_to)

    def reply_surface(
        self, chat_id: str, gate: SendGate, *, reply_to: str | None = None, journal: Journal | None = None
    ) -> Surface:
        return self.of(chat_id).reply_surface(chat_id, gate, reply_to=reply_to, journal=journal)

    async def typing(self, chat_id: str) -> None:
        await self.of(chat_id).typing(chat_id)


#: Where a webhook process serves Telegram's POSTs.
WEBHOOK_PATH = "/telegram/webhook"


def telegram_bots(spec: str) -> ChatRouter:
    """The bots ``--bots`` describes, the intake among them built in its mode (see the module docstring)."""
    bots: list[TelegramAdapter] = []
    chats: dict[str, int] = {}
    intake: TelegramAdapter | None = None
    for index, bot in enumerate(json.loads(spec)):
        webhook: dict[str, Any] = {}
        if bot.get("intake") == "webhook":
            webhook = {
                "mode": "webhook",
                "listen_port": int(bot["port"]),
                "webhook_secret": bot["secret"],
                "webhook_path": WEBHOOK_PATH,
            }
        telegram = TelegramSettings(token=bot["token"], api_server=bot["api"], **webhook)
        if webhook:
            # The fake Bot API posts updates over plain HTTP to loopback, an address the configuration rightly
            # refuses (Telegram itself posts over HTTPS only): the one value set past validation.
            telegram = telegram.model_copy(update={"webhook_url": f"http://127.0.0.1:{bot['port']}{WEBHOOK_PATH}"})
        adapter = TelegramAdapter(telegram, typing_interval=0, preview_interval=0.5, poll_timeout=10)
        if bot.get("intake") in ("polling", "webhook"):
            intake = adapter
        bots.append(adapter)
        chats.update((str(chat), index) for chat in bot["chats"])
    return ChatRouter(bots, chats, intake)


class RedisReplyLog(PlatformAdapter):
    platform = "local"
    max_message_length = 1_000_000

    def __init__(self, redis: Redis, key: str) -> None:
        self.redis = redis
        self.key = key

    async def start(self, intake: Intake) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        await self.redis.rpush(self.key, json.dumps({"chat": chat_id, "text": text, "pid": os.getpid()}))


async def main(args: argparse.Namespace) -> None:
    if args.log_file:
        from gateway.run.logging_setup import LOG_FORMAT

        logging.basicConfig(filename=args.log_file, level=logging.INFO, format=f"%(process)d {LOG_FORMAT}")
    redis = Redis.from_url(args.redis, decode_responses=True)
    sections: dict[str, Any] = {"gateway": json.loads(args.gateway)} if args.gateway else {}
    if args.access:
        sections["access"] = json.loads(args.access)
    if args.auxiliary:
        sections["auxiliary"] = json.loads(args.auxiliary)
    settings = make_settings(
        args.redis, args.prefix, args.base_url, context_length=args.context_length, model=args.model, **sections
    )
    adapters: dict[str, PlatformAdapter] = {"local": RedisReplyLog(redis, f"{args.prefix}:sent")}
    if args.die_after_commit_commands is not None:
        dying_at_commit(redis, args.prefix, args.die_after_commit_commands)
    if args.telegram_api:
        telegram = TelegramSettings(token=args.telegram_token, api_server=args.telegram_api)
        adapters["tg"] = TelegramAdapter(telegram, typing_interval=0, preview_interval=0.5)
    if args.bots:
        adapters["tg"] = telegram_bots(args.bots)
    gateway = await open_on(redis, settings, adapters)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, log_tasks)
    if args.bots:  # the one adapter that takes updates in (polling or the webhook), as ``foldgate run`` starts it
        await adapters["tg"].start(gateway.runner.intake)
    await redis.rpush(f"{args.prefix}:workers", str(os.getpid()))
    await stop.wait()
    await gateway.close()  # the runner, every adapter, the agents and the channel; the connection is ours
    await redis.aclose()


def dying_at_commit(redis: Redis, prefix: str, steps: int) -> None:
    """This process dies by SIGKILL before the command after ``steps`` of a compaction commit's (a negative number:
    it never does, and counts them in ``<prefix>:commit_commands`` instead)."""
    real = assembly.channel_for

    async def counted(sent: int) -> None:
        await redis.set(f"{prefix}:commit_commands", sent)

    def dying(client: Any) -> DiesAfter:
        kill = functools.partial(os.kill, os.getpid(), signal.SIGKILL)
        return DiesAfter(real(client), steps if steps >= 0 else None, kill, counted if steps < 0 else None)

    assembly.channel_for = dying  # type: ignore[assignment]


def log_tasks() -> None:
    """SIGUSR1: log where every task of the process waits (for a test that finds a chat stuck).

    ``Task.get_stack`` shows only a suspended task's outermost frame; following ``cr_await``
    down the chain of awaited coroutines shows the line that is actually waiting.
    """
    for task in asyncio.all_tasks():
        where, awaited = [], task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:
                where.append(type(awaited).__name__)
                break
            where.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        logging.getLogger("worker").warning("task %s waits at %s", task.get_name(), " -> ".join(where) or "(no frame)")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--context-length", type=int, default=64_000)
    parser.add_argument(
        "--gateway",
        default="",
        help='JSON: keys of the gateway section to run with, e.g. {"lock_ttl_seconds": 2};'
        " the rest are the shipped defaults",
    )
    parser.add_argument("--telegram-api", default="")
    parser.add_argument("--telegram-token", default="")
    parser.add_argument("--bots", default="", help="JSON: the Telegram bots to answer as, one taken in here")
    parser.add_argument("--log-file", default="", help="where the process logs (INFO and up); default: stderr")
    parser.add_argument("--model", default="test-model", help="the model's name (a priced one meters dollars)")
    parser.add_argument("--access", default="", help="JSON: the access section (budgets, roles)")
    parser.add_argument("--auxiliary", default="", help="JSON: the auxiliary section (the summarizer)")
    parser.add_argument(
        "--die-after-commit-commands",
        type=int,
        default=None,
        help="SIGKILL this process before the command after N of a compaction commit's (-1: count them)",
    )
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> None:
    """The process's whole life; a target for a forked process, whose imports are already done."""
    asyncio.run(main(parse(argv)))


if __name__ == "__main__":
    run()
