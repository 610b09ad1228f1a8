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
                    the ``num_ctx`` parameter, else Ollama's default (see :func:`_ollama_window`)
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
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, quote, urlsplit

import httpx

from agent import json_codec
from agent.llm.http import TRANSPORT_ERRORS

log = logging.getLogger(__name__)

#: Seconds one call may spend in all, across every request it makes: it runs while a bot starts.
DEFAULT_TIMEOUT = 3.0
#: No model has a larger window. A bigger number is a placeholder or a bug, not a window.
LARGEST_WINDOW = 100_000_000
#: The ports the local servers listen on unless told otherwise, which hint at which one this is.
OLLAMA_PORT = 11434
LM_STUDIO_PORT = 1234
#: Ollama's window when neither the request nor the model sets ``num_ctx``, for a model not yet loaded.
#: Since 0.15.5 the default depends on GPU memory (4,096, 32,768 or 262,144), so the smallest is used.
#: From 0.6.7 it was 4,096 everywhere. Before that it was 2,048.
OLLAMA_DEFAULT_NUM_CTX = 4_096
OLLAMA_OLD_DEFAULT_NUM_CTX = 2_048
OLLAMA_FIRST_4K_DEFAULT = (0, 6, 7)

#: List fields that state a window, as paths into one entry, in the order read: OpenRouter's figure for the
#: model before its top provider's, then vLLM's, Groq's and Mistral's.
_LIST_FIELDS: tuple[tuple[str, ...], ...] = (
    ("context_length",),
    ("top_provider", "context_length"),
    ("max_model_len",),
    ("context_window",),
    ("max_context_length",),
)
#: A tag at the end of a model name: Ollama's ``:latest``/``:7b``, OpenRouter's ``:free``/``:nitro``.
_TAG = re.compile(r":[^:/]+$")
#: Answers that refuse the key. Asking the same server anything else with it would be refused too.
_REFUSALS = frozenset({401, 403})


@dataclass(frozen=True)
class ReportedWindow:
    """A model's window in tokens as its server states it, and in a few words where that was read.

    ``provisional`` marks a figure for a model that is not loaded yet. The server stated what the
    model may hold, and a load may settle on less, so the caller should ask again rather than keep
    the figure for good.
    """

    tokens: int
    source: str
    provisional: bool = False


class _Silent(Exception):
    """The server did not answer at all: every other source on it would only wait the same way."""


@dataclass(frozen=True)
class _Answer:
    """One exchange: the answer's status, and its decoded JSON if it was a 2xx with JSON, else None."""

    status: int
    body: Any


@dataclass(frozen=True)
class _Asker:
    """Requests to one server, with the caller's client and headers and the time left for them."""

    http: httpx.AsyncClient
    headers: Mapping[str, str]
    timeout: float

    async def get(self, url: str, params: Mapping[str, str] | None = None) -> _Answer:
        return await self._send("GET", url, params=params)

    async def post(self, url: str, body: Mapping[str, Any]) -> _Answer:
        return await self._send("POST", url, content=json_codec.dumps(body))

    async def _send(
        self, method: str, url: str, *, params: Mapping[str, str] | None = None, content: bytes | None = None
    ) -> _Answer:
        headers = {**self.headers, "accept": "application/json"}
        if content is not None:
            headers["content-type"] = "application/json"
        try:
            response = await self.http.request(
                method, url, params=params, content=content, headers=headers, timeout=self.timeout
            )
        except TRANSPORT_ERRORS as error:
            raise _Silent(url) from error
        if not 200 <= response.status_code < 300:
            return _Answer(response.status_code, None)
        try:
            return _Answer(response.status_code, json_codec.loads(response.content))
        except ValueError:
            return _Answer(response.status_code, None)


#: One server API that may state the window: asked with the server's root and the model's name.
_Source = Callable[[_Asker, str, str], Awaitable[ReportedWindow | None]]


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
    asker = _Asker(http, headers, timeout)
    base = base_url.rstrip("/")
    try:
        async with asyncio.timeout(timeout):
            if dialect == "anthropic":
                return await _anthropic_window(asker, base, model)
            return await _openai_compatible_window(asker, base, model)
    except (_Silent, TimeoutError):
        return None
    except Exception as error:  # the window is a hint: nothing a server says may stop a bot from starting
        log.debug("reading the window of %s from %s failed: %r", model, base, error)
        return None


# ------------------------------------------------------------------------------ the model list


