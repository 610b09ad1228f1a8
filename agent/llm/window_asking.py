"""How the window readers ask a model server and read what it answers.

:mod:`agent.llm.model_windows` decides which of a server's APIs to ask and
:mod:`agent.llm.window_servers` knows what each of them reports. Both need the same few
things, kept here: one time-bounded way to ask that turns a silent server into :class:`Silent`,
the entry of a model list that is the configured model (names are compared ever more loosely,
never guessed), and a number that can really be a window.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from agent import json_codec
from agent.llm.http import TRANSPORT_ERRORS

#: No model has a larger window. A bigger number is a placeholder or a bug, not a window.
LARGEST_WINDOW = 100_000_000
#: A tag at the end of a model name: Ollama's ``:latest``/``:7b``, OpenRouter's ``:free``/``:nitro``.
MODEL_TAG = re.compile(r":[^:/]+$")


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


class Silent(Exception):
    """The server did not answer at all: every other source on it would only wait the same way."""


@dataclass(frozen=True)
class Answer:
    """One exchange: the answer's status, and its decoded JSON if it was a 2xx with JSON, else None."""

    status: int
    body: Any


@dataclass(frozen=True)
class Asker:
    """Requests to one server, with the caller's client and headers and the time left for them."""

    http: httpx.AsyncClient
    headers: Mapping[str, str]
    timeout: float

    async def get(self, url: str, params: Mapping[str, str] | None = None) -> Answer:
        return await self._send("GET", url, params=params)

    async def post(self, url: str, body: Mapping[str, Any]) -> Answer:
        return await self._send("POST", url, content=json_codec.dumps(body))

    async def _send(
        self, method: str, url: str, *, params: Mapping[str, str] | None = None, content: bytes | None = None
    ) -> Answer:
        headers = {**self.headers, "accept": "application/json"}
        if content is not None:
            headers["content-type"] = "application/json"
        try:
            response = await self.http.request(
                method, url, params=params, content=content, headers=headers, timeout=self.timeout
            )
        except TRANSPORT_ERRORS as error:
            raise Silent(url) from error
        if not 200 <= response.status_code < 300:
            return Answer(response.status_code, None)
        try:
            return Answer(response.status_code, json_codec.loads(response.content))
        except ValueError:
            return Answer(response.status_code, None)


#: One server API that may state the window: asked with the server's root and the model's name.
Source = Callable[[Asker, str, str], Awaitable[ReportedWindow | None]]


# ------------------------------------------------------------------------------ finding the model


def find_entry(entries: Sequence[Mapping[str, Any]], model: str) -> Mapping[str, Any] | None:
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
                entry
                for entry in hits
                if any(key(name) == wanted and not MODEL_TAG.search(name) for name in _names(entry))
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
    return MODEL_TAG.sub("", name.casefold())


def _bare(name: str) -> str:
    return _untagged(name).rsplit("/", 1)[-1].removesuffix(".gguf")


_KEYS: tuple[Callable[[str], str], ...] = (_exact, _folded, _without_latest, _untagged, _bare)


def _names(entry: Mapping[str, Any]) -> list[str]:
    """Every name an entry answers to: its id, OpenRouter's canonical slug, llama.cpp's aliases."""
    aliases = entry.get("aliases")
    names = [entry.get("id"), entry.get("canonical_slug"), *(aliases if isinstance(aliases, list) else ())]
    return [name for name in names if isinstance(name, str) and name]


# ------------------------------------------------------------------------------ small readers


def list_entries(body: Any) -> list[Mapping[str, Any]]:
    """The entries of an OpenAI-style list (``{"data": [...]}``); anything else is an empty list."""
    data = body.get("data") if isinstance(body, Mapping) else None
    return [entry for entry in data if isinstance(entry, Mapping)] if isinstance(data, list) else []


def dig(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def plausible(value: Any) -> int | None:
    """``value`` as a window, if it can be one: a whole number of tokens above 0, below :data:`LARGEST_WINDOW`."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 < value <= LARGEST_WINDOW else None


def server_root(base: str) -> str:
    """The server's own root, where local servers keep their APIs: the base without its ``/v1``."""
    return base.removesuffix("/v1")


def list_path(base: str) -> str:
    return urlsplit(base).path.rstrip("/") + "/models"
