"""The web pages in a real browser: Debian's headless Chromium, driven by Playwright (no browser download).

Each test also writes a screenshot of the page it looked at into ``screenshots/`` at the top of the
checkout (not tracked; ``FOLDGATE_SCREENSHOTS`` names another folder). The README shows the ones
in ``docs/screenshots/``, written by
``FOLDGATE_SCREENSHOTS=docs/screenshots ./dev test tests/gateway/web/test_web_browser.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from playwright import async_api as playwright

from tests.fakes.browser import SHOTS, needs_chromium, shot
from tests.fakes.gateway import NOTES, is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.web import ADMIN_TOKEN, WebGateway, open_chat, web_gateway, web_settings

ANSWER = (
    "The login timeout fix is in PR 4711: it raised the session timeout to 45 minutes and was merged "
    "after the overnight run went green."
)
FILLER = " and then some more words about the release plan" * 120

pytestmark = needs_chromium


@pytest_asyncio.fixture
async def web(redis_url: str, key_prefix: str) -> AsyncIterator[WebGateway]:
    async with FakeLLMServer(default=Reply.answer(ANSWER, chunk_size=5, event_delay=0.04)) as provider:
        settings = web_settings(
            redis_url, key_prefix, provider.openai_base_url, compression={"tail_mode": "legacy", "protect_last_n": 2}
        )
        async with web_gateway(settings) as running:
            yield running


async def say(page: playwright.Page, text: str) -> None:
    """Type a message and send it, then wait until its reply is complete."""
    done = await page.locator('.role-assistant[data-done="1"]').count()
    await page.fill("#composer textarea", text)
    await page.press("#composer textarea", "Enter")
    await page.locator('.role-assistant[data-done="1"]').nth(done).wait_for(timeout=20_000)


async def test_a_reply_streams_into_the_chat_and_ends_as_the_models_text(browser, web):
    page = await browser.new_page()
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.on("websocket", lambda socket: fetched.append(socket.url))
    await page.goto(web.chat_url + "/")
    # Record every text the reply shows while it grows.
    await page.evaluate("""() => {
        window.seen = [];
        new MutationObserver(() => {
            const reply = document.querySelector('.role-assistant .text');
            if (reply && window.seen.at(-1) !== reply.textContent) window.seen.push(reply.textContent);
        }).observe(document.getElementById('transcript'), {subtree: true, childList: true, characterData: true});
    }""")
    await say(page, "Which PR holds the login timeout fix?")
    seen = await page.evaluate("window.seen")
    growing = [text for text in seen if text]
    assert len(growing) >= 3, seen  # shown while it was written, not only at the end
    assert all(later.startswith(earlier) for earlier, later in zip(growing, growing[1:]))
    assert await page.locator(".role-assistant .text").last.text_content() == ANSWER
    assert await page.locator(".role-user .text").last.text_content() == "Which PR holds the login timeout fix?"
    await shot(page, "web-chat")
    await page.reload()  # and it is the conversation as stored
    assert await page.locator(".role-assistant .text").last.text_content() == ANSWER
    own = web.chat_url.split("://", 1)[1]
    assert fetched and all(url.split("://", 1)[1].startswith(own + "/") for url in fetched), (
        fetched
    )  # no CDN, nothing else


async def test_messages_sent_in_quick_succession_are_all_taken_in(browser, web):
    page = await browser.new_page()
    await page.goto(web.chat_url + "/")
    for text in ("first question", "second question", "third question"):
        await page.fill("#composer textarea", text)
        await page.press("#composer textarea", "Enter")  # before the previous post has been answered
    await web.gateway.runner.wait_idle()
    await page.reload()
    assert await page.locator(".role-user .text").all_text_contents() == [
        "first question",
        "second question",
        "third question",
    ]


async def test_without_javascript_the_chat_and_its_search_still_work(browser, web):
    context = await browser.new_context(java_script_enabled=False)
    page = await context.new_page()
    await page.goto(web.chat_url + "/")
    await page.fill("#composer textarea", "Which PR holds the login timeout fix?")
    await page.click("#composer button[type=submit]")
    # The form posts; the page shows the message waiting and reloads itself until the reply is stored.
    await page.locator(".role-assistant .text", has_text="PR 4711").wait_for(timeout=20_000)
    assert await page.locator(".role-assistant .text").last.text_content() == ANSWER
    await page.fill('form.search input[name="q"]', "login timeout")
    await page.press('form.search input[name="q"]', "Enter")
    await page.locator("li.hit a").first.click()
    assert "login timeout" in (await page.locator("article.msg.target").text_content()).lower()
    await context.close()


async def test_a_compress_in_the_chat_appears_on_the_operator_chart(browser, web):
    chat = await browser.new_page()
    await chat.goto(web.chat_url + "/")
    for number in range(5):
        await say(chat, f"note {number}: the deploy key lives in vault path ops/deploy-{number}" + FILLER)
    operator = await browser.new_page()
    await operator.goto(web.operator_url + "/admin")
    await operator.fill('input[name="token"]', ADMIN_TOKEN)
    await operator.click('form.login button[type="submit"]')
    await operator.locator("td.chat-key a").first.click()
    await operator.locator("svg.context-chart").wait_for()
    assert await operator.locator("svg.context-chart [data-kind]").count() == 0
    await chat.click('form.command button:text-is("/compress")')
    await chat.locator('.role-assistant[data-done="1"]:has-text("Compressed")').wait_for(timeout=20_000)
    # The operator page redraws its charts by itself: the manual compaction shows up without a reload.
    await operator.locator("svg.context-chart [data-kind=manual]").wait_for(timeout=15_000)
    await operator.reload()
    assert await operator.locator("li.compaction[data-kind=manual] details.summary-text").count() == 1
    await shot(operator, "operator-chat")
    await operator.goto(web.operator_url + "/admin")
    await shot(operator, "operator-chats")
    await operator.goto(web.operator_url + "/admin/gateway")
    await shot(operator, "operator-gateway")


async def test_a_long_chats_chart_shows_every_compaction_by_kind(browser, redis_url, key_prefix):
    """The picture the README shows: a chat that grows past the in-loop threshold again and again."""
    import httpx

    def answer(request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return Reply.answer(NOTES)
        return Reply.answer("Here is what I found in the logs: " + "the job retried and then settled; " * 60)

    async with FakeLLMServer(handler=answer) as provider:
        async with web_gateway(
            web_settings(
                redis_url,
                key_prefix,
                provider.openai_base_url,
                context_length=16_000,
                compression={"tail_mode": "legacy", "protect_last_n": 4},
            )
        ) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                for number in range(36):
                    text = (
                        "/compress" if number == 30 else f"step {number}: what did the nightly job log?" + FILLER[:900]
                    )
                    await client.post("/send", data={"text": text, "nonce": await open_chat(client)})
                    await web.gateway.runner.wait_idle()
                chat = f"web:{client.cookies['fg_chat']}"
            page = await browser.new_page(viewport={"width": 1100, "height": 900})
            await page.goto(web.operator_url + "/admin/login")
            await page.fill('input[name="token"]', ADMIN_TOKEN)
            await page.click('form.login button[type="submit"]')
            await page.goto(web.operator_url + "/admin/chats/" + chat.replace(":", "%3A"))
            markers = page.locator("svg.context-chart g.marker")
            kinds = [await markers.nth(i).get_attribute("data-kind") for i in range(await markers.count())]
            assert kinds.count("in_loop") >= 2 and kinds.count("manual") == 1, kinds
            assert await page.locator("li.compaction").count() == len(kinds)  # each one listed with its summary
            dots = page.locator("svg.context-chart circle.context-dot title")
            shares = [int(text.split("(")[1].split("%")[0]) for text in await dots.all_text_contents()]
            assert shares and max(shares) < 100  # the context never passed the window
            await page.locator("section#charts").screenshot(path=str(SHOTS / "operator-chart.png"))
            await shot(page, "operator-long-chat")


async def test_a_search_hit_leads_to_the_original_message_in_context(browser, web):
    page = await browser.new_page()
    await page.goto(web.chat_url + "/")
    for number in range(5):
        await say(page, f"note {number}: the deploy key lives in vault path ops/deploy-{number}" + FILLER)
    await say(page, "/compress")
    await page.fill('form.search input[name="q"]', "ops/deploy-1")
    await page.press('form.search input[name="q"]', "Enter")
    await page.locator("li.hit").first.wait_for()
    await shot(page, "web-search")
    await page.locator("li.hit a").first.click()
    target = page.locator("article.msg.target")
    await target.wait_for()
    assert "ops/deploy-1" in await target.text_content()
    assert "role-user" in await target.get_attribute("class")  # the person's own message, not a summary of it
    assert await page.locator("article.msg").count() > 1  # with what came before and after it
    await shot(page, "web-message")


async def test_markup_in_a_message_is_shown_as_text_and_never_runs(browser, web):
    page = await browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    await page.goto(web.chat_url + "/")
    markup = page.locator(".role-user .text script, .role-user .text img")
    await say(page, "<script>alert(1)</script><img src=x onerror=alert(2)>")
    assert (
        await page.locator(".role-user .text").last.text_content()
        == "<script>alert(1)</script><img src=x onerror=alert(2)>"
    )
    # never parsed into elements, so nothing in it can run: no script, no image whose error handler fires later
    assert await markup.count() == 0
    await page.reload()  # as the server renders it
    assert (
        await page.locator(".role-user .text").last.text_content()
        == "<script>alert(1)</script><img src=x onerror=alert(2)>"
    )
    assert await markup.count() == 0
    assert dialogs == []


async def test_the_operator_page_is_refused_without_the_token(browser, web):
    page = await browser.new_page()
    response = await page.goto(web.operator_url + "/admin")
    assert response.status == 401
    assert await page.locator("table.chats").count() == 0
    await page.fill('input[name="token"]', "not-the-token-not-the-token")
    await page.click('form.login button[type="submit"]')
    assert await page.locator(".problem").text_content() == "That is not the operator token."
    assert await page.locator("table.chats").count() == 0
    await shot(page, "operator-login")
