"""No request made for one person ever carries another person's memory, and no bot reads another bot's.

Two people (Dana, Lee) write to two bots on one Redis, each in a private chat and together in a group. Hypothesis
draws interleavings of what they do — ``/remember``, stating something about themselves (which a compaction then
keeps), asking the model to note something (its ``memory`` tool), ``/new``, ``/compress``, and asking "what do you
remember about Dana?" — and every request the provider receives is checked: each marker it carries is one the
person it answers may be given (their own memory for that chat's scope) or one said in that very chat (the
conversation itself). Every text written carries a marker of its own, so where each one may appear is known.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.people import Bot, people_settings, process, said
from tests.fakes.waiting import wait_for

PEOPLE = {"dana": "1", "lee": "2"}
GROUP = "-1001"
BOTS = ("a", "b")
KINDS = ("remember", "state", "tool", "ask", "new", "compress")
MARKER = re.compile(r"mk\d+x")
Step = tuple[str, str, str, str]  # kind, bot, person, where ("private" | "group")


@dataclass
class Truth:
    """Where each marker may appear: with its owner's requests in their scope, or in the chat it was said in."""

    owner: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # marker -> (bot, person, scope)
    said_in: dict[str, tuple[str, str]] = field(default_factory=dict)  # marker -> (bot, chat)
    checked: int = 0
    #: Markers the requests of "ask" steps carried (after a ``/new`` there is no conversation they could come
    #: from: they are the memory's), so memory is shown to be read, not only kept apart.
    recalled: set[str] = field(default_factory=set)

    def allowed(self, marker: str, bot: str, person: str | None, chat: str) -> bool:
        if self.said_in.get(marker) == (bot, chat):
            return True
        scope = "group" if chat == f"tg:{GROUP}" else "private"
        return person is not None and self.owner.get(marker) == (bot, person, scope)


def model(request: RecordedRequest) -> Reply:
    """Answers plainly (never repeating what it was told); asked to note something, calls its memory tool."""
    if is_summary_request(request) or request.messages[-1].get("role") == "tool":
        return Reply.answer("ok")
    note = re.search(r"please note (mk\d+x)", request.last_user_text)
    if note:
        return Reply.tool_call("memory", {"action": "add", "text": f"Wants {note[1]} kept in mind"})
    return Reply.answer("ok")


async def _step(bots: dict[str, Bot], truth: Truth, step: Step, n: int) -> tuple[str, str]:
    """Run one step; the chat it happened in and the person who wrote."""
    kind, bot_name, person, where = step
    user = PEOPLE[person]
    chat = GROUP if where == "group" else user
    bot, marker = bots[bot_name], f"mk{n}x"
    message = {
        "remember": f"/remember I like {marker}",
        "state": f"I am allergic to {marker}.",
        "tool": f"please note {marker}",
        "ask": "what do you remember about Dana?",
        "new": "/new",
        "compress": "/compress",
    }[kind]
    if kind in ("remember", "tool"):
        truth.owner[marker] = (bot_name, person, where)
    if kind in ("state", "tool"):
        truth.said_in[marker] = (bot_name, f"tg:{chat}")
        truth.owner[marker] = (bot_name, person, where)  # a compaction may keep it for them
    if kind == "state":  # enough chatter after it for a compaction to fold it away
        before = len(bot.adapter.sent)
        # the session's first messages are never folded (compression.protect_first_n): the statement comes after
        chatter = [
            f"small talk line {i}: " + "the weather and the trains and the neighbours again " * 6 for i in range(28)
        ]
        for text in [*chatter[:4], message, *chatter[4:]]:
            await bot.runner.intake(said(user, text, None if where == "private" else GROUP))
        await wait_for(lambda: len(bot.adapter.sent) > before, what="the reply to the chatter")
        await bot.runner.wait_idle()
    else:
        await bot.ask(said(user, message, None if where == "private" else GROUP))
    return f"tg:{chat}", person


def _check(truth: Truth, requests: list[RecordedRequest], step: Step, chat: str, person: str) -> None:
    bot = step[1]
    for request in requests:
        text = request.raw.decode()
        asked_by = None if is_summary_request(request) else person
        leaked = [m for m in MARKER.findall(text) if not truth.allowed(m, bot, asked_by, chat)]
        assert leaked == [], f"a request for {asked_by or 'a summary'} in {bot}/{chat} carried {leaked}"
        truth.checked += 1
        if step[0] == "ask":
            truth.recalled |= set(MARKER.findall(text))


async def _run(redis_url: str, steps: list[Step]) -> Truth:
    prefix, truth = f"fgtest-{uuid.uuid4().hex}", Truth()
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        async with FakeLLMServer(handler=model) as llm:
            bots: dict[str, Bot] = {}
            settings = {
                name: people_settings(redis_url, f"{prefix}.{name}", llm, gateway={}, context_length=8_000)
                for name in BOTS
            }
            async with process(settings["a"], redis) as bots["a"], process(settings["b"], redis) as bots["b"]:
                for n, step in enumerate(steps):
                    seen = len(llm.requests)
                    chat, person = await _step(bots, truth, step, n)
                    _check(truth, llm.requests[seen:], step, chat, person)
    finally:
        keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
    return truth


steps = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.sampled_from(BOTS),
        st.sampled_from(tuple(PEOPLE)),
        st.sampled_from(("private", "group")),
    ),
    min_size=3,
    max_size=12,
)


@hypothesis_settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(steps=steps)
def test_no_request_ever_carries_another_persons_or_another_bots_memory(redis_url: str, steps: list[Step]) -> None:
    asyncio.run(_run(redis_url, steps))


def test_a_fixed_story_reaches_every_kind_of_leak_there_could_be(redis_url: str) -> None:
    """Each person's memory in each scope of each bot, folded and noted, then asked about by the other person."""
    story: list[Step] = []
    for bot in BOTS:
        for person in PEOPLE:
            for where in ("private", "group"):
                story += [("remember", bot, person, where), ("state", bot, person, where), ("tool", bot, person, where)]
                story += [("compress", bot, person, where)]
    for bot in BOTS:
        for person in PEOPLE:
            for where in ("private", "group"):
                story += [("new", bot, person, where), ("ask", bot, person, where)]
    truth = asyncio.run(_run(redis_url, story))
    assert len(truth.owner) == 24 and truth.checked >= len(story)
    assert truth.recalled == set(truth.owner)  # each one reached its owner's requests after /new