async def _openai_compatible_window(asker: _Asker, base: str, model: str) -> ReportedWindow | None:
    """The list first. Then, if it names no window, the server's own API when there is one to ask."""
    listing = await asker.get(base + "/models")
    if listing.status in _REFUSALS:
        return None
    entries = _entries(listing.body)
    entry = _find_entry(entries, model)
    llama = _llama_cpp_entry(entries, entry)
    if llama is not None:
        return await _llama_cpp_window(asker, base, llama)
    if entry is not None:
        found = _listed_window(base, entry)
        if found is not None:
            return found
    name = str(entry.get("id")) if entry is not None else model
    for source in _native_sources(base, entries):
        found = await source(asker, _server_root(base), name)
        if found is not None:
            return found
    return None


def _listed_window(base: str, entry: Mapping[str, Any]) -> ReportedWindow | None:
    """The window an entry of the OpenAI-compatible list states, in the first field that holds a sane one."""
    for path in _LIST_FIELDS:
        tokens = _plausible(_dig(entry, *path))
        if tokens is not None:
            return ReportedWindow(tokens, f"{_server_name(base, entry)} {_list_path(base)} {'.'.join(path)}")
    return None


def _server_name(base: str, entry: Mapping[str, Any]) -> str:
    """Who stated a window in the list, for the source words: OpenRouter and vLLM by their entries' shape
    (a gateway may pass either on under its own name), any other server by its host."""
    if "top_provider" in entry or "canonical_slug" in entry:
        return "OpenRouter"
    if entry.get("owned_by") == "vllm" or "max_model_len" in entry:
        return "vLLM"
    return urlsplit(base).hostname or base


def _native_sources(base: str, entries: Sequence[Mapping[str, Any]]) -> list[_Source]:
    """Which local servers' own APIs to ask when the list names no window, most likely first.

    The list's ``owned_by`` and the port point to one. Without a hint, both are asked only on a
    private network. A list that states windows for other models shows a server that has no such API.
    """
    if any(_plausible(_dig(entry, *path)) is not None for entry in entries for path in _LIST_FIELDS):
        return []
    parts = urlsplit(base)
    owners = {entry.get("owned_by") for entry in entries}
    lm_studio = _port(parts) == LM_STUDIO_PORT or "organization_owner" in owners
    ollama = _port(parts) == OLLAMA_PORT or "library" in owners
    if lm_studio != ollama:
        return [_lm_studio_window] if lm_studio else [_ollama_window]
    if lm_studio or _private_host(parts.hostname):
        return [_lm_studio_window, _ollama_window]
    return []


# ------------------------------------------------------------------------------ llama.cpp


