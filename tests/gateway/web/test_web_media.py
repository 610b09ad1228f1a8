"""Files sent from the web chat over real HTTP (no browser): a multipart form without JavaScript reaches the
model as an image part, an upload over media.max_bytes is refused having read no more than the limit, each
chat's images are served to that chat (and the operator) only, and search finds what files said."""

from __future__ import annotations

import asyncio
import hashlib
import re

import httpx

from gateway.web.chat_platform import chat_key
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.media import images_in, png
from tests.fakes.sdk_shapes import validate_chat_completions
from tests.fakes.web import ADMIN_TOKEN, open_chat, web_gateway, web_settings

LIMIT = 64 * 1024


def seen(request: RecordedRequest) -> Reply:
    validate_chat_completions(request.body)
    return Reply.answer(f"seen {len(images_in(request))} images: {request.last_user_text[:80]}")


async def media_keys(redis, prefix: str) -> list[str]:
    return [key async for key in redis.scan_iter(match=f"{prefix}:*media*", count=1000)]


async def test_a_photo_sent_by_a_form_without_javascript_reaches_the_model_and_shows_on_the_page(
    redis_url, key_prefix
) -> None:
    photo = png(320, 200)
    sha = hashlib.sha256(photo).hexdigest()
    async with FakeLLMServer(handler=seen) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url, timeout=30) as client:
                nonce = await open_chat(client)
                posted = await client.post(
                    "/send",
                    data={"text": "what does this <b>chart</b> show?", "nonce": nonce},
                    files={"file": ("q3 <dash>.png", photo, "image/png")},
                )
                assert posted.status_code == 303 and posted.headers["location"] == "/#end"
                await web.gateway.runner.wait_idle(timeout=20)
                page = (await client.get("/")).text
                served = await client.get(f"/media/{sha}")
    assert len(provider.requests) == 1
    assert images_in(provider.requests[0]) == [photo]  # the bytes as sent (small enough to be kept as they are)
    assert "what does this <b>chart</b> show?" in provider.requests[0].last_user_text
    assert "seen 1 images" in page
    assert f'<img src="/media/{sha}"' in page and 'width="320" height="200"' in page
    assert "q3 &lt;dash&gt;.png" in page and "<dash>" not in page  # every value escaped
    assert "&lt;b&gt;chart&lt;/b&gt;" in page
    assert served.status_code == 200 and served.content == photo and served.headers["content-type"] == "image/png"


async def test_with_javascript_the_answer_names_the_stored_items(redis_url, key_prefix) -> None:
    photo = png(40, 40, (0, 120, 0))
    async with FakeLLMServer(handler=seen) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url, timeout=30) as client:
                nonce = await open_chat(client)
                sent = await client.post(
                    "/send",
                    data={"nonce": nonce},
                    headers={"Accept": "application/json"},
                    files=[
                        ("file", ("green.png", photo, "image/png")),
                        ("file", ("notes.txt", b"plain notes", "text/plain")),
                    ],
                )
                await web.gateway.runner.wait_idle(timeout=20)
    assert sent.status_code == 200
    assert sent.json() == {
        "update_id": nonce,
        "queued": True,
        "items": [
            {
                "kind": "image",
                "name": "green.png",
                "about": f"{len(photo)} bytes",
                "sha": hashlib.sha256(photo).hexdigest(),
            },
            {"kind": "document", "name": "notes.txt", "about": "11 bytes", "sha": ""},
        ],
    }
    assert images_in(provider.requests[0]) == [photo]  # a message of files alone, no caption
    assert "plain notes" in provider.requests[0].last_user_text


async def test_an_upload_over_the_limit_is_refused_and_nothing_is_kept(redis, redis_url, key_prefix) -> None:
    settings = web_settings(redis_url, key_prefix, "http://127.0.0.1:9", media={"max_bytes": LIMIT})
    async with web_gateway(settings) as web:
        async with httpx.AsyncClient(base_url=web.chat_url, timeout=30) as client:
            nonce = await open_chat(client)
            refused = await client.post(
                "/send",
                data={"text": "the whole dump", "nonce": nonce},
                files={"file": ("dump.bin", bytes(LIMIT + 1), "application/octet-stream")},
            )
            page = (await client.get("/")).text
        assert refused.status_code == 413
        assert refused.text == "dump.bin is more than 64 KB, over the 64 KB limit: nothing was sent\n"
        assert await media_keys(redis, key_prefix) == []
        assert "the whole dump" not in page  # not waiting either: the message was not taken in
        assert await web.gateway.runner.inbox.waiting(chat_key(client.cookies["fg_chat"]), 10) == []


