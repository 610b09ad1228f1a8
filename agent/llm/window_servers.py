"""What each model server's own API says about a model's window: llama.cpp, LM Studio, Ollama, Anthropic.

Each reader here asks one server in its own words and reads only the fields that server is
known to fill; :mod:`agent.llm.model_windows` decides which of them to ask. A reader that
finds nothing sane returns None, and the next source (or the catalog) has its turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from agent.llm.window_asking import (
    MODEL_TAG,
    Asker,
    ReportedWindow,
    dig,
    find_entry,
    list_entries,
    list_path,
    plausible,
    server_root,
)

#: Ollama's window when neither the request nor the model sets ``num_ctx``, for a model not yet loaded.
#: Since 0.15.5 the default depends on GPU memory (4,096, 32,768 or 262,144), so the smallest is used.
#: From 0.6.7 it was 4,096 everywhere. Before that it was 2,048.
OLLAMA_DEFAULT_NUM_CTX = 4_096
OLLAMA_OLD_DEFAULT_NUM_CTX = 2_048
OLLAMA_FIRST_4K_DEFAULT = (0, 6, 7)


# ------------------------------------------------------------------------------ llama.cpp


def llama_cpp_entry(entries: Sequence[Mapping[str, Any]], entry: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
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


async def llama_cpp_window(asker: Asker, base: str, entry: Mapping[str, Any]) -> ReportedWindow | None:
    """A request slot's window from ``/props``, else the list's ``meta``.

    A router is asked about the named model, with ``autoload=false`` so that the question does not
    load it. A model the router has not loaded is not asked about at all.
    """
    router = isinstance(entry.get("status"), dict)
    if not router or dig(entry, "status", "value") == "loaded":
        params = {"model": str(entry.get("id")), "autoload": "false"} if router else None
        props = await asker.get(server_root(base) + "/props", params)
        slot = plausible(dig(props.body, "default_generation_settings", "n_ctx"))
        if slot is not None:
            return ReportedWindow(slot, "llama.cpp /props n_ctx")
    meta = entry.get("meta")
    if not isinstance(meta, Mapping):
        return None
    context = plausible(meta.get("n_ctx"))
    if context is not None:
        return ReportedWindow(context, f"llama.cpp {list_path(base)} meta.n_ctx")
    trained = plausible(meta.get("n_ctx_train"))
    if trained is not None:
        return ReportedWindow(trained, f"llama.cpp {list_path(base)} meta.n_ctx_train", provisional=True)
    return None


# ------------------------------------------------------------------------------ LM Studio


async def lm_studio_window(asker: Asker, root: str, model: str) -> ReportedWindow | None:
    """LM Studio's own list: the context a loaded model was loaded with is its limit.

    For a model not loaded, the list gives only the model's maximum. A load may pick less, so that
    figure is provisional.
    """
    listing = await asker.get(root + "/api/v0/models")
    entry = find_entry(list_entries(listing.body), model)
    if entry is None:
        return None
    loaded = plausible(entry.get("loaded_context_length"))
    if loaded is not None:
        return ReportedWindow(loaded, "LM Studio /api/v0/models loaded_context_length")
    largest = plausible(entry.get("max_context_length"))
    if largest is not None:
        return ReportedWindow(
            largest, "LM Studio /api/v0/models max_context_length (model not loaded)", provisional=True
        )
    return None


# ------------------------------------------------------------------------------ Ollama


async def ollama_window(asker: Asker, root: str, model: str) -> ReportedWindow | None:
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
    loaded = dig(running.body, "models")
    if not isinstance(loaded, list):
        return None  # not Ollama
    for item in loaded:
        if isinstance(item, Mapping) and _ollama_names_match(item, model):
            tokens = plausible(item.get("context_length"))
            if tokens is not None:
                return ReportedWindow(tokens, "Ollama /api/ps context_length")
    shown = await asker.post(root + "/api/show", {"model": model})
    if not isinstance(shown.body, Mapping):
        return None
    return await _ollama_configured_window(asker, root, shown.body)


async def _ollama_configured_window(asker: Asker, root: str, shown: Mapping[str, Any]) -> ReportedWindow | None:
    """The window of a model that is not loaded: its ``num_ctx`` parameter, else the server's default."""
    trained = _ollama_trained_length(shown.get("model_info"))
    if shown.get("remote_host") and trained is not None:
        return ReportedWindow(trained, "Ollama /api/show context_length (cloud model)")
    num_ctx = _ollama_num_ctx(shown.get("parameters"))
    if num_ctx is not None:
        return ReportedWindow(_capped(num_ctx, trained), "Ollama /api/show num_ctx")
    version = await asker.get(root + "/api/version")
    default = _ollama_default_num_ctx(dig(version.body, "version"))
    return ReportedWindow(_capped(default, trained), "Ollama default num_ctx (model not loaded)", provisional=True)


def _ollama_names_match(item: Mapping[str, Any], model: str) -> bool:
    """Whether an ``/api/ps`` entry is ``model``: Ollama reads a name without a tag as ``:latest``."""
    wanted = _ollama_name(model)
    return any(isinstance(name, str) and _ollama_name(name) == wanted for name in (item.get("name"), item.get("model")))


def _ollama_name(name: str) -> str:
    folded = name.casefold()
    return folded if MODEL_TAG.search(folded) else folded + ":latest"


def _ollama_trained_length(info: Any) -> int | None:
    """``<architecture>.context_length`` of ``/api/show``'s ``model_info``: what the model was trained for."""
    if not isinstance(info, Mapping):
        return None
    architecture = info.get("general.architecture")
    named = plausible(info.get(f"{architecture}.context_length")) if isinstance(architecture, str) else None
    if named is not None:
        return named
    for key, value in info.items():
        tokens = plausible(value) if isinstance(key, str) and key.endswith(".context_length") else None
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
            return plausible(int(digits)) if digits.isdigit() else None
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


async def anthropic_window(asker: Asker, base: str, model: str) -> ReportedWindow | None:
    """``max_input_tokens`` of the model's entry in Anthropic's list (ids and aliases both answer)."""
    answer = await asker.get(f"{server_root(base)}/v1/models/{quote(model, safe='')}")
    tokens = plausible(dig(answer.body, "max_input_tokens"))
    return ReportedWindow(tokens, "Anthropic /v1/models max_input_tokens") if tokens is not None else None