def _llama_cpp_entry(entries: Sequence[Mapping[str, Any]], entry: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The llama.cpp entry to read, if this is llama.cpp's server.

    A single-model server answers under any model name, so its only entry is the model whatever
    name was configured. The router (several models, each with a ``status``) serves only the
    names it lists.
    """
    if entry is not None:
        return entry if _is_llama_cpp(entry) else None
    if len(entries) == 1 and _is_llama_cpp(entries[0]) and not isinstance(entries[0].get("status"), dict):
        return entries[0]
    return None


def _is_llama_cpp(entry: Mapping[str, Any]) -> bool:
    return entry.get("owned_by") == "llamacpp" or "meta" in entry


async def _llama_cpp_window(asker: _Asker, base: str, entry: Mapping[str, Any]) -> ReportedWindow | None:
    """A request slot's window from ``/props``, else the list's ``meta``.

    A router is asked about the named model, with ``autoload=false`` so that the question does not
    load it. A model the router has not loaded is not asked about at all.
    """
    router = isinstance(entry.get("status"), dict)
    if not router or _dig(entry, "status", "value") == "loaded":
        params = {"model": str(entry.get("id")), "autoload": "false"} if router else None
        props = await asker.get(_server_root(base) + "/props", params)
        slot = _plausible(_dig(props.body, "default_generation_settings", "n_ctx"))
        if slot is not None:
            return ReportedWindow(slot, "llama.cpp /props n_ctx")
    meta = entry.get("meta")
    if not isinstance(meta, Mapping):
        return None
    context = _plausible(meta.get("n_ctx"))
    if context is not None:
        return ReportedWindow(context, f"llama.cpp {_list_path(base)} meta.n_ctx")
    trained = _plausible(meta.get("n_ctx_train"))
    if trained is not None:
        return ReportedWindow(trained, f"llama.cpp {_list_path(base)} meta.n_ctx_train", provisional=True)
    return None


# ------------------------------------------------------------------------------ LM Studio


async def _lm_studio_window(asker: _Asker, root: str, model: str) -> ReportedWindow | None:
    """LM Studio's own list: the context a loaded model was loaded with is its limit.

    For a model not loaded, the list gives only the model's maximum. A load may pick less, so that
    figure is provisional.
    """
    listing = await asker.get(root + "/api/v0/models")
    entry = _find_entry(_entries(listing.body), model)
    if entry is None:
        return None
    loaded = _plausible(entry.get("loaded_context_length"))
    if loaded is not None:
        return ReportedWindow(loaded, "LM Studio /api/v0/models loaded_context_length")
    largest = _plausible(entry.get("max_context_length"))
    if largest is not None:
        return ReportedWindow(
            largest, "LM Studio /api/v0/models max_context_length (model not loaded)", provisional=True
        )
    return None


# ------------------------------------------------------------------------------ Ollama


async def _ollama_window(asker: _Asker, root: str, model: str) -> ReportedWindow | None:
    """The window Ollama enforces on a request that names no ``num_ctx``.

    An OpenAI-compatible request cannot name one. For a loaded model, ``/api/ps`` reports the window
    it was loaded with (Ollama 0.9.7 and later), and that is the limit. Otherwise the window comes
    from the model's ``num_ctx`` parameter. Failing that, it is the server's default:
    ``OLLAMA_CONTEXT_LENGTH`` if set, else (since 0.15.5) 4,096, 32,768 or 262,144 by the GPU
    memory Ollama found; from 0.6.7 a fixed 4,096, and before that 2,048. Neither the variable nor
    the memory can be seen from here. So for a model not loaded, the smallest default its version
    may use is reported, as provisional. Compacting early costs a summary. A window too large costs
    the start of the conversation, which Ollama drops without a word. Like Ollama, every figure is
    capped at the model's trained length. Cloud models get their full length.
    """
    running = await asker.get(root + "/api/ps")
    loaded = _dig(running.body, "models")
    if not isinstance(loaded, list):
        return None  # not Ollama
    for item in loaded:
        if isinstance(item, Mapping) and _ollama_names_match(item, model):
            tokens = _plausible(item.get("context_length"))
            if tokens is not None:
                return ReportedWindow(tokens, "Ollama /api/ps context_length")
    shown = await asker.post(root + "/api/show", {"model": model})
    if not isinstance(shown.body, Mapping):
        return None
    return await _ollama_configured_window(asker, root, shown.body)


async def _ollama_configured_window(asker: _Asker, root: str, shown: Mapping[str, Any]) -> ReportedWindow | None:
    """The window of a model that is not loaded: its ``num_ctx`` parameter, else the server's default."""
    trained = _ollama_trained_length(shown.get("model_info"))
    if shown.get("remote_host") and trained is not None:
        return ReportedWindow(trained, "Ollama /api/show context_length (cloud model)")
    num_ctx = _ollama_num_ctx(shown.get("parameters"))
    if num_ctx is not None:
        return ReportedWindow(_capped(num_ctx, trained), "Ollama /api/show num_ctx")
    version = await asker.get(root + "/api/version")
    default = _ollama_default_num_ctx(_dig(version.body, "version"))
    return ReportedWindow(_capped(default, trained), "Ollama default num_ctx (model not loaded)", provisional=True)


def _ollama_names_match(item: Mapping[str, Any], model: str) -> bool:
    """Whether an ``/api/ps`` entry is ``model``: Ollama reads a name without a tag as ``:latest``."""
    wanted = _ollama_name(model)
    return any(isinstance(name, str) and _ollama_name(name) == wanted for name in (item.get("name"), item.get("model")))


def _ollama_name(name: str) -> str:
    folded = name.casefold()
    return folded if _TAG.search(folded) else folded + ":latest"


def _ollama_trained_length(info: Any) -> int | None:
    """``<architecture>.context_length`` of ``/api/show``'s ``model_info``: what the model was trained for."""
    if not isinstance(info, Mapping):
        return None
    architecture = info.get("general.architecture")
    named = _plausible(info.get(f"{architecture}.context_length")) if isinstance(architecture, str) else None
    if named is not None:
        return named
    for key, value in info.items():
        tokens = _plausible(value) if isinstance(key, str) and key.endswith(".context_length") else None
        if tokens is not None:
            return tokens
    return None


def _ollama_num_ctx(parameters: Any) -> int | None:
    """``num_ctx`` from ``/api/show``'s parameters: one ``name value`` per line, names padded with spaces."""
    if not isinstance(parameters, str):
        return None
    for line in parameters.splitlines():
        name, _, value = line.strip().partition(" ")
        if name == "num_ctx":
            digits = value.strip().strip('"')
            return _plausible(int(digits)) if digits.isdigit() else None
    return None


def _ollama_default_num_ctx(version: Any) -> int:
    """The smallest default window this Ollama version may use (a version it does not state: today's)."""
    if not isinstance(version, str):
        return OLLAMA_DEFAULT_NUM_CTX
    numbers = re.match(r"(\d+)\.(\d+)\.(\d+)", version.strip().removeprefix("v"))
    if numbers is None:
        return OLLAMA_DEFAULT_NUM_CTX
    parsed = tuple(int(part) for part in numbers.groups())
    return OLLAMA_OLD_DEFAULT_NUM_CTX if parsed < OLLAMA_FIRST_4K_DEFAULT else OLLAMA_DEFAULT_NUM_CTX


def _capped(tokens: int, trained: int | None) -> int:
    return min(tokens, trained) if trained is not None else tokens


# ------------------------------------------------------------------------------ Anthropic


async def _anthropic_window(asker: _Asker, base: str, model: str) -> ReportedWindow | None:
    """``max_input_tokens`` of the model's entry in Anthropic's list (ids and aliases both answer)."""
    answer = await asker.get(f"{_server_root(base)}/v1/models/{quote(model, safe='')}")
    tokens = _plausible(_dig(answer.body, "max_input_tokens"))
    return ReportedWindow(tokens, "Anthropic /v1/models max_input_tokens") if tokens is not None else None


# ------------------------------------------------------------------------------ finding the model


def _find_entry(entries: Sequence[Mapping[str, Any]], model: str) -> Mapping[str, Any] | None:
    """The list entry that is ``model``, compared ever more loosely: exactly, then ignoring case, then
    without an implied ``:latest``, then without a tag, then without the provider or path before the name.

    The first comparison that finds anything decides. If it finds several entries, the one without a
    tag is the model itself (``x`` rather than ``x:free``). If that does not settle it, no entry is
    taken, because a wrong model's window is worse than none.
    """
    for key in _KEYS:
        wanted = key(model)
        hits = [entry for entry in entries if any(key(name) == wanted for name in _names(entry))]
        if len(hits) == 1 or (hits and key is _exact):
            return hits[0]
        if hits:
            plain = [
                entry for entry in hits if any(key(name) == wanted and not _TAG.search(name) for name in _names(entry))
            ]
            return plain[0] if len(plain) == 1 else None
    return None


def _exact(name: str) -> str:
    return name


def _folded(name: str) -> str:
    return name.casefold()


def _without_latest(name: str) -> str:
    return name.casefold().removesuffix(":latest")


def _untagged(name: str) -> str:
    return _TAG.sub("", name.casefold())


def _bare(name: str) -> str:
    return _untagged(name).rsplit("/", 1)[-1].removesuffix(".gguf")


_KEYS: tuple[Callable[[str], str], ...] = (_exact, _folded, _without_latest, _untagged, _bare)


def _names(entry: Mapping[str, Any]) -> list[str]:
    """Every name an entry answers to: its id, OpenRouter's canonical slug, llama.cpp's aliases."""
    aliases = entry.get("aliases")
    names = [entry.get("id"), entry.get("canonical_slug"), *(aliases if isinstance(aliases, list) else ())]
    return [name for name in names if isinstance(name, str) and name]


# ------------------------------------------------------------------------------ small readers


def _entries(body: Any) -> list[Mapping[str, Any]]:
    """The entries of an OpenAI-style list (``{"data": [...]}``); anything else is an empty list."""
    data = body.get("data") if isinstance(body, Mapping) else None
    return [entry for entry in data if isinstance(entry, Mapping)] if isinstance(data, list) else []


def _dig(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _plausible(value: Any) -> int | None:
    """``value`` as a window, if it can be one: a whole number of tokens above 0, below :data:`LARGEST_WINDOW`."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 < value <= LARGEST_WINDOW else None


def _server_root(base: str) -> str:
    """The server's own root, where local servers keep their APIs: the base without its ``/v1``."""
    return base.removesuffix("/v1")


def _list_path(base: str) -> str:
    return urlsplit(base).path.rstrip("/") + "/models"


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
