"""API people in the admins' commands and the operator view: ``/block api:<name>``, ``/unblock`` and ``/allow``
name a key's person, and the operator view lists an API session under its key's name and opens it."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import openai
import pytest

from gateway.access.roles import named_person
from gateway.api.sessions import SESSION_HEADER
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.web import ADMIN_TOKEN, free_port


def test_an_api_person_is_named_by_the_key_name():
    assert named_person("api:laptop", "tg") == "api:laptop"
    assert named_person("api:ci.runner-2", "dc") == "api:ci.runner-2"  # a key's name may hold dots
    assert named_person("bob", "api") == "api:bob"  # a bare name in an API session is an API person
    assert named_person("api:<@123>", "tg") is None and named_person("api:a/b", "tg") is None
    assert named_person("api:" + "x" * 65, "tg") is None  # longer than a key's name may be
    assert named_person("web:a.b", "tg") is None and named_person("tg:a.b", "tg") is None  # dots are the API's


async def ask(client: openai.AsyncOpenAI, text: str) -> str:
    answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    return str(answer.choices[0].message.content)


async def test_an_admin_blocks_and_unblocks_an_api_key_by_its_name(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("fine")) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, access={"admins": ["api:alice"]})
        async with api_gateway(settings) as api:
            alice, bob = api.async_client("alice"), api.async_client("bob")
            blocked = await ask(alice, "/block api:bob")
            with pytest.raises(openai.PermissionDeniedError):
                await ask(bob, "anyone there?")
            unblocked = await ask(alice, "/unblock api:bob")
            answered = await ask(bob, "and now?")
    assert "api:bob" in blocked and "api:bob" in unblocked
    assert answered == "fine"


async def test_the_operator_view_lists_an_api_session_under_its_key_name(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("fine")) as provider:
        gateway = {"metrics_port": free_port(), "admin_token": ADMIN_TOKEN}
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, gateway=gateway)
        async with api_gateway(settings) as api:
            raw = await api.async_client("bob").chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "hello from the API"}]
            )
            chat = f"api:bob/{raw.headers[SESSION_HEADER]}"
            base = api.servers.addresses["operator view"].removesuffix("/admin")
            bearer = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with httpx.AsyncClient(base_url=base, headers=bearer) as operator:
                listed = await operator.get("/admin")
                page = await operator.get("/admin/chats/" + quote(chat, safe=""))
    assert listed.status_code == 200 and chat in listed.text
    assert page.status_code == 200 and "hello from the API" in page.text
