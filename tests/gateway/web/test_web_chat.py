"""The web chat over real HTTP: a browser's chat, its streamed replies, its search, and what it may not do."""

from __future__ import annotations

import asyncio
import contextlib
import re

import aiohttp
import httpx
import pytest

from gateway.store.channel import PipelinedConnection
from gateway.store.live import LiveHub
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for
from tests.fakes.web import open_chat, web_gateway, web_settings

ANSWER = "The login timeout fix is in PR 4711, merged after the overnight run went green."


async def test_a_message_gets_a_streamed_reply_over_the_live_socket(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer(ANSWER, chunk_size=6, event_delay=0.03)) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                nonce = await open_chat(client)
                cookie = client.cookies["fg_chat"]
                async with aiohttp.ClientSession(cookies={"fg_chat": cookie}) as session:
                    async with session.ws_connect(web.chat_url + "/live", origin=web.chat_url) as socket:
                        sent = await client.post(
                            "/send",
                            data={"text": "Which PR holds the login fix?", "nonce": nonce},
                            headers={"Accept": "application/json"},
                        )
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

                await wait_for(answered, what="the answer on the reloaded page")
                assert "hello there" in (await client.get("/")).text


async def test_each_browser_is_its_own_chat_and_never_reads_another(redis_url, key_prefix):
    def reply(request: RecordedRequest) -> Reply:
        return Reply.answer(f"noted: {request.last_user_text}")

    async with FakeLLMServer(handler=reply) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with (
                httpx.AsyncClient(base_url=web.chat_url) as alice,
                httpx.AsyncClient(base_url=web.chat_url) as bob,
            ):
                await alice.post(
                    "/send", data={"text": "the vault code is zebra-crocus-91", "nonce": await open_chat(alice)}
                )
                await bob.post("/send", data={"text": "what is the vault code?", "nonce": await open_chat(bob)})
                assert alice.cookies["fg_chat"] != bob.cookies["fg_chat"]

                async def stored() -> bool:
                    return (
                        "noted: the vault code" in (await alice.get("/")).text
                        and "noted: what is the vault code" in (await bob.get("/")).text
                    )

                await wait_for(stored, what="both chats' answers on their pages")
                found = await alice.get("/search", params={"q": "zebra-crocus-91"})
                assert "zebra-crocus-91" in found.text and "/m/" in found.text
                link = re.search(r'href="(/m/[^"#]+)', found.text).group(1)
                assert "zebra-crocus-91" in (await alice.get(link)).text  # the hit opens the message in context
                assert (
                    'class="hit"' in (await bob.get("/search", params={"q": "vault"})).text
                )  # Bob's own chat is searched
                assert 'class="hit"' not in (await bob.get("/search", params={"q": "zebra-crocus-91"})).text
                assert "zebra-crocus-91" not in (await bob.get("/")).text
                assert (await bob.get(link)).status_code == 404  # Alice's message id is nothing in Bob's chat


async def test_the_same_form_sent_twice_is_taken_in_once(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                nonce = await open_chat(client)
                first = await client.post(
                    "/send", data={"text": "once", "nonce": nonce}, headers={"Accept": "application/json"}
                )
                again = await client.post(
                    "/send", data={"text": "once", "nonce": nonce}, headers={"Accept": "application/json"}
                )
                assert first.json()["queued"] is True and again.json()["queued"] is False
                await web.gateway.runner.wait_idle()
            assert len(provider.requests) == 1


@pytest.mark.parametrize(
    "headers", [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}]
)
async def test_cross_site_posts_and_sockets_are_refused(redis_url, key_prefix, headers):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                nonce = await open_chat(client)
                refused = await client.post("/send", data={"text": "/new", "nonce": nonce}, headers=headers)
                assert refused.status_code == 403
                socket = await client.get(
                    "/live",
                    headers={
                        **headers,
                        "Connection": "Upgrade",
                        "Upgrade": "websocket",
                        "Sec-WebSocket-Version": "13",
                        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                    },
                )
                assert socket.status_code == 403
                # a post is taken in before it is answered, so a refused one that got in would hold its nonce by
                # now: the same nonce from the page itself is still new, and it is the only thing answered
                same_site = await client.post(
                    "/send", data={"text": "hello", "nonce": nonce}, headers={"Accept": "application/json"}
                )
                assert same_site.json()["queued"] is True
                await web.gateway.runner.wait_idle()
            assert [request.last_user_text for request in provider.requests if request.method == "POST"] == ["hello"]
            assert await web.gateway.runner.inbox.marked() == 0


