"""What the provider itself says a model's window is, asked of the server that serves it.

foldgate's catalog knows the public models by name, but people also run models no catalog can
know: local ones (Ollama, vLLM, llama.cpp, LM Studio) and aliases behind OpenRouter or a company
gateway. A wrong window is the surest way for compaction to fail. If it is too large, the server
refuses the request, or (worse) silently drops the start of the conversation. If it is too small,
foldgate compacts for nothing. Most servers state the window, each in its own words:

==================  =============================================================================
OpenRouter          ``GET …/models``: ``data[].context_length``, else ``top_provider.context_length``
vLLM                ``GET /v1/models``: ``data[].max_model_len``
other gateways      the same list, with ``context_window`` (Groq) or ``max_context_length`` (Mistral)
llama.cpp server    ``GET /props``: ``default_generation_settings.n_ctx``, the window of one request
                    slot and so the real limit; else ``/v1/models`` ``data[].meta.n_ctx`` (the whole
                    context, in newer builds), else ``meta.n_ctx_train`` (what the model was trained for)
LM Studio           ``GET /api/v0/models``: ``loaded_context_length`` of a loaded model, else
                    ``max_context_length`` (the most a load may give it)
Ollama              ``GET /api/ps``: the loaded model's ``context_length``; else ``POST /api/show``:
                    the ``num_ctx`` parameter, else Ollama's default (see
                    :func:`agent.llm.window_servers.ollama_window`)
Anthropic           ``GET /v1/models/{id}``: ``max_input_tokens``
==================  =============================================================================

The OpenAI-compatible list is asked first: every such server answers it, and its answer either
holds the window or shows which server this is. A server's own API (llama.cpp, LM Studio, Ollama)
is asked only when the list points to it or the host is on a private network, so a public
provider never gets requests for paths it does not have. The first answer wins.

:func:`reported_window` never raises: a server that cannot be reached, refuses the key, answers
something unreadable or states a nonsense number has said nothing, and the caller falls back to
the catalog. A window marked ``provisional`` describes a model that is not loaded. Loading it may
pick a smaller window, so the caller should not keep that answer as long as a firm one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpx

from agent.llm.window_asking import (
    LARGEST_WINDOW,
    Asker,
    ReportedWindow,
    Silent,
    Source,
    dig,
    find_entry,
    list_entries,
    list_path,
    plausible,
    server_root,
)
from agent.llm.window_servers import (
    OLLAMA_DEFAULT_NUM_CTX,
    OLLAMA_FIRST_4K_DEFAULT,
    OLLAMA_OLD_DEFAULT_NUM_CTX,
    anthropic_window,
    llama_cpp_entry,
    llama_cpp_window,
    lm_studio_window,
    ollama_window,
)

#: The window a server reports, and the figures that bound it: some are defined beside the readers that use
#: them (agent.llm.window_asking, agent.llm.window_servers) and still answer to this module's name.
__all__ = [
    "DEFAULT_TIMEOUT",
    "LARGEST_WINDOW",
    "LM_STUDIO_PORT",
    "OLLAMA_DEFAULT_NUM_CTX",
    "OLLAMA_FIRST_4K_DEFAULT",
    "OLLAMA_OLD_DEFAULT_NUM_CTX",
    "OLLAMA_PORT",
    "ReportedWindow",
    "reported_window",
]

log = logging.getLogger(__name__)

#: Seconds one call may spend in all, across every request it makes: it runs while a bot starts.
DEFAULT_TIMEOUT = 3.0
#: The ports the local servers listen on unless told otherwise, which hint at which one this is.
OLLAMA_PORT = 11434
LM_STUDIO_PORT = 1234

#: List fields that state a window, as paths into one entry, in the order read: OpenRouter's figure for the
#: model before its top provider's, then vLLM's, Groq's and Mistral's.
_LIST_FIELDS: tuple[tuple[str, ...], ...] = (
    ("context_length",),
    ("top_provider", "context_length"),
    ("max_model_len",),
    ("context_window",),
    ("max_context_length",),
)
#: Answers that refuse the key. Asking the same server anything else with it would be refused too.
_REFUSALS = frozenset({401, 403})


async def reported_window(
    http: httpx.AsyncClient,
    base_url: str,
    model: str,
    *,
    headers: Mapping[str, str],
    dialect: str = "openai",
    timeout: float = DEFAULT_TIMEOUT,
) -> ReportedWindow | None:
    """The window ``model`` has on the server at ``base_url``, as the server states it, or None.

    ``base_url`` is the configured base: OpenAI-compatible (``http://localhost:11434/v1``,
    ``https://openrouter.ai/api/v1``) or, for ``dialect="anthropic"``, Anthropic's root. ``headers``
    carry the key, and go to this server only. ``timeout`` bounds the whole call, not each request:
    it runs while a bot starts, and a silent host must not hold that up. Any failure gives None.
    """
    if not base_url or not model:
        return None
    asker = Asker(http, headers, timeout)
    base = base_url.rstrip("/")
    try:
        async with asyncio.timeout(timeout):
            if dialect == "anthropic":
                return await anthropic_window(asker, base, model)
            return await _openai_compatible_window(asker, base, model)
    except (Silent, TimeoutError):
        return None
    except Exception as error:  # the window is a hint: nothing a server says may stop a bot from starting
        log.debug("reading the window of %s from %s failed: %r", model, base, error)
        return None


# ------------------------------------------------------------------------------ the model list


async def _openai_compatible_window(asker: Asker, base: str, model: str) -> ReportedWindow | None:
    """The list first. Then, if it names no window, the server's own API when there is one to ask."""
    listing = await asker.get(base + "/models")
    if listing.status in _REFUSALS:
        return None
    entries = list_entries(listing.body)
    entry = find_entry(entries, model)
    llama = llama_cpp_entry(entries, entry)
    if llama is not None:
        return await llama_cpp_window(asker, base, llama)
    if entry is not None:
        found = _listed_window(base, entry)
        if found is not None:
            return found
    name = str(entry.get("id")) if entry is not None else model
    for source in _native_sources(base, entries):
        found = await source(asker, server_root(base), name)
        if found is not None:
            return found
    return None


def _listed_window(base: str, entry: Mapping[str, Any]) -> ReportedWindow | None:
    """The window an entry of the OpenAI-compatible list states, in the first field that holds a sane one."""
    for path in _LIST_FIELDS:
        tokens = plausible(dig(entry, *path))
        if tokens is not None:
            return ReportedWindow(tokens, f"{_server_name(base, entry)} {list_path(base)} {'.'.join(path)}")
    return None


def _server_name(base: str, entry: Mapping[str, Any]) -> str:
    """Who stated a window in the list, for the source words: OpenRouter and vLLM by their entries' shape
    (a gateway may pass either on under its own name), any other server by its host."""
    if "top_provider" in entry or "canonical_slug" in entry:
        return "OpenRouter"
    if entry.get("owned_by") == "vllm" or "max_model_len" in entry:
        return "vLLM"
    return urlsplit(base).hostname or base


def _native_sources(base: str, entries: Sequence[Mapping[str, Any]]) -> list[Source]:
    """Which local servers' own APIs to ask when the list names no window, most likely first.

    The list's ``owned_by`` and the port point to one. Without a hint, both are asked only on a
    private network. A list that states windows for other models shows a server that has no such API.
    """
    if any(plausible(dig(entry, *path)) is not None for entry in entries for path in _LIST_FIELDS):
        return []
    parts = urlsplit(base)
    owners = {entry.get("owned_by") for entry in entries}
    lm_studio = _port(parts) == LM_STUDIO_PORT or "organization_owner" in owners
    ollama = _port(parts) == OLLAMA_PORT or "library" in owners
    if lm_studio != ollama:
        return [lm_studio_window] if lm_studio else [ollama_window]
    if lm_studio or _private_host(parts.hostname):
        return [lm_studio_window, ollama_window]
    return []


# ------------------------------------------------------------------------------ hints at the server


def _port(parts: SplitResult) -> int | None:
    try:
        return parts.port
    except ValueError:  # a port out of range: no hint in it
        return None


def _private_host(host: str | None) -> bool:
    """Whether ``host`` is this machine or on a private network, where a local model server may run."""
    if not host:
        return False
    if host == "localhost" or "." not in host or host.endswith((".localhost", ".local", ".internal", ".lan")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_private or address.is_loopback or address.is_link_local
