"""What a provider's context-length refusal says about the model's window, in numbers.

A refusal is the only place many servers state the window they really run with: a local
llama.cpp or LM Studio loads a model with whatever context its operator chose, a vLLM deployment
caps it with ``--max-model-len``, a router's endpoint may be smaller than the model's card. So
foldgate reads the refusal instead of trusting a catalog, and the next request is planned for the
window the provider named.

Each provider words it differently, and the wording changes between server versions; every
sentence read here is one a provider has actually sent (the test corpus quotes them). Numbers are
read only from those sentences and from fields the provider itself named (llama.cpp's ``n_ctx``),
never from whatever digits happen to be near the word "context": a wrong window is worse than
none, since foldgate would then compact a conversation that fitted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agent import json_codec

#: Error bodies are short; past this a text is not an error body, and is read no further.
_TEXT_LIMIT = 64_000
#: JSON inside a JSON string (a proxy relaying a server's body as its message) is unwrapped this deep.
_NESTING_LIMIT = 4

#: A token count as providers print it: ``204308``, or with thousands separators, ``204,308``.
_NUMBER = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"


def _n(name: str) -> str:
    """A token count captured under ``name``, so each wording says which number is which."""
    return f"(?P<{name}>{_NUMBER})"


@dataclass(frozen=True)
class WindowRefusal:
    """The numbers one refusal names; each is None when the provider did not say it."""

    #: The model's whole window (prompt and answer together) as the provider names it.
    window: int | None = None
    #: The refused request's prompt as the provider counted it (its own tokenizer, not foldgate's estimate).
    prompt_tokens: int | None = None
    #: A cap on the prompt alone, for providers that name that instead of the whole window (OpenAI's
    #: "configured limit" for the GPT-5 family, Gemini's input maximum): the answer's room is not in it.
    input_limit: int | None = None

    def or_else(self, other: WindowRefusal) -> WindowRefusal:
        """These numbers, with the ones this refusal lacks taken from ``other``."""
        return WindowRefusal(
            window=self.window if self.window is not None else other.window,
            prompt_tokens=self.prompt_tokens if self.prompt_tokens is not None else other.prompt_tokens,
            input_limit=self.input_limit if self.input_limit is not None else other.input_limit,
        )


# Every sentence below names its numbers with groups: ``window``, ``prompt``, ``limit``, or ``parts``
# (a parenthesised breakdown whose input parts add up to the prompt).
_WORDINGS = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        # OpenAI, DeepSeek, vLLM, OpenRouter: "This model's (endpoint's) maximum context length is N tokens".
        rf"maximum context length (?:is|of) {_n('window')} tokens",
        # OpenAI: "However, your messages resulted in M tokens" (tools included in M when it breaks them down).
        rf"your messages resulted in {_n('prompt')} tokens",
        # OpenAI, old vLLM, OpenRouter: "you requested (about) M tokens (X in the messages, Y in the completion)".
        rf"you requested (?:about )?{_NUMBER} tokens \((?P<parts>[^()]{{1,300}})\)",
        # vLLM: "and your request has M input tokens", "your prompt contains at least M input tokens".
        rf"your request has {_n('prompt')} input tokens",
        rf"your prompt contains at least {_n('prompt')} input tokens",
        # vLLM: "The prompt (total length M) is too long to fit into the model (context length N)".
        rf"prompt \(total length {_n('prompt')}\) is too long to fit into the model \(context length {_n('window')}\)",
        # vLLM: "The decoder prompt (length M) [plus the number of requested output tokens (at least 1)] is longer
        # than the maximum model length of N".
        rf"decoder prompt \(length {_n('prompt')}\)",
        rf"is longer than the maximum model length of {_n('window')}",
        # Anthropic: "prompt is too long: M tokens > N maximum".
        rf"prompt is too long: {_n('prompt')} tokens > {_n('window')} maximum",
        # Anthropic: "input length and `max_tokens` exceed context limit: M + X > N".
        rf"exceed context limit: {_n('prompt')} \+ {_NUMBER} > {_n('window')}",
        # llama.cpp server (and Ollama relaying it): "request (M tokens) exceeds the available context size (N tokens)".
        rf"request \({_n('prompt')} tokens\) exceeds (?:the available )?context size \({_n('window')} tokens\)",
        # Ollama's MLX runner: "input length (M tokens) exceeds the model's maximum context length (N tokens)".
        rf"input length \({_n('prompt')} tokens\) exceeds the model.{{1,2}}s maximum context length "
        rf"\({_n('window')} tokens\)",
        # LM Studio: "... the model is loaded with context length of only N tokens", "Reached context length of N
        # tokens", "Input length M exceeds context length N".
        rf"context length of only {_n('window')} tokens",
        rf"reached context length of {_n('window')} tokens",
        rf"input length {_n('prompt')} exceeds context length {_n('window')}",
        # LM Studio's llama.cpp engine: "(n_keep: X>= n_ctx: N)", "n_keep (X) >= n_ctx (N)".
        rf"n_ctx(?::\s*|\s*\(){_n('window')}",
        # llama.cpp's structured fields, in a body whose quotes may still be escaped.
        rf'\\*"n_ctx\\*"\s*:\s*{_n("window")}',
        rf'\\*"n_prompt_tokens\\*"\s*:\s*{_n("prompt")}',
        # OpenAI (GPT-5 family): "Input tokens exceed the configured limit of L tokens".
        rf"input tokens exceed the configured limit of {_n('limit')} tokens",
        # Gemini: "The input token count (M) exceeds the maximum number of tokens allowed (L)".
        rf"input token count \({_n('prompt')}\) exceeds the maximum number of tokens allowed \({_n('limit')}\)",
        # SGLang: "Input length (M tokens) exceeds the maximum allowed length (L tokens)".
        rf"input length \({_n('prompt')} tokens\) exceeds the maximum allowed length \({_n('limit')} tokens\)",
    )
)

#: One part of a breakdown that belongs to the prompt: "4012 in the messages", "101 in the functions",
#: "6283 in your prompt", "7884 of text input", "3748 of tool input" (the completion's part is not one).
_INPUT_PART = re.compile(
    rf"({_NUMBER}) (?:in the messages|in the functions|in your prompt|of [a-z]+ input)", re.IGNORECASE
)

#: Fields some servers add to the error object, by the number they carry.
_FIELDS = {"n_ctx": "window", "n_prompt_tokens": "prompt"}


def read_window_refusal(detail: str) -> WindowRefusal:
    """The window and prompt size a context-length refusal names, from its text or its raw JSON body.

    Sentences in the text are read first, then fields of the JSON (JSON relayed as a string inside
    another body included); a number either names fills in what the other lacks. Text that names
    no number gives a refusal with every field None.
    """
    found = WindowRefusal()
    for text in _texts(detail[:_TEXT_LIMIT], _NESTING_LIMIT):
        found = found.or_else(_read_sentences(text))
    return found.or_else(_read_fields(detail[:_TEXT_LIMIT]))


def _texts(text: str, depth: int) -> Iterator[str]:
    """``text`` with its whitespace folded (messages arrive wrapped across lines), then every string inside
    it when it is JSON, unwrapped again when such a string is itself JSON."""
    yield " ".join(text.split())
    if depth <= 0:
        return
    for string in _strings(_decoded(text)):
        yield from _texts(string, depth - 1)


def _read_sentences(text: str) -> WindowRefusal:
    """The numbers the known sentences in ``text`` name; where two name the same one, the earlier wording wins."""
    found = WindowRefusal()
    for wording in _WORDINGS:
        match = wording.search(text)
        if match is not None:
            found = found.or_else(_from_match(match))
    return found


def _from_match(match: re.Match[str]) -> WindowRefusal:
    """The numbers one matched sentence names, by the names of its groups."""
    named = {name: value for name, value in match.groupdict().items() if value is not None}
    prompt = _number(named["prompt"]) if "prompt" in named else None
    if "parts" in named:
        prompt = _input_total(named["parts"])
    return WindowRefusal(
        window=_number(named["window"]) if "window" in named else None,
        prompt_tokens=prompt,
        input_limit=_number(named["limit"]) if "limit" in named else None,
    )


def _input_total(parts: str) -> int | None:
    """The prompt's share of a breakdown such as "2426 in the messages, 2933 in the functions, and 4096 in
    the completion" (5359), or None when no part of it is input."""
    inputs = [_number(match.group(1)) for match in _INPUT_PART.finditer(parts)]
    return sum(inputs) if inputs else None


