"""A gateway serving its web pages for tests: real Redis, the web chat and the operator view on loopback; and the
chat page opened as a browser opens it (:func:`open_chat`)."""

from __future__ import annotations

import contextlib
import io
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.bots import Fleet
from gateway.config import Settings
from gateway.run.assembly import RunningGateway
from gateway.run.web_serving import serve_web
from gateway.web.server import WebServers

#: The operator token the test gateways use.
ADMIN_TOKEN = "operator-token-for-tests-0123456789"


def free_port() -> int:
    """A port nothing listens on now (the operator's server needs a number: 0 means "off" there)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def web_settings(
    redis_url: str,
    prefix: str,
    base_url: str,
    *,
    context_length: int = 32_000,
    admin_token: str | None = ADMIN_TOKEN,
    chat_host: str = "127.0.0.1",
    **sections: Any,
) -> Settings:
    """Settings for a custom OpenAI-compatible model at ``base_url``, the web chat and the operator view."""
    gateway = {
        "metrics_port": free_port(),
        "admin_token": admin_token,
        "lock_ttl_seconds": 5,
        **sections.pop("gateway", {}),
    }
    if admin_token is None:
        gateway.pop("admin_token")
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={"name": "test-model", "provider": "custom", "base_url": base_url, "context_length": context_length},
        platforms={"local": {"enabled": True, "web": True, "host": chat_host, "port": 0}},
        gateway=gateway,
        **sections,
    )


@dataclass
class WebGateway:
    fleet: Fleet
    servers: WebServers

    @property
    def gateway(self) -> RunningGateway:
        """The gateway of the bot with the web chat (the first bot)."""
        gateway = self.fleet.front_gateway
        assert gateway is not None
        return gateway

    @property
    def chat_url(self) -> str:
        return self.servers.addresses["web chat"].rstrip("/")

    @property
    def operator_url(self) -> str:
        return self.servers.addresses["operator view"].removesuffix("/admin")


@contextlib.asynccontextmanager
async def web_gateway(settings: Settings, *, verify: bool = False) -> AsyncIterator[WebGateway]:
    """Started bots with their web servers, as ``foldgate run`` starts them (platforms other than the web
    chat are not checked unless ``verify``: tests give them fake addresses; a bot whose check fails is failed)."""
    fleet = await Fleet.open(settings, io.StringIO(), exclusive=False, verify=verify)
    try:
        servers = await serve_web(fleet, io.StringIO())
        try:
            yield WebGateway(fleet, servers)
        finally:
            await servers.close()
    finally:
        await fleet.close(grace_seconds=0)


def nonce_of(page: str) -> str:
    """The nonce of the chat page's form."""
    return re.search(r'name="nonce" value="([A-Za-z0-9_-]+)"', page).group(1)


async def open_chat(client: httpx.AsyncClient) -> str:
    """Load the chat page as a browser does (which gives it its chat cookie); the form's nonce."""
    page = await client.get("/")
    assert page.status_code == 200
    return nonce_of(page.text)
