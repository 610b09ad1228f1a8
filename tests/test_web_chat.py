"""The web chat over real HTTP: a browser's chat, its streamed replies, its search, and what it may not do."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import httpx
import pytest

from gateway.web.live import LiveHub
from gateway.redis_channel import PipelinedConnection
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.web import web_gateway, web_settings

ANSWER = "The login timeout fix is in PR 4711, merged after the overnight run went green."


def nonce_of(page: str) -> str:
    return re.search(r'name="nonce" value="([A-Za-z0-9_-]+)"', page).group(1)


async def open_chat(client: httpx.AsyncClient) -> str:
    """Load the chat page as a browser does (which gives it its chat cookie); the form's nonce."""
    page = await client.get("/")
    assert page.status_code == 200
    return nonce_of(page.text)


async def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_message_gets_a_streamed_reply_over_the_live_socket(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer(ANSWER, chunk_size=6, event_delay=0.03)) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                nonce = await open_chat(client)
                cookie = client.cookies["fg_chat"]
                async with aiohttp.ClientSession(cookies={"fg_chat": cookie}) as session:
                    async with session.ws_connect(web.chat_url + "/live", origin=web.chat_url) as socket:
                        sent = await client.post("/send", data={"text": "Which PR holds the login fix?", "nonce": nonce},
                                                 headers={"Accept": "application/json"})
                        assert sent.status_code == 200 and sent.json()["update_id"] == nonce
                        events = []
                        while not events or events[-1]["type"] != "final":
                            events.append(await asyncio.wait_for(socket.receive_json(), 10))
                previews = [e["text"] for e in events if e["type"] == "preview"]
                assert len(previews) >= 3, events  # the reply grew on the page before it was done
                assert all(b.startswith(a) for a, b in zip(previews, previews[1:]))
                assert events[-1] == {"type": "final", "reply_to": nonce, "text": ANSWER}
                page = await client.get("/")
            assert ANSWER in page.text  # and it is in the conversation as stored


async def test_without_javascript_a_form_post_is_answered_on_the_next_load(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer(ANSWER)) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                nonce = await open_chat(client)
                posted = await client.post("/send", data={"text": "hello there", "nonce": nonce})
                assert posted.status_code == 303 and posted.headers["location"] == "/#end"

                async def answered() -> bool:
                    return ANSWER in (await client.get("/")).text

                await wait_for(answered)
                assert "hello there" in (await client.get("/")).text


async def test_each_browser_is_its_own_chat_and_never_reads_another(redis_url, key_prefix):
    def reply(request: RecordedRequest) -> Reply:
        return Reply.answer(f"noted: {request.last_user_text}")

    async with FakeLLMServer(handler=reply) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as alice, httpx.AsyncClient(base_url=web.chat_url) as bob:
                await alice.post("/send", data={"text": "the vault code is zebra-crocus-91", "nonce": await open_chat(alice)})
                await bob.post("/send", data={"text": "what is the vault code?", "nonce": await open_chat(bob)})
                assert alice.cookies["fg_chat"] != bob.cookies["fg_chat"]

                async def stored() -> bool:
                    return ("noted: the vault code" in (await alice.get("/")).text
                            and "noted: what is the vault code" in (await bob.get("/")).text)

                await wait_for(stored)
                found = await alice.get("/search", params={"q": "zebra-crocus-91"})
                assert "zebra-crocus-91" in found.text and "/m/" in found.text
                link = re.search(r'href="(/m/[^"#]+)', found.text).group(1)
                assert "zebra-crocus-91" in (await alice.get(link)).text  # the hit opens the message in context
                assert 'class="hit"' in (await bob.get("/search", params={"q": "vault"})).text  # Bob's own chat is searched
                assert 'class="hit"' not in (await bob.get("/search", params={"q": "zebra-crocus-91"})).text
                assert "zebra-crocus-91" not in (await bob.get("/")).text
                assert (await bob.get(link)).status_code == 404  # Alice's message id is nothing in Bob's chat


async def test_the_same_form_sent_twice_is_taken_in_once(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                nonce = await open_chat(client)
                first = await client.post("/send", data={"text": "once", "nonce": nonce}, headers={"Accept": "application/json"})
                again = await client.post("/send", data={"text": "once", "nonce": nonce}, headers={"Accept": "application/json"})
                assert first.json()["queued"] is True and again.json()["queued"] is False
                await web.gateway.runner.wait_idle(timeout=10)
            assert len(provider.requests) == 1


@pytest.mark.parametrize("headers", [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                                     {"Origin": "null"}])
async def test_cross_site_posts_and_sockets_are_refused(redis_url, key_prefix, headers):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                nonce = await open_chat(client)
                refused = await client.post("/send", data={"text": "/new", "nonce": nonce}, headers=headers)
                assert refused.status_code == 403
                socket = await client.get("/live", headers={**headers, "Connection": "Upgrade", "Upgrade": "websocket",
                                                            "Sec-WebSocket-Version": "13",
                                                            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
                assert socket.status_code == 403
                await asyncio.sleep(0.2)
            assert provider.requests == [] and await web.gateway.runner.inbox.marked() == 0


async def test_the_chat_cookie_is_http_only_and_posting_needs_it(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                page = await client.get("/")
                cookie = page.headers["set-cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
                assert "default-src 'none'" in page.headers["content-security-policy"]
                assert "script-src 'self'" in page.headers["content-security-policy"]
            async with httpx.AsyncClient(base_url=web.chat_url) as stranger:
                assert (await stranger.post("/send", data={"text": "hi", "nonce": "abcdefgh1"})).status_code == 403


async def test_a_reply_written_by_another_process_reaches_this_ones_page(redis, redis_url, key_prefix):
    """Two gateway processes share Redis: the page is connected to one, the turn runs in the other."""
    here, there = PipelinedConnection.like(redis), PipelinedConnection.like(redis)
    listening, publishing = LiveHub(redis, here, key_prefix), LiveHub(redis, there, key_prefix)
    try:
        async with listening.listen("web:browser-one-0123456789") as events:
            await publishing.publish("web:browser-one-0123456789", {"type": "final", "reply_to": "n1", "text": "hi"})
            await publishing.publish("web:browser-two-0123456789", {"type": "final", "reply_to": "n2", "text": "not yours"})
            assert await asyncio.wait_for(events.get(), 5) == {"type": "final", "reply_to": "n1", "text": "hi"}
            await asyncio.sleep(0.2)
            assert events.empty()
    finally:
        await listening.aclose()
        await here.aclose()
        await there.aclose()
