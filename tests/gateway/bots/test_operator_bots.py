"""The operator view and ``/metrics`` of a process serving several bots, over real HTTP and real Redis.

Each page shows one bot's data, the one ``?bot=`` chose (remembered in a cookie) or the first running one;
``/admin/bots`` lists every bot with a failed one's reason; every ``foldgate_*`` figure is labelled with its
bot, and ``foldgate_bot_up`` says which bots run. A deployment without ``bots:`` scrapes as it always did.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote

import aiohttp
from yarl import URL

from gateway.config import Settings
from gateway.config.bots import BotSettings
from gateway.platforms.base import IncomingMessage
from gateway.web.operated import chat_link
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.web import ADMIN_TOKEN, WebGateway, web_gateway, web_settings

BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: The token the fake Bot API knows, and the one beta is configured with: Telegram refuses it.
KNOWN_TOKEN, BETA_TOKEN = "111111:the-token-telegram-knows", "222222:a-token-telegram-refuses"


@asynccontextmanager
async def operator(web: WebGateway) -> AsyncIterator[aiohttp.ClientSession]:
    """A client of the operator's server with the token, keeping cookies (the server is an IP address)."""
    async with aiohttp.ClientSession(
        base_url=web.operator_url, headers=BEARER, cookie_jar=aiohttp.CookieJar(unsafe=True)
    ) as session:
        yield session


async def text_of(session: aiohttp.ClientSession, path: str, status: int = 200) -> str:
    async with session.get(path) as response:
        assert response.status == status, (path, response.status)
        return await response.text()


async def chat_in(web: WebGateway, bot: str, chat_id: str, text: str = "hello") -> str:
    """A message taken in by ``bot`` and answered; the chat's key."""
    runner = web.fleet.gateways()[bot].runner
    await runner.intake(
        IncomingMessage(platform="web", chat_id=chat_id, user_id=chat_id, update_id=f"{bot}-1", text=text)
    )
    await runner.wait_idle()
    return f"web:{chat_id}"


def two_bots(redis_url: str, prefix: str, provider: FakeLLMServer, beta: dict | None = None) -> Settings:
    return web_settings(
        redis_url, prefix, provider.openai_base_url, bots=[{"name": "alpha"}, {"name": "beta", **(beta or {})}]
    )


