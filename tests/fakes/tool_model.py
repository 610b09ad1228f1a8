"""A fake model that uses tools: asked through the fake provider, it calls the tool a word of the person's message
picks and answers with the tool's result; every request body it gets is checked against the official SDK types."""

from __future__ import annotations

from typing import Any

from agent.llm.openai_chat import TOOL_IMAGES_HEADING
from agent.tokens import content_text
from tests.fakes.llm_server import RecordedRequest, Reply
from tests.fakes.sdk_shapes import validate_chat_completions


def tool_names(request: RecordedRequest) -> list[str]:
    """The names of the tools ``request`` offers the model, in order."""
    return [tool["function"]["name"] for tool in request.body.get("tools") or ()]


def last_tool_result(request: RecordedRequest) -> str | None:
    """The newest tool result's text, when the request ends with tool results (chat completions carry a result's
    images in a user message right after them)."""
    messages = request.messages
    if messages and messages[-1].get("role") == "user" and TOOL_IMAGES_HEADING in str(messages[-1]["content"]):
        messages = messages[:-1]
    last = messages[-1]
    return content_text(last["content"]) if last.get("role") == "tool" else None


def agent_for(calls: dict[str, tuple[str, dict[str, Any]]], *, insist: bool = False):
    """The fake model: a word in the person's message picks the tool it calls — one it was offered, unless it
    ``insist``s — and after the result it answers with it."""

    def answer(request: RecordedRequest) -> Reply:
        validate_chat_completions(request.body)
        result = last_tool_result(request)
        if result is not None:
            return Reply.answer(f"tool said: {result[:200]}")
        for word, (tool, arguments) in calls.items():
            if word in request.last_user_text and (insist or tool in tool_names(request)):
                return Reply.tool_call(tool, arguments, call_id=f"call_{word}")
        return Reply.answer("no tool needed")

    return answer
