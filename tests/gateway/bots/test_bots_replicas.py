"""Two ``foldgate run`` processes serving the same three bots on one Redis: each Telegram token is polled by
one process at a time (no 409 reaches either), a SIGKILLed poller's tokens move to the other within seconds
and nothing sent meanwhile is lost; SIGHUP and ``foldgate reload`` re-read the file, refusing an invalid one.

"Within seconds" is the dead poller's lease, which Redis expires by itself within its span; the test does not
time the takeover (a busy machine takes what it takes), its waits only end a test that hangs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from gateway.config.files import dump_yaml
from gateway.store.leases import LEASE_SECONDS
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for

#: Seconds before a wait is given up as a hang: two gateway processes on a busy machine may take many seconds to
#: start, answer or reload, and a wait that ends on its event costs nothing more when they are quick.
PATIENCE = 90.0
TOKENS = {"alpha": "710001:alpha-token", "beta": "710002:beta-token", "gamma": "710003:gamma-token"}
PERSON = 42


def answer(request: RecordedRequest) -> Reply:
    return Reply.answer(f"{request.model}: {request.last_user_text}")


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(handler=answer) as server:
        yield server


def write_config(
    path: Path,
    redis_url: str,
    prefix: str,
    llm: FakeLLMServer,
    apis: dict[str, FakeBotAPI],
    names: list[str],
    **extra: Any,
) -> None:
    bots = [
        {
            "name": name,
            "model": {"name": f"{name}-model"},
            "platforms": {"telegram": {"enabled": True, "token": TOKENS[name], "api_server": apis[name].base_url}},
        }
        for name in names
    ]
    config = {
        "redis": {"url": redis_url, "key_prefix": prefix},
        "model": {"name": "shared", "provider": "custom", "base_url": llm.openai_base_url, "context_length": 64_000},
        "platforms": {"local": {"enabled": False}},
        "gateway": {"lock_ttl_seconds": 3},
        "delivery": {"stream_replies": False},
        "bots": bots,
        **extra,
    }
    path.write_text(dump_yaml(config), encoding="utf-8")


def environment(tmp_path: Path, config: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FOLDGATE_", "REDIS", "TELEGRAM"))}
    env.update(FOLDGATE_HOME=str(tmp_path / "home"), FOLDGATE_CONFIG=str(config), PYTHONUNBUFFERED="1")
    return env


def start(tmp_path: Path, config: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "run"],
        env=environment(tmp_path, config),
        stdin=subprocess.DEVNULL,
        stdout=open(tmp_path / f"{name}.out", "wb"),
        stderr=open(tmp_path / f"{name}.err", "wb"),
    )


async def test_two_processes_poll_each_token_once_and_a_killed_pollers_tokens_move(
    redis, redis_url, key_prefix, tmp_path, llm
):
    async with (
        FakeBotAPI(TOKENS["alpha"]) as alpha,
        FakeBotAPI(TOKENS["beta"]) as beta,
        FakeBotAPI(TOKENS["gamma"]) as gamma,
    ):
        apis = {"alpha": alpha, "beta": beta, "gamma": gamma}
        config = tmp_path / "config.yaml"
        write_config(config, redis_url, key_prefix, llm, apis, list(apis))
        processes = [start(tmp_path, config, "first"), start(tmp_path, config, "second")]
        leases = {name: f"{key_prefix}:lease:poll:tg:{token.split(':')[0]}" for name, token in TOKENS.items()}

        async def holders() -> dict[str, int]:
            values = {name: await redis.get(key) for name, key in leases.items()}
            return {name: int(value.split(":")[1]) for name, value in values.items() if value}

        try:
            await wait_for(
                lambda: all(len(api.get_updates_calls) for api in apis.values()),
                timeout=PATIENCE,
                what="every token polled",
            )
            for name, api in apis.items():
                api.push(api.private_message(PERSON, f"first to {name}"))
            for name, api in apis.items():
                await api.wait_until(lambda api=api: len(api.sent) == 1, timeout=PATIENCE)
                assert [sent.text for sent in api.sent] == [f"{name}-model: first to {name}"]

            async def answered() -> (
                bool
            ):  # every answer recorded (one killed between its send and its record is resent)
                lengths = [await redis.llen(f"{key_prefix}.{name}:{{tg:{PERSON}}}:inbox") for name in apis]
                return not any(lengths)

            await wait_for(answered, timeout=PATIENCE, what="every inbox emptied")
            held = await holders()
            assert set(held) == set(apis) and set(held.values()) <= {process.pid for process in processes}

            # the process polling alpha dies without a word; what is sent meanwhile waits at Telegram
            victim = next(process for process in processes if process.pid == held["alpha"])
            survivor = next(process for process in processes if process is not victim)
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            # never given up, yet not kept for ever: Redis ends it within its span (-2: already gone)
            left = await redis.pttl(leases["alpha"])
            assert left == -2 or 0 < left <= LEASE_SECONDS * 1000, left
            for name, api in apis.items():
                api.push(api.private_message(PERSON, f"second to {name}"))
            for name, api in apis.items():
                await api.wait_until(lambda api=api: len(api.sent) == 2, timeout=PATIENCE)
                assert [sent.text for sent in api.sent][1] == f"{name}-model: second to {name}"
            assert set((await holders()).values()) == {survivor.pid}
            assert all(api.conflicts_seen == 0 for api in apis.values())  # no poller was ever told 409

            # an invalid file is refused in one line; the bots go on as they were
            config.write_text(
                config.read_text(encoding="utf-8").replace("context_length: 64000", "context_length: 12"),
                encoding="utf-8",
            )
            survivor.send_signal(signal.SIGHUP)
            err = tmp_path / "second.err" if survivor is processes[1] else tmp_path / "first.err"
            out = err.with_suffix(".out")
            refused = await wait_for(
                lambda: [line for line in err.read_text(encoding="utf-8").splitlines() if "reload refused" in line],
                timeout=PATIENCE,
                what="the refusal",
            )
            assert "model.context_length" in refused[0]

            # `foldgate reload` with gamma removed: the others untouched, gamma's lease given up at once
            write_config(config, redis_url, key_prefix, llm, apis, ["alpha", "beta"])
            reloaded = subprocess.run(
                [sys.executable, "-m", "gateway.cli", "reload"],
                env=environment(tmp_path, config),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert reloaded.returncode == 0 and f"({survivor.pid})" in reloaded.stdout
            await wait_for(
                lambda: "bot gamma stopped" in out.read_text(encoding="utf-8"), timeout=PATIENCE, what="the reload"
            )

            async def gamma_free() -> bool:
                return not await redis.exists(leases["gamma"])

            await wait_for(gamma_free, timeout=PATIENCE, what="gamma's lease given up")
            polls_of_gamma = len(gamma.get_updates_calls)
            gamma.push(gamma.private_message(PERSON, "third to gamma"))
            alpha.push(alpha.private_message(PERSON, "third to alpha"))
            await alpha.wait_until(lambda: len(alpha.sent) == 3, timeout=PATIENCE)
            # the survivor answers (alpha, sent after gamma's message) but never asked for gamma's updates again:
            # the message is kept at Telegram for when gamma returns
            assert len(gamma.get_updates_calls) == polls_of_gamma
            assert len(gamma.sent) == 2 and gamma.pending_updates == 1
        finally:
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