async def test_each_page_shows_the_bot_chosen_and_remembers_it(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(two_bots(redis_url, key_prefix, provider)) as web:
            chat = await chat_in(web, "alpha", "alpha-person")
            async with operator(web) as session:
                alpha = await text_of(session, "/admin?bot=alpha")
                assert chat in alpha and "bot <strong>alpha</strong>" in alpha and 'href="/admin/bots"' in alpha
                assert session.cookie_jar.filter_cookies(URL(web.operator_url + "/admin"))["fg_bot"].value == "alpha"

                beta = await text_of(session, "/admin?bot=beta")
                assert chat not in beta and "bot <strong>beta</strong>" in beta
                remembered = await text_of(session, "/admin")  # the cookie now says beta
                assert chat not in remembered and "bot <strong>beta</strong>" in remembered
                await text_of(session, "/admin/chats/" + quote(chat, safe=""), status=404)  # not beta's chat
                figures = await text_of(session, "/admin/gateway/figures")
                assert re.search(r"turns per second</dt>", figures)

                unknown = await text_of(session, "/admin?bot=nobody")  # never a 500: the cookie's bot, beta
                assert "bot <strong>beta</strong>" in unknown
                await text_of(session, "/admin?bot=alpha")
                page = await text_of(session, "/admin/chats/" + quote(chat, safe=""))
                assert "alpha-person" in page
                # a page's links and refreshes keep its bot, whatever another tab chooses meanwhile
                assert '/charts?bot=alpha"' in page and 'href="/admin?bot=alpha"' in page
                listed = await text_of(session, "/admin?bot=alpha")
                assert f'href="{chat_link(chat)}?bot=alpha"' in listed and "&amp;bot=alpha" in listed
                assert 'data-refresh="/admin/gateway/figures?bot=alpha"' in await text_of(session, "/admin/gateway")
                gateway = await text_of(session, "/admin/gateway")
                assert gateway.count('class="bot-running"') == 2
                assert await text_of(session, "/admin/spend")

                metrics = await text_of(session, "/metrics")
    assert 'foldgate_turns_total{bot="alpha"} 1.0' in metrics and 'foldgate_turns_total{bot="beta"} 0.0' in metrics
    assert 'foldgate_bot_up{bot="alpha"} 1.0' in metrics and 'foldgate_bot_up{bot="beta"} 1.0' in metrics
    assert re.search(r"^foldgate_redis_used_memory_bytes \d", metrics, re.MULTILINE)  # one server: once, unlabelled
    assert "process_resident_memory_bytes" in metrics
    # every other figure names its bot
    assert not re.search(r"^foldgate_(?!redis_used_memory_bytes )\w+ ", metrics, re.MULTILINE)


async def test_a_failed_bot_is_listed_with_what_to_fix_and_scraped_as_down(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider, FakeBotAPI(KNOWN_TOKEN) as telegram:
        beta = {"platforms": {"telegram": {"enabled": True, "token": BETA_TOKEN, "api_server": telegram.base_url}}}
        async with web_gateway(two_bots(redis_url, key_prefix, provider, beta), verify=True) as web:
            assert [status.state for status in web.fleet.status_list()] == ["running", "failed"]
            chat = await chat_in(web, "alpha", "alpha-person")
            async with operator(web) as session:
                bots = await text_of(session, "/admin/bots")
                assert 'href="/admin?bot=alpha"' in bots and 'href="/admin?bot=beta"' not in bots
                failed = re.search(r'<tr class="bot-failed bad" data-bot="beta">(.*?)</tr>', bots, re.DOTALL)
                assert failed and "rejected the bot token" in failed.group(1)
                assert BETA_TOKEN not in bots

                fallback = await text_of(session, "/admin?bot=beta")  # beta does not run: alpha's pages
                assert chat in fallback and "bot <strong>alpha</strong>" in fallback
                assert "fg_bot" not in {cookie.key for cookie in session.cookie_jar}
                gateway = await text_of(session, "/admin/gateway")
                assert 'class="bot-failed bad" data-bot="beta"' in gateway

                metrics = await text_of(session, "/metrics")
    assert 'foldgate_bot_up{bot="beta"} 0.0' in metrics and 'foldgate_bot_up{bot="alpha"} 1.0' in metrics
    assert 'foldgate_turns_total{bot="alpha"} 1.0' in metrics and 'bot="beta"} 1.0' not in metrics
    assert 'foldgate_turns_total{bot="beta"}' not in metrics  # a bot that does not run has no figures


async def test_a_reloaded_bot_is_scraped_afresh_and_a_removed_one_not_at_all(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        settings = two_bots(redis_url, key_prefix, provider)
        async with web_gateway(settings) as web:
            await chat_in(web, "beta", "beta-person")
            async with operator(web) as session:
                assert 'foldgate_turns_total{bot="beta"} 1.0' in await text_of(session, "/metrics")

                changed = [BotSettings(name="alpha"), BotSettings(name="beta", model={"context_length": 16_000})]
                await web.fleet.reload(settings.model_copy(update={"bots": changed}))
                assert 'foldgate_turns_total{bot="beta"} 0.0' in await text_of(session, "/metrics")

                await web.fleet.reload(settings.model_copy(update={"bots": [BotSettings(name="alpha")]}))
                metrics = await text_of(session, "/metrics")
                assert 'bot="beta"' not in metrics and 'foldgate_turns_total{bot="alpha"} 0.0' in metrics
                assert "bot <strong>alpha</strong>" in await text_of(session, "/admin?bot=beta")


async def test_one_bot_scrapes_and_pages_as_before(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            chat = await chat_in(web, "main", "only-person")
            async with operator(web) as session:
                metrics = await text_of(session, "/metrics")
                listing = await text_of(session, "/admin")
                bots = await text_of(session, "/admin/bots")
                gateway = await text_of(session, "/admin/gateway")
    assert "foldgate_turns_total 1.0" in metrics and "bot=" not in metrics and "foldgate_bot_up" not in metrics
    assert chat in listing and "/admin/bots" not in listing and "<strong>main</strong>" not in listing
    assert 'data-bot="main"' in bots and 'class="bot-running"' in bots
    assert "bot-running" not in gateway
