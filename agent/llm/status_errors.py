"""The typed exception for a provider's non-2xx answer, with a hint at what to fix.

Both the sending path (:class:`agent.llm.endpoint.Endpoint`) and the model list read a
refusal the same way, so the mapping lives on its own; which status is which error is
:func:`agent.llm.errors.classify_failure`.
"""

from __future__ import annotations

import httpx

from agent.llm.errors import ProviderError, classify_failure
from agent.llm.retry import parse_retry_after, should_retry_header

#: What to check for a refusal that no retry cures, by status.
_STATUS_HINTS = {
    401: "the API key was refused: check {key}.api_key (or the provider's API key variable)",
    403: "the API key may not use this model or endpoint: check {key}.api_key and {key}.name",
    404: "no such model or endpoint: check {key}.name and {key}.base_url",
}


#: The most of an error body the classifier reads; a real one is a few hundred bytes.
_BODY_LIMIT = 64_000


def _error_text(response: httpx.Response) -> str:
    """The provider's own words from an error body (OpenAI/Anthropic ``error`` object, or the raw text)."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:2000]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        parts = [str(error.get(key) or "") for key in ("type", "code", "message")]
        return " ".join(part for part in parts if part) or response.text[:2000]
    if isinstance(error, str):
        return error
    return response.text[:2000]


def error_for_status(response: httpx.Response, *, config_key: str = "model") -> ProviderError:
    """The typed exception for a non-2xx response (its body already read).

    The classifier gets the whole body as well as its digest: the digest keeps only the error's
    type, code and message, and a context-length refusal may say its window elsewhere (llama.cpp's
    ``n_ctx`` field, or the upstream error a router relays inside ``metadata``).
    """
    status = response.status_code
    detail = _error_text(response)
    hint = _STATUS_HINTS.get(status)
    message = f"HTTP {status} from {response.request.url}: {detail}"[:1000]
    if hint:
        message = f"{message} — {hint.format(key=config_key)}"
    error = classify_failure(message, status=status, detail=detail, body=response.text[:_BODY_LIMIT])
    error.retry_after = parse_retry_after(response.headers)
    error.should_retry = should_retry_header(response.headers)
    return error
