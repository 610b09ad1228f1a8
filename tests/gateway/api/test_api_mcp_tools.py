"""The bot's MCP tools over the OpenAI-compatible API, driven by OpenAI's SDK against the real MCP server of the
tests: a tool the policy lets run runs inside foldgate (the client sees only the answer), and a tool whose policy
is ``ask`` asks the client, whose next request answers the question and gets the rest of the turn's reply —
through chat completions (a stateless client resending its history, streamed) and the Responses API."""

from __future__ import annotations

import re
from typing import Any

from gateway.api.sessions import SESSION_HEADER
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.mcp_server import TICKET, stdio_command
from tests.fakes.paths import REPO
from tests.fakes.tool_model import agent_for, tool_names

MODEL = agent_for({"ticket": ("notes__lookup", {"ticket": "42"}), "wipe": ("notes__wipe", {})})


def notes_over_the_api(redis_url: str, key_prefix: str, base_url: str) -> Any:
    command, args = stdio_command()
    tools = {
        "allowed_commands": [command],
        "allow": [{"servers": ["notes"], "platforms": ["api"]}],
        "mcp_servers": {"notes": {"command": command, "args": args, "cwd": str(REPO)}},
        "confirm_timeout_seconds": 120,
    }
    return api_settings(redis_url, key_prefix, base_url, tools=tools)


def approval_id(question: str) -> str:
    found = re.search(r"/approve (\w+)", question)
    assert found is not None, question
    return found[1]


async def test_a_tool_the_policy_lets_run_runs_inside_foldgate_and_the_client_sees_the_answer(redis_url, key_prefix):
    async with FakeLLMServer(handler=MODEL) as provider:
        async with api_gateway(notes_over_the_api(redis_url, key_prefix, provider.openai_base_url)) as api:
            answer = await api.async_client().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "what does ticket 42 say?"}]
            )
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == f"tool said: {TICKET}"
    offered = [request for request in provider.requests if "notes__lookup" in tool_names(request)]
    assert offered and "notes__wipe" in tool_names(offered[0])


async def test_an_asking_tool_asks_the_client_and_its_answer_gets_the_rest_of_the_reply(redis_url, key_prefix):
    wipe = {"role": "user", "content": "wipe everything"}
    async with FakeLLMServer(handler=MODEL) as provider:
        async with api_gateway(notes_over_the_api(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            raw = await client.chat.completions.with_raw_response.create(model="m", messages=[wipe])
            session, question = raw.headers[SESSION_HEADER], raw.parse().choices[0].message.content or ""
            assert question.startswith("🔐 alice, may I run notes__wipe {}?")

            # A stateless client: no session header, its history resent with the answer at the end, streamed.
            history = [wipe, {"role": "assistant", "content": question}]
            answering = {"role": "user", "content": f"/approve {approval_id(question)}"}
            streamed = await client.chat.completions.with_raw_response.create(
                model="m", messages=[*history, answering], stream=True
            )
            said = "".join([c.choices[0].delta.content or "" async for c in streamed.parse() if c.choices])

            # The session goes on from the committed turn, matched by its history again.
            later = await client.chat.completions.with_raw_response.create(
                model="m",
                messages=[*history, answering, {"role": "assistant", "content": said}, wipe],
            )
            asked_again = later.parse().choices[0].message.content or ""
            refusing = {"role": "user", "content": f"/refuse {approval_id(asked_again)}"}
            history += [answering, {"role": "assistant", "content": said}, wipe]
            history.append({"role": "assistant", "content": asked_again})
            refused = await client.chat.completions.create(model="m", messages=[*history, refusing])
    assert said == "tool said: [approved by alice]\nwiped"
    assert streamed.headers[SESSION_HEADER] == later.headers[SESSION_HEADER] == session
    assert (refused.choices[0].message.content or "").startswith(
        'tool said: {"error":"notes__wipe was not run: refused by alice"}'
    )
    last = provider.requests[-1].messages
    tool_results = [m["content"] for m in last if m["role"] == "tool"]
    assert len(tool_results) == 2 and "wiped" in str(tool_results[0])  # both turns, committed once each


async def test_through_the_responses_api_the_answer_continues_by_previous_response_id(redis_url, key_prefix):
    async with FakeLLMServer(handler=MODEL) as provider:
        async with api_gateway(notes_over_the_api(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            asked = await client.responses.create(model="m", input="wipe everything")
            answered = await client.responses.create(
                model="m", input=f"/approve {approval_id(asked.output_text)}", previous_response_id=asked.id
            )
            kept = await client.responses.retrieve(answered.id)
    assert asked.output_text.startswith("🔐 alice, may I run notes__wipe {}?")
    assert answered.output_text == kept.output_text == "tool said: [approved by alice]\nwiped"
