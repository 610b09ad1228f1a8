"""The operator view over real HTTP: refused without the token, every chat listed, one chat's compactions
and turns, the gateway's figures — and no secret or other chat's data where it does not belong."""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx
import pytest

from gateway.events import TurnEvent
from gateway.platforms.base import IncomingMessage
from gateway.store.activity import ActivityLog
from gateway.store.inbox import Inbox
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.web import ADMIN_TOKEN, open_chat, web_gateway, web_settings

BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
API_KEY = "sk-live-never-on-a-page-5e4d3c2b1a"


#: A small tail, so a few long messages leave a middle for /compress to fold.
COMPACTING = {"compression": {"tail_mode": "legacy", "protect_last_n": 2}}
FILLER = " and then some more words about the release plan" * 120


async def chat_with_a_compaction(web, client: httpx.AsyncClient) -> str:
    """A web chat with a few long turns, one message holding markup, and a /compress; its chat key."""
    for text in [
        "first: the deploy key lives in vault path ops/deploy",
        "second: <script>alert(1)</script> odd text",
        "third: ok",
        "fourth: and more",
        "fifth: nearly done",
    ]:
        await client.post("/send", data={"text": text + FILLER, "nonce": await open_chat(client)})
        await web.gateway.runner.wait_idle()
    await client.post("/send", data={"text": "/compress", "nonce": await open_chat(client)})
    await web.gateway.runner.wait_idle()
    return f"web:{client.cookies['fg_chat']}"


async def test_every_operator_page_is_refused_without_the_token(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.operator_url) as client:
                for path in ["/admin", "/admin/gateway", "/admin/chats/web%3Ax", "/admin/gateway/figures"]:
                    refused = await client.get(path)
                    assert refused.status_code == 401 and 'name="token"' in refused.text, path
                    wrong = await client.get(
                        path, headers={"Authorization": "Bearer operator-token-for-tests-0123456788"}
                    )
                    assert wrong.status_code == 401
                    assert (await client.get(path, headers=BEARER)).status_code in (200, 404)
                assert (await client.get("/metrics")).status_code == 200  # the scrape stays open for Prometheus
                assert (await client.get("/healthz")).status_code == 200


