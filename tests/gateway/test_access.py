"""Who the bot answers: admins change the allow and block lists from the chat, kept in Redis and seen by every process
at the next message; the configuration's lists stay the floor; a non-admin's change is refused in one line; a blocked
person's messages are stored and never answered; ``/usage`` shows a budget's spend, an admin anyone's."""

from __future__ import annotations

from gateway.platforms.base import IncomingMessage
from gateway.platforms.recording import RecordingAdapter
from gateway.store import SessionStore
from tests.fakes.gateway import make_settings, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

WINDOW = 64_000


def said(user: str, number: int, text: str, chat: str = "room") -> IncomingMessage:
    return IncomingMessage(
        platform="local",
        chat_id=chat,
        user_id=user,
        user_name=user.capitalize(),
        update_id=f"{user}-{number}",
        text=text,
    )


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


async def test_an_admin_blocks_and_unblocks_and_every_process_sees_it_at_once(redis, redis_url, key_prefix) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            gateway={"coalesce_backlog": False},
            access={"admins": ["local:root"], "blocked": ["local:mallory"]},
        )
        first, second = RecordingAdapter(), RecordingAdapter()
        async with (
            running_gateway(settings, redis, adapter=first) as (one, _a, _e),
            running_gateway(settings, redis, adapter=second) as (two, _b, _f),
        ):
            for step in [
                (one, said("bob", 1, "/block local:eve")),  # not an admin
                (one, said("root", 2, "/block eve")),  # an admin, a bare id: this platform's
                (two, said("eve", 3, "hello from eve")),  # the other process: blocked already
                (two, said("mallory", 4, "hello from mallory")),  # blocked in the file
                (one, said("root", 5, "/unblock mallory")),
                (one, said("root", 6, "/unblock eve")),
                (two, said("eve", 7, "eve again")),
                (two, said("root", 8, "/block local:eve")),
            ]:
                await step[0].intake(step[1])
                await one.wait_idle()
                await two.wait_idle()
            store = SessionStore(redis, key_prefix)
            kept = [
                m["content"]
                for m in await store.active("local:room", await store.current_session("local:room"))
                if m["role"] == "user"
            ]
        # a restart: the admin's change is still there
        async with running_gateway(settings, redis, adapter=RecordingAdapter()) as (three, again, _g):
            await three.intake(said("eve", 9, "eve after the restart"))
            await three.intake(said("bob", 10, "bob after the restart"))
            await three.wait_idle()
    replies = [text for _, text in first.sent + second.sent]
    assert replies[0] == "Only an admin may change who I answer (access.admins)."
    assert replies[1] == "⛔ local:eve is blocked: their messages are kept and not answered."
    assert "local:mallory is blocked in the configuration (access.blocked): only the file can change that." in replies
    assert "✅ local:eve is unblocked: I answer them from their next message." in replies
    assert "echo: eve again" in replies
    assert not any("hello from eve" in text or "hello from mallory" in text for text in replies)
    assert any("hello from eve" in text for text in kept) and any("hello from mallory" in text for text in kept)
    assert [text for _, text in again.sent] == ["echo: bob after the restart"]  # eve's block outlived the restart


async def test_usage_shows_the_budget_and_an_admin_may_ask_for_anyone(redis, redis_url, key_prefix) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            model="gpt-4o",
            gateway={"coalesce_backlog": False},
            access={"admins": ["local:root"], "budgets": {"per_user": {"usd": 1.0}}},
        )
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for message in [
                said("bob", 1, "hello"),
                said("bob", 2, "/usage"),
                said("bob", 3, "/usage local:root"),
                said("root", 4, "/usage local:bob"),
            ]:
                await runner.intake(message)
                await runner.wait_idle()
    replies = [text for _, text in adapter.sent]
    assert "Budget (you, day): $0.00" in replies[1] and "of $1.00; resets at 00:00 UTC" in replies[1]
    assert replies[2] == "Only an admin may see someone else's usage."
    assert replies[3].startswith("Budget (local:bob, day): $0.00") and "of $1.00" in replies[3]


