"""The body of ``POST /v1/responses``, and what it brings to its session as a chat request would.

``input`` is a string (the person's message) or a list of input items. Messages are taken (``role`` user,
assistant, system or developer; content a string or ``input_text`` / ``input_image`` / ``output_text`` parts);
any other item (a ``function_call_output`` of the client's own tools among them) is refused naming it, as are
``tools``: the client's own tools are served by chat completions only so far. The request's last item is the
person's new message; the ones before it are history, which only a request that starts a new session may bring
(the session holds it otherwise). System and developer items join ``instructions`` as the session's prompt.

The request is turned into the chat request it amounts to (:meth:`ResponseRequest.as_chat`), so its images
are read and kept exactly as a chat request's are (:func:`gateway.api.images.keep_images`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent import json_codec
from gateway.api.errors import ApiError, invalid
from gateway.api.requests import ChatCompletionRequest, ChatMessage, field_name
from gateway.api.sessions import SYSTEM_ROLES, checked_header

#: Part types whose text is taken, and the one that is an image.
_TEXT_PARTS = ("input_text", "output_text", "text")
_IMAGE_PART = "input_image"


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class ConversationRef(_Body):
    id: str = Field(min_length=1)


class ResponseRequest(_Body):
    """``POST /v1/responses``."""

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    store: bool = True
    stream: bool = False
    tools: list[dict[str, Any]] | None = None

    @property
    def conversation_id(self) -> str | None:
        """The session ``conversation`` names (checked as the session header is), None when it names none."""
        named = self.conversation.id if isinstance(self.conversation, ConversationRef) else self.conversation
        if named is None:
            return None
        try:
            return checked_header(named)
        except ApiError:
            raise invalid(
                "conversation", "conversation must be 1-128 characters of A-Z, a-z, 0-9, _ . : and -."
            ) from None

    def messages(self) -> list[ChatMessage]:
        """The input as chat messages (instructions first, as a system message), checked on the way."""
        items = [{"role": "user", "content": self.input}] if isinstance(self.input, str) else self.input
        messages = [ChatMessage(role="system", content=self.instructions)] if self.instructions else []
        for index, item in enumerate(items):
            messages.append(_message(item, index))
        return messages

    def as_chat(self) -> ChatCompletionRequest:
        """The chat request this request amounts to: its messages, the same model, no tools."""
        return ChatCompletionRequest(model=self.model, messages=self.messages())


def _message(item: dict[str, Any], index: int) -> ChatMessage:
    """One input item as a chat message; 400 naming the item (or its part) for what is not taken."""
    kind = item.get("type", "message")
    if kind != "message":
        raise ApiError(
            400,
            f"Input items of type {kind!r} are not supported here: only messages (the client's own tools are"
            " served by /v1/chat/completions).",
            param=f"input[{index}].type",
            code="unsupported_value",
        )
    role = item.get("role")
    if role not in ("user", "assistant", *SYSTEM_ROLES):
        raise invalid(f"input[{index}].role", "A message's role must be user, assistant, system or developer.")
    content = item.get("content")
    if isinstance(content, str):
        return ChatMessage(role=role, content=content)
    if not isinstance(content, list):
        raise invalid(f"input[{index}].content", "A message's content must be a string or a list of parts.")
    parts = [_part(part, f"input[{index}].content[{n}]") for n, part in enumerate(content)]
    if all(part["type"] == "text" for part in parts):  # text alone is kept as the string a chat message holds
        return ChatMessage(role=role, content="\n".join(part["text"] for part in parts))
    return ChatMessage(role=role, content=parts)


def _part(part: Any, param: str) -> dict[str, Any]:
    """One content part in the chat shape: text as ``text``, an image as ``image_url``."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == _IMAGE_PART and isinstance(part.get("image_url"), str):
        return {"type": "image_url", "image_url": {"url": part["image_url"]}}
    if kind == _IMAGE_PART:
        raise invalid(param, f"{param}: an image must be given as image_url (a data: or https:// URL).")
    raise ApiError(400, f"{param}: parts of type {kind!r} are not supported.", param=param, code="unsupported_value")


def parse_response_request(body: bytes) -> ResponseRequest:
    """The request in ``body``; :class:`ApiError` (400) naming the first field at fault."""
    try:
        data = json_codec.loads(body)
    except ValueError:
        raise invalid("body", "The body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise invalid("body", "The body must be a JSON object.")
    try:
        request = ResponseRequest.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise invalid(field_name(first["loc"]), f"{field_name(first['loc'])}: {first['msg']}") from None
    _check(request)
    return request


def _check(request: ResponseRequest) -> None:
    """Refuse what would be taken and not done: tools, two ways of naming the session, an input that does
    not end with the person's message, or history sent where the session holds its own."""
    if request.tools:
        raise ApiError(
            400,
            "Tools are not supported by /v1/responses here; /v1/chat/completions serves the client's own tools.",
            param="tools",
            code="unsupported_value",
        )
    if request.previous_response_id is not None and request.conversation is not None:
        raise invalid("conversation", "Send previous_response_id or conversation, not both.")
    messages = [message for message in request.messages() if message.role not in SYSTEM_ROLES]
    if not messages or messages[-1].role != "user":
        raise invalid("input", "The input must end with a user message: it is answered.")
    if not (messages[-1].text().strip() or messages[-1].images()):
        raise invalid("input", "The last user message has neither text nor an image.")
    continues = request.previous_response_id is not None or request.conversation is not None
    if continues and len(messages) > 1:
        raise invalid(
            "input",
            "With previous_response_id or conversation the session holds the history: send only the new message.",
        )
