"""The request bodies the API takes, as pydantic models: what a client may send, and the field at fault when
it sent something else.

Only what is done is accepted: one choice (``n``), text content (an image part is refused rather than dropped),
no client tools yet. Sampling options a client sends by habit (``temperature``, ``max_tokens``, ``user`` …)
are taken and not used: the bot's own configuration decides them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent import json_codec
from gateway.api.errors import ApiError, invalid


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


class ChatMessage(_Body):
    """One message of the conversation the client sends (OpenAI's shape; tool fields pass through unread)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Part] | None = None

    def text(self) -> str:
        """The message's text: the string, or its text parts one after another."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content or () if isinstance(part, TextPart))

    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(isinstance(part, ImagePart) for part in self.content)


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

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def parse_request(body: bytes) -> ChatCompletionRequest:
    """The request in ``body``; :class:`ApiError` (400) naming the first field at fault."""
    try:
        data = json_codec.loads(body)
    except ValueError:
        raise invalid("body", "The body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise invalid("body", "The body must be a JSON object.")
    try:
        request = ChatCompletionRequest.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise invalid(field_name(first["loc"]), f"{field_name(first['loc'])}: {first['msg']}") from None
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
    """Refuse what would be accepted and not done: several choices, the client's own tools, images, and a
    conversation that does not end with the person's message."""
    if request.n not in (None, 1):
        raise invalid("n", "Only n=1 is supported: each request is one message in the session, answered once.")
    if request.tools:
        raise ApiError(400, "Client tools are not supported yet.", param="tools", code="unsupported_parameter")
    for index, message in enumerate(request.messages):
        if message.has_images():
            raise ApiError(
                400,
                "Image parts are not supported by this API yet; send text.",
                param=f"messages[{index}].content",
                code="unsupported_content",
            )
    last = len(request.messages) - 1
    if request.messages[last].role != "user":
        raise invalid(f"messages[{last}].role", "The last message must be the user's: it is what is answered.")
    if not request.messages[last].text().strip():
        raise invalid(f"messages[{last}].content", "The last user message has no text.")
