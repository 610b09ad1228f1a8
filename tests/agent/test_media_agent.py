"""Photos, documents and voice on the agent's side: stand-in lines, bounded requests on every route, a photo
given back by ``session_fetch``, and compaction that keeps a line per folded item.

Providers are the loopback fakes (``tests.fakes``), and every request body they receive is checked against
the official SDK types (``tests.fakes.sdk_shapes``). The media store is an in-memory :class:`Shelf` speaking the
agent's ``MediaSource`` protocol (the gateway adapts its Redis store to the same protocol).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.compaction.summary_prompt import render_message
from agent.context_compressor import ContextCompressor
from agent.items import NO_LONGER_STORED, NOT_READABLE, ImageInliner, stand_in
from agent.llm.openai_chat import TOOL_IMAGES_HEADING
from agent.messages import SUMMARY_KEY, is_summary
from agent.models import vision_for
from agent.search import search_messages
from agent.settings import CompressionSettings
from agent.tokens import content_text
from agent.tools import Tool, ToolOutput, ToolRegistry, recovery_tools
from tests.fakes.agent_media import ROUTES, Shelf, run_route, validate
from tests.fakes.llm_server import RecordedRequest, Reply
from tests.fakes.sdk_shapes import validate_anthropic_messages, validate_chat_completions


def png(colour: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> bytes:
    """A real one-colour PNG (the agent never decodes an image, but what it sends should be one)."""
    width, height = size

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(colour) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def photo(shelf: Shelf, name: str, colour: tuple[int, int, int] = (200, 30, 30), **extra: Any) -> dict[str, Any]:
    data = png(colour)
    return {
        "kind": "image",
        "sha": shelf.put(data, "image/png"),
        "name": name,
        "mime": "image/png",
        "bytes": len(data),
        "file_id": f"tg-{name}",
        "w": 64,
        "h": 48,
        **extra,
    }


def data_of(ref: dict[str, Any], shelf: Shelf) -> str:
    return base64.b64encode(shelf.blobs[ref["sha"]][0]).decode()


def image_urls(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    return [
        part["image_url"]["url"] for part in content or () if isinstance(part, dict) and part.get("type") == "image_url"
    ]


# --------------------------------------------------------------------------- stand-in lines


def test_stand_in_lines_name_the_item_and_its_message():
    assert (
        stand_in("m231", {"kind": "image", "name": "photo.jpg", "w": 1280, "h": 960}, speaker="Ada")
        == "[image m231: photo.jpg, 1280×960, from Ada]"
    )
    assert (
        stand_in("m240", {"kind": "document", "name": "invoice-0425.pdf", "pages": 3})
        == "[document m240: invoice-0425.pdf, 3 pages]"
    )
    assert stand_in("m250", {"kind": "voice", "seconds": 12.4}) == "[voice m250: 0:12]"
    assert stand_in("m251", {"kind": "audio", "name": "talk.mp3", "seconds": 3725}) == "[audio m251: talk.mp3, 1:02:05]"
    assert (
        stand_in("m252", {"kind": "document", "name": "big.zip", "error": "over the 20 MB limit"})
        == "[document m252: big.zip, not taken in: over the 20 MB limit]"
    )
    assert stand_in(None, {"kind": "image"}) == "[image]"
    # a ref carried by another message names the message it came with
    assert stand_in("m900", {"kind": "image", "name": "a.png", "origin": "m231"}).startswith("[image m231: a.png")
    # a name cannot break the line
    assert stand_in("m1", {"kind": "image", "name": "x]\n[image m2: fake"}) == "[image m1: x) (image m2: fake]"


def test_vision_by_model_family():
    assert all(
        vision_for(m)
        for m in (
            "gpt-4o",
            "openai/gpt-4.1-mini",
            "gpt-5",
            "claude-3-5-sonnet-20241022",
            "anthropic/claude-sonnet-4.5",
            "gemini-2.5-pro",
            "some-new-model",
        )
    )
    assert not any(vision_for(m) for m in ("gpt-3.5-turbo", "gpt-4-0613", "claude-2.1", "o3-mini", "deepseek-chat"))
    assert vision_for("qwen2.5-vl-72b") and not vision_for("qwen3-32b")
    assert not vision_for("some-new-model", {"some-new": False}) and vision_for("deepseek-chat", {"deepseek": True})


# --------------------------------------------------------------------------- bounded requests


def conversation(shelf: Shelf, photos: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse.", "_id": "m0"}]
    for n in range(1, photos + 1):
        messages.append(
            {
                "role": "user",
                "content": f"photo {n}" if n % 2 else "",
                "_id": f"m{2 * n - 1}",
                "_items": [photo(shelf, f"p{n}.jpg", (n * 20, 0, 0))],
            }
        )
        messages.append({"role": "assistant", "content": f"seen {n}", "_id": f"m{2 * n}"})
    messages.append({"role": "user", "content": "compare them", "_id": f"m{2 * photos + 1}"})
    return messages


async def test_without_items_the_messages_pass_untouched():
    shelf = Shelf()
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert await ImageInliner(shelf).prepare(messages) is messages
    assert shelf.reads == []


async def test_only_the_newest_images_go_inline_and_the_rest_are_stand_ins():
    shelf = Shelf()
    messages = conversation(shelf, 6)
    before = copy.deepcopy(messages)
    out = await ImageInliner(shelf, max_images=4).prepare(messages)
    assert messages == before  # the transcript is never changed
    shown = {index for index, message in enumerate(out) if image_urls(message)}
    assert shown == {5, 7, 9, 11}  # photos 3..6
    for index in (1, 3):
        assert out[index]["content"] == "\n".join(
            filter(None, [before[index]["content"], f"[image m{index}: p{(index + 1) // 2}.jpg, 64×48]"])
        )
    photo_six = out[11]["content"]
    assert photo_six[0] == {"type": "text", "text": "[image m11: p6.jpg, 64×48]"}  # no caption: the label leads
    assert image_urls(out[11]) == [f"data:image/png;base64,{data_of(before[11]['_items'][0], shelf)}"]
    assert sorted(shelf.reads) == sorted(before[i]["_items"][0]["sha"] for i in (5, 7, 9, 11))
    assert all("_tok" not in message for message in out if "_items" in message)


async def test_a_model_without_vision_gets_stand_ins_only_and_nothing_is_read():
    shelf = Shelf()
    out = await ImageInliner(shelf, vision=False).prepare(conversation(shelf, 2))
    assert not any(image_urls(message) for message in out)
    assert out[3]["content"] == "[image m3: p2.jpg, 64×48]" and shelf.reads == []
    unwired = await ImageInliner(None).prepare(conversation(shelf, 1))  # no store to read from: the same
    assert unwired[1]["content"] == "photo 1\n[image m1: p1.jpg, 64×48]"


async def test_an_image_that_cannot_be_read_is_its_stand_in_with_the_reason():
    shelf = Shelf()
    messages = conversation(shelf, 3)
    del shelf.blobs[messages[3]["_items"][0]["sha"]]
    out = await ImageInliner(shelf).prepare(messages)
    assert out[3]["content"] == f"[image m3: p2.jpg, 64×48] {NO_LONGER_STORED}"
    assert len(image_urls(out[5])) == 1 and len(image_urls(out[1])) == 1
    shelf.failing = True
    away = await ImageInliner(shelf).prepare(messages)  # the turn goes on without the images
    assert away[1]["content"] == f"photo 1\n[image m1: p1.jpg, 64×48] {NOT_READABLE}"


async def test_a_format_no_route_takes_is_not_sent():
    shelf = Shelf()
    ref = photo(shelf, "scan.tiff")
    shelf.blobs[ref["sha"]] = (b"II*\x00", "image/tiff")
    out = await ImageInliner(shelf).prepare([{"role": "user", "content": "", "_id": "m1", "_items": [ref]}])
    assert (
        out[0]["content"]
        == "[image m1: scan.tiff, 64×48] (not sent: image/tiff is not an image format the model takes)"
    )


async def test_one_image_goes_once_assistant_messages_never_carry_one_and_errors_are_said():
    shelf = Shelf()
    ref = photo(shelf, "same.jpg")
    refused = {"kind": "document", "name": "huge.pdf", "error": "over the 20 MB limit"}
    document = {"kind": "document", "sha": "d" * 64, "name": "notes.txt"}
    messages = [
        {"role": "user", "content": "first", "_id": "m1", "_items": [ref, refused, document]},
        {"role": "assistant", "content": "an answer with a photo", "_id": "m2", "_items": [photo(shelf, "out.jpg")]},
        {"role": "user", "content": "again", "_id": "m3", "_items": [ref]},
    ]
    out = await ImageInliner(shelf).prepare(messages)
    assert image_urls(out[2]) and not image_urls(out[0])
    assert out[0]["content"] == (
        "first\n[image m1: same.jpg, 64×48]\n[document m1: huge.pdf, not taken in: over the 20 MB limit]"
    )
    assert out[1]["content"] == "an answer with a photo\n[image m2: out.jpg, 64×48]"


async def test_the_requests_of_one_turn_read_each_image_once():
    shelf = Shelf()
    inliner = ImageInliner(shelf, max_images=2)
    messages = conversation(shelf, 3)
    await inliner.prepare(messages)
    await inliner.prepare(messages + [{"role": "assistant", "content": "..."}])
    assert len(shelf.reads) == 2


# --------------------------------------------------------------------------- through the agent, on every route


class Archive:
    """The recovery tools' message source over a list of stored messages."""

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        self.messages = list(messages)

    async def all_messages(self) -> Sequence[dict[str, Any]]:
        return self.messages

    async def messages_by_id(self, ids: Sequence[str]) -> Sequence[dict[str, Any]]:
        by_id = {m.get("_id"): m for m in self.messages}
        return [by_id[i] for i in ids if i in by_id]