async def test_a_flood_from_one_member_is_kept_unanswered_and_the_others_are_answered(
    redis, redis_url, key_prefix
) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            gateway={"coalesce_backlog": False},
            access={"messages_per_minute": 3},
        )
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for number in range(10):
                await runner.intake(said("flood", number, f"flood {number}"))
                if number in (4, 8):
                    await runner.intake(said("ann", number, f"ann {number}"))
            await runner.intake(said("flood", 50, "flood elsewhere", chat="other"))
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            kept = [
                m
                for m in await store.active("local:room", await store.current_session("local:room"))
                if m["role"] == "user"
            ]
    replies = [text for _, text in adapter.sent]
    assert [text for text in replies if text.startswith("echo: flood")] == [f"echo: flood {n}" for n in range(3)]
    assert "echo: ann 4" in replies and "echo: ann 8" in replies  # the others in the group are not starved
    assert sum(text.startswith("⏳") for text in replies) == 2  # told once in each chat this minute
    assert len(kept) == 12  # every message kept


async def test_an_admin_may_answer_a_question_asked_of_someone_else(redis, key_prefix) -> None:
    from gateway.store.approvals import Answer, Approvals

    approvals = Approvals(SessionStore(redis, key_prefix).channel, key_prefix)
    asked = await approvals.open("tg:-100", asker="42")
    assert await approvals.answer("tg:-100", asked, approved=True, user_id="7", user_name="Eve") == "not yours"
    assert (
        await approvals.answer("tg:-100", asked, approved=False, user_id="1", user_name="Root", admin=True)
        == "recorded"
    )
    assert await approvals.answer("tg:-100", asked, approved=True, user_id="42", user_name="Ann") == "already answered"
    assert await approvals.wait("tg:-100", asked, 1) == Answer(False, "1", "Root")


async def test_names_are_not_ids_the_files_block_stands_and_the_first_allow_says_what_changes(
    redis, redis_url, key_prefix
) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            gateway={"coalesce_backlog": False},
            access={"admins": ["local:root"], "blocked": ["tg:666"]},
        )
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for number, text in enumerate(["/block tg:alice", "/allow tg:666", "/allow local:ann", "/allow local:bob"]):
                await runner.intake(said("root", number, text))
                await runner.wait_idle()
    replies = [text for _, text in adapter.sent]
    assert replies[0].startswith("Name the person by their numeric id")
    assert replies[1] == "tg:666 is blocked in the configuration (access.blocked): only the file can change that."
    assert "From now on I answer only the people allowed" in replies[2]
    assert replies[3] == "✅ local:bob is allowed: I answer them from their next message."


async def test_a_person_held_back_by_the_rate_limit_can_still_stop(redis, redis_url, key_prefix) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            gateway={"coalesce_backlog": False},
            access={"messages_per_minute": 1},
        )
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for number, text in enumerate(["one", "two", "/help", "/stop"]):
                await runner.intake(said("flood", number, text))
            await runner.wait_idle()
    replies = [text for _, text in adapter.sent]
    assert replies[0] == "echo: one" and replies[1].startswith("⏳")  # /help waits like any message ...
    assert len(replies) == 3 and "stop" in replies[2].lower()  # ... a /stop never does


def test_a_person_is_named_by_a_number_a_mention_or_a_web_chat_id() -> None:
    from gateway.access.roles import named_person

    assert named_person("123", "tg") == "tg:123" and named_person("<@!456>", "dc") == "dc:456"
    assert named_person("web:Ab-9_xZ", "tg") == "web:Ab-9_xZ"  # web chat ids have dashes
    assert named_person("@alice", "tg") is None and named_person("tg:alice", "dc") is None


async def test_with_people_allowed_in_the_file_only_they_and_the_admins_are_answered(
    redis, redis_url, key_prefix
) -> None:
    async with FakeLLMServer(handler=echo) as llm:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            gateway={"coalesce_backlog": False},
            access={"admins": ["local:root"], "allowed": ["local:ann"]},
        )
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for number, (user, text) in enumerate([("ann", "ann asks"), ("bob", "bob asks"), ("root", "root asks")]):
                await runner.intake(said(user, number, text))
                await runner.wait_idle()
    assert [text for _, text in adapter.sent] == ["echo: ann asks", "echo: root asks"]
