"""An https image is fetched only from a public address unless ``platforms.api.fetch_private_urls`` is true: a
loopback URL is 400 naming the part and the setting as shipped, and is fetched with the setting on."""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator

import openai
import pytest
from aiohttp import web
from PIL import Image

from gateway.api import public_fetch
from gateway.api.public_fetch import PrivateAddress, PublicOnlyBackend, is_public, public_addresses
from gateway.config.api import ApiSettings
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.tls import TestPKI


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (30, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


@contextlib.asynccontextmanager
async def image_server(pki: TestPKI) -> AsyncIterator[str]:
    """An https server on loopback serving one image; the URL of the image."""

    async def image(request: web.Request) -> web.Response:
        return web.Response(body=png(), content_type="image/png")

    app = web.Application()
    app.router.add_get("/cat.png", image)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=pki.server_context)
    await site.start()
    try:
        port = runner.addresses[0][1]
        yield f"https://localhost:{port}/cat.png"
    finally:
        await runner.cleanup()


def asking(url: str) -> list[dict[str, object]]:
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "224.0.0.1", "0.0.0.0", "240.0.0.1"]
    + ["100.64.0.1", "::1", "fe80::1%eth0", "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::"],
)
def test_internal_addresses_are_not_public(address):
    assert not is_public(address)


@pytest.mark.parametrize("address", ["93.184.215.14", "1.1.1.1", "2606:4700:4700::1111"])
def test_global_addresses_are_public(address):
    assert is_public(address)


async def test_a_name_resolving_to_loopback_is_refused_before_any_connection():
    with pytest.raises(PrivateAddress) as refused:
        await public_addresses("localhost", 443)
    assert "platforms.api.fetch_private_urls: true" in str(refused.value)


class Dialler:
    """Stands for the network: records the address each connection dials."""

    def __init__(self) -> None:
        self.dialled: list[str] = []

    async def connect_tcp(self, host: str, port: int, **options: object) -> object:
        self.dialled.append(host)
        return object()


async def test_the_connection_dials_the_address_that_was_checked(monkeypatch):
    """The name is resolved once, by the check, and that address is dialled: a resolver answering differently a
    moment later (DNS rebinding) is never asked."""
    checked: list[str] = []

    async def resolved_once(host: str, port: int) -> list[str]:
        checked.append(host)
        return ["93.184.215.14"]

    monkeypatch.setattr(public_fetch, "public_addresses", resolved_once)
    backend = PublicOnlyBackend()
    dialler = Dialler()
    backend._inner = dialler  # type: ignore[assignment]
    await backend.connect_tcp("images.example", 443)
    assert (checked, dialler.dialled) == (["images.example"], ["93.184.215.14"])


def test_private_urls_are_not_fetched_as_shipped():
    assert ApiSettings().fetch_private_urls is False


async def test_a_loopback_image_is_refused_as_shipped_and_fetched_with_the_setting(
    redis_url, key_prefix, pki, monkeypatch
):
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))  # the download trusts the test CA
    async with FakeLLMServer(default=Reply.answer("A green square.")) as provider, image_server(pki) as url:
        shipped = api_settings(redis_url, key_prefix, provider.openai_base_url)
        async with api_gateway(shipped) as api:
            with pytest.raises(openai.BadRequestError) as refused:
                await api.async_client().chat.completions.create(model="m", messages=asking(url))
        allowed = api_settings(redis_url, key_prefix, provider.openai_base_url)
        allowed.platforms.api.fetch_private_urls = True
        async with api_gateway(allowed) as api:
            answer = await api.async_client().chat.completions.create(model="m", messages=asking(url))
        turns = [r for r in provider.requests if r.messages and not is_summary_request(r)]
    assert refused.value.body["param"] == "messages[0].content[1]"
    assert "platforms.api.fetch_private_urls: true" in refused.value.body["message"]
    assert answer.choices[0].message.content == "A green square."
    assert len(turns) == 1 and any(part["type"] == "image_url" for part in turns[0].messages[-1]["content"])
