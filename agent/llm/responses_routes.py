"""Where a Responses route leads, and whether native compaction may be sent there.

Kept apart from the wire format and the client because the gateway decides a route's kind
when it builds the client, and the model gate decides both what is sent and what is replayed.
The field only works for gpt-5.6-family models on the direct OpenAI API or the ChatGPT
Codex backend; everywhere else it fails server-side with an HTTP 500 or a stalled stream.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlparse

from agent.models import bare_model_id

#: The server's compaction threshold sits this far below the local trigger.
SERVER_THRESHOLD_MARGIN = 8_000

#: Where the route goes: the direct OpenAI API, the ChatGPT Codex backend, or anything else.
RouteKind = Literal["openai", "openai-codex", "other"]
NATIVE_COMPACTION_ROUTES = frozenset({"openai", "openai-codex"})
_OPENAI_HOST = "api.openai.com"
_CODEX_HOST = "chatgpt.com"
_GPT56 = re.compile(r"gpt-5\.6(?:-[a-z0-9.]+)*")


def classify_route(provider: str, base_url: str) -> RouteKind:
    """``openai`` / ``openai-codex`` only for those providers at their own hosts; a relay or local server is
    ``other``."""
    host = (urlparse(base_url).hostname or "").lower()
    if provider == "openai" and host == _OPENAI_HOST:
        return "openai"
    if provider == "openai-codex" and host == _CODEX_HOST:
        return "openai-codex"
    return "other"


def native_compaction_model(model: str) -> bool:
    """gpt-5.6 and its named variants (``gpt-5.6-sol`` …), with or without a provider prefix or ``-900k``."""
    return bool(_GPT56.fullmatch(bare_model_id(model)))


def server_compact_threshold(configured: int, local_trigger_tokens: int | None) -> int:
    """The ``compact_threshold`` to send: the configured one, kept ≈8K below the local trigger."""
    if local_trigger_tokens is None:
        return configured
    return max(1, min(configured, local_trigger_tokens - SERVER_THRESHOLD_MARGIN))
