"""Image parts over the OpenAI-compatible API: a data URL reaches the provider as an image of the person's
message, one over ``media.max_bytes`` is 413 and a broken one 400 naming the part; an https URL is downloaded
at request time within the same limit."""

from __future__ import annotations

import base64
import io
import os

import openai
import pytest
from PIL import Image

from gateway.api.errors import ApiError
from gateway.api.images import MAX_IMAGES, decode_data_url, read_image
from gateway.api.requests import ImagePart
from gateway.config import Settings
from gateway.media.errors import MediaError, MediaTooLarge
from gateway.web.live_adapter import upload_file_id, uploaded
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

LIMIT = 4096


def png(side: int = 16) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def asking(url: str, text: str = "What is in this picture?") -> list[dict[str, object]]:
    parts = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def settings(redis_url: str, key_prefix: str, base_url: str) -> Settings:
    return api_settings(redis_url, key_prefix, base_url, media={"max_bytes": LIMIT})


async def test_a_data_url_image_reaches_the_provider_as_an_image_of_the_message(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("A red square.")) as provider:
        async with api_gateway(settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            answer = await api.async_client().chat.completions.create(model="m", messages=asking(data_url(png())))
            sent = chat_turns(provider)[-1].messages[-1]
    assert answer.choices[0].message.content == "A red square."
    assert sent["role"] == "user" and isinstance(sent["content"], list)
    kinds = [part["type"] for part in sent["content"]]
    assert "image_url" in kinds and "What is in this picture?" in str(sent["content"])
    image = next(part for part in sent["content"] if part["type"] == "image_url")
    assert image["image_url"]["url"].startswith("data:image/")


async def test_an_image_alone_is_a_message(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("A red square.")) as provider:
        async with api_gateway(settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            parts = [{"type": "image_url", "image_url": {"url": data_url(png())}}]
            await api.async_client().chat.completions.create(model="m", messages=[{"role": "user", "content": parts}])
            sent = chat_turns(provider)[-1].messages[-1]
    assert any(part["type"] == "image_url" for part in sent["content"])


async def test_a_data_url_over_the_limit_is_413_and_nothing_is_asked(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("never")) as provider:
        async with api_gateway(settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            with pytest.raises(openai.APIStatusError) as refused:
                await api.async_client().chat.completions.create(
                    model="m", messages=asking(data_url(os.urandom(LIMIT + 500)))
                )
    assert refused.value.status_code == 413
    assert refused.value.body["param"] == "messages[0].content[1]"
    assert chat_turns(provider) == []


@pytest.mark.parametrize(
    "url",
    ["data:image/png;base64,not*base64", "data:text/plain;base64,aGVsbG8=", "http://example.com/a.png", "ftp://x"],
)
async def test_an_image_url_that_is_not_one_is_400_naming_the_part(redis_url, key_prefix, url):
    async with FakeLLMServer(default=Reply.answer("never")) as provider:
        async with api_gateway(settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            with pytest.raises(openai.BadRequestError) as refused:
                await api.async_client().chat.completions.create(model="m", messages=asking(url))
    assert refused.value.body["param"] == "messages[0].content[1]"
    assert chat_turns(provider) == []


def test_a_data_url_is_measured_before_it_is_decoded():
    with pytest.raises(ApiError) as refused:
        decode_data_url(data_url(b"x" * 3 * LIMIT), "p", LIMIT)
    assert refused.value.status == 413
    assert decode_data_url(data_url(b"abc", "image/webp"), "p", LIMIT) == (b"abc", "image/webp")


def part(url: str) -> ImagePart:
    return ImagePart.model_validate({"type": "image_url", "image_url": {"url": url}})


async def test_an_https_image_is_downloaded_within_the_limit():
    asked: list[tuple[str, int]] = []

    async def fetch(url: str, limit: int, name: str) -> bytes:
        asked.append((url, limit))
        return b"picture"

    assert await read_image(part("https://example.com/cat.png"), "p", LIMIT, fetch) == (b"picture", "")
    assert asked == [("https://example.com/cat.png", LIMIT)]


@pytest.mark.parametrize(
    ("failure", "status"), [(MediaTooLarge("the image", 9999, LIMIT), 413), (MediaError("answered 404"), 400)]
)
async def test_an_https_image_that_cannot_be_had_is_refused(failure, status):
    async def fetch(url: str, limit: int, name: str) -> bytes:
        raise failure

    with pytest.raises(ApiError) as refused:
        await read_image(part("https://example.com/cat.png"), "messages[0].content[1]", LIMIT, fetch)
    assert (refused.value.status, refused.value.param) == (status, "messages[0].content[1]")


def test_an_image_file_id_names_its_chat_and_sha():
    assert uploaded(upload_file_id("alice/s_1", "abc")) == ("alice/s_1", "abc")
    assert uploaded("path:/etc/passwd") is None


async def test_more_images_than_a_message_may_carry_is_400(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("never")) as provider:
        async with api_gateway(settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            parts = [{"type": "image_url", "image_url": {"url": data_url(png(4))}}] * (MAX_IMAGES + 1)
            with pytest.raises(openai.BadRequestError) as refused:
                await api.async_client().chat.completions.create(
                    model="m", messages=[{"role": "user", "content": parts}]
                )
    assert refused.value.body["param"] == "messages[0].content"
    assert chat_turns(provider) == []
