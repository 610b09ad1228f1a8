"""The OpenAI-compatible API driven by OpenAI's Node SDK, a second official client beside the Python one.

The client is the ``openai`` npm package pinned in ``tests/node/package.json`` (its lock file commits the exact
version); each script in ``tests/node/`` runs under ``node`` against the gateway a test opens here and prints one
JSON line of what the SDK saw. A client written in another language parses headers, errors and server-sent
events its own way, so this catches what a Python-only check would let through.

Without ``node`` on the machine the tests are skipped; with ``node`` but without the installed package they fail,
saying how to install it, because a silent skip would hide that the second client never ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.api_gateway import KEYS, ApiGateway, api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

NODE_PROJECT = Path(__file__).resolve().parents[2] / "node"
NODE = shutil.which("node")
ANSWER = "The login timeout fix is in PR 4711, merged after the overnight run went green."


@pytest.fixture
def node_sdk() -> None:
    """Skipped without node; without the installed SDK, one line telling how to install it rather than a stack
    of import errors from node."""
    if NODE is None:
        pytest.skip("node is not installed here (the Node SDK's tests need it)")
    if not (NODE_PROJECT / "node_modules" / "openai" / "package.json").is_file():
        pytest.fail("tests/node/node_modules is missing: run `npm ci --prefix tests/node`", pytrace=False)


async def run_script(name: str, api: ApiGateway, key: str = "alice") -> dict[str, Any]:
    """Run ``tests/node/<name>.mjs`` against ``api`` with key ``key`` (a name of :data:`KEYS`); its JSON line.

    It runs as a subprocess awaited on this loop, so the gateway the test serves keeps answering meanwhile.
    """
    assert NODE is not None
    environment = {**os.environ, "FOLDGATE_BASE_URL": api.base_url, "FOLDGATE_API_KEY": KEYS.get(key, key)}
    process = await asyncio.create_subprocess_exec(
        NODE,
        str(NODE_PROJECT / f"{name}.mjs"),
        cwd=NODE_PROJECT,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, f"node {name}.mjs failed:\n{err.decode(errors='replace')}"
    return json.loads(out.decode().strip().splitlines()[-1])


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def answered_by_topic(request: RecordedRequest) -> Reply:
    return Reply.answer(f"About {request.last_user_text}: noted.")


async def test_a_plain_completion(redis_url, key_prefix, node_sdk):
    async with FakeLLMServer(default=Reply.answer(ANSWER)) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            answer = await run_script("completion", api)
            assert chat_turns(provider)[-1].last_user_text == "Which PR holds the login fix?"
    assert answer["object"] == "chat.completion" and answer["model"] == "test-model"
    assert answer["role"] == "assistant" and answer["content"] == ANSWER
    assert answer["finish_reason"] == "stop"
    usage = answer["usage"]
    assert usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_a_streamed_completion_assembles_to_the_reply_and_ends_with_usage(redis_url, key_prefix, node_sdk):
    async with FakeLLMServer(default=Reply.answer(ANSWER, chunk_size=6, event_delay=0.02)) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            streamed = await run_script("stream", api)
    assert streamed["first_role"] == "assistant"
    assert streamed["content"] == ANSWER
    assert streamed["pieces"] >= 2  # it came in pieces, as it was written
    assert streamed["finishes"] == ["stop"]
    assert streamed["usage"]["completion_tokens"] > 0
    assert streamed["last_chunk_has_choices"] is False  # the usage chunk comes last, with no choices


async def test_the_session_header_through_with_response_and_as_response(redis_url, key_prefix, node_sdk):
    async with FakeLLMServer(handler=answered_by_topic) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            seen = await run_script("session", api)
            last = chat_turns(provider)[-1]
    assert seen["first_session"].startswith("s_")
    assert seen["second_status"] == 200 and seen["second_session"] == seen["first_session"]
    assert seen["first_content"] == "About apples: noted." and seen["second_content"] == "About pears: noted."
    said = [(m["role"], m.get("content")) for m in last.messages if m["role"] in ("user", "assistant")]
    assert said == [("user", "apples"), ("assistant", "About apples: noted."), ("user", "pears")]


async def test_a_wrong_key_and_a_malformed_request_are_the_sdks_errors(redis_url, key_prefix, node_sdk):
    async with FakeLLMServer() as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            refused = await run_script("errors", api)
            assert chat_turns(provider) == []
    for wrong_key in (refused["wrong_key"], refused["wrong_key_models"]):
        assert wrong_key["is_authentication_error"] is True and wrong_key["name"] == "AuthenticationError"
        assert wrong_key["status"] == 401
        assert wrong_key["code"] == "invalid_api_key" and wrong_key["type"] == "invalid_request_error"
    malformed = refused["malformed"]
    assert malformed["is_bad_request_error"] is True and malformed["status"] == 400
    assert malformed["param"] == "messages[0].role" and malformed["type"] == "invalid_request_error"


async def test_models_list_names_the_bot(redis_url, key_prefix, node_sdk):
    async with FakeLLMServer() as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            models = await run_script("models", api)
    assert models == {"ids": ["test-model"], "objects": ["model"]}


def test_the_lock_file_pins_the_sdk_to_the_public_registry():
    """``npm ci`` installs exactly what the lock names: one minor line of the SDK, from registry.npmjs.org only."""
    manifest = json.loads((NODE_PROJECT / "package.json").read_text())
    lock = json.loads((NODE_PROJECT / "package-lock.json").read_text())
    assert manifest["dependencies"]["openai"].startswith("~")
    packages = {path: entry for path, entry in lock["packages"].items() if path}
    assert "node_modules/openai" in packages
    for path, entry in packages.items():
        assert entry["resolved"].startswith("https://registry.npmjs.org/"), path
        assert entry["integrity"].startswith("sha512-"), path