def _read_fields(detail: str) -> WindowRefusal:
    """The numbers a JSON body carries as fields of its own (llama.cpp's ``n_ctx`` and ``n_prompt_tokens``)."""
    values: dict[str, int] = {}
    for key, value in _fields(_decoded(detail), _NESTING_LIMIT):
        name = _FIELDS.get(key)
        if name is not None and name not in values and isinstance(value, int) and not isinstance(value, bool):
            values[name] = value
    return WindowRefusal(window=values.get("window"), prompt_tokens=values.get("prompt"))


def _decoded(text: str) -> Any:
    """The JSON value ``text`` holds, or None when it is not a JSON object or array."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        return json_codec.loads(stripped)
    except ValueError:
        return None


def _strings(value: Any) -> Iterator[str]:
    """Every string value inside a decoded JSON value, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _fields(value: Any, depth: int) -> Iterator[tuple[str, Any]]:
    """Every key and value of the objects inside a decoded JSON value, strings holding JSON unwrapped."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key), item
            yield from _fields(item, depth)
    elif isinstance(value, list):
        for item in value:
            yield from _fields(item, depth)
    elif isinstance(value, str) and depth > 0:
        yield from _fields(_decoded(value), depth - 1)


def _number(text: str) -> int:
    """A count as printed, thousands separators dropped."""
    return int(text.replace(",", ""))
