"""Files in the web pages in a real browser (Debian's headless Chromium, driven by Playwright): a photo chosen in
the chat's file input is sent, shown in the chat and in the operator view as a picture the browser decoded, with
and without JavaScript, and a file dropped on the chat goes with the next message."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator

import pytest_asyncio
from PIL import Image
from playwright import async_api as playwright

from tests.fakes.browser import needs_chromium, shot
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.media import images_in
from tests.fakes.web import ADMIN_TOKEN, WebGateway, web_gateway, web_settings

pytestmark = needs_chromium


def photo(width: int = 480, height: int = 320) -> bytes:
    """A picture with something in it (bands of colour), so a screenshot shows whether it was drawn."""
    image = Image.new("RGB", (width, height), (240, 240, 240))
    for band, color in enumerate([(220, 50, 47), (38, 139, 210), (133, 153, 0), (181, 137, 0)]):
        image.paste(color, (band * width // 4, 0, (band + 1) * width // 4, height))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def describe(request: RecordedRequest) -> Reply:
    return Reply.answer(f"I see {len(images_in(request))} image(s): four colour bands.", chunk_size=8, event_delay=0.02)


@pytest_asyncio.fixture
async def web(redis_url: str, key_prefix: str) -> AsyncIterator[tuple[WebGateway, FakeLLMServer]]:
    async with FakeLLMServer(handler=describe) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as running:
            yield running, provider


async def drawn(image: playwright.Locator) -> int:
    """The width the browser decoded the picture at (0: it did not load)."""
    await image.scroll_into_view_if_needed()
    await image.evaluate("img => img.complete ? true : new Promise(done => img.addEventListener('load', done))")
    return int(await image.evaluate("img => img.naturalWidth"))


async def log_in(page: playwright.Page, url: str) -> None:
    await page.goto(url)
    await page.fill('input[name="token"]', ADMIN_TOKEN)
    await page.click('form.login button[type="submit"]')


async def test_a_photo_chosen_in_the_file_input_shows_in_the_chat_and_the_operator_view(browser, web, tmp_path):
    running, provider = web
    sent = photo()
    (tmp_path / "bands.png").write_bytes(sent)
    page = await browser.new_page(viewport={"width": 1000, "height": 900})
    await page.goto(running.chat_url + "/")
    await page.set_input_files('#composer input[type="file"]', str(tmp_path / "bands.png"))
    assert "bands.png" in await page.locator("#chosen").text_content()
    await page.fill("#composer textarea", "What is in this picture?")
    await page.press("#composer textarea", "Enter")
    await page.locator('.role-assistant[data-done="1"]').wait_for(timeout=20_000)
    shown = page.locator(".role-user .item img").last
    assert await drawn(shown) == 480  # shown at once, from the chat's own store
    assert await page.locator(".role-assistant .text").last.text_content() == "I see 1 image(s): four colour bands."
    assert images_in(provider.requests[0]) == [sent]
    await page.reload()  # and in the conversation as stored
    assert await drawn(page.locator(".role-user .item img").last) == 480
    assert "bands.png" in await page.locator(".role-user .item figcaption").last.text_content()
    await shot(page, "web-chat-photo")

    operator = await browser.new_page(viewport={"width": 1200, "height": 900})
    await log_in(operator, running.operator_url + "/admin")
    await operator.locator("td.chat-key a").first.click()
    assert await drawn(operator.locator(".latest .item img").first) == 480
    assert "bands.png" in await operator.locator(".latest .item figcaption").first.text_content()
    await shot(operator, "operator-chat-photo")


async def test_without_javascript_the_file_input_posts_the_photo(browser, web, tmp_path):
    running, _provider = web
    (tmp_path / "bands.png").write_bytes(photo(200, 100))
    context = await browser.new_context(java_script_enabled=False)
    page = await context.new_page()
    await page.goto(running.chat_url + "/")
    await page.set_input_files('#composer input[type="file"]', str(tmp_path / "bands.png"))
    await page.click("#composer button[type=submit]")  # no caption: the photo alone
    await page.locator(".role-assistant .text", has_text="I see 1 image").wait_for(timeout=20_000)
    assert await drawn(page.locator(".role-user .item img").last) == 200
    await context.close()


async def test_a_file_dropped_on_the_chat_goes_with_the_next_message(browser, web):
    running, provider = web
    page = await browser.new_page()
    await page.goto(running.chat_url + "/")
    # A drop as the browser makes it, with a file in its DataTransfer (Playwright cannot drag from the desktop).
    await page.evaluate(
        """async (data) => {
        const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], "dropped.png", {type: "image/png"}));
        const target = document.getElementById("transcript");
        target.dispatchEvent(new DragEvent("dragover", {bubbles: true, cancelable: true, dataTransfer: transfer}));
        target.dispatchEvent(new DragEvent("drop", {bubbles: true, cancelable: true, dataTransfer: transfer}));
    }""",
        base64.b64encode(photo(120, 60)).decode(),
    )
    assert "dropped.png" in await page.locator("#chosen").text_content()
    await page.fill("#composer textarea", "this one")
    await page.press("#composer textarea", "Enter")
    await page.locator('.role-assistant[data-done="1"]').wait_for(timeout=20_000)
    assert await drawn(page.locator(".role-user .item img").last) == 120
    assert len(images_in(provider.requests[-1])) == 1


async def test_an_image_the_model_makes_shows_under_its_reply_live_and_after_a_reload(browser, redis_url, key_prefix):
    made = photo(360, 240)

    def draw(request: RecordedRequest) -> Reply:
        return Reply.answer("Here are the bands.", images=[f"data:image/png;base64,{base64.b64encode(made).decode()}"])

    async with FakeLLMServer(flavor="openrouter", handler=draw) as provider:
        settings = web_settings(redis_url, key_prefix, provider.openai_base_url)
        settings.model.name = "google/gemini-2.5-flash-image"
        async with web_gateway(settings) as running:
            page = await browser.new_page(viewport={"width": 1000, "height": 900})
            await page.goto(running.chat_url + "/")
            await page.fill("#composer textarea", "Draw the four bands")
            await page.press("#composer textarea", "Enter")
            shown = page.locator(".role-assistant .item img").last
            await shown.wait_for(timeout=20_000)
            assert await drawn(shown) == 360  # sent live, under the reply it belongs to
            assert await page.locator(".role-assistant .text").last.text_content() == "Here are the bands."
            await page.reload()  # and kept with the reply in the conversation as stored
            assert await drawn(page.locator(".role-assistant .item img").last) == 360
            assert "image-1.png" in await page.locator(".role-assistant .item figcaption").last.text_content()
            await shot(page, "web-chat-made-image")
