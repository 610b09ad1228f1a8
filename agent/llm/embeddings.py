"""Texts to vectors through any OpenAI-compatible ``POST {base_url}/embeddings``.

The request is the one OpenAI documents and local servers (vLLM, llama.cpp, Ollama's OpenAI route,
text-embeddings-inference) copy: ``{"model", "input": [texts], "encoding_format": "float"}``, answered by
``{"data": [{"embedding": [...], "index": i}], "usage": {"prompt_tokens"}}``. It goes out through the
same :class:`~agent.llm.endpoint.Endpoint` as every chat request, so proxies, trust, pooled connections,
retries (:mod:`agent.llm.retry`) and the typed :mod:`agent.llm.errors` failures are the chat client's;
this module only builds the body and reads the answer. An answer that does not hold one vector per text,
all of one length, is a :class:`~agent.llm.errors.BadResponse` (retried like a 5xx).

What an embedding costs is priced here (:func:`embedding_usd`): providers bill the input tokens only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx

from agent.http_options import HttpOptions
from agent.llm.endpoint import Endpoint
from agent.llm.errors import BadResponse
from agent.llm.pooled import PooledClient
from agent.llm.retry import RetryPolicy
from agent.llm.types import Completion
from agent.usage import Usage

#: The route's path below the base URL (which usually ends in ``/v1``).
PATH = "/embeddings"

#: Dollars per million input tokens, by model (OpenAI's published prices); a model not here is metered in tokens.
EMBEDDING_PER_MILLION: dict[str, Decimal] = {
    "text-embedding-3-small": Decimal("0.02"),
    "text-embedding-3-large": Decimal("0.13"),
    "text-embedding-ada-002": Decimal("0.10"),
}


def embedding_usd(model: str, tokens: int) -> float:
    """What embedding ``tokens`` input tokens with ``model`` costs (0 for a model the table does not know)."""
    per_million = EMBEDDING_PER_MILLION.get(model.rsplit("/", 1)[-1].lower())
    return float(per_million) * max(0, tokens) / 1_000_000 if per_million is not None else 0.0


@dataclass(frozen=True)
class Embedded:
    """One request's answer: a vector per text, in the order the texts were given, and its usage."""

    vectors: list[list[float]]
    usage: Usage
    model: str


def build_request(texts: Sequence[str], *, model: str, dimensions: int | None = None) -> dict[str, Any]:
    """The body of one embeddings request."""
    body: dict[str, Any] = {"model": model, "input": list(texts), "encoding_format": "float"}
    if dimensions is not None:
        body["dimensions"] = dimensions
    return body


def _vector(item: Any) -> tuple[int, list[float]]:
    """One ``data`` entry as ``(index, vector)``; a :class:`BadResponse` for anything else."""
    if not isinstance(item, Mapping):
        raise BadResponse(f"an embeddings answer's data entry is not an object: {item!r:.100}")
    index, vector = item.get("index"), item.get("embedding")
    if type(index) is not int or not isinstance(vector, list) or not vector:
        raise BadResponse("an embeddings answer's data entry has no index or no embedding list")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vector):
        raise BadResponse("an embeddings answer's vector holds something other than finite numbers")
    return index, [float(x) for x in vector]


def parse_response(data: Any, count: int) -> tuple[list[list[float]], Usage]:
    """The vectors of an answer to ``count`` texts, by their index, and its usage."""
    items = data.get("data") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        raise BadResponse(f"an embeddings answer without a data list: {data!r:.200}")
    by_index = dict(_vector(item) for item in items)
    if sorted(by_index) != list(range(count)):
        raise BadResponse(f"an embeddings answer for {count} texts held vectors for indexes {sorted(by_index)[:10]}")
    vectors = [by_index[i] for i in range(count)]
    if len({len(vector) for vector in vectors}) > 1:
        raise BadResponse("an embeddings answer held vectors of different lengths")
    usage = data.get("usage") if isinstance(data, Mapping) else None
    return vectors, Usage.from_mapping(usage if isinstance(usage, Mapping) else None)


class EmbeddingClient(PooledClient):
    """One embeddings endpoint; reuse one instance (it pools connections). ``http`` shares a pooled client
    (the caller closes it); ``retry`` is how often a failed request is tried again in place
    (:class:`~agent.llm.retry.RetryPolicy`)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        dimensions: int | None = None,
        options: HttpOptions | None = None,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
        config_key: str = "memory.embeddings",
    ) -> None:
        super().__init__(options, http)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.dimensions = dimensions
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.endpoint = Endpoint(
            self.base_url + PATH,
            headers,
            http=self.http,
            retry=retry or RetryPolicy(),
            timeout_seconds=self.options.timeout_seconds,
            config_key=config_key,
        )

    async def embed(self, texts: Sequence[str]) -> Embedded:
        """A vector per text, in order; raises a :mod:`agent.llm.errors` exception on any failure. No texts,
        no request."""
        if not texts:
            return Embedded([], Usage(), self.model)
        count = len(texts)
        found: list[list[float]] = []

        def parse(data: Any) -> Completion:
            vectors, usage = parse_response(data, count)
            found[:] = vectors
            return Completion(text="", usage=usage)

        body = build_request(texts, model=self.model, dimensions=self.dimensions)
        completion = await self.endpoint.send(body, parse=parse)
        return Embedded(list(found), completion.usage, self.model)
