"""A fake embeddings service: a real aiohttp server on loopback speaking OpenAI's ``POST /v1/embeddings``.

Point an :class:`agent.llm.embeddings.EmbeddingClient` (or the official ``openai`` SDK) at
``server.base_url``::

    async with FakeEmbeddingsServer() as server:
        ...
        await server.stop()   # the endpoint is away: connections are refused
        await server.start()  # back, on the same port
        assert server.inputs == 12 and server.requests == 2

The body is checked against the official SDK's ``EmbeddingCreateParams`` and refused with OpenAI's 400
error body when it does not fit; ``api_key`` given to the server must come as ``Authorization: Bearer``
(else 401). ``failures`` makes the next requests answer a status (``server.fail(503, 2)``).

The vectors are deterministic and make paraphrases close: each word is mapped through a small table of
synonyms to a concept ("self-care", "me-time", "relax" … are one; "pottery", "ceramics", "clay" another)
that has a dimension of its own, weighted above plain words; any other word (less a few filler words)
is hashed into one of the remaining buckets. The vector is L2-normalised, so a dot product is the cosine.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from openai.types.embedding_create_params import EmbeddingCreateParams

from tests.fakes.sdk_shapes import _validate

#: Concepts, each with the words and phrases that mean it.
CONCEPTS: dict[str, tuple[str, ...]] = {
    "self-care": ("self-care", "selfcare", "me-time", "me time", "relax", "relaxing", "pamper", "unwind", "rest"),
    "pottery": ("pottery", "ceramics", "clay", "kiln", "wheel-throwing"),
    "concert": ("concert", "gig", "show", "live music"),
    "hiking": ("hiking", "hike", "trail", "trek", "trekking"),
    "dog": ("dog", "puppy", "pup", "doggo"),
    "cooking": ("cooking", "cook", "recipe", "baking", "bake"),
    "travel": ("travel", "trip", "journey", "vacation", "holiday"),
}
#: Words that carry no meaning of their own here.
FILLER = frozenset(
    [
        "a",
        "an",
        "the",
        "i",
        "i've",
        "i'm",
        "me",
        "my",
        "you",
        "your",
        "we",
        "our",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "do",
        "does",
        "did",
        "how",
        "what",
        "when",
        "where",
        "why",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "and",
        "or",
        "but",
        "it",
        "this",
        "that",
        "with",
        "about",
        "so",
        "have",
        "has",
        "had",
        "can",
        "could",
        "should",
        "would",
    ]
)
#: The weight of a concept's dimension against a plain word's.
CONCEPT_WEIGHT = 3.0
DEFAULT_DIMENSIONS = 64
_WORD = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")


def _phrases() -> list[tuple[str, int]]:
    """Every phrase of the table with its concept's dimension, longest first (``me time`` before ``me``)."""
    pairs = [(phrase, index) for index, words in enumerate(CONCEPTS.values()) for phrase in words]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


_PHRASES = _phrases()


def vector_of(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The text's deterministic vector (see the module docstring)."""
    if dimensions <= len(CONCEPTS):
        raise ValueError(f"need more than {len(CONCEPTS)} dimensions")
    values = [0.0] * dimensions
    rest = " " + " ".join(_WORD.findall(text.lower())) + " "
    for phrase, index in _PHRASES:
        found = rest.count(f" {phrase} ")
        if found:
            values[index] += CONCEPT_WEIGHT * found
            rest = rest.replace(f" {phrase} ", " ")
    buckets = dimensions - len(CONCEPTS)
    for word in rest.split():
        if word not in FILLER:
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            values[len(CONCEPTS) + int.from_bytes(digest, "big") % buckets] += 1.0
    norm = math.sqrt(sum(value * value for value in values))
    if norm == 0:
        values[-1], norm = 1.0, 1.0  # a text of filler only still gets a unit vector
    return [value / norm for value in values]


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


@dataclass
class FakeEmbeddingsServer:
    """The fake service (see the module docstring); counts what it answered."""

    api_key: str | None = None
    dimensions: int = DEFAULT_DIMENSIONS
    host: str = "127.0.0.1"
    port: int = 0
    #: Requests answered with vectors, and the texts they held together.
    requests: int = 0
    inputs: int = 0
    #: Each answered request's texts, in order.
    batches: list[list[str]] = field(default_factory=list)
    #: The endpoint takes requests but answers none until it stops (a hung server, for a client's timeout to end).
    stalled: bool = False
    _released: asyncio.Event = field(default_factory=asyncio.Event)
    _failures: list[int] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    async def __aenter__(self) -> FakeEmbeddingsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        """Listen (again, on the same port once it had one)."""
        if self._runner is not None:
            return
        self._released.clear()
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop listening: a request now meets a refused connection."""
        if self._runner is not None:
            self._released.set()  # whatever still waits for an answer gets one as the server goes
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def fail(self, status: int, times: int = 1) -> None:
        """The next ``times`` requests are answered ``status`` with OpenAI's error body."""
        self._failures.extend([status] * times)

    async def _embeddings(self, http: web.Request) -> web.Response:
        if self.api_key is not None and http.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        if self._failures:
            return _error(self._failures.pop(0), "The server had an error while processing your request.")
        if self.stalled:
            await self._released.wait()  # no answer until the server stops: the client's own timeout must end it
        try:
            body: Any = await http.json()
            _validate(EmbeddingCreateParams, body, "embeddings")
        except (ValueError, AssertionError) as error:
            return _error(400, f"Invalid request: {error}", "invalid_request_error")
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if not texts or not all(isinstance(text, str) and text for text in texts):
            return _error(400, "'input' must be non-empty strings", "invalid_request_error")
        dimensions = int(body.get("dimensions") or self.dimensions)
        self.requests += 1
        self.inputs += len(texts)
        self.batches.append(list(texts))
        tokens = sum(_tokens(text) for text in texts)
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": index, "embedding": vector_of(text, dimensions)}
                    for index, text in enumerate(texts)
                ],
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )


def _error(status: int, message: str, code: str | None = None) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": code}}, status=status)
