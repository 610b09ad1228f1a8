"""``platforms.api.host`` and ``port`` decide where the API listens: a gateway told another loopback address
serves there, and only there."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes.api_gateway import KEYS, api_gateway, api_settings
from tests.fakes.llm_server import FakeLLMServer, Reply


async def test_the_api_listens_on_the_configured_host(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("here")) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url)
        settings.platforms.api.host = "127.0.0.2"
        async with api_gateway(settings) as api:
            assert api.base_url.startswith("http://127.0.0.2:")
            port = int(api.base_url.split(":")[2].split("/")[0])
            answer = await api.async_client().chat.completions.create(
                model="any", messages=[{"role": "user", "content": "hi"}]
            )
            assert answer.choices[0].message.content == "here"
            headers = {"Authorization": f"Bearer {KEYS['alice']}"}
            async with httpx.AsyncClient() as client:  # the same port on another address is not the API's
                with pytest.raises(httpx.ConnectError):
                    await client.get(f"http://127.0.0.1:{port}/v1/models", headers=headers)