def recovery(messages: Sequence[dict[str, Any]]) -> ToolRegistry:
    tools = ToolRegistry()
    for tool in recovery_tools(Archive(messages)):
        tools.add(tool)
    return tools


def fetch_then_answer(ids: list[str], answer: str):
    """A model that asks for ``session_fetch(ids)`` first and answers once it has the result."""
    calls = iter([Reply.tool_call("session_fetch", {"ids": ids}, call_id="call_fetch_1")])
    return lambda request: next(calls, Reply.answer(answer))


def sent_text(request: RecordedRequest) -> str:
    return json.dumps(request.body, ensure_ascii=False)


def images_in(route: str, body: dict[str, Any]) -> list[str]:
    """Every image the body sends, as base64 data, in order, whatever the route's shape."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "image_url":
                found.append(node["image_url"]["url"].split(",", 1)[1])
            elif node.get("type") == "input_image":
                found.append(node["image_url"].split(",", 1)[1])
            elif node.get("type") == "image":
                found.append(node["source"]["data"])
            else:
                for value in node.values():
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(body.get("messages") or body.get("input"))
    return found


@pytest.mark.parametrize("route", ROUTES)
async def test_a_photo_without_caption_reaches_the_model_as_an_image(route):
    shelf = Shelf()
    ref = photo(shelf, "photo.jpg")
    history = [{"role": "system", "content": "You are terse.", "_id": "m0"}]
    requests, result = await run_route(route, history, {"role": "user", "content": "", "_items": [ref]}, shelf)
    body = requests[0].body
    validate(route, body)
    assert images_in(route, body) == [data_of(ref, shelf)]
    assert "[image: photo.jpg, 64×48]" in sent_text(requests[0]) and result.reply == "a red square"
    assert result.new_messages[0]["_items"] == [ref]  # what is stored keeps the ref, never the bytes
    assert "base64" not in json.dumps(result.new_messages)


@pytest.mark.parametrize("route", ROUTES)
async def test_session_fetch_gives_a_folded_photo_back_as_an_image(route):
    shelf = Shelf()
    history = conversation(shelf, 5)
    first = history[1]["_items"][0]
    requests, result = await run_route(
        route,
        history[:-1],
        history[-1],
        shelf,
        recovery(history),
        fetch_then_answer(["m1"], "the first photo is dark red"),
    )
    assert len(requests) == 2 and result.reply == "the first photo is dark red"
    for request in requests:
        validate(route, request.body)
    assert data_of(first, shelf) not in images_in(route, requests[0].body)  # five photos: the oldest is a stand-in
    assert "[image m1: p1.jpg, 64×48]" in sent_text(requests[0])
    again = images_in(route, requests[1].body)
    assert data_of(first, shelf) in again and len(again) == 4
    tool_message = next(m for m in result.new_messages if m["role"] == "tool")
    assert tool_message["_items"] == [{**first, "origin": "m1"}]
    record = json.loads(tool_message["content"])["messages"][0]
    assert record["id"] == "m1" and record["items"] == ["[image m1: p1.jpg, 64×48]"]
    if route in ("openai", "openrouter"):  # a tool message takes only text: the image follows the results
        messages = requests[1].body["messages"]
        index = next(i for i, m in enumerate(messages) if m["role"] == "tool")
        carrier = messages[index + 1]
        assert carrier["role"] == "user" and carrier["content"][0]["text"] == TOOL_IMAGES_HEADING
        assert carrier["content"][1]["image_url"]["url"].endswith(data_of(first, shelf))


async def test_a_tool_may_return_items_and_plain_text_tools_still_work():
    shelf = Shelf()
    ref = photo(shelf, "chart.png")

    async def chart(args: dict) -> ToolOutput:
        return ToolOutput("drew the chart", (ref,))

    async def echo(args: dict) -> str:
        return "plain"

    tools = ToolRegistry()
    tools.add(Tool("chart", "draw", {"type": "object"}, chart))
    tools.add(Tool("echo", "echo", {"type": "object"}, echo))
    assert await tools.call("echo", "{}") == "plain" and (await tools.run("echo", "{}")).items == ()
    assert await tools.call("chart", "{}") == "drew the chart" and (await tools.run("chart", "{}")).items == (ref,)

    calls = iter([Reply.tool_call("chart", {}, call_id="c1"), Reply.tool_call("echo", {}, call_id="c2")])
    requests, result = await run_route(
        "anthropic",
        [],
        {"role": "user", "content": "chart it"},
        shelf,
        tools,
        lambda request: next(calls, Reply.answer("done")),
    )
    validate_anthropic_messages(requests[-1].body)
    assert images_in("anthropic", requests[-1].body) == [data_of(ref, shelf)]
    results = [m for m in result.new_messages if m["role"] == "tool"]
    assert results[0]["_items"] == [ref] and "_items" not in results[1]


# --------------------------------------------------------------------------- compaction and search


KINDS = st.sampled_from(["image", "image", "document", "voice", "audio", "refused"])


def item_for(kind: str, n: int) -> dict[str, Any]:
    sha = hashlib.sha256(str(n).encode()).hexdigest()
    if kind == "image":
        return {"kind": "image", "sha": sha, "name": f"photo-{n}.jpg", "mime": "image/jpeg", "w": 1280, "h": 960}
    if kind == "document":
        return {
            "kind": "document",
            "sha": sha,
            "name": f"invoice-{n}.pdf",
            "mime": "application/pdf",
            "pages": n % 7 + 1,
        }
    if kind == "refused":
        return {"kind": "document", "name": f"huge-{n}.zip", "error": "over the 20 MB limit"}
    return {"kind": kind, "sha": sha, "name": "" if kind == "voice" else f"talk-{n}.mp3", "seconds": float(n)}


@st.composite
def chats_with_items(draw):
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse.", "_id": "m0"},
        {"role": "user", "content": "start", "_id": "m1"},
    ]
    for n in range(2, 2 + draw(st.integers(6, 30))):
        kinds = draw(st.lists(KINDS, max_size=3))
        text = draw(st.sampled_from(["", "look at this", "the ledger for march " * 40]))
        message: dict[str, Any] = {"role": "user" if n % 2 == 0 else "assistant", "content": text, "_id": f"m{n}"}
        if message["role"] == "user" and kinds:
            message["_items"] = [item_for(kind, n * 10 + i) for i, kind in enumerate(kinds)]
            if draw(st.booleans()):
                message["name"] = "Ada"
        messages.append(message)
    return messages


def summary_of(messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in messages if is_summary(m))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(chat=chats_with_items(), context_length=st.sampled_from([16_000, 60_000, 200_000]))
async def test_every_folded_item_keeps_its_stand_in_line_in_the_summary(chat, context_length):
    """A line per folded item, newest first; where the summary's budget ends, one line counts the older ones left
    out (search still finds them), so no item leaves the context without a word."""
    config = CompressionSettings(protect_last_n=2)
    compressor = ContextCompressor("test-model", context_length, config)
    out = await compressor.compress(chat, force=True)
    if compressor.last_compaction.outcome != "compacted":
        return
    kept = {m.get("_id") or m.get("_orig_id") for m in out}
    summary = summary_of(out)
    text = content_text(summary["content"])
    folded = [m for m in chat if m["_id"] not in kept]
    lines = [stand_in(m["_id"], ref, speaker=m.get("name", "")) for m in folded for ref in m.get("_items") or ()][::-1]
    shown = [line in text for line in lines]
    left_out = shown.count(False)
    assert shown == [True] * (len(lines) - left_out) + [False] * left_out  # the newest are the ones shown
    assert (f"… and {left_out:,} older items" in text) is (left_out > 0)
    if context_length == 200_000:
        assert left_out == 0
    newest = [ref for m in folded for ref in m.get("_items") or () if ref["kind"] == "image"][::-1][:4]
    if summary["role"] == "user" and newest:
        assert [ref["sha"] for ref in summary["_items"]] == [ref["sha"] for ref in newest]


async def test_thirty_compactions_later_the_photo_is_named_and_fetched_back():
    shelf = Shelf()
    first = photo(shelf, "whiteboard.jpg")
    chat = [
        {"role": "system", "content": "You are terse.", "_id": "m0"},
        {"role": "user", "content": "hello", "_id": "m1"},
        {"role": "assistant", "content": "hi", "_id": "m2"},
        {"role": "user", "content": "our plan", "_id": "m3", "_items": [first]},
        {"role": "assistant", "content": "noted", "_id": "m4"},
    ]
    archive = list(chat)
    compressor = ContextCompressor("test-model", 16_000, CompressionSettings(protect_last_n=2))
    next_id = 5
    for round_ in range(30):
        for _ in range(4):
            for role in ("user", "assistant"):
                message = {"role": role, "content": f"round {round_} " + "budget figures " * 200, "_id": f"m{next_id}"}
                chat.append(message)
                archive.append(message)
                next_id += 1
        chat = await compressor.compress(chat, force=True)
        assert compressor.last_compaction.outcome == "compacted"
        state = json.loads(json.dumps(compressor.export_state()))  # a restart: the engine is rebuilt from its state
        compressor = ContextCompressor("test-model", 16_000, CompressionSettings(protect_last_n=2))
        compressor.load_state(state)
    assert compressor.compression_count == 30
    assert "[image m3: whiteboard.jpg, 64×48]" in content_text(summary_of(chat)["content"])

    requests, result = await run_route(
        "openai",
        chat,
        {"role": "user", "content": "what was on the whiteboard?"},
        shelf,
        recovery(archive),
        fetch_then_answer(["m3"], "the plan"),
    )
    for request in requests:
        validate_chat_completions(request.body)
    assert data_of(first, shelf) in images_in("openai", requests[-1].body)
    fetched = next(m for m in result.new_messages if m["role"] == "tool")
    assert fetched["_items"] == [{**first, "origin": "m3"}]


async def test_the_summary_shows_the_newest_folded_photo_while_no_newer_one_crowds_it_out():
    shelf = Shelf()
    ref = photo(shelf, "receipt.jpg")
    chat = [
        {"role": "system", "content": "s", "_id": "m0"},
        {"role": "user", "content": "hi", "_id": "m1"},
        {"role": "assistant", "content": "hello", "_id": "m2"},
        {"role": "assistant", "content": "more " * 50, "_id": "m3"},
        {"role": "user", "content": "this one", "_id": "m4", "_items": [ref]},
    ]
    chat += [{"role": "assistant" if n % 2 else "user", "content": "talk " * 300, "_id": f"m{n}"} for n in range(5, 13)]
    out = await ContextCompressor("test-model", 16_000, CompressionSettings(protect_last_n=2)).compress(
        chat, force=True
    )
    summary = summary_of(out)
    assert summary[SUMMARY_KEY] and summary["role"] == "user" and summary["_items"] == [{**ref, "origin": "m4"}]
    sent = await ImageInliner(shelf).prepare(out)
    assert image_urls(sent[out.index(summary)])[0].endswith(data_of(ref, shelf))


def test_search_finds_a_photo_by_its_name():
    messages = [
        {"role": "user", "content": "", "_id": "m1", "_items": [{"kind": "image", "name": "boarding-pass.png"}]},
        {"role": "user", "content": "an unrelated note", "_id": "m2"},
    ]
    hits = search_messages(messages, "boarding-pass.png")
    assert [hit.message_id for hit in hits] == ["m1"]


def test_the_summarizer_reads_which_items_a_message_carried():
    message = {
        "role": "user",
        "content": "the contract",
        "_id": "m7",
        "_items": [{"kind": "document", "name": "contract.pdf", "pages": 12}],
    }
    assert render_message(message, {}) == "[m7] user: the contract\n  [document m7: contract.pdf, 12 pages]"
