"""A fake OpenAI Responses API on loopback (``POST …/v1/responses``), with server-side compaction.

It reuses :class:`tests.fakes.llm_server.FakeLLMServer`'s HTTP plumbing, reply queue and
handler, and answers in the Responses shape. What it models:

- ``context_management: [{type: "compaction", compact_threshold: N}]``: when the input is
  larger than N tokens, the output starts with an opaque ``compaction`` item whose
  ``encrypted_content`` only this server instance can read back (it stands for the input
  it folded, :attr:`carry_tokens` tokens from then on);
- a replayed ``compaction``/``reasoning`` item this server did not issue is refused with
  a 400, as a real server refuses content it cannot decrypt;
- ``reject_context_management=True`` refuses the field itself with a structured 400
  naming the parameter (what an ineligible route answers);
- ``stream: true`` is answered as server-sent events ending in ``response.completed``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from agent.tokens import count_text
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply


class FakeResponsesServer(FakeLLMServer):
    """See the module docstring. ``name`` makes each instance's encrypted content distinct."""

    def __init__(
        self,
        *,
        name: str = "fake",
        reject_context_management: bool = False,
        carry_tokens: int = 300,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.reject_context_management = reject_context_management
        self.carry_tokens = carry_tokens
        #: encrypted content this server issued -> tokens it stands for
        self.issued: dict[str, int] = {}
        self.compactions = 0
        self._response_ids = itertools.count(1)

    @property
    def responses_base_url(self) -> str:
        """Base URL for Responses clients (they append ``/responses``)."""
        return f"{self.base_url}/v1"

    async def _respond(self, request: RecordedRequest, writer: asyncio.StreamWriter) -> bool:
        self.requests.append(request)
        if request.method != "POST" or not request.path.rstrip("/").endswith("/responses"):
            await self._write(writer, 404, {"error": {"message": f"no route {request.method} {request.path}"}})
            return True
        body = request.body if isinstance(request.body, dict) else None
        if body is None:
            await self._write(writer, 400, _error("request body is not JSON"))
            return True
        if self.reject_context_management and "context_management" in body:
            await self._write(writer, 400, _error(
                "Unsupported parameter: 'context_management' is not supported with this model.",
                code="unsupported_parameter", param="context_management"))
            return True
        tokens, problem = self._input_tokens(body)
        if problem:
            await self._write(writer, 400, _error(problem, code="invalid_encrypted_content", param="input"))
            return True
        reply = await self._next_reply(request)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.drop:
            writer.transport.abort()
            return False
        if reply.status != 200:
            error = (reply.body or {}).get("__error__", {}) if isinstance(reply.body, dict) else {}
            await self._write(writer, reply.status, _error(error.get("message", "error"), code=error.get("code")), reply.headers)
            return True
        response = self._response(body, reply, tokens)
        if body.get("stream"):
            await self._write_events(writer, response)
        else:
            await self._write(writer, 200, response)
        return True

    def _input_tokens(self, body: dict[str, Any]) -> tuple[int, str | None]:
        tokens = count_text(str(body.get("instructions") or ""))
        for item in body.get("input") or ():
            if item.get("type") in ("compaction", "reasoning"):
                content = item.get("encrypted_content")
                if content not in self.issued:
                    return 0, f"The encrypted content of item {item.get('id')!r} could not be verified."
                tokens += self.issued[content]
            else:
                tokens += 4 + count_text(json.dumps(item.get("content") or item.get("output") or item.get("arguments") or ""))
        return tokens, None

    def _response(self, body: dict[str, Any], reply: Reply, tokens: int) -> dict[str, Any]:
        number = next(self._response_ids)
        output: list[dict[str, Any]] = []
        management = body.get("context_management") or []
        threshold = next((entry.get("compact_threshold") for entry in management if entry.get("type") == "compaction"), None)
        if threshold is not None and tokens > threshold:
            self.compactions += 1
            content = f"enc::{self.name}::{self.compactions}"
            self.issued[content] = self.carry_tokens
            output.append({"type": "compaction", "id": f"cmp_{self.name}_{self.compactions}", "encrypted_content": content})
            tokens = self.carry_tokens
        if reply.text:
            output.append({"type": "message", "id": f"msg_{number}", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": reply.text, "annotations": []}]})
        for call in reply.tool_calls:
            output.append({"type": "function_call", "id": f"fc_{number}", "call_id": call["id"],
                           "name": call["function"]["name"], "arguments": call["function"]["arguments"]})
        completion = count_text(reply.text) + sum(8 + count_text(c["function"]["arguments"]) for c in reply.tool_calls)
        usage = reply.usage or {
            "input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens + completion,
        }
        return {
            "id": f"resp_{self.name}_{number}", "object": "response", "status": "completed",
            "model": body.get("model"), "output": output, "usage": usage,
        }

    async def _write_events(self, writer: asyncio.StreamWriter, response: dict[str, Any]) -> None:
        events = [
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
            *({"type": "response.output_item.done", "item": item} for item in response["output"]),
            {"type": "response.completed", "response": response},
        ]
        payload = "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events).encode()
        head = ["HTTP/1.1 200 OK", "content-type: text/event-stream", f"content-length: {len(payload)}"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        await writer.drain()


def _error(message: str, *, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code, "param": param}}
