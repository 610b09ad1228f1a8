"""Which models a provider serves: its ``/models`` list, and whether a configured name is on it.

Only the ``/model`` switch asks this (a completion never does), so it is kept apart from
sending requests; :meth:`agent.llm.client.ChatClient.list_models` caches the answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import httpx

from agent import json_codec
from agent.llm.errors import BadResponse
from agent.llm.http import TRANSPORT_ERRORS, transport_failure
from agent.llm.status_errors import error_for_status

#: How long a fetched model list is reused: ``/model`` asks it, and providers change it rarely.
MODEL_LIST_TTL_SECONDS = 300.0
#: Pages of an Anthropic model list followed at most (1,000 models each).
MAX_MODEL_PAGES = 10
#: What a listed id may carry that a request may leave off: an Anthropic date stamp, or its ``-0``/``-latest`` alias.
_MODEL_SNAPSHOT = re.compile(r"-(\d{8}|latest|0)$")


def lists_model(listed: Sequence[str], model: str) -> bool:
    """Whether a provider's model list serves ``model``: listed as such, or as a dated snapshot of it.

    Anthropic lists ``claude-sonnet-4-20250514`` and answers ``claude-sonnet-4-0`` too; a bare
    family name never matches another family's snapshot (``claude-opus-4`` is not ``claude-opus-4-7``).
    """
    if model in listed:
        return True
    base = _MODEL_SNAPSHOT.sub("", model)
    return any(_MODEL_SNAPSHOT.sub("", name) == base for name in listed)


async def fetch_model_ids(
    http: httpx.AsyncClient,
    base_url: str,
    *,
    dialect: str,
    headers: Mapping[str, str],
    config_key: str = "model",
) -> list[str]:
    """The model ids at ``GET {base_url}/models`` (Anthropic: ``/v1/models``, following its pages).

    Raises a :mod:`agent.llm.errors` exception when the list cannot be read.
    """
    url = base_url + ("/v1/models" if dialect == "anthropic" else "/models")
    ids: list[str] = []
    params: dict[str, str] = {"limit": "1000"} if dialect == "anthropic" else {}
    for _page in range(MAX_MODEL_PAGES):
        try:
            response = await http.get(url, params=params, headers=headers)
        except TRANSPORT_ERRORS as error:
            raise transport_failure(error, url, config_key=config_key) from error
        if response.status_code >= 300:
            raise error_for_status(response, config_key=config_key)
        try:
            page = json_codec.loads(response.content)
        except ValueError as error:
            raise BadResponse(f"malformed JSON from {url}", status=response.status_code) from error
        entries = page.get("data") if isinstance(page, dict) else None
        if not isinstance(entries, list):
            raise BadResponse(f"{url} answered without a model list (no 'data' array)", status=response.status_code)
        ids += [str(entry["id"]) for entry in entries if isinstance(entry, dict) and entry.get("id")]
        if not (dialect == "anthropic" and page.get("has_more") and page.get("last_id")):
            break
        params = {"limit": "1000", "after_id": str(page["last_id"])}
    return ids