async def test_an_upload_over_the_limit_is_refused_before_the_rest_of_it_arrives(redis, redis_url, key_prefix) -> None:
    """A client still sending gets its refusal once the limit is passed: the page does not read on to the end."""
    settings = web_settings(redis_url, key_prefix, "http://127.0.0.1:9", media={"max_bytes": LIMIT})
    async with web_gateway(settings) as web:
        async with httpx.AsyncClient(base_url=web.chat_url) as client:
            nonce = await open_chat(client)
            cookie = client.cookies["fg_chat"]
        host, port = web.chat_url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        boundary = "fgboundary"
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="nonce"\r\n\r\n{nonce}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="huge.iso"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        declared = len(head) + 1024 * 1024 * 1024  # says a gigabyte is coming; a fraction of it is ever sent
        writer.write(
            (
                f"POST /send HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: fg_chat={cookie}\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {declared}\r\n\r\n"
            ).encode()
            + head
            + bytes(4 * LIMIT)
        )
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 10)  # answered while the body is still "coming"
        writer.close()
        assert status.startswith(b"HTTP/1.1 413"), status
        assert await media_keys(redis, key_prefix) == []


async def test_a_chat_sees_its_own_images_only_and_the_operator_needs_the_token(redis_url, key_prefix) -> None:
    photo = png(64, 48, (10, 10, 200))
    sha = hashlib.sha256(photo).hexdigest()
    async with FakeLLMServer(handler=seen) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with (
                httpx.AsyncClient(base_url=web.chat_url) as alice,
                httpx.AsyncClient(base_url=web.chat_url) as bob,
                httpx.AsyncClient(base_url=web.operator_url) as operator,
            ):
                await alice.post(
                    "/send",
                    data={"text": "mine", "nonce": await open_chat(alice)},
                    files={"file": ("mine.png", photo, "image/png")},
                    headers={"Accept": "application/json"},
                )
                await open_chat(bob)
                await web.gateway.runner.wait_idle(timeout=20)
                assert (await alice.get(f"/media/{sha}")).content == photo
                assert (await bob.get(f"/media/{sha}")).status_code == 404  # Alice's image is nothing in Bob's chat
                async with httpx.AsyncClient(base_url=web.chat_url) as stranger:  # no chat cookie
                    assert (await stranger.get(f"/media/{sha}")).status_code == 403
                assert (await alice.get("/media/..%2F..%2Fetc")).status_code == 404

                alice_chat = "web%3A" + alice.cookies["fg_chat"]
                bob_chat = "web%3A" + bob.cookies["fg_chat"]
                assert (await operator.get(f"/admin/chats/{alice_chat}/media/{sha}")).status_code == 401
                bearer = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
                shown = await operator.get(f"/admin/chats/{alice_chat}/media/{sha}", headers=bearer)
                assert shown.status_code == 200 and shown.content == photo
                assert (await operator.get(f"/admin/chats/{bob_chat}/media/{sha}", headers=bearer)).status_code == 404
                chat_page = await operator.get(f"/admin/chats/{alice_chat}", headers=bearer)
                assert f'<img src="/admin/chats/{alice_chat}/media/{sha}"' in chat_page.text
                assert "mine.png" in chat_page.text


async def test_a_stored_file_of_another_type_is_never_served_as_a_page(redis_url, key_prefix) -> None:
    """An HTML file sent as a document is kept, listed by name, and never handed to a browser from this origin."""
    page_bytes = b"<html><script>alert(1)</script></html>"
    async with FakeLLMServer(handler=seen) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url) as client:
                await client.post(
                    "/send",
                    data={"nonce": await open_chat(client)},
                    headers={"Accept": "application/json"},
                    files={"file": ("trap.html", page_bytes, "text/html")},
                )
                await web.gateway.runner.wait_idle(timeout=20)
                served = await client.get(f"/media/{hashlib.sha256(page_bytes).hexdigest()}")
                page = (await client.get("/")).text
    assert served.status_code == 404
    assert "trap.html" in page and "<script>alert(1)" not in page


async def test_search_finds_a_document_by_its_text_and_a_photo_by_its_name(redis_url, key_prefix) -> None:
    runbook = "Rotating the signing keys: run keyctl rotate --zone emerald-falcon-7 and restart the edge.\n"
    async with FakeLLMServer(handler=seen) as provider:
        async with web_gateway(web_settings(redis_url, key_prefix, provider.openai_base_url)) as web:
            async with httpx.AsyncClient(base_url=web.chat_url, timeout=30) as client:
                await client.post(
                    "/send",
                    data={"text": "our runbook", "nonce": await open_chat(client)},
                    files={"file": ("runbook.txt", runbook.encode(), "text/plain")},
                    headers={"Accept": "application/json"},
                )
                await web.gateway.runner.wait_idle(timeout=20)
                await client.post(
                    "/send",
                    data={"nonce": await open_chat(client)},
                    files={"file": ("latency-heatmap.png", png(30, 30), "image/png")},
                    headers={"Accept": "application/json"},
                )
                await web.gateway.runner.wait_idle(timeout=20)

                by_text = await client.get("/search", params={"q": "emerald-falcon-7"})
                by_name = await client.get("/search", params={"q": "latency-heatmap"})
                link = re.search(r'href="(/m/[^"#]+)', by_name.text).group(1)
                opened = await client.get(link)
    assert 'class="hit"' in by_text.text and "emerald-falcon-7" in by_text.text
    assert 'class="hit"' in by_name.text and "latency-heatmap" in by_name.text
    assert '<img src="/media/' in opened.text and "latency-heatmap.png" in opened.text  # the hit opens with its image
