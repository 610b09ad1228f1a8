"""A fake OpenAI Responses API on loopback (``POST …/v1/responses``), with server-side compaction.

It reuses :class:`tests.fakes.llm_server.FakeLLMServer`'s HTTP plumbing (aiohttp, TLS,
compression, faults), reply queue and handler, and answers in the Responses shape. What
it models:

- ``context_management: [{type: "compaction", compact_threshold: N}]``: when the input is
  larger than N tokens, the output starts with an opaque ``compaction`` item whose
  ``encrypted_content`` only this server instance can read back (it stands for the input
  it folded, :attr:`carry_tokens` tokens from then on);
- a replayed ``compaction``/``reasoning`` item this server did not issue is refused with
  a 400, as a real server refuses content it cannot decrypt;
- ``reject_context_management=True`` refuses the field itself with a structured 400
  naming the parameter (what an ineligible route answers);
- function tools follow strict mode as the API documents it: ``strict: true`` with a
  schema strict mode cannot take (a property missing from ``required``, an object
  without ``additionalProperties: false``) is a 400 ``invalid_function_parameters``;
  ``strict`` left out is strict when the schema allows it and otherwise falls back to
  non-strict (the answer's ``tools`` show which) — ``omitted_strict="reject"`` makes an
  omitted ``strict`` behave like ``true`` instead;
- ``temperature`` on a reasoning model (o-series, GPT-5) is refused as the API does;
- ``stream: true`` is answered with the API's event sequence, written event by event:
  ``response.created``, ``response.in_progress``, per output item ``output_item.added``,
  ``content_part.added``, ``output_text.delta``… ``output_text.done``,
  ``content_part.done`` (or ``function_call_arguments.delta``… ``.done``),
  ``output_item.done``, and ``response.completed`` (``response.incomplete`` for a
  truncated answer); faults give ``response.failed`` or an ``error`` event.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from typing import Any, Literal

from aiohttp import web

from agent.tokens import count_text
from tests.fakes.llm_server import (
    FakeLLMServer,
    RecordedRequest,
    Reply,
    StreamError,
    Usage,
    bare_model,
    openai_error,
    pieces,
    sse,
)

_RESPONSES_REASONING = re.compile(r"o\d+(?:-[\w.-]+)?|gpt-5(?:\.\d+)?(?:-[\w.-]+)?")
_CHAT_SNAPSHOT = re.compile(r"gpt-5(?:\.\d+)?-chat(?:-[\w.-]+)?")


def strict_schema_problem(schema: Any, context: tuple[Any, ...] = ()) -> str | None:
    """Why strict mode cannot take ``schema`` (the API's wording), or None when it can.

    Strict mode needs every object to list all its properties in ``required`` and to set
    ``additionalProperties: false``; nested objects, array items, ``anyOf`` branches and
    ``$defs`` are held to the same rule.
    """
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        missing = [key for key in properties if key not in required]
        if missing:
            return (
                f"In context={context!r}, 'required' is required to be supplied and to be an array including "
                f"every key in properties. Missing '{missing[0]}'."
            )
        extra = [key for key in required if key not in properties]
        if extra:
            return (
                f"In context={context!r}, 'required' is required to be supplied and to be an array including "
                f"every key in properties. Extra required key '{extra[0]}' supplied."
            )
        if schema.get("additionalProperties") is not False:
            return f"In context={context!r}, 'additionalProperties' is required to be supplied and to be false."
        for key, child in properties.items():
            problem = strict_schema_problem(child, (*context, "properties", key))
            if problem:
                return problem
    if isinstance(schema.get("items"), dict):
        problem = strict_schema_problem(schema["items"], (*context, "items"))
        if problem:
            return problem
    for index, branch in enumerate(schema.get("anyOf") or ()):
        problem = strict_schema_problem(branch, (*context, "anyOf", index))
        if problem:
            return problem
    for keyword in ("$defs", "definitions"):
        for name, child in (schema.get(keyword) or {}).items():
            problem = strict_schema_problem(child, (*context, keyword, name))
            if problem:
                return problem
    return None


def _error(
    message: str, *, code: str | None = None, param: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    return openai_error(message, kind, code=code, param=param)


class FakeResponsesServer(FakeLLMServer):
    """See the module docstring. ``name`` makes each instance's encrypted content distinct."""

    def __init__(
        self,
        *,
        name: str = "fake",
        reject_context_management: bool = False,
        carry_tokens: int = 300,
        omitted_strict: Literal["fallback", "reject"] = "fallback",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.reject_context_management = reject_context_management
        self.carry_tokens = carry_tokens
        self.omitted_strict = omitted_strict
        #: encrypted content this server issued -> tokens it stands for
        self.issued: dict[str, int] = {}
        self.compactions = 0
        self._response_ids = itertools.count(1)

    @property
    def responses_base_url(self) -> str:
        """Base URL for Responses clients (they append ``/responses``)."""
        return f"{self.base_url}/v1"

    def model_names(self, dialect: str) -> list[str]:
        return list(self.models) if self.models is not None else ["gpt-5.6", "gpt-5.5", "gpt-5.4-mini"]

    async def _respond(self, request: RecordedRequest, http: web.Request) -> web.StreamResponse:
        path = http.path.rstrip("/")
        if http.method == "GET":
            return await super()._respond(request, http)
        if http.method != "POST" or not path.endswith("/responses"):
            return await self._send_json(http, request, 404, _error(f"Invalid URL ({http.method} {http.path})"))
        body = request.body if isinstance(request.body, dict) else None
        if body is None:
            return await self._send_json(
                http, request, 400, _error("We could not parse the JSON body of your request.")
            )
        refusal = self._responses_refusal(body)
        if refusal is not None:
            return await self._send_json(http, request, 400, refusal)
        tokens, problem = self._input_tokens(body)
        if problem:
            return await self._send_json(
                http, request, 400, _error(problem, code="invalid_encrypted_content", param="input")
            )
        reply = await self._next_reply(request)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.drop:
            return self._drop(http)
        if self.context_limit is not None and tokens > self.context_limit and reply.status == 200:
            return await self._send_json(
                http,
                request,
                400,
                _error(
                    "Your input exceeds the context window of this model. Please adjust your input and try again.",
                    code="context_length_exceeded",
                    param="input",
                ),
            )
        if reply.status != 200 or reply.body is not None:
            status, error = self._error_reply(request, reply, Usage(tokens, 0, 0))
            return await self._send_json(http, request, status, error, reply.headers, delay=reply.first_byte_delay)
        response = self._response(body, reply, tokens)
        if body.get("stream") is True:
            fault = reply.fault()
            failure = (lambda number: self._failure_event(response, fault, number)) if fault else None
            return await self._send_stream(http, request, reply, self._events(response, reply), failure)
        return await self._send_json(http, request, 200, response, reply.headers, delay=reply.first_byte_delay)

    # -- validation ------------------------------------------------------------------

    def _responses_refusal(self, body: dict[str, Any]) -> dict[str, Any] | None:
        if self.reject_context_management and "context_management" in body:
            return _error(
                "Unsupported parameter: 'context_management' is not supported with this model.",
                code="unsupported_parameter",
                param="context_management",
            )
        model = bare_model(body.get("model"))
        if (
            body.get("temperature") is not None
            and _RESPONSES_REASONING.fullmatch(model)
            and not _CHAT_SNAPSHOT.fullmatch(model)
        ):
            return _error(
                "Unsupported parameter: 'temperature' is not supported with this model.",
                code="unsupported_parameter",
                param="temperature",
            )
        for index, tool in enumerate(body.get("tools") or ()):
            if not isinstance(tool, dict) or tool.get("type") != "function" or tool.get("strict") is False:
                continue
            problem = strict_schema_problem(tool.get("parameters"))
            if problem and (tool.get("strict") is True or self.omitted_strict == "reject"):
                return _error(
                    f"Invalid schema for function '{tool.get('name')}': {problem}",
                    code="invalid_function_parameters",
                    param=f"tools[{index}].parameters",
                )
        return None

    @staticmethod
    def _echo_tools(tools: list[Any]) -> list[Any]:
        """The request's tools as the response lists them, with the strictness they were given."""
        echoed = []
        for tool in tools:
            if isinstance(tool, dict) and tool.get("type") == "function":
                strict = tool.get("strict")
                if strict is None:
                    strict = strict_schema_problem(tool.get("parameters")) is None
                tool = {"description": None, **tool, "strict": strict}
            echoed.append(tool)
        return echoed

    def _input_tokens(self, body: dict[str, Any]) -> tuple[int, str | None]:
        tokens = count_text(str(body.get("instructions") or ""))
        given = body.get("input") or ()
        for item in [{"role": "user", "content": given}] if isinstance(given, str) else given:
            if not isinstance(item, dict):
                continue
            if item.get("type") in ("compaction", "reasoning"):
                content = item.get("encrypted_content")
                if content not in self.issued:
                    return 0, f"The encrypted content of item {item.get('id')!r} could not be verified."
                tokens += self.issued[content]
            else:
                tokens += 4 + count_text(
                    json.dumps(item.get("content") or item.get("output") or item.get("arguments") or "")
                )
        return tokens, None

    # -- answers ---------------------------------------------------------------------

    def _response(self, body: dict[str, Any], reply: Reply, tokens: int) -> dict[str, Any]:
        number = next(self._response_ids)
        output: list[dict[str, Any]] = []
        management = body.get("context_management") or []
        threshold = next(
            (entry.get("compact_threshold") for entry in management if entry.get("type") == "compaction"), None
        )
        if threshold is not None and tokens > threshold:
            self.compactions += 1
            content = f"enc::{self.name}::{self.compactions}"
            self.issued[content] = self.carry_tokens
            output.append(
                {"type": "compaction", "id": f"cmp_{self.name}_{self.compactions}", "encrypted_content": content}
            )
            tokens = self.carry_tokens
        if reply.text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{number}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}],
                }
            )
        for index, call in enumerate(reply.tool_calls):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{number}_{index}",
                    "call_id": call["id"],
                    "status": "completed",
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                }
            )
        completion = count_text(reply.text) + sum(8 + count_text(c["function"]["arguments"]) for c in reply.tool_calls)
        usage = reply.usage or {
            "input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens + completion,
        }
        truncated = reply.finish_reason == "length"
        now = time.time()
        return {
            "id": f"resp_{self.name}_{number}",
            "object": "response",
            "created_at": int(now),
            "status": "incomplete" if truncated else "completed",
            "completed_at": None if truncated else int(now),
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": body.get("model"),
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": self._echo_tools(list(body.get("tools") or ())),
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage,
            "user": None,
            "metadata": {},
        }

    def _events(self, response: dict[str, Any], reply: Reply) -> list[bytes]:
        """The stream of one response, event by event, numbered as the API numbers them."""
        pending = {
            **response,
            "status": "in_progress",
            "output": [],
            "usage": None,
            "completed_at": None,
            "incomplete_details": None,
        }
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": pending},
            {"type": "response.in_progress", "response": pending},
        ]
        for index, item in enumerate(response["output"]):
            events += self._item_events(index, item, reply.chunk_size)
        final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        events.append({"type": final, "response": response})
        return [sse({**event, "sequence_number": number}, event["type"]) for number, event in enumerate(events)]

    @staticmethod
    def _item_events(index: int, item: dict[str, Any], size: int | None) -> list[dict[str, Any]]:
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            return [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                },
                {"type": "response.content_part.added", **where, "content_index": 0, "part": part},
                *(
                    {"type": "response.output_text.delta", **where, "content_index": 0, "delta": piece, "logprobs": []}
                    for piece in pieces(text, size)
                ),
                {"type": "response.output_text.done", **where, "content_index": 0, "text": text, "logprobs": []},
                {"type": "response.content_part.done", **where, "content_index": 0, "part": {**part, "text": text}},
                {"type": "response.output_item.done", "output_index": index, "item": item},
            ]
        if item["type"] == "function_call":
            return [
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "arguments": ""},
                },
                *(
                    {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                    for piece in pieces(item["arguments"], size)
                ),
                {
                    "type": "response.function_call_arguments.done",
                    **where,
                    "name": item["name"],
                    "arguments": item["arguments"],
                },
                {"type": "response.output_item.done", "output_index": index, "item": item},
            ]
        return [
            {"type": "response.output_item.added", "output_index": index, "item": item},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]

    @staticmethod
    def _failure_event(response: dict[str, Any], fault: StreamError, number: int) -> bytes:
        """``response.failed`` (the response, failed, with its error) or a bare ``error`` event."""
        code = fault.code or "server_error"
        if fault.responses_event == "error":
            event = {"type": "error", "code": code, "message": fault.message, "param": None, "sequence_number": number}
            return sse(event, "error")
        failed = {
            **response,
            "status": "failed",
            "completed_at": None,
            "usage": None,
            "error": {"code": code, "message": fault.message},
        }
        return sse({"type": "response.failed", "response": failed, "sequence_number": number}, "response.failed")
