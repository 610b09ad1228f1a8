"""A gateway serving the OpenAI-compatible API for tests: real Redis, the bots ``foldgate run`` opens (through
the same fleet and web serving), a fake provider behind them, and the API on a loopback port the system picks.

Clients are OpenAI's own SDK, pointed at :attr:`ApiGateway.base_url` with one of :data:`KEYS`.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import openai

from gateway.bots import Fleet
from gateway.config import Settings
from gateway.run.web_serving import serve_web
from gateway.web.server import WebServers

#: The keys the test gateways take, by name (each a person ``api:<name>``).
KEYS = {"alice": "alice-key-0123456789abcdefghij", "bob": "bob-key-0123456789abcdefghijkl"}


def api_settings(
    redis_url: str, prefix: str, base_url: str, *, context_length: int = 32_000, **sections: Any
) -> Settings:
    """Settings for a custom OpenAI-compatible model at ``base_url`` and the API on a port of the system's
    choosing, taking :data:`KEYS`; other sections pass through as ``config.yaml`` would give them."""
    gateway = sections.pop("gateway", {})
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={"name": "test-model", "provider": "custom", "base_url": base_url, "context_length": context_length},
        platforms={
            "local": {"enabled": True, "web": True, "port": 0},
            "api": {"enabled": True, "port": 0, "keys": [{"name": n, "key": k} for n, k in KEYS.items()]},
        },
        gateway=gateway,
        **sections,
    )


@dataclass
class ApiGateway:
    fleet: Fleet
    servers: WebServers
    #: Every client handed out, closed with the gateway: one left to the garbage collector closes its connections
    #: on a loop that has ended, and the error it logs lands in whichever test runs then.
    clients: list[openai.OpenAI | openai.AsyncOpenAI] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.servers.addresses["OpenAI-compatible API"]

    def client(self, key: str = "alice", **options: Any) -> openai.OpenAI:
        """OpenAI's synchronous client with key ``key`` (a name of :data:`KEYS`, else the key itself); run its
        calls in a thread so the loop serving the gateway goes on."""
        client = openai.OpenAI(base_url=self.base_url, api_key=KEYS.get(key, key), max_retries=0, **options)
        self.clients.append(client)
        return client

    def async_client(self, key: str = "alice", **options: Any) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=KEYS.get(key, key), max_retries=0, **options)
        self.clients.append(client)
        return client

    async def close_clients(self) -> None:
        for client in self.clients:
            if isinstance(client, openai.AsyncOpenAI):
                await client.close()
            else:
                client.close()


@contextlib.asynccontextmanager
async def api_gateway(settings: Settings) -> AsyncIterator[ApiGateway]:
    """Started bots with their servers, the API among them, as ``foldgate run`` starts them."""
    fleet = await Fleet.open(settings, io.StringIO(), exclusive=False, verify=False)
    try:
        servers = await serve_web(fleet, io.StringIO())
        served = ApiGateway(fleet, servers)
        try:
            yield served
        finally:
            await served.close_clients()
            await servers.close()
    finally:
        await fleet.close(grace_seconds=0)
