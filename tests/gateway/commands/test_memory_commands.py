"""What the bot keeps about a person, through real gateways on one Redis: ``/remember`` keeps it and says so,
``/memory`` lists it with where it came from, ``/forget`` removes it at once in every process; it outlives a
restart; a private entry stays private and a group's stays in that group; nobody is shown another person's; bad
input changes nothing and says why; two bots never see each other's."""

from __future__ import annotations

from typing import Any

from gateway.config import Settings
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.people import people_settings, process, said

GROUP = "-1001"
OTHER_GROUP = "-1002"
ADMIN = "900"


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


def settings_of(redis_url: str, prefix: str, llm: FakeLLMServer, **memory: Any) -> Settings:
    return people_settings(redis_url, prefix, llm, memory=memory)


async def test_remember_lists_and_forget_removes_in_every_process_and_outlives_a_restart(
    redis, redis_url, key_prefix
) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        settings = settings_of(redis_url, key_prefix, llm)
        async with process(settings, redis) as one, process(settings, redis) as two:
            assert await one.ask(said("1", "/memory")) == "Nothing yet: /remember <text> keeps something about you."
            stored = await one.ask(said("1", "/remember I prefer short answers"))
            assert stored == "Remembered (private) as #1: I prefer short answers"
            assert await one.ask(said("1", "/remember  I prefer short answers ")) == (
                "Already remembered as #1 (private): I prefer short answers"
            )
            await one.ask(said("1", "/remember My name is Dana"))
            listed = await two.ask(said("1", "/memory"))  # the other process sees it
            assert listed.splitlines()[0] == "What I keep about you (private):"
            assert listed.splitlines()[1].startswith("2. My name is Dana — remember, from tg:1, message ")
            assert listed.splitlines()[2].startswith("1. I prefer short answers — remember, from tg:1, message ")
            assert await two.ask(said("1", "/forget 1")) == "Forgot #1 (private): I prefer short answers"
            after = await one.ask(said("1", "/memory"))  # gone at once in the first process too
            assert "short answers" not in after and "My name is Dana" in after
        async with process(settings, redis) as restarted:  # a new process on the same Redis: still there
            assert "2. My name is Dana" in await restarted.ask(said("1", "/memory"))
            assert await restarted.ask(said("1", "/forget all")) == "Forgot everything I kept about you (1 entry)."
        async with process(settings, redis) as again:
            assert await again.ask(said("1", "/memory")) == "Nothing yet: /remember <text> keeps something about you."
            # the model was never asked: these were commands
        assert not [r for r in llm.requests if "remember" in (r.last_user_text or "")]


async def test_entries_stay_where_they_were_learned_and_with_whom(redis, redis_url, key_prefix) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        async with process(settings_of(redis_url, key_prefix, llm), redis) as bot:
            assert (await bot.ask(said("1", "/remember private fact of one"))).startswith("Remembered (private)")
            assert await bot.ask(said("1", "/remember group fact of one", GROUP)) == (
                f"Remembered (tg:{GROUP}) as #2: group fact of one"
            )
            await bot.ask(said("2", "/remember private fact of two"))
            await bot.ask(said("2", "/remember group fact of two", GROUP))

            in_private = await bot.ask(said("1", "/memory"))
            assert "private fact of one" in in_private and "group fact" not in in_private
            assert "of two" not in in_private
            in_group = await bot.ask(said("1", "/memory", GROUP))
            assert "group fact of one" in in_group and "private fact" not in in_group and "of two" not in in_group
            elsewhere = await bot.ask(said("1", "/memory", OTHER_GROUP))
            assert elsewhere == "Nothing yet: /remember <text> keeps something about you."
            two_in_group = await bot.ask(said("2", "/memory", GROUP))
            assert "group fact of two" in two_in_group and "of one" not in two_in_group

            # a person cannot reach another's, by asking or by removing
            assert await bot.ask(said("2", "/memory tg:1")) == (
                "Only an admin may see what I keep about someone else. Nothing was changed."
            )
            assert await bot.ask(said("2", "/forget tg:1 all")) == (
                "Only an admin may remove what I keep about someone else. Nothing was changed."
            )
            assert await bot.ask(said("2", "/forget 1")) == (  # #1 is person 1's; person 2's start at 1 too
                "Forgot #1 (private): private fact of two"
            )
            assert "private fact of one" in await bot.ask(said("1", "/memory"))

            # an admin sees and removes anyone's
            seen = await bot.ask(said(ADMIN, "/memory tg:1"))
            assert "private fact of one" in seen and "[private]" in seen and f"[tg:{GROUP}]" in seen
            assert "of two" not in seen
            assert await bot.ask(said(ADMIN, "/forget tg:1 2")) == f"Forgot #2 (tg:{GROUP}): group fact of one"
            assert await bot.ask(said(ADMIN, "/forget tg:1 all")) == "Forgot everything I kept about tg:1 (1 entry)."
            assert await bot.ask(said("1", "/memory", GROUP)) == (
                "Nothing yet: /remember <text> keeps something about you."
            )


async def test_bad_input_changes_nothing_and_says_why(redis, redis_url, key_prefix) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        async with process(settings_of(redis_url, key_prefix, llm, max_entry_chars=40), redis) as bot:
            await bot.ask(said("1", "/remember kept"))
            before = await bot.ask(said("1", "/memory"))
            answers = [
                await bot.ask(said("1", "/remember " + "x" * 41)),
                await bot.ask(said("1", "/remember   ")),
                await bot.ask(said("1", "/forget 7")),
                await bot.ask(said("1", "/forget banana")),
                await bot.ask(said("1", "/forget")),
            ]
            assert answers == [
                "Not remembered: the text is 41 characters, over the limit of 40 (memory.max_entry_chars). "
                "Say it shorter.",
                "What should I remember? /remember <text>, e.g. /remember I prefer short answers.",
                "There is no entry #7 about you: /memory lists them. Nothing was changed.",
                "Which one? /forget N removes entry N of /memory; /forget all removes every one. Nothing was changed.",
                "Which one? /forget N removes entry N of /memory; /forget all removes every one. Nothing was changed.",
            ]
            assert await bot.ask(said("1", "/memory")) == before
            assert "/remember TEXT — Keep something about you" in await bot.ask(said("1", "/help"))


async def test_two_bots_never_see_each_others_memory(redis, redis_url, key_prefix) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        first = settings_of(redis_url, key_prefix, llm)
        second = settings_of(redis_url, f"{key_prefix}.second", llm)
        async with process(first, redis) as bot_a, process(second, redis) as bot_b:
            await bot_a.ask(said("1", "/remember told bot A only"))
            await bot_a.ask(said("1", "/remember group rule for A", GROUP))
            assert await bot_b.ask(said("1", "/memory")) == "Nothing yet: /remember <text> keeps something about you."
            assert await bot_b.ask(said("1", "/memory", GROUP)) == (
                "Nothing yet: /remember <text> keeps something about you."
            )
            assert await bot_b.ask(said(ADMIN, "/memory tg:1")) == "Nothing yet about tg:1."
            assert await bot_b.ask(said("1", "/forget all")) == "Nothing was kept about you."
            assert "told bot A only" in await bot_a.ask(said("1", "/memory"))
