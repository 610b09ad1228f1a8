"""The headline case for a stateless client: OpenAI's own SDK, sending no session header and resending the whole
conversation every call, holds a 1,000-turn conversation of pasted terminal output against a 16K window.

The provider refuses, as a real one does, any request over its window (counting the answer's ``max_tokens`` in
it, as OpenAI and vLLM do): none comes. Every answer names the same session, however many times it was
compacted. A fact said at turn 2 is long gone from the window by turn 1,000, and the model gets it back through
``session_search`` over the session's archive.

The client's resending is what makes this slow (about 4 minutes on 2 cores): by the last turn every call carries
about 2,000 messages, which the SDK walks and the gateway reads and counts again.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from gateway.api.sessions import SESSION_HEADER
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import NOTES, is_summary_request
from tests.fakes.histories import pasted_outputs
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

TURNS = 1_000
WINDOW = 16_000
TICKET = "OPS-4471"
FACT = f"Before I forget: the staging database password rotation ticket is {TICKET}."
QUESTION = "Which ticket tracks the staging database password rotation?"
SEARCH = "staging database password rotation ticket"


class Operator:
    """A model reading pasted output: it acknowledges each paste in a line, and for :data:`QUESTION` searches the
    session's history, then answers from the best hit. What its search gave back is kept for the test to read."""

    def __init__(self) -> None:
        self.search_results: list[str] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return Reply.answer(NOTES)
        last = request.messages[-1]
        if last.get("role") == "tool":
            self.search_results.append(str(last.get("content")))
            hits = json.loads(str(last.get("content"))).get("hits") or []
            return Reply.answer("From the history: " + (hits[0]["snippet"] if hits else "nothing found"))
        if request.last_user_text == QUESTION:
            return Reply.tool_call("session_search", {"query": SEARCH}, call_id="search_1")
        lines = request.last_user_text.count("\n")
        return Reply.answer(f"Read {lines} lines of output; nothing needs action yet.")


async def converse(client: openai.AsyncOpenAI, texts: list[str]) -> tuple[list[str], str]:
    """Say each text in turn, resending the whole conversation every time as a stateless client does: the
    session each answer named, and the last answer."""
    history: list[dict[str, Any]] = []
    sessions: list[str] = []
    answer = ""
    for text in texts:
        history.append({"role": "user", "content": text})
        raw = await client.chat.completions.with_raw_response.create(model="m", messages=history)
        sessions.append(raw.headers[SESSION_HEADER])
        answer = str(raw.parse().choices[0].message.content)
        history.append({"role": "assistant", "content": answer})
    return sessions, answer


@pytest.mark.slow
@pytest.mark.timeout(900)  # the resent history grows every turn: about 4 minutes on 2 cores, well within this
async def test_a_stateless_sdk_client_holds_1000_log_turns_in_a_16k_window_and_recalls_turn_2(redis_url, key_prefix):
    pasted = pasted_outputs(TURNS - 1, seed=4471)
    texts = [pasted[0], f"{FACT}\n{pasted[1]}", *pasted[2:], QUESTION]
    operator = Operator()
    # the stricter of the providers' rules: the window holds the prompt and the answer's max_tokens together
    async with FakeLLMServer(handler=operator, context_limit=WINDOW, window_counts_answer=True) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, context_length=WINDOW)
        async with api_gateway(settings) as api:
            sessions, answer = await converse(api.async_client(), texts)

    completions = [request for request in provider.requests if request.messages]
    assert all(request.window_tokens is not None for request in completions)  # each one weighed at the door
    assert provider.overflowed == []  # not one request over the window, so none refused
    assert len(sessions) == TURNS and set(sessions) == {sessions[0]}  # one session from the first turn to the last
    assert sum(1 for request in completions if is_summary_request(request)) >= 10  # compacted many times
    # the question's own request no longer carries the fact: it was compacted away long before
    asked = [request for request in provider.requests if request.last_user_text == QUESTION]
    assert FACT not in asked[0].text
    assert len(operator.search_results) == 1 and TICKET in operator.search_results[0]  # the archive search found it
    assert TICKET in answer
