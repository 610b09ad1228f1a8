"""Http1Transport against real servers on loopback: aiohttp for ordinary traffic, raw asyncio servers for wire edge cases."""

from __future__ import annotations

import asyncio
import gzip
import json
import shutil
import socket
import ssl
import struct
import subprocess
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import uvloop
from aiohttp import web

from agent.llm import ChatClient, ProviderTimeout, ProviderUnavailable
from agent.llm.transport import Http1Transport, PostTarget
from tests.fakes.llm_server import FakeLLMServer, Reply

TIMEOUTS = httpx.Timeout(5.0).as_dict()


async def send(
    transport: Http1Transport,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
    timeout: httpx.Timeout | None = None,
) -> httpx.Response:
    """One request through the transport's httpx interface."""
    extensions = {"timeout": (timeout.as_dict() if timeout is not None else TIMEOUTS)}
    request = httpx.Request(method, url, headers=headers, content=content, extensions=extensions)
    response = await transport.handle_async_request(request)
    try:
        await response.aread()
    finally:
        await response.aclose()
    return response


# --------------------------------------------------------------------------- servers


@asynccontextmanager
async def aiohttp_server() -> AsyncIterator[SimpleNamespace]:
    """An aiohttp app that echoes requests, compresses on demand and sleeps on demand; records client peers."""
    state = SimpleNamespace(peers=[], active=0, most=0, url="")

    async def echo(request: web.Request) -> web.Response:
        state.peers.append(request.transport.get_extra_info("peername"))
        body = await request.read()
        return web.json_response({
            "method": request.method,
            "path": request.path_qs,
            "headers": [[name, value] for name, value in request.headers.items()],
            "body": body.decode(),
        })

    async def compressed(request: web.Request) -> web.Response:
        state.peers.append(request.transport.get_extra_info("peername"))
        response = web.Response(text="squeeze me " * 500, content_type="text/plain")
        coding = request.query.get("coding")
        response.enable_compression(web.ContentCoding(coding) if coding else None)
        return response

    async def slow(request: web.Request) -> web.Response:
        state.peers.append(request.transport.get_extra_info("peername"))
        state.active += 1
        state.most = max(state.most, state.active)
        try:
            await asyncio.sleep(float(request.query.get("s", "0.1")))
        finally:
            state.active -= 1
        return web.json_response({"slept": request.query.get("s", "0.1")})

    async def completions(request: web.Request) -> web.Response:
        state.peers.append(request.transport.get_extra_info("peername"))
        body = await request.json()
        state.last_body = body
        state.last_headers = dict(request.headers)
        text = f"echo: {body['messages'][-1]['content']}"
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        })

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/compressed", compressed)
    app.router.add_get("/slow", slow)
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    state.url = f"http://{host}:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[SimpleNamespace]:
    """A bare TCP server; ``handler(reader, writer, index)`` runs per connection (index counts from 0)."""
    state = SimpleNamespace(connections=0, url="", tasks=set())

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = state.connections
        state.connections += 1
        state.tasks.add(asyncio.current_task())
        try:
            await handler(reader, writer, index)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            state.tasks.discard(asyncio.current_task())
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield state
    finally:
        server.close()
        for task in list(state.tasks):
            task.cancel()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """(head, body) of the next request, None at a clean EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def answer(body: bytes, *extra: str) -> bytes:
    headers = "".join(f"{line}\r\n" for line in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body


async def wait_for_eof(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
async def transport() -> AsyncIterator[Http1Transport]:
    http = Http1Transport()
    yield http
    await http.aclose()


# --------------------------------------------------------------------------- ordinary traffic


async def test_json_post_round_trip_sends_exactly_the_request_headers(transport):
    async with aiohttp_server() as server:
        payload = json.dumps({"model": "m", "messages": [{"role": "user", "content": "héllo"}]}).encode()
        response = await send(transport, "POST", f"{server.url}/echo?x=1&y=%20", content=payload,
                              headers={"content-type": "application/json", "authorization": "Bearer sk-1",
                                       "x-api-key": "k-2"})
    assert response.status_code == 200 and response.reason_phrase == "OK" and response.http_version == "HTTP/1.1"
    echoed = response.json()
    assert echoed["method"] == "POST" and echoed["path"] == "/echo?x=1&y=%20"
    assert json.loads(echoed["body"]) == json.loads(payload)
    sent = {name.lower(): value for name, value in echoed["headers"]}
    port = server.url.rsplit(":", 1)[1]
    assert sent["host"] == f"127.0.0.1:{port}"
    assert sent["content-type"] == "application/json" and sent["authorization"] == "Bearer sk-1"
    assert sent["x-api-key"] == "k-2" and sent["content-length"] == str(len(payload))
    assert sent["accept-encoding"] == "gzip, deflate"
    assert "user-agent" not in sent and "transfer-encoding" not in sent
    assert [name.lower() for name, _ in echoed["headers"]].count("content-length") == 1


async def test_post_to_a_target_sends_the_same_request_and_reuses_its_connection(transport):
    async with aiohttp_server() as server:
        target = PostTarget(f"{server.url}/echo?x=1", {"content-type": "application/json", "authorization": "Bearer sk-1"})
        answers = [await transport.post(target, b'{"n":%d}' % number, TIMEOUTS) for number in range(3)]
        empty = await transport.post(target, b"", TIMEOUTS)
    for number, answer in enumerate(answers):
        echoed = json.loads(answer.body)
        assert answer.status == 200 and echoed["method"] == "POST" and echoed["path"] == "/echo?x=1"
        assert json.loads(echoed["body"]) == {"n": number}
        sent = {name.lower(): value for name, value in echoed["headers"]}
        assert sent["authorization"] == "Bearer sk-1" and sent["content-length"] == str(len(b'{"n":0}'))
        assert sent["accept-encoding"] == "gzip, deflate"
    assert json.loads(empty.body)["body"] == ""
    assert len(set(server.peers)) == 1  # one keep-alive connection carried all four


async def test_a_target_refuses_an_unsupported_scheme_and_header_injection():
    with pytest.raises(httpx.UnsupportedProtocol):
        PostTarget("ftp://127.0.0.1/file", {})
    with pytest.raises(httpx.LocalProtocolError):
        PostTarget("http://127.0.0.1/", {"x-evil": "a\r\nInjected: 1"})


async def test_works_as_an_httpx_async_client_transport():
    async with aiohttp_server() as server, httpx.AsyncClient(transport=Http1Transport(), base_url=server.url) as client:
        response = await client.post("/echo", json={"a": 1}, headers={"user-agent": "foldgate-test"})
        empty = await client.get("/echo")
    assert json.loads(response.json()["body"]) == {"a": 1}
    sent = {name.lower(): value for name, value in response.json()["headers"]}
    assert sent["user-agent"] == "foldgate-test"
    assert empty.json()["method"] == "GET" and empty.json()["body"] == ""
    assert "content-length" not in {name.lower() for name, _ in empty.json()["headers"]}


async def test_sequential_requests_reuse_one_connection(transport):
    async with aiohttp_server() as server:
        for number in range(5):
            response = await send(transport, "POST", f"{server.url}/echo", content=b"n=%d" % number)
            assert response.json()["body"] == f"n={number}"
    assert len(server.peers) == 5 and len(set(server.peers)) == 1


async def test_tcp_nodelay_is_set_on_pooled_connections(transport):
    async with aiohttp_server() as server:
        await send(transport, "GET", f"{server.url}/echo")
        (pool,) = transport._pools.values()
        (connection,) = pool.idle
        sock = connection.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


@pytest.mark.parametrize("coding", [None, "gzip", "deflate"])
async def test_compressed_responses_are_decoded_and_the_header_dropped(transport, coding):
    async with aiohttp_server() as server:
        query = f"?coding={coding}" if coding else ""
        response = await send(transport, "GET", f"{server.url}/compressed{query}")
    assert response.text == "squeeze me " * 500
    assert "content-encoding" not in response.headers
    # Compressed on the wire: far fewer bytes than the text.
    assert int(response.headers["content-length"]) < 1000


async def test_raw_deflate_and_multi_member_gzip_are_decoded(transport):
    bodies = [
        (b"deflate", zlib.compress(b"zlib-wrapped")[2:-4], b"zlib-wrapped"),  # raw deflate, as some servers send
        (b"gzip", gzip.compress(b"one ") + gzip.compress(b"two"), b"one two"),
        (b"gzip, identity", gzip.compress(b"listed"), b"listed"),
    ]

    async def handler(reader, writer, index):
        for coding, body, _ in bodies:
            await read_request(reader)
            writer.write(answer(body, f"Content-Encoding: {coding.decode()}"))

        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        for _, _, expected in bodies:
            response = await send(transport, "GET", server.url)
            assert response.content == expected and "content-encoding" not in response.headers


async def test_fifty_concurrent_requests_each_get_their_own_answer(transport):
    async with aiohttp_server() as server:
        responses = await asyncio.gather(*(
            send(transport, "POST", f"{server.url}/echo", content=f"request {n}".encode()) for n in range(50)
        ))
    assert [r.json()["body"] for r in responses] == [f"request {n}" for n in range(50)]


async def test_concurrent_requests_beyond_the_limit_share_the_allowed_connections():
    http = Http1Transport(limit_per_host=5)
    try:
        async with aiohttp_server() as server:
            responses = await asyncio.gather(*(send(http, "GET", f"{server.url}/slow?s=0.02") for _ in range(40)))
    finally:
        await http.aclose()
    assert all(r.status_code == 200 for r in responses)
    assert server.most <= 5 and len(set(server.peers)) <= 5


async def test_pool_limit_serialises_requests_on_one_connection():
    http = Http1Transport(limit_per_host=1)
    try:
        async with aiohttp_server() as server:
            first, second = await asyncio.gather(
                send(http, "GET", f"{server.url}/slow?s=0.1"), send(http, "GET", f"{server.url}/slow?s=0.1")
            )
    finally:
        await http.aclose()
    assert first.status_code == second.status_code == 200
    assert server.most == 1 and len(server.peers) == 2 and len(set(server.peers)) == 1


async def test_waiting_longer_than_the_pool_timeout_raises_pool_timeout():
    http = Http1Transport(limit_per_host=1)
    try:
        async with aiohttp_server() as server:
            busy = asyncio.create_task(send(http, "GET", f"{server.url}/slow?s=0.5"))
            await asyncio.sleep(0.05)
            with pytest.raises(httpx.PoolTimeout):
                await send(http, "GET", f"{server.url}/slow?s=0", timeout=httpx.Timeout(5.0, pool=0.1))
            assert (await busy).status_code == 200
            # The slot is free again.
            assert (await send(http, "GET", f"{server.url}/slow?s=0")).status_code == 200
    finally:
        await http.aclose()


# --------------------------------------------------------------------------- response framing


async def test_chunked_response_with_extensions_and_trailer_then_keep_alive(transport):
    pieces = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5;name=value\r\nhel",
        b"lo\r\n",
        b"1\r",
        b"\n \r\n",
        b"A\r\n0123456789\r\n0\r\nX-Sum: 16\r\n",
        b"\r\n",
    ]

    async def handler(reader, writer, index):
        await read_request(reader)
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)
        await read_request(reader)
        writer.write(answer(b"again"))
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        response = await send(transport, "GET", server.url)
        assert response.content == b"hello 0123456789"
        assert "x-sum" not in response.headers  # trailers are dropped
        assert (await send(transport, "GET", server.url)).content == b"again"
    assert server.connections == 1


async def test_body_read_until_close_and_connection_not_reused(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"part two")
        await writer.drain()

    async with raw_server(handler) as server:
        assert (await send(transport, "GET", server.url)).content == b"part one, part two"
        assert (await send(transport, "GET", server.url)).content == b"part one, part two"
    assert server.connections == 2


@pytest.mark.parametrize("extra", [("Connection: close",), ()], ids=["connection-close", "http/1.0"])
async def test_connection_close_and_http10_answers_are_not_reused(transport, extra):
    async def handler(reader, writer, index):
        # The server would happily go on: only the client's reading of the answer decides.
        while await read_request(reader) is not None:
            response = answer(b"bye", *extra)
            if not extra:
                response = response.replace(b"HTTP/1.1", b"HTTP/1.0", 1)
            writer.write(response)

    async with raw_server(handler) as server:
        for _ in range(3):
            assert (await send(transport, "GET", server.url)).content == b"bye"
    assert server.connections == 3


async def test_http10_keep_alive_answer_is_reused(transport):
    async def handler(reader, writer, index):
        while await read_request(reader) is not None:
            writer.write(answer(b"ok", "Connection: keep-alive").replace(b"HTTP/1.1", b"HTTP/1.0", 1))

    async with raw_server(handler) as server:
        for _ in range(3):
            assert (await send(transport, "GET", server.url)).content == b"ok"
    assert server.connections == 1


async def test_interim_responses_are_skipped(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" + answer(b"final", "X-Final: yes"))
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        response = await send(transport, "POST", server.url, content=b"{}")
    assert response.status_code == 200 and response.content == b"final"
    assert response.headers["x-final"] == "yes" and "link" not in response.headers


async def test_head_204_and_304_have_no_body_and_keep_the_connection(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        # HEAD: the length (and coding) of a body not sent.
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nContent-Encoding: gzip\r\n\r\n")
        await read_request(reader)
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await read_request(reader)
        writer.write(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n")
        await read_request(reader)
        writer.write(answer(b"last"))
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        head = await send(transport, "HEAD", server.url)
        assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == "10"
        assert (await send(transport, "DELETE", server.url)).status_code == 204
        assert (await send(transport, "GET", server.url)).status_code == 304
        assert (await send(transport, "GET", server.url)).content == b"last"
    assert server.connections == 1


async def test_headers_are_case_insensitive_and_repeats_are_kept(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(answer(b"{}", "Set-Cookie: a=1", "set-cookie: b=2", "X-Request-ID:   abc  "))
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        response = await send(transport, "GET", server.url)
    assert response.headers.get_list("SET-COOKIE") == ["a=1", "b=2"]
    assert response.headers["x-request-id"] == "abc"


async def test_a_response_split_byte_by_byte_is_parsed(transport):
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"

    async def handler(reader, writer, index):
        await read_request(reader)
        for offset in range(len(wire)):
            writer.write(wire[offset:offset + 1])
            await writer.drain()
            await asyncio.sleep(0)
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        assert (await send(transport, "GET", server.url)).content == b"abcde"


# --------------------------------------------------------------------------- stale keep-alive and failures


@pytest.mark.parametrize("reset", [False, True], ids=["eof", "reset"])
async def test_stale_keep_alive_connection_is_retried_once_on_a_new_one(transport, reset):
    async def handler(reader, writer, index):
        served = 0
        while await read_request(reader) is not None:
            if index == 0 and served == 1:
                # The server gave up on the idle connection just as the client reused it.
                if reset:
                    writer.get_extra_info("socket").setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort() if reset else writer.close()
                return
            writer.write(answer(f"connection {index}".encode()))
            served += 1

    async with raw_server(handler) as server:
        assert (await send(transport, "POST", server.url, content=b"1")).content == b"connection 0"
        assert (await send(transport, "POST", server.url, content=b"2")).content == b"connection 1"
        assert (await send(transport, "POST", server.url, content=b"3")).content == b"connection 1"
    assert server.connections == 2


async def test_an_idle_connection_the_server_closed_is_not_reused(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(answer(b"once"))
        await writer.drain()

    async with raw_server(handler) as server:
        await send(transport, "GET", server.url)
        await asyncio.sleep(0.05)  # the EOF arrives while the connection sits in the pool
        assert (await send(transport, "GET", server.url)).content == b"once"
    assert server.connections == 2


async def test_no_retry_on_a_fresh_connection(transport):
    async def handler(reader, writer, index):
        await read_request(reader)

    async with raw_server(handler) as server:
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await send(transport, "POST", server.url, content=b"x")
    assert server.connections == 1


async def test_no_retry_once_response_bytes_arrived(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(answer(b"first"))
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")

    async with raw_server(handler) as server:
        await send(transport, "GET", server.url)
        with pytest.raises(httpx.RemoteProtocolError, match="before the response was complete"):
            await send(transport, "GET", server.url)
    assert server.connections == 1


@pytest.mark.parametrize("wire", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
], ids=["content-length", "chunked", "head"])
async def test_server_closing_mid_response_is_a_remote_protocol_error(transport, wire):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(wire)
        await writer.drain()

    async with raw_server(handler) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            await send(transport, "GET", server.url)


@pytest.mark.parametrize("wire", [
    b"HTTP/1.1 abc OK\r\n\r\n",
    b"garbage\r\n\r\n",
    b"HTTP/2 200\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nbad name: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\nabcd",
    b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Encoding: gzip\r\n\r\nabc",
], ids=["status-code", "status-line", "version", "header-colon", "header-name", "lengths", "negative-length",
        "chunk-size", "chunk-crlf", "transfer-coding", "upgrade", "bad-gzip"])
async def test_malformed_responses_are_remote_protocol_errors(transport, wire):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(wire)
        await wait_for_eof(reader)  # the server stays: the error must come from parsing, not from a close

    async with raw_server(handler) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            await send(transport, "GET", server.url, timeout=httpx.Timeout(2.0))


async def test_header_section_too_large_is_refused(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 70_000)
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        with pytest.raises(httpx.RemoteProtocolError, match="too large"):
            await send(transport, "GET", server.url)


async def test_connection_refused_is_a_connect_error(transport):
    with pytest.raises(httpx.ConnectError):
        await send(transport, "GET", f"http://127.0.0.1:{unused_port()}/")
    # The failed attempt gave its slot back.
    assert all(pool._slots == 0 for pool in transport._pools.values())


async def test_unsupported_scheme_and_header_injection_are_refused(transport):
    with pytest.raises(httpx.UnsupportedProtocol):
        await send(transport, "GET", "ftp://127.0.0.1/file")
    with pytest.raises(httpx.LocalProtocolError):
        await send(transport, "GET", f"http://127.0.0.1:{unused_port()}/", headers={"x-evil": "a\r\nInjected: 1"})


async def test_read_timeout_when_the_server_never_answers(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        started = time.perf_counter()
        with pytest.raises(httpx.ReadTimeout):
            await send(transport, "GET", server.url, timeout=httpx.Timeout(5.0, read=0.2))
        elapsed = time.perf_counter() - started
    assert 0.15 < elapsed < 1.5


async def test_read_timeout_is_reset_by_every_chunk(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n")
        for byte in b"slowly":
            await asyncio.sleep(0.08)
            writer.write(bytes([byte]))
            await writer.drain()
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        # 0.5 s in all, but never 0.25 s without a byte.
        response = await send(transport, "GET", server.url, timeout=httpx.Timeout(5.0, read=0.25))
    assert response.content == b"slowly"


async def test_a_shorter_read_timeout_on_a_reused_connection_fires_on_time(transport):
    async def handler(reader, writer, index):
        await read_request(reader)
        writer.write(answer(b"quick"))
        await read_request(reader)
        await wait_for_eof(reader)

    async with raw_server(handler) as server:
        # The first request leaves the connection's timer pending two minutes out.
        await send(transport, "GET", server.url, timeout=httpx.Timeout(120.0))
        started = time.perf_counter()
        with pytest.raises(httpx.ReadTimeout):
            await send(transport, "GET", server.url, timeout=httpx.Timeout(5.0, read=0.2))
        assert time.perf_counter() - started < 1.5
    assert server.connections == 1


async def test_idle_connections_past_keepalive_expiry_are_not_reused():
    http = Http1Transport(keepalive_expiry=0.05)
    try:
        async with aiohttp_server() as server:
            await send(http, "GET", f"{server.url}/echo")
            await send(http, "GET", f"{server.url}/echo")
            await asyncio.sleep(0.1)
            await send(http, "GET", f"{server.url}/echo")
    finally:
        await http.aclose()
    assert server.peers[0] == server.peers[1] != server.peers[2]


async def test_write_timeout_when_the_server_does_not_read(transport):
    async def handler(reader, writer, index):
        await asyncio.sleep(30)

    async with raw_server(handler) as server:
        with pytest.raises(httpx.WriteTimeout):
            await send(transport, "POST", server.url, content=bytes(64 * 1024 * 1024),
                       timeout=httpx.Timeout(5.0, write=0.3))


async def test_cancelling_the_caller_closes_the_connection_in_use(transport):
    received = asyncio.Event()
    closed = asyncio.Event()

    async def handler(reader, writer, index):
        await read_request(reader)
        received.set()
        await wait_for_eof(reader)
        closed.set()

    async with raw_server(handler) as server:
        task = asyncio.create_task(send(transport, "GET", server.url))
        await asyncio.wait_for(received.wait(), 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(closed.wait(), 2)
        (pool,) = transport._pools.values()
        assert not pool.idle and not pool.connections and pool._slots == 0


async def test_aclose_closes_pooled_and_in_flight_connections():
    http = Http1Transport()
    received = asyncio.Event()
    ended: list[int] = []

    async def handler(reader, writer, index):
        while (request := await read_request(reader)) is not None:
            if b"/idle" in request[0]:
                writer.write(answer(b"pooled"))
            else:
                received.set()
        ended.append(index)

    async with raw_server(handler) as server:
        # One connection left idle in the pool, one in use when aclose() runs.
        await asyncio.gather(send(http, "GET", f"{server.url}/idle"), send(http, "GET", f"{server.url}/idle"))
        in_flight = asyncio.create_task(send(http, "GET", f"{server.url}/hang"))
        await asyncio.wait_for(received.wait(), 2)
        await http.aclose()
        with pytest.raises(httpx.ReadError):
            await in_flight
        with pytest.raises(RuntimeError, match="closed"):
            await send(http, "GET", server.url)
        for _ in range(100):
            if len(ended) == 2:
                break
            await asyncio.sleep(0.01)
    assert sorted(ended) == [0, 1]


# --------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA and a certificate it signed for localhost / 127.0.0.1 (made with the openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=foldgate test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    run("req", *key, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (folder / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return folder


@asynccontextmanager
async def tls_server(certificates: Path) -> AsyncIterator[SimpleNamespace]:
    state = SimpleNamespace(names=[], connections=0, url="")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    context.sni_callback = lambda sock, name, ctx: state.names.append(name)

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        try:
            while (request := await read_request(reader)) is not None:
                writer.write(answer(b"secret " + request[1]))
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0, ssl=context)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        await server.wait_closed()


async def test_https_verifies_sends_sni_and_reuses_the_connection(certificates):
    trusting = ssl.create_default_context(cafile=str(certificates / "ca.pem"))
    http = Http1Transport(ssl_context=trusting)
    try:
        async with tls_server(certificates) as server:
            for number in range(3):
                response = await send(http, "POST", f"https://localhost:{server.port}/", content=b"%d" % number)
                assert response.content == b"secret %d" % number
    finally:
        await http.aclose()
    assert server.connections == 1 and server.names == ["localhost"]


async def test_https_with_an_untrusted_certificate_is_a_connect_error(certificates, transport):
    async with tls_server(certificates) as server:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await send(transport, "GET", f"https://localhost:{server.port}/")


# --------------------------------------------------------------------------- ChatClient end to end


async def test_chat_client_uses_the_transport_end_to_end():
    async with aiohttp_server() as server, ChatClient(f"{server.url}/v1", api_key="sk-e2e") as client:
        assert isinstance(client._transport, Http1Transport)
        first = await client.complete([{"role": "user", "content": "ping"}], model="gpt-x", max_tokens=20)
        second = await client.complete([{"role": "user", "content": "pong"}], model="gpt-x", max_tokens=20)
    assert first.text == "echo: ping" and second.text == "echo: pong"
    assert first.usage.prompt_tokens == 11 and first.finish_reason == "stop"
    assert server.last_headers["Authorization"] == "Bearer sk-e2e"
    assert server.last_body["model"] == "gpt-x" and server.last_body["max_tokens"] == 20
    assert len(set(server.peers)) == 1


async def test_a_chat_client_with_a_bad_url_or_header_fails_its_calls_not_its_construction():
    for client in (ChatClient("ftp://127.0.0.1/v1"), ChatClient("http://[::1/v1"),
                   ChatClient("http://127.0.0.1:9/v1", api_key="sk-1\n"), ChatClient("http://127.0.0.1:9/v1", api_key="ключ")):
        async with client:
            with pytest.raises(ProviderUnavailable):
                await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)


async def test_chat_client_maps_transport_failures_to_provider_errors():
    async with FakeLLMServer() as server:
        server.enqueue(Reply.slow(2.0), Reply.drop_connection(), Reply.answer("fine"))
        async with ChatClient(server.openai_base_url, timeout=0.3) as client:
            with pytest.raises(ProviderTimeout):
                await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)
            with pytest.raises(ProviderUnavailable):
                await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)
            completion = await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)
    assert completion.text == "fine"


# --------------------------------------------------------------------------- uvloop (the gateway's loop)


def test_keep_alive_chunked_and_stale_retry_under_uvloop():
    async def scenario() -> tuple[list[bytes], int]:
        async def handler(reader, writer, index):
            served = 0
            while await read_request(reader) is not None:
                if index == 0 and served == 2:
                    writer.close()
                    return
                if served == 0:
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n")
                else:
                    writer.write(answer(f"{index}.{served}".encode()))
                served += 1

        http = Http1Transport()
        try:
            async with raw_server(handler) as server:
                bodies = [(await send(http, "POST", server.url, content=b"x")).content for _ in range(4)]
                (pool,) = http._pools.values()
                sock = pool.idle[0].transport.get_extra_info("socket")
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
                return bodies, server.connections
        finally:
            await http.aclose()

    bodies, connections = uvloop.run(scenario())
    assert bodies == [b"ab", b"0.1", b"ab", b"1.1"] and connections == 2
