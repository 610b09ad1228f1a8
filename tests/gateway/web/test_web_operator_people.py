"""The operator's page of what a bot keeps about a person, over real HTTP: every entry with how it was written and
where it was learned, reached from the chat the person wrote in; refused without the token; the remove and forget
buttons change Redis at once; an unknown or odd id is shown as text, never as markup, never as an error."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from html import unescape
from urllib.parse import quote

import httpx

from gateway.store.memory import MemoryStore, group_scope
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.web import ADMIN_TOKEN, open_chat, web_gateway, web_settings

BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
GROUP_CHAT = "tg:-100777"


def people_page(person: str) -> str:
    return "/admin/people/" + quote(person, safe="")


def memory_of(web) -> MemoryStore:
    store = web.gateway.store
    return MemoryStore(store.channel, store.prefix)


async def say(web, client: httpx.AsyncClient, text: str) -> None:
    await client.post("/send", data={"text": text, "nonce": await open_chat(client)})
    await web.gateway.runner.wait_idle()


@contextlib.asynccontextmanager
async def logged_in(web) -> AsyncIterator[httpx.AsyncClient]:
    """A browser of the operator's, logged in through the form (the admin cookie, no header)."""
    async with httpx.AsyncClient(base_url=web.operator_url, headers={"Origin": web.operator_url}) as client:
        answer = await client.post("/admin/login", data={"token": ADMIN_TOKEN, "next": "/admin"})
        assert answer.status_code == 303 and "fg_admin" in client.cookies
        yield client


async def press(client: httpx.AsyncClient, page: str, field: str, value: str) -> httpx.Response:
    """Submit the page's forget form whose hidden ``field`` is ``value``, as the browser would, and follow it."""
    forms = re.findall(
        r'<form class="forget" action="([^"]+)" method="post">\s*<input type="hidden" name="(\w+)" '
        r'value="([^"]*)"',
        page,
    )
    (action,) = [unescape(a) for a, name, val in forms if name == field and unescape(val) == value]
    answer = await client.post(action, data={field: value}, headers={"Sec-Fetch-Site": "same-origin"})
    assert answer.status_code == 303
    return await client.get(answer.headers["location"])


async def test_a_persons_entries_show_how_they_were_written_and_where_from_linked_from_their_chat(
    redis_url, key_prefix
):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with (
                httpx.AsyncClient(base_url=web.chat_url) as chat_client,
                httpx.AsyncClient(base_url=web.operator_url, headers=BEARER) as operator,
            ):
                await say(web, chat_client, "hello there")
                await say(web, chat_client, "/remember I prefer answers in French")
                chat = person = f"web:{chat_client.cookies['fg_chat']}"  # a browser of the web chat is one person
                memory = memory_of(web)
                await memory.add(
                    person, group_scope(GROUP_CHAT), "runs the release", source="tool", chat=GROUP_CHAT, message_id="77"
                )
                await memory.add(
                    "",
                    group_scope(GROUP_CHAT),
                    "no memes on Fridays",
                    source="remember",
                    chat=GROUP_CHAT,
                    message_id="78",
                )
                (remembered,) = await memory.entries(person, "private")

                chat_page = await operator.get("/admin/chats/" + quote(chat, safe=""))
                assert f'href="{people_page(person)}"' in chat_page.text  # the person who wrote links to their memory
                page = await operator.get(people_page(person))
                assert page.status_code == 200
                text = page.text
                assert "I prefer answers in French" in text and "runs the release" in text
                assert "no memes on Fridays" not in text  # the group's own memory is not the person's
                row = text[text.index("I prefer answers in French") :].split("</tr>")[0]
                assert "remember" in row and "/admin/chats/" + quote(chat, safe="") in row
                assert f"message {remembered.message_id}" in row and "private chats" in row
                row = text[text.index("runs the release") :].split("</tr>")[0]
                assert ">tool<" in row and "/admin/chats/" + quote(GROUP_CHAT, safe="") in row and "message 77" in row

                group = await operator.get(people_page("group:" + GROUP_CHAT))
                assert group.status_code == 200 and "no memes on Fridays" in group.text
                assert "runs the release" not in group.text
                by_box = await operator.get("/admin/people", params={"person": person})
                assert by_box.status_code == 200 and "I prefer answers in French" in by_box.text
                assert 'action="/admin/people"' in (await operator.get("/admin")).text  # the box to open someone