async def test_the_login_form_sets_an_http_only_cookie_that_is_not_the_token(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.operator_url) as client:
                wrong = await client.post("/admin/login", data={"token": "guess-guess-guess-guess", "next": "/admin"})
                assert wrong.status_code == 401 and "fg_admin" not in client.cookies
                cross = await client.post(
                    "/admin/login",
                    data={"token": ADMIN_TOKEN, "next": "/admin"},
                    headers={"Origin": "https://evil.example"},
                )
                assert cross.status_code == 403 and "fg_admin" not in client.cookies
                away = await client.post("/admin/login", data={"token": ADMIN_TOKEN, "next": "//evil.example/x"})
                assert away.status_code == 303 and away.headers["location"] == "/admin"  # never sent to another site
                cookie = away.headers["set-cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/admin" in cookie
                assert ADMIN_TOKEN not in cookie
                assert (await client.get("/admin")).status_code == 200
                await client.post("/admin/logout")
                assert (await client.get("/admin")).status_code == 401


async def test_without_a_configured_token_the_view_is_off(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        settings = web_settings(redis_url, key_prefix, provider.openai_base_url, admin_token=None)
        async with web_gateway(settings) as web:
            async with httpx.AsyncClient(base_url=web.operator_url) as client:
                off = await client.get("/admin", headers={"Authorization": "Bearer anything-at-all-here"})
                assert off.status_code == 403 and "gateway.admin_token" in off.text
                login = await client.post("/admin/login", data={"token": "", "next": "/admin"})
                assert login.status_code == 401


async def test_a_chats_page_shows_its_compaction_summary_and_archived_messages(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("noted.")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url, **COMPACTING)) as web:
            async with (
                httpx.AsyncClient(base_url=web.chat_url) as chat_client,
                httpx.AsyncClient(base_url=web.operator_url, headers=BEARER) as operator,
            ):
                chat = await chat_with_a_compaction(web, chat_client)
                listing = await operator.get("/admin")
                assert chat in listing.text and "/admin/chats/" + quote(chat, safe="") in listing.text
                page = await operator.get("/admin/chats/" + quote(chat, safe=""))
                assert page.status_code == 200
                assert 'data-kind="manual"' in page.text  # marked on the chart and in the list of compactions
                assert "[CONTEXT COMPACTION]" in page.text  # the summary as the model saw it
                assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text and "<script>alert" not in page.text
                links = re.findall(r'href="(/admin/chats/[^"#]+/m/[^"#]+)', page.text)
                assert links, "the archived messages are listed by id"
                originals = [await operator.get(link) for link in links]
                assert any("vault path ops/deploy" in o.text for o in originals)
                assert all(o.status_code == 200 for o in originals)
                charts = await operator.get("/admin/chats/" + quote(chat, safe="") + "/charts")
                assert "context-chart" in charts.text and 'data-kind="manual"' in charts.text


async def test_no_secret_reaches_any_page(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        settings = web_settings(redis_url, key_prefix, provider.openai_base_url, **COMPACTING)
        settings.model.api_key = API_KEY
        async with web_gateway(settings) as web:
            async with (
                httpx.AsyncClient(base_url=web.chat_url) as chat_client,
                httpx.AsyncClient(base_url=web.operator_url, headers=BEARER) as operator,
            ):
                chat = await chat_with_a_compaction(web, chat_client)
                pages = [await chat_client.get(path) for path in ["/", "/search?q=deploy"]]
                pages += [
                    await operator.get(path)
                    for path in [
                        "/admin",
                        "/admin/gateway",
                        "/admin/gateway/figures",
                        "/metrics",
                        "/admin/chats/" + quote(chat, safe=""),
                        "/admin/chats/" + quote(chat, safe="") + "/charts",
                    ]
                ]
                for page in pages:
                    assert page.status_code == 200, page.url
                    assert API_KEY not in page.text and ADMIN_TOKEN not in page.text, page.url


async def test_thousands_of_chats_sort_and_page(redis, redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            inbox = Inbox(redis, key_prefix, channel=web.gateway.store.channel)
            log = ActivityLog(redis, web.gateway.store.channel, key_prefix)
            for number in range(120):
                chat_id = f"chat{number:03d}"
                await inbox.put(
                    IncomingMessage(platform="tg", chat_id=chat_id, update_id="1", text="hi", ts=1_000_000.0 + number)
                )
                await log.record(
                    TurnEvent(
                        platform="tg",
                        chat=f"tg:{chat_id}",
                        session_id="s",
                        prompt_tokens=10,
                        completion_tokens=1,
                        latency_ms=1,
                        cost_usd=(number * 37 % 120) / 100,
                        ts=1_000_000.0 + number,
                    )
                )
            await redis.delete(f"{key_prefix}:ready")  # nobody is to answer them here
            async with httpx.AsyncClient(base_url=web.operator_url, headers=BEARER) as operator:
                newest = await operator.get("/admin")
                assert "120" in newest.text and "page 1 of 3" in newest.text
                assert newest.text.index("tg:chat119") < newest.text.index("tg:chat118")
                by_cost = await operator.get("/admin", params={"sort": "cost", "order": "desc"})
                first = re.search(r'<td class="chat-key"><a [^>]*>([^<]+)<', by_cost.text).group(1)
                assert first == "tg:chat107"  # 107 * 37 % 120 = 119: the most expensive
                last_page = await operator.get("/admin", params={"sort": "cost", "order": "desc", "page": "3"})
                assert "page 3 of 3" in last_page.text and last_page.text.count('class="chat-key"') == 20
                assert "tg:chat000" in last_page.text  # it cost nothing


async def test_the_gateway_page_and_metrics_show_provider_errors_and_redis_memory(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        provider.enqueue(Reply.error(400, "bad request: unsupported parameter", kind="invalid_request_error"))
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with (
                httpx.AsyncClient(base_url=web.chat_url) as chat_client,
                httpx.AsyncClient(base_url=web.operator_url, headers=BEARER) as operator,
            ):
                await chat_client.post("/send", data={"text": "hello", "nonce": await open_chat(chat_client)})
                await web.gateway.runner.wait_idle()
                figures = await operator.get("/admin/gateway/figures")
                assert re.search(r"provider errors</dt><dd>1<", figures.text)
                assert "MiB" in figures.text
                metrics = (await operator.get("/metrics")).text
                assert "foldgate_provider_errors_total 1" in metrics
                assert re.search(r"foldgate_redis_used_memory_bytes \d+", metrics)
                chat = f"web:{chat_client.cookies['fg_chat']}"
                page = await operator.get("/admin/chats/" + quote(chat, safe=""))
                assert 'class="turn bad"' in page.text  # the failed turn stands out in the turn log


@pytest.mark.parametrize("path", ["/admin/chats/web%3Anobody-here-at-all", "/admin/chats/web%3Ax/m/abc/1"])
async def test_an_unknown_chat_or_message_is_not_found(redis_url, key_prefix, path):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.operator_url, headers=BEARER) as operator:
                assert (await operator.get(path)).status_code == 404


async def test_archived_messages_count_across_rotated_sessions(redis_url, key_prefix):
    """With ``in_place: false`` each compaction continues in a new session; the list still counts what it archived."""
    from gateway.web.chat_table import chat_page

    async with FakeLLMServer(default=Reply.answer("noted.")) as provider:
        settings = web_settings(
            redis_url,
            key_prefix,
            provider.openai_base_url,
            compression={**COMPACTING["compression"], "in_place": False},
        )
        async with web_gateway(settings) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as chat_client:
                chat = await chat_with_a_compaction(web, chat_client)
            history = await web.gateway.activity.history(chat)
            archived = sum(len(e.archived_ids) for e in history if e.name == "session:compress")
            page = await chat_page(web.gateway.activity, web.gateway.store, lambda model: 32_000)
            (row,) = [row for row in page.rows if row.chat == chat]
            assert archived > 0 and row.archived == archived and row.compactions == 1