async def test_the_chat_cookie_is_http_only_and_posting_needs_it(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                page = await client.get("/")
                cookie = page.headers["set-cookie"]
                assert "HttpOnly" in cookie and "SameSite=Lax" in cookie  # a link from elsewhere still finds the chat
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
            await publishing.publish(
                "web:browser-two-0123456789", {"type": "final", "reply_to": "n2", "text": "not yours"}
            )
            await publishing.publish("web:browser-one-0123456789", {"type": "final", "reply_to": "n3", "text": "again"})
            assert await asyncio.wait_for(events.get(), 5) == {"type": "final", "reply_to": "n1", "text": "hi"}
            # Redis delivers one publisher's messages in order: had the other browser's come here, it would be next
            assert await asyncio.wait_for(events.get(), 5) == {"type": "final", "reply_to": "n3", "text": "again"}
    finally:
        await listening.aclose()
        await here.aclose()
        await there.aclose()


async def test_a_page_whose_dns_was_pointed_here_is_refused(redis_url, key_prefix):
    """DNS rebinding: the attacker's page names its own host, and its Origin agrees with it."""
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        settings = web_settings(
            redis_url, key_prefix, provider.openai_base_url, gateway={"allowed_hosts": ["chat.example.org"]}
        )
        async with web_gateway(settings) as web:
            port = web.chat_url.rsplit(":", 1)[1]
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                nonce = await open_chat(client)
                forged = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
                assert (await client.get("/", headers=forged)).status_code == 421
                refused = await client.post(
                    "/send", data={"text": "spend their tokens", "nonce": nonce}, headers=forged
                )
                assert refused.status_code == 421
                named = {"Host": f"chat.example.org:{port}", "Origin": f"http://chat.example.org:{port}"}
                assert (await client.get("/", headers=named)).status_code == 200  # a name it was given
                assert (await client.get("/", headers={"Host": f"localhost:{port}"})).status_code == 200
            async with httpx.AsyncClient(base_url=web.operator_url) as scraper:
                assert (await scraper.get("/metrics", headers={"Host": "foldgate-0.foldgate:9100"})).status_code == 200
            assert provider.requests == []


async def test_a_process_that_serves_no_page_still_sends_a_web_chats_replies(redis, redis_url, key_prefix):
    """Any process may take a web chat's turn; the page connected to another one still gets the reply."""
    from gateway.run.assembly import open_gateway

    async with FakeLLMServer(default=Reply.answer(ANSWER)) as provider:
        settings = web_settings(redis_url, key_prefix, provider.openai_base_url)
        async with web_gateway(settings) as web:
            other = await open_gateway(settings, {})  # a second process: no web chat of its own
            try:
                await web.gateway.runner.stop(grace_seconds=0)  # only the other one answers now
                async with httpx.AsyncClient(base_url=web.chat_url) as client:
                    await open_chat(client)
                    async with aiohttp.ClientSession(cookies={"fg_chat": client.cookies["fg_chat"]}) as session:
                        async with session.ws_connect(web.chat_url + "/live", origin=web.chat_url) as socket:
                            for number in range(3):
                                nonce = f"message-{number}-0123456789"
                                await client.post(
                                    "/send",
                                    data={"text": f"question {number}", "nonce": nonce},
                                    headers={"Accept": "application/json"},
                                )
                                event = {}
                                while event.get("type") != "final":
                                    event = await asyncio.wait_for(socket.receive_json(), 10)
                                assert event == {"type": "final", "reply_to": nonce, "text": ANSWER}
            finally:
                await other.close(grace_seconds=0)


async def test_pages_opening_together_on_a_fresh_connection_all_get_their_events(redis_url, key_prefix):
    from redis.asyncio import Redis

    fresh = Redis.from_url(redis_url, decode_responses=True)  # no pooled connection yet
    channel = PipelinedConnection.like(fresh)
    hub = LiveHub(fresh, channel, key_prefix)
    chats = [f"web:together-{number}-0123456789" for number in range(5)]
    try:
        async with contextlib.AsyncExitStack() as stack:
            queues = await asyncio.gather(*(stack.enter_async_context(hub.listen(chat)) for chat in chats))
            for chat in chats:
                await hub.publish(chat, {"type": "final", "reply_to": chat, "text": "hi"})
            received = [await asyncio.wait_for(queue.get(), 5) for queue in queues]
            assert [event["reply_to"] for event in received] == chats
        clients = await fresh.client_list()
        assert sum(1 for client in clients if int(client.get("sub", 0)) > 0) <= 1  # one subscription connection
    finally:
        await hub.aclose()
        await channel.aclose()
        await fresh.aclose()


async def test_the_web_chat_binds_the_configured_loopback_address(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url, chat_host="::1")) as web:
            assert web.chat_url.startswith("http://[::1]:")
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                assert (await client.get("/")).status_code == 200
