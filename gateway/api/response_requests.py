"""The body of ``POST /v1/responses``, and what it brings to its session as a chat request would.

``input`` is a string (the person's message) or a list of input items. Messages are taken (``role`` user,
assistant, system or developer; content a string or ``input_text`` / ``input_image`` / ``output_text`` parts),
and so are the client's own function tools: ``tools`` in the Responses' flat shape (name, description,
parameters at the top of each), and the results of their calls as ``function_call_output`` items, which become
the chat request's ``tool`` messages. The ``function_call`` items a client echoes back are its copy of what the
session already holds, and are passed over. The request ends with the person's new message, with the results
of the client's calls, or with both (results first); what comes before is history, which only a request that
starts a new session may bring (the session holds it otherwise). System and developer items join
``instructions`` as the session's prompt.

The request is turned into the chat request it amounts to (:meth:`ResponseRequest.as_chat`), so its images,
tools and tool results are read exactly as a chat request's are (:func:`gateway.api.requests.new_turn`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.api.errors import ApiError, invalid
from gateway.api.requests import ChatCompletionRequest, ChatMessage, check_client_tools, new_turn, parsed_body
from gateway.api.sessions import SYSTEM_ROLES, checked_header

#: Part types whose text is taken, and the one that is an image.
_TEXT_PARTS = ("input_text", "output_text", "text")
_IMAGE_PART = "input_image"
#: Input items that are not messages: the client's copy of a call (passed over), and a call's result.
_CALL = "function_call"
_CALL_OUTPUT = "function_call_output"


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
    tool_choice: str | dict[str, Any] | None = None

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

    def items(self) -> list[dict[str, Any]]:
        """The input as a list of items (a string is one user message)."""
        return [{"role": "user", "content": self.input}] if isinstance(self.input, str) else self.input

    def messages(self) -> list[ChatMessage]:
        """The input's messages as chat messages (instructions first, as a system message), checked on the way;
        the client's calls and their results are not among them."""
        messages = [ChatMessage(role="system", content=self.instructions)] if self.instructions else []
        for index, item in enumerate(self.items()):
            if item.get("type") not in (_CALL, _CALL_OUTPUT):
                messages.append(_message(item, index))
        return messages

    def chat_messages(self) -> list[ChatMessage]:
        """The input as a chat request's messages: its messages, and each call's result as a ``tool`` message."""
        messages = [ChatMessage(role="system", content=self.instructions)] if self.instructions else []
        for index, item in enumerate(self.items()):
            kind = item.get("type")
            if kind == _CALL_OUTPUT:
                messages.append(_tool_message(item, index))
            elif kind != _CALL:
                messages.append(_message(item, index))
        return messages

    def chat_tools(self) -> list[dict[str, Any]] | None:
        """``tools`` in the chat shape (each function's fields under ``function``), as given when not a function."""
        if self.tools is None:
            return None
        return [_chat_tool(tool) for tool in self.tools]

    def as_chat(self) -> ChatCompletionRequest:
        """The chat request this request amounts to: its messages and tool results, the same model and tools."""
        return ChatCompletionRequest(
            model=self.model, messages=self.chat_messages(), tools=self.chat_tools(), tool_choice=self.tool_choice
        )

    def result_param(self, refusal: str) -> str:
        """The field of the result a ``refusal`` of the turn names by its call id (``input[i].call_id``): the turn
        knows the results as a chat request's ``tool`` messages, this API as input items."""
        for index, item in enumerate(self.items()):
            call_id = item.get("call_id")
            if item.get("type") == _CALL_OUTPUT and isinstance(call_id, str) and call_id and call_id in refusal:
                return f"input[{index}].call_id"
        return "input"


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function":
        return tool
    function = {key: value for key, value in tool.items() if key != "type"}
    return {"type": "function", "function": function}


def _tool_message(item: dict[str, Any], index: int) -> ChatMessage:
    """A call's result as the ``tool`` message a chat request brings it in; its output a string, or text parts."""
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"input[{index}].call_id", "A function_call_output must name the call it answers (call_id).")
    output = item.get("output")
    if isinstance(output, list):
        output = "\n".join(_part(part, f"input[{index}].output[{n}]")["text"] for n, part in enumerate(output))
    if not isinstance(output, str):
        raise invalid(f"input[{index}].output", "A function_call_output's output must be a string or text parts.")
    return ChatMessage(role="tool", tool_call_id=call_id, content=output)


def _message(item: dict[str, Any], index: int) -> ChatMessage:
    """One input item as a chat message; 400 naming the item (or its part) for what is not taken."""
    kind = item.get("type", "message")
    if kind != "message":
        raise ApiError(
            400,
            f"Input items of type {kind!r} are not supported here: only messages, function_call and"
            " function_call_output.",
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
    request = parsed_body(body, ResponseRequest)
    _check(request)
    return request


def _checked_tools(request: ResponseRequest) -> ChatCompletionRequest:
    """The request as a chat request, once its tools are ones the model can call: function tools with valid,
    distinct names (one the bot's own tools take is refused by the turn, which knows them), and ``tool_choice``
    ``auto`` or ``none`` (forcing a call is not done)."""
    chat = request.as_chat()
    check_client_tools(request.tools or (), chat.tools or (), request.tool_choice)
    return chat


def _check(request: ResponseRequest) -> None:
    """Refuse what would be taken and not done: tools the chat request would refuse, two ways of naming the
    session, an input that ends with neither the person's message nor results of the client's calls, or
    history sent where the session holds its own."""
    if not request.chat_messages():
        raise invalid("input", "The input must end with a user message or function_call_output items: it is answered.")
    chat = _checked_tools(request)
    if request.previous_response_id is not None and request.conversation is not None:
        raise invalid("conversation", "Send previous_response_id or conversation, not both.")
    messages = [message for message in chat.messages if message.role not in SYSTEM_ROLES]
    if not messages or messages[-1].role not in ("user", "tool"):
        raise invalid("input", "The input must end with a user message or function_call_output items: it is answered.")
    if messages[-1].role == "user" and not (messages[-1].text().strip() or messages[-1].images()):
        raise invalid("input", "The last user message has neither text nor an image.")
    turn = new_turn(chat)
    taken = len(turn.results) + (turn.user_index is not None)
    continues = request.previous_response_id is not None or request.conversation is not None
    if continues and len(messages) > taken:
        raise invalid(
            "input",
            "With previous_response_id or conversation the session holds the history: send only the new message"
            " and the results of the client's calls.",
        )
