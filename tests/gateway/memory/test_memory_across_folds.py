"""Nothing a person said about themselves is lost at a fold: a preference stated once in the first hour of a
2,000-message private night, folded away by the compactions of that night, is in the request the bot makes after
``/new`` the next morning — with the deterministic notes (the summarizer away) and with a model's summary."""

from __future__ import annotations

import pytest

from tests.fakes.everyday import conversation
from tests.fakes.gateway import NOTES, is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.people import people_settings, process, said
from tests.fakes.waiting import wait_for

NIGHT_STARTS = 1_767_300_000.0  # an evening; the night's messages follow a few seconds apart
PREFERENCE = "I'm allergic to shellfish, so never suggest prawns."


def night() -> list[str]:
    """2,000 messages of one person's everyday chatter, the preference among the first hour's."""
    lines = [m["content"] for m in conversation(7, tokens=60_000).messages if m["role"] == "user"]
    texts = [lines[i % len(lines)] for i in range(2_000)]
    texts[40] = PREFERENCE  # 40 messages in: the first hour
    return texts


@pytest.mark.parametrize("summaries", ["deterministic notes", "model summary"])
async def test_a_preference_stated_once_in_the_first_hour_survives_the_night_and_a_new_session(
    redis, redis_url, key_prefix, summaries
) -> None:
    def model(request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return Reply.error(503, "summarizer away") if summaries == "deterministic notes" else Reply.answer(NOTES)
        return Reply.answer("ok")

    async with FakeLLMServer(handler=model) as llm:
        settings = people_settings(redis_url, key_prefix, llm, context_length=16_000, gateway={})
        async with process(settings, redis) as bot:
            for n, text in enumerate(night()):
                await bot.runner.intake(said("7", text, name="Robin", ts=NIGHT_STARTS + 10 * n))
            await wait_for(lambda: bot.adapter.sent, what="the night's first reply")
            await bot.runner.wait_idle()
            folds = [r for r in llm.requests if is_summary_request(r)]
            assert folds, "the night was compacted"
            morning = NIGHT_STARTS + 12 * 3600
            await bot.ask(said("7", "/new", name="Robin", ts=morning))
            await bot.ask(said("7", "good morning! ideas for lunch?", name="Robin", ts=morning + 60))
        request = llm.requests[-1]
        assert not is_summary_request(request)
        assert "allergic to shellfish" in request.system  # the memory block of the new session
        # not a leftover of the night: the new session holds the morning's message alone
        assert [m for m in request.messages if m["role"] != "system"] == [
            {"role": "user", "content": "good morning! ideas for lunch?"}
        ]
        listed = await _listed(redis_url, key_prefix, llm, redis)
        assert "allergic to shellfish" in listed and "compaction, from tg:7" in listed


async def _listed(redis_url: str, key_prefix: str, llm: FakeLLMServer, redis) -> str:
    async with process(people_settings(redis_url, key_prefix, llm), redis) as bot:
        return await bot.ask(said("7", "/memory"))


async def test_what_was_forgotten_is_not_learned_again_from_older_messages_a_later_fold_reads(
    redis, redis_url, key_prefix
) -> None:
    """``/forget all`` forgets what was said before it: a compaction folding those older messages afterwards does
    not bring it back, while what the person says after forgetting is kept as usual."""
    chatter = "small talk about the weather, the trains and the neighbours once again " * 5

    def model(request: RecordedRequest) -> Reply:
        return Reply.answer(NOTES if is_summary_request(request) else "ok")

    async with FakeLLMServer(handler=model) as llm:
        settings = people_settings(redis_url, key_prefix, llm, context_length=8_000, gateway={})
        async with process(settings, redis) as bot:
            texts = [f"{chatter}{n}" for n in range(30)]
            texts[5:5] = [PREFERENCE]
            for text in texts:
                await bot.runner.intake(said("7", text, name="Robin"))
            await wait_for(lambda: bot.adapter.sent, what="the reply to the chatter")
            await bot.runner.wait_idle()
            assert (await bot.ask(said("7", "/forget all", name="Robin"))).startswith("Nothing was kept")
            later = [f"{chatter}{n}" for n in range(30, 60)]
            later[3:3] = ["My name is Robin."]
            for text in later:
                await bot.runner.intake(said("7", text, name="Robin"))
            await wait_for(lambda: len(bot.adapter.sent) > 2, what="the reply to the later chatter")
            await bot.runner.wait_idle()
            assert (await bot.ask(said("7", "/compress", name="Robin"))).startswith("Compressed")
            listed = await bot.ask(said("7", "/memory", name="Robin"))
    assert "My name is Robin." in listed and "shellfish" not in listed
