"""A tool that asks first, in the web chat in a real browser (Debian's headless Chromium, driven by Playwright): the
question shows under the reply with two buttons; approved, refused, and left unanswered, each ends as it should and
the question says what was decided."""

from __future__ import annotations

from tests.fakes.browser import needs_chromium, shot
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.mcp_server import stdio_command
from tests.fakes.paths import REPO
from tests.fakes.tool_model import agent_for
from tests.fakes.web import web_gateway, web_settings

pytestmark = needs_chromium

ROOT = str(REPO)


async def test_the_web_chat_asks_before_a_destructive_tool_and_runs_it_only_on_approve(browser, redis_url, key_prefix):
    command, args = stdio_command()
    tools = {
        "allowed_commands": [command],
        "confirm_timeout_seconds": 3,
        "mcp_servers": {"notes": {"command": command, "args": args, "cwd": ROOT}},
        "allow": [{"servers": ["notes"], "platforms": ["web"]}],
    }
    async with FakeLLMServer(handler=agent_for({"wipe": ("notes__wipe", {})})) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url, tools=tools)) as running:
            page = await browser.new_page(viewport={"width": 1000, "height": 900})
            await page.goto(running.chat_url + "/")
            for number, click in enumerate(["Approve", "Refuse", None], 1):
                await page.fill("#composer textarea", f"wipe every ticket ({number})")
                await page.press("#composer textarea", "Enter")
                question = page.locator(".approval").nth(number - 1)
                await question.locator("p").first.wait_for(timeout=20_000)
                assert "May I run notes__wipe {}?" in await question.locator("p").first.text_content()
                if click is not None:
                    await question.get_by_role("button", name=click).click()
                await question.locator(".outcome").wait_for(timeout=20_000)
                await page.locator(f'.role-assistant[data-done="1"] >> nth={number - 1}').wait_for(timeout=20_000)
            outcomes = await page.locator(".approval .outcome").all_text_contents()
            replies = await page.locator(".role-assistant .text").all_text_contents()
            buttons_left = await page.locator(".approval button").count()
            await shot(page, "web-chat-approval")
    assert outcomes == ["→ approved by you", "→ refused by you", "→ no answer within 3 s, so it was not run"]
    assert replies[-3] == "tool said: [approved by you]\nwiped"
    assert "not run: refused by you" in replies[-2] and "no answer within 3 s" in replies[-1]
    assert buttons_left == 0
