"""A gateway serving the OpenAI-compatible API as an OS process of its own: ``python -m tests.fakes.api_process …``.

It is :func:`tests.fakes.api_gateway.api_gateway` (the bots ``foldgate run`` opens, the API among their servers)
with :func:`tests.fakes.api_gateway.api_settings`, in another interpreter: so a test can show that a session lives
in Redis, not in the process that served its last request. Once it serves, it pushes its API's base URL to
``<prefix>:api-servers``; SIGTERM closes it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys

from redis.asyncio import Redis

from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.workers import ROOT


def servers_key(prefix: str) -> str:
    """The Redis list the processes under ``prefix`` announce their API's base URL in, as each starts serving."""
    return f"{prefix}:api-servers"


def start_api_process(redis_url: str, prefix: str, base_url: str) -> subprocess.Popen:
    """An API-serving gateway process on ``redis_url`` and ``prefix``, its model the provider at ``base_url``;
    stop it with :func:`tests.fakes.workers.stop`."""
    argv = [sys.executable, "-m", "tests.fakes.api_process", "--redis", redis_url, "--prefix", prefix]
    argv += ["--base-url", base_url]
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with api_gateway(api_settings(args.redis, args.prefix, args.base_url)) as api:
        redis = Redis.from_url(args.redis, decode_responses=True)
        try:
            await redis.rpush(servers_key(args.prefix), api.base_url)
        finally:
            await redis.aclose()
        await stop.wait()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--base-url", required=True, help="the fake provider's OpenAI-compatible base URL")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
