"""The background embedder: every real message of a chat turned into a vector, off the reply path.

A turn never waits for it. The turn's event (``turn:done``) only notes the chat in this process
(:meth:`Embedder.observe`, no await); the embedder's own task writes the note to the shared due set
(:class:`~gateway.store.embeddings.EmbeddingStore`) and works through the due chats, any process taking
any chat. The first start with a model makes every chat of the chat index due once, so what was said
before embeddings were on is embedded too. For each due chat:

1. the chat's embedding lock (a short Redis lock: no two processes embed one chat's batch at once);
2. the model adopted — vectors made with another model (or another length) are dropped, so a change
   of ``memory.embeddings.model`` re-embeds every chat as it comes due;
3. each session's messages past its mark looked at: real user and assistant text (no tool calls or
   results, no summaries or stand-ins, nothing empty) joins the pending set, clipped to
   :data:`MAX_CHARS`; a session rotation started begins past its parent's ids, so what it copied is
   embedded once, as the parent's;
4. one batch of ``batch_size`` pending messages reserved against the chat's budget (a chat over its
   budget is not embedded until the period ends), sent in one request, settled to the tokens the
   endpoint reported at the model's price (tokens only for a model without one), its vectors kept
   unit-length as float32; more waiting makes the chat due again at once, behind the other due chats.

An endpoint that is away (refused, 5xx, timeout) keeps the batch pending and the chat due later,
by :data:`ENDPOINT_AWAY`'s backoff, shared by every chat of this process; once the endpoint answers
again the wait ends. Nothing is lost: what a process took and did not keep is still pending, and what
it never looked at is still past the mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence

import numpy as np

from agent.cancelling import cancel_and_wait
from agent.llm.embeddings import EmbeddingClient, embedding_usd
from agent.llm.errors import ProviderError
from agent.messages import SYNTHETIC_KEY, Message, is_real_user_message, is_summary, text_of
from agent.metering import BudgetExceeded, settled
from agent.retrying import CHAT_OUTAGE, REDIS_OUTAGE, Draw
from agent.tokens import count_text
from gateway.access.budgets import BudgetUsedUp, ChatMeter
from gateway.events import Event, TurnEvent
from gateway.platforms.base import IncomingMessage
from gateway.session_source import conversations
from gateway.store import SessionStore, UnknownSession
from gateway.store.embeddings import EmbeddingStore, LockLost, key_of, split_key
from gateway.store.locks import new_token
from gateway.worker.parts import Spending

log = logging.getLogger(__name__)

#: Characters of a message sent to be embedded at most (about 2,000 tokens: its start carries its meaning).
MAX_CHARS = 8_000
#: Message ids of one session looked at in one pass at most (a long session is taken in over several).
LOOK_CHUNK = 2_000
#: Chats taken off the due set in one pass.
CHATS_PER_PASS = 8
#: Seconds between two looks at the due set when no turn of this process wakes the embedder.
POLL_SECONDS = 1.0
#: How long a chat's embedding lock holds: longer than one request may take with its retry.
LOCK_SECONDS = 120.0
#: A chat another process is embedding is looked at again this much later.
BUSY_RETRY_SECONDS = 2.0
#: While the endpoint is away, messages wait: the n-th failure in a row pushes the chats back this long.
ENDPOINT_AWAY = CHAT_OUTAGE.adjusted(what="messages waiting while the embeddings endpoint is away", cap=60.0)


def model_key(client: EmbeddingClient) -> str:
    """What vectors are comparable under: the model and the length asked for (``@`` none: the model's own)."""
    return f"{client.model}@{client.dimensions or ''}"


def embeddable_text(message: Message) -> str | None:
    """The text a message is embedded by, clipped; None for what is not a person's or the bot's words."""
    role = message.get("role")
    if role not in ("user", "assistant") or message.get(SYNTHETIC_KEY) or is_summary(message):
        return None
    if role == "user" and not is_real_user_message(message):
        return None
    text = text_of(message).strip()
    return text[:MAX_CHARS] if text else None


def unit_float32(vector: Sequence[float]) -> np.ndarray:
    """``vector`` as unit-length float32 (a dot product of two is their cosine); all zeros stays zeros."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def chat_meter(spend: Spending, chat: str) -> ChatMeter | None:
    """The meter of calls made for ``chat`` as a whole (its ``per_chat`` budget), None when no budget applies."""
    platform, _, chat_id = chat.partition(":")
    message = IncomingMessage(platform=platform, chat_id=chat_id or chat, update_id="embeddings")
    return spend.meter(message, [])


class Embedder:
    """The background embedder of one process (see the module docstring)."""

    def __init__(
        self,
        store: SessionStore,
        vectors: EmbeddingStore,
        client: EmbeddingClient,
        spend: Spending,
        *,
        batch_size: int,
        clock: Callable[[], float] = time.time,
        draw: Draw = random.uniform,
    ) -> None:
        self.store = store
        self.vectors = vectors
        self.client = client
        self.spend = spend
        self.batch_size = batch_size
        self.model = model_key(client)
        self.clock = clock
        self.draw = draw
        #: Failed requests in a row, and when the endpoint is worth asking again (0: now).
        self.failures = 0
        self.resume_at = 0.0
        self._noted: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def observe(self, event: Event) -> None:
        """An event subscriber: a committed turn's chat is noted to be looked at (nothing awaited)."""
        if isinstance(event, TurnEvent):
            self._noted.add(event.chat)
            self._wake.set()

    async def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="embedder")

    async def stop(self) -> None:
        """Stop the task; a batch out is dropped unkept (it stays pending for the next start)."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def aclose(self) -> None:
        """Stop, and close the endpoint's connections (the search's client shares them)."""
        try:
            await self.stop()
        finally:
            await self.client.aclose()

    async def _run(self) -> None:
        redis_failures, backfilled = 0, False
        while True:
            wait = POLL_SECONDS
            try:
                if not backfilled:
                    await self.vectors.backfill(self.model)
                    backfilled = True
                await self.run_once()
                redis_failures = 0
            except Exception as error:  # Redis away: the notes stay in this process, tried again
                redis_failures += 1
                wait = max(REDIS_OUTAGE.delay(redis_failures), 0.05)
                log.debug("embedder pass failed: %s", error, exc_info=True)
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def run_once(self) -> int:
        """One pass: the noted chats marked due, and up to :data:`CHATS_PER_PASS` due chats worked on; how
        many messages were embedded."""
        noted, self._noted = self._noted, set()
        try:
            for chat in noted:
                await self.vectors.mark(chat)
        except BaseException:
            self._noted |= noted
            raise
        embedded = 0
        for chat in await self.vectors.take_due(CHATS_PER_PASS, now=self.clock()):
            embedded += await self.embed_chat(chat)
        return embedded

    async def embed_chat(self, chat: str) -> int:
        """Look at the chat's new messages and embed one batch of what waits; how many were embedded."""
        now = self.clock()
        if now < self.resume_at:
            await self.vectors.defer(chat, self.resume_at)
            return 0
        token = new_token()
        if not await self.vectors.lock(chat, token, LOCK_SECONDS):
            await self.vectors.defer(chat, now + BUSY_RETRY_SECONDS)
            return 0
        try:
            await self.vectors.adopt(chat, token, self.model)
            more = await self._look(chat, token)
            embedded, waiting = await self._batch(chat, token)
            if more or waiting:
                await self.vectors.mark(chat)
            return embedded
        except LockLost:
            log.info("%s: the embedding lock expired during a batch; another pass takes it again", chat)
            await self.vectors.mark(chat)
            return 0
        finally:
            with contextlib.suppress(Exception):
                await self.vectors.release(chat, token)

    async def _look(self, chat: str, token: str) -> bool:
        """Queue each session's messages past its mark that have words to embed; True when a session has more
        than one look takes in."""
        marks = await self.vectors.marks(chat)
        more = False
        current = await self.store.stored_session(chat)
        for conversation in await conversations(self.store, chat, current):
            for sid in conversation.sessions:
                meta = await self.store.meta(chat, sid)
                top = meta.next_id
                mark = marks[sid] if sid in marks else await self._inherited(chat, meta.parent_session_id)
                if top <= mark:
                    continue
                end = min(top, mark + LOOK_CHUNK)
                more = more or end < top
                ids = [str(number) for number in range(mark + 1, end + 1)]
                wanted = [
                    str(message["_id"])
                    for message in await self.vectors.messages(chat, sid, ids)
                    if embeddable_text(message) is not None
                ]
                await self.vectors.queue(chat, token, self.model, sid, end, wanted)
        return more

    async def _inherited(self, chat: str, parent: str | None) -> int:
        """Where a session's own messages begin: a rotation copies what it keeps under the parent's ids and goes on
        from the parent's last one, and those copies are embedded as the parent's already."""
        if not parent:
            return 0
        try:
            return (await self.store.meta(chat, parent)).next_id
        except UnknownSession:
            return 0

    async def _batch(self, chat: str, token: str) -> tuple[int, int]:
        """Embed one batch of the chat's pending messages; (how many were embedded, how many still wait)."""
        keys = await self.vectors.pending(chat, self.batch_size)
        if not keys:
            return 0, 0
        texts: dict[str, str] = {}
        for sid in dict.fromkeys(split_key(key)[0] for key in keys):
            ids = [split_key(key)[1] for key in keys if split_key(key)[0] == sid]
            for message in await self.vectors.messages(chat, sid, ids):
                text = embeddable_text(message)
                if text is not None:
                    texts[key_of(sid, str(message["_id"]))] = text
        gone = [key for key in keys if key not in texts]
        if not texts:
            return 0, await self.vectors.keep(chat, token, self.model, {}, gone)
        vectors = await self._embedded(chat, list(texts.values()))
        if vectors is None:
            return 0, 0
        kept = {key: unit_float32(vector).tobytes() for key, vector in zip(texts, vectors)}
        return len(kept), await self.vectors.keep(chat, token, self.model, kept, gone)

    async def _embedded(self, chat: str, texts: list[str]) -> list[list[float]] | None:
        """The texts' vectors, metered against the chat's budget; None when the budget or the endpoint said no
        (the chat is due again when either may say yes)."""
        meter = chat_meter(self.spend, chat)
        held: object = []
        if meter is not None:
            tokens = sum(count_text(text) for text in texts)
            try:
                held = await meter.reserve_amount(embedding_usd(self.client.model, tokens), tokens)
            except BudgetExceeded as over:
                ends = over.ends.timestamp() if isinstance(over, BudgetUsedUp) else self.clock() + POLL_SECONDS * 30
                log.info("%s: not embedded while its budget is spent: %s", chat, over.key or over.notice)
                await self.vectors.defer(chat, ends)
                return None
        try:
            answer = await self.client.embed(texts)
        except ProviderError as error:
            if meter is not None:
                await settled(meter.settle_amount(held, 0.0, 0))
            await self._endpoint_failed(chat, error)
            return None
        if meter is not None:
            tokens = answer.usage.prompt_tokens
            await settled(meter.settle_amount(held, embedding_usd(self.client.model, tokens), tokens))
        self.failures, self.resume_at = 0, 0.0
        return answer.vectors

    async def _endpoint_failed(self, chat: str, error: ProviderError) -> None:
        self.failures += 1
        wait = ENDPOINT_AWAY.wait(self.failures, error.retry_after, self.draw)
        self.resume_at = self.clock() + wait
        if self.failures == 1:
            log.warning("the embeddings endpoint failed (%s); messages wait and are sent again later", error)
        await self.vectors.defer(chat, self.resume_at)