async def test_without_the_token_the_page_and_its_buttons_are_refused(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            memory = memory_of(web)
            await memory.add("tg:42", "private", "keeps bees", source="remember", chat="tg:42", message_id="1")
            async with httpx.AsyncClient(base_url=web.operator_url) as stranger:
                for path in [people_page("tg:42"), "/admin/people?person=tg:42"]:
                    refused = await stranger.get(path)
                    assert refused.status_code == 401 and "keeps bees" not in refused.text
                wrong = {"Authorization": "Bearer operator-token-for-tests-0123456788"}
                for headers in [{}, wrong]:
                    post = await stranger.post(people_page("tg:42") + "/forget", data={"all": "all"}, headers=headers)
                    assert post.status_code == 401
            async with logged_in(web) as operator:
                cross_site = await operator.post(
                    people_page("tg:42") + "/forget", data={"all": "all"}, headers={"Origin": "https://evil.example"}
                )
                assert cross_site.status_code == 403
            assert [e.text for e in await memory.entries("tg:42")] == ["keeps bees"]  # nothing was removed


async def test_removing_one_then_forgetting_all_through_the_buttons(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            memory = memory_of(web)
            for text in ["keeps bees", "is vegetarian", "lives in Lyon"]:
                await memory.add("tg:42", "private", text, source="remember", chat="tg:42", message_id="5")
            await memory.add(
                "tg:42",
                group_scope(GROUP_CHAT),
                "leads the group",
                source="compaction",
                chat=GROUP_CHAT,
                message_id="9",
            )
            await memory.add(
                "tg:43", "private", "someone else entirely", source="remember", chat="tg:43", message_id="6"
            )
            (vegetarian,) = [e for e in await memory.entries("tg:42") if e.text == "is vegetarian"]
            async with logged_in(web) as operator:
                page = await operator.get(people_page("tg:42"))
                assert page.status_code == 200 and "is vegetarian" in page.text

                after = await press(operator, page.text, "number", str(vegetarian.number))
                assert "is vegetarian" not in after.text and "keeps bees" in after.text
                assert "Removed 1 entry" in after.text
                assert "is vegetarian" not in [e.text for e in await memory.entries("tg:42")]

                emptied = await press(operator, after.text, "all", "all")
                assert "nothing kept" in emptied.text.lower() and "leads the group" not in emptied.text
                assert await memory.entries("tg:42") == []  # every scope, the groups' too
                assert [e.text for e in await memory.entries("tg:43")] == ["someone else entirely"]
            assert web.gateway.events.counters["memory_writes_operator"] == 1 + 3  # one, then the three left


async def test_unknown_and_odd_ids_and_entries_are_shown_as_text(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            memory = memory_of(web)
            odd = 'web:<img src=x onerror="alert(1)">/a?b#c%d'
            await memory.add(
                odd, "private", "<script>alert('kept')</script>", source="tool", chat="tg:1", message_id="<b>"
            )
            async with httpx.AsyncClient(base_url=web.operator_url, headers=BEARER) as operator:
                unknown = await operator.get(people_page("tg:123456"))
                assert unknown.status_code == 200 and "nothing kept about tg:123456" in unknown.text.lower()
                for answer in [
                    await operator.get(people_page(odd)),
                    await operator.get("/admin/people", params={"person": odd}),
                ]:
                    assert answer.status_code == 200
                    assert "&lt;script&gt;alert(" in answer.text and "<script>alert" not in answer.text
                    assert "<img src=x" not in answer.text and "&lt;img src=x" in answer.text
                    assert "<b>" not in answer.text
                braces = await operator.get("/admin/people", params={"person": "tg:{42}"})
                assert braces.status_code == 400 and "tg:{42}" in braces.text  # says why, no 500
                nobody = await operator.get(people_page("group:tg:-1"))
                assert nobody.status_code == 200 and "nothing kept" in nobody.text.lower()
