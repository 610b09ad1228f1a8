"""The request bodies the API takes, as pydantic models: what a client may send, and the field at fault when
it sent something else.

Only what is done is accepted: one choice (``n``), text and image parts, the client's own function tools
(``tool_choice`` only as ``auto`` or ``none``). Sampling options a client sends by habit (``temperature``,
``max_tokens``, ``user`` …) are taken and not used: the bot's own configuration decides them.

What a request brings to its session is its end (:func:`new_turn`): the last user message, and the results
of the client's tool calls just before it, or instead of it (the client resends the assistant message with
the calls ahead of them, as OpenAI's API asks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent import json_codec
from agent.tool_calls import ClientToolError, client_tool_schemas
from gateway.api.errors import ApiError, invalid
from gateway.platforms.base import ToolResult


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ImageUrl(_Body):
    url: str


class ImagePart(_Body):
    type: Literal["image_url"]
    image_url: ImageUrl


Part = Annotated[TextPart | ImagePart, Field(discriminator="type")]
#: A request model read from a body.
Parsed = TypeVar("Parsed", bound=BaseModel)


class ChatMessage(_Body):
    """One message of the conversation the client sends (OpenAI's shape; an assistant's calls pass through
    unread: the session's transcript holds them)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Part] | None = None
    #: The call a ``tool`` message answers.
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text: the string, or its text parts one after another."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content or () if isinstance(part, TextPart))

    def images(self) -> list[tuple[int, ImagePart]]:
        """The message's image parts, each with its index in the content."""
        if not isinstance(self.content, list):
            return []
        return [(index, part) for index, part in enumerate(self.content) if isinstance(part, ImagePart)]


class StreamOptions(_Body):
    include_usage: bool = False


class ChatCompletionRequest(_Body):
    """``POST /v1/chat/completions``."""

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def client_tools(self) -> tuple[dict[str, Any], ...]:
        """The tools offered to the model: none when ``tool_choice`` is ``none``."""
        return () if self.tool_choice == "none" else tuple(self.tools or ())


@dataclass(frozen=True)
class NewTurn:
    """What a request brings to its session: the client's tool results (oldest first), then the person's
    message (``user_index`` None when the request ends with the results)."""

    results: tuple[ToolResult, ...]
    user_index: int | None

    def text(self, request: ChatCompletionRequest) -> str:
        return request.messages[self.user_index].text() if self.user_index is not None else ""


def new_turn(request: ChatCompletionRequest) -> NewTurn:
    """The request's end as a turn: a trailing user message, and the run of tool messages before it (or at the
    very end). Checked by :func:`check_supported` first."""
    messages = request.messages
    end = len(messages) - 1
    user_index = end if messages[end].role == "user" else None
    start = end if user_index is None else end - 1
    results: list[ToolResult] = []
    while start >= 0 and messages[start].role == "tool":
        message = messages[start]
        results.insert(0, ToolResult(tool_call_id=message.tool_call_id or "", content=message.text()))
        start -= 1
    return NewTurn(tuple(results), user_index)


def parsed_body(body: bytes, model: type[Parsed]) -> Parsed:
    """``body`` read as a ``model``; :class:`ApiError` (400) naming the first field at fault."""
    try:
        data = json_codec.loads(body)
    except ValueError:
        raise invalid("body", "The body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise invalid("body", "The body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise invalid(field_name(first["loc"]), f"{field_name(first['loc'])}: {first['msg']}") from None


def parse_request(body: bytes) -> ChatCompletionRequest:
    """The request in ``body``; :class:`ApiError` (400) naming the first field at fault."""
    request = parsed_body(body, ChatCompletionRequest)
    check_supported(request)
    return request


def field_name(loc: tuple[int | str, ...]) -> str:
    """A validation error's location as a client names the field (``messages[2].role``); the union branches
    pydantic adds to it (``str``, ``list[...]``) are not fields and end it."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif part == "str" or "[" in part:
            break
        else:
            name += f".{part}" if name else part
    return name or "body"


def check_supported(request: ChatCompletionRequest) -> None:
    """Refuse what would be accepted and not done: several choices, tools other than functions, a
    ``tool_choice`` other than ``auto`` or ``none``, and a conversation that ends with neither the person's
    message nor the results of the client's tool calls."""
    if request.n not in (None, 1):
        raise invalid("n", "Only n=1 is supported: each request is one message in the session, answered once.")
    _check_tools(request)
    _check_end(request.messages)


def _check_tools(request: ChatCompletionRequest) -> None:
    check_client_tools(request.tools or (), request.tools or (), request.tool_choice)


def check_client_tools(
    sent: Sequence[Mapping[str, Any]], as_chat: Sequence[Mapping[str, Any]], tool_choice: object
) -> None:
    """Function tools only (``sent``: as the request wrote them, each with its ``type``), with valid, distinct names
    the model can call (``as_chat``: in chat completions' shape; a name the bot's own tools take is refused by the
    turn, which knows them); ``tool_choice`` as ``auto`` or ``none`` (forcing a call is not done)."""
    for index, tool in enumerate(sent):
        if tool.get("type") != "function":
            raise ApiError(
                400, "Only function tools are supported.", param=f"tools[{index}].type", code="unsupported_value"
            )
    try:
        client_tool_schemas(as_chat, ())
    except ClientToolError as error:
        raise invalid(error.param, str(error)) from None
    if tool_choice not in (None, "auto", "none"):
        raise ApiError(
            400,
            'Only tool_choice "auto" and "none" are supported: the model decides whether to call a tool.',
            param="tool_choice",
            code="unsupported_value",
        )


def _check_end(messages: list[ChatMessage]) -> None:
    """The conversation ends with the person's message (text or images), after the results of the client's
    calls or not, or with those results; the results follow the assistant message whose calls they answer."""
    last = len(messages) - 1
    if messages[last].role not in ("user", "tool"):
        raise invalid(f"messages[{last}].role", "The last message must be the user's (or a tool's): it is answered.")
    if messages[last].role == "user" and not (messages[last].text().strip() or messages[last].images()):
        raise invalid(f"messages[{last}].content", "The last user message has neither text nor an image.")
    index = last if messages[last].role == "tool" else last - 1
    if index < 0 or messages[index].role != "tool":
        return
    while index >= 0 and messages[index].role == "tool":
        if not messages[index].tool_call_id:
            raise invalid(f"messages[{index}].tool_call_id", "A tool message must name the call it answers.")
        index -= 1
    if index < 0 or messages[index].role != "assistant":
        raise invalid(
            f"messages[{index + 1}].role", "Tool messages must follow the assistant message whose calls they answer."
        )
