"""A chat's messages ranked by meaning: the query embedded, compared with every vector the embedder kept.

:class:`ChatMeanings` is the ``MeaningSearch`` the chat's history search fuses with its keyword
ranking. It answers None — keywords only, no error — when the query cannot be embedded (the endpoint
is away, or the chat's budget is spent), and an empty list while nothing of the chat is embedded yet
(without asking the endpoint when nothing is waiting to be either).

The comparison is one matrix-vector product: a chat's vectors are unit-length float32, so the dot
product is the cosine. They are held in this process per chat (:data:`CACHE_BYTES` in all, least recently used
chat dropped first) and brought up to date by reading only the vectors kept since (the order list);
a model change, seen as a new generation, reloads them. A few recent queries' vectors are kept too, so
a search asked again (a retried turn, the same words in two tools) sends no second request.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from agent.llm.embeddings import EmbeddingClient, embedding_usd
from agent.llm.errors import ProviderError
from agent.metering import BudgetExceeded, settled
from agent.tokens import count_text
from gateway.store.embeddings import EmbeddingStore, VectorsAt, split_key
from gateway.worker.embedding import MAX_CHARS, chat_meter, model_key, unit_float32
from gateway.worker.parts import Spending

log = logging.getLogger(__name__)

#: Bytes of vectors held in this process over every chat (100,000 vectors of 384 float32 take 154 MB).
CACHE_BYTES = 512 * 1024 * 1024
#: Recent queries whose vectors are kept.
QUERY_CACHE = 32
#: From this many vectors on, a chat's comparison runs in a thread (100,000 of 384 take about 30 ms).
THREAD_ROWS = 20_000
#: Vectors read from Redis in one request while a chat's copy is brought up to date.
READ_CHUNK = 4_096


@dataclass
class _Held:
    """One chat's vectors in this process: rows ``[:count]`` of ``matrix`` are those of ``keys``."""

    model: str
    generation: int
    keys: list[str] = field(default_factory=list)
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    @property
    def count(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes)

    def extend(self, keys: list[str], rows: list[bytes]) -> None:
        """Append rows (a row of another length than the first is left out with its key)."""
        width = self.matrix.shape[1] if self.count else (len(rows[0]) // 4 if rows else 0)
        kept = [(key, row) for key, row in zip(keys, rows) if len(row) == width * 4]
        if not kept:
            return
        block = np.frombuffer(b"".join(row for _, row in kept), dtype=np.float32).reshape(len(kept), width)
        needed = self.count + len(kept)
        if self.matrix.shape[0] < needed or self.matrix.shape[1] != width:
            grown = np.zeros((max(needed, 2 * self.matrix.shape[0], 64), width), dtype=np.float32)
            if self.count:
                grown[: self.count] = self.matrix[: self.count]
            self.matrix = grown
        self.matrix[self.count : needed] = block
        self.keys.extend(key for key, _ in kept)


class ChatMeanings:
    """``MeaningSearch`` over the vectors :class:`~gateway.worker.embedding.Embedder` keeps (module docstring)."""

    def __init__(
        self,
        vectors: EmbeddingStore,
        client: EmbeddingClient,
        spend: Spending,
        *,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        self.vectors = vectors
        self.client = client
        self.spend = spend
        self.model = model_key(client)
        self.cache_bytes = cache_bytes
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()

    async def similar(self, chat: str, query: str, limit: int) -> list[tuple[str, str]] | None:
        """The ``limit`` messages of ``chat`` closest in meaning to ``query``, best first, as (the session the
        message is stored in, its id there); None when the query cannot be embedded now."""
        query = " ".join(query.split())[:MAX_CHARS]
        if not query or limit <= 0:
            return []
        at = await self.vectors.where(chat)
        ready = at.model == self.model and at.count > 0
        if not ready and not await self.vectors.waiting(chat):
            return []  # nothing of the chat to compare with, nor on its way: no request
        wanted = await self._query_vector(chat, query)
        if wanted is None:
            return None
        if not ready:
            return []
        held = await self._up_to_date(chat, at)
        if held.count == 0 or held.matrix.shape[1] != wanted.shape[0]:
            return []
        rows = held.matrix[: held.count]
        if held.count >= THREAD_ROWS:  # tens of milliseconds: not on the event loop every turn shares
            best = await asyncio.to_thread(_ranked, rows, wanted, limit)
        else:
            best = _ranked(rows, wanted, limit)
        return [split_key(held.keys[row]) for row in best]

    async def _query_vector(self, chat: str, query: str) -> np.ndarray | None:
        """The query's unit vector: from the recent ones, else one request metered against the chat's budget."""
        if query in self._queries:
            self._queries.move_to_end(query)
            return self._queries[query]
        meter = chat_meter(self.spend, chat)
        held: object = []
        tokens = count_text(query)
        try:
            if meter is not None:
                held = await meter.reserve_amount(embedding_usd(self.client.model, tokens), tokens)
        except BudgetExceeded:
            return None
        try:
            answer = await self.client.embed([query])
        except ProviderError as error:
            log.info("a search went by keywords only: the query could not be embedded (%s)", error)
            if meter is not None:
                await settled(meter.settle_amount(held, 0.0, 0))
            return None
        if meter is not None:
            used = answer.usage.prompt_tokens
            await settled(meter.settle_amount(held, embedding_usd(self.client.model, used), used))
        vector = unit_float32(answer.vectors[0])
        self._queries[query] = vector
        while len(self._queries) > QUERY_CACHE:
            self._queries.popitem(last=False)
        return vector

    async def _up_to_date(self, chat: str, at: VectorsAt) -> _Held:
        """The chat's vectors in this process, with those kept since the last look read in."""
        held = self._held.pop(chat, None)
        if held is None or held.generation != at.generation or held.model != at.model or held.count > at.count:
            held = _Held(at.model, at.generation)
        while held.count < at.count:
            keys = await self.vectors.ids_from(chat, held.count, min(at.count, held.count + READ_CHUNK) - 1)
            if not keys:
                break
            rows = await self.vectors.vectors(chat, keys)
            present = [(key, row) for key, row in zip(keys, rows) if row is not None]
            if len(present) < len(keys):  # a model change between the two reads: the next search reloads
                held.extend([key for key, _ in present], [row for _, row in present])
                break
            held.extend(keys, [row for row in rows if row is not None])
        self._held[chat] = held
        self._trim()
        return held

    def _trim(self) -> None:
        """Drop the least recently searched chats' vectors past :attr:`cache_bytes` (never the one just read)."""
        total = sum(held.nbytes for held in self._held.values())
        while total > self.cache_bytes and len(self._held) > 1:
            _, dropped = self._held.popitem(last=False)
            total -= dropped.nbytes


def _ranked(rows: np.ndarray, wanted: np.ndarray, count: int) -> list[int]:
    """Indexes of the ``count`` rows closest to ``wanted`` (unit vectors: the highest dot products), best first."""
    # einsum's own loop, not BLAS: a BLAS matrix-vector product wakes its threads on every search, which on a
    # busy machine cost more than the product (1,000 x 1,536: 2 ms against 0.4 ms; 100,000 x 384: 25 against 10)
    scores = np.einsum("ij,j->i", rows, wanted)
    if count >= scores.shape[0]:
        return [int(i) for i in np.argsort(-scores, kind="stable")]
    top = np.argpartition(-scores, count)[:count]
    return [int(i) for i in top[np.argsort(-scores[top], kind="stable")]]
