"""The Discord adapter with the real discord.py client, never connected to Discord's gateway.

Messages are built by discord.py itself from the raw MESSAGE_CREATE / GUILD_CREATE payloads Discord's
gateway sends, on the client's own connection state. The client's REST side (login, sending,
typing) talks to a fake Discord API: a real HTTP server on loopback that discord.py's HTTP layer is
pointed at, so its rate-limit handling runs for real. Pipeline tests put the adapter in front of the
gateway ``foldgate run`` opens (shipped settings, shared send budget) on real Redis, the fake LLM server echoing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import discord
import pytest
import pytest_asyncio

from gateway.config import Settings
from gateway.platforms.base import ApprovalPrompt, IncomingMessage
from gateway.platforms.discord import Allowlist, DiscordAdapter
from gateway.platforms.discord_client import DiscordTokenMalformed
from tests.fakes.discord_api import (
    ALICE,
    ALICE_ID,
    BOB,
    BOB_ID,
    BOT,
    BOT_ID,
    BOT_ROLE_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    OTHER_BOT_ID,
    QUIET_CHANNEL_ID,
    THREAD_ID,
    as_message,
    mention,
    message_payload,
    open_adapter,
    receive,
    snowflake,
    user_payload,
)
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for

# The fake Discord API (``discord_api``), an adapter logged in to it (``adapter``) and the gateway in front of
# that adapter (``gateway``, on this module's ``llm``) are fixtures of tests/conftest.py.


def incoming(adapter: DiscordAdapter, data: dict[str, Any]):
    return adapter.to_incoming(as_message(adapter, data))


SLOW_STORY = " ".join(f"Line {n}: the deploy went out and the canary held." for n in range(14))


def reply_for(request: RecordedRequest) -> Reply:
    """The fake model: a long answer when asked for one, else an echo of the newest user message."""
    if "long report" in request.last_user_text:
        paragraphs = [f"Section {n}: " + " ".join(f"finding-{n}-{k} holds." for k in range(40)) for n in range(6)]
        return Reply.answer("\n\n".join(paragraphs))
    if "slowly" in request.last_user_text:
        return Reply(text=SLOW_STORY, chunk_size=25, event_delay=0.1)
    return Reply.answer(f"echo: {request.last_user_text}")


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(handler=reply_for) as server:
        yield server


# --------------------------------------------------------------------------- conversion


async def test_a_dm_is_answered_and_keyed_by_channel_and_message_id(adapter):
    data = message_payload(ALICE, "hello there", channel_id=DM_CHANNEL_ID, guild=False)
    message = incoming(adapter, data)
    assert message is not None and message.respond
    assert (message.platform, message.chat_id, message.update_id) == ("dc", str(DM_CHANNEL_ID), data["id"])
    assert (message.user_id, message.user_name, message.text) == (str(ALICE_ID), "Alice", "hello there")
    assert message.chat == f"dc:{DM_CHANNEL_ID}"


@pytest.mark.parametrize(
    "content",
    [
        f"<@{BOT_ID}> what broke overnight?",
        f"<@!{BOT_ID}> what broke overnight?",
        f"what broke overnight? <@{BOT_ID}>",
        f"<@&{BOT_ROLE_ID}> what broke overnight?",
    ],
    ids=["user mention first", "nickname mention", "user mention last", "role mention"],
)
async def test_a_mention_in_a_server_is_answered_without_the_mention(adapter, content):
    data = message_payload(
        ALICE,
        content,
        mentions=(mention(BOT),) if "@&" not in content else (),
        mention_roles=(BOT_ROLE_ID,) if "@&" in content else (),
    )
    message = incoming(adapter, data)
    assert message is not None and message.respond
    assert message.text == "what broke overnight?"
    assert message.chat_id == str(CHANNEL_ID)


async def test_a_mention_mid_sentence_leaves_one_space_and_keeps_code_indentation(adapter):
    content = f"hey <@{BOT_ID}> run this:\n```py\nif x:\n    y()\n```"
    message = incoming(adapter, message_payload(ALICE, content, mentions=(mention(BOT),)))
    assert message.text == "hey run this:\n```py\nif x:\n    y()\n```"


async def test_server_chatter_is_recorded_with_the_speaker_and_not_answered(adapter):
    message = incoming(adapter, message_payload(ALICE, "deploy is green"))
    assert message is not None and not message.respond
    assert message.text == "Alice: deploy is green"
    # a command typed as chatter stays chatter: the name in front keeps it from running
    assert incoming(adapter, message_payload(BOB, "/new")).text == "Bob: /new"


async def test_everyone_pings_do_not_address_the_bot(adapter):
    message = incoming(adapter, message_payload(ALICE, "@everyone standup", mention_everyone=True))
    assert message is not None and not message.respond


async def test_a_reply_to_the_bot_is_answered_even_without_a_ping(adapter):
    earlier = message_payload(BOT, "the fix is 9f3c2ab", guild=True)
    data = message_payload(ALICE, "are you sure?", replying_to=earlier)
    message = incoming(adapter, data)
    assert message is not None and message.respond and message.text == "are you sure?"
    # a reply to someone else is chatter
    to_bob = message_payload(ALICE, "thanks", replying_to=message_payload(BOB, "done"))
    assert not incoming(adapter, to_bob).respond


async def test_other_mentions_are_shown_by_name(adapter):
    content = f"<@{BOT_ID}> ask <@{BOB_ID}> about <#{QUIET_CHANNEL_ID}>"
    message = incoming(adapter, message_payload(ALICE, content, mentions=(mention(BOT), mention(BOB))))
    assert message.text == "ask @Bob about #quiet"


@pytest.mark.parametrize(
    "payload",
    [
        message_payload(user_payload(OTHER_BOT_ID, "Otherbot", bot=True), f"<@{BOT_ID}> hi", mentions=(mention(BOT),)),
        message_payload(BOT, "my own reply"),
        message_payload(BOT, "my own DM reply", channel_id=DM_CHANNEL_ID, guild=False),
        message_payload(user_payload(OTHER_BOT_ID, "Hook", bot=True), "alert", webhook_id=snowflake()),
        message_payload(ALICE, "", message_type=7),  # "Alice joined the server"
        message_payload(ALICE, f"<@{BOT_ID}>", mentions=(mention(BOT),)),  # nothing left to answer
    ],
    ids=["other-bot", "itself", "itself-dm", "webhook", "system", "bare-mention"],
)
async def test_bots_system_messages_and_empty_messages_are_ignored(adapter, payload):
    assert incoming(adapter, payload) is None


async def test_a_thread_is_its_own_chat(adapter):
    message = incoming(
        adapter, message_payload(ALICE, f"<@{BOT_ID}> status?", channel_id=THREAD_ID, mentions=(mention(BOT),))
    )
    assert message.chat_id == str(THREAD_ID) and message.respond


async def test_attachments_are_the_messages_items(adapter):
    attachment = {
        "id": str(snowflake()),
        "filename": "trace.log",
        "size": 10,
        "url": "https://cdn.discordapp.com/attachments/1/2/trace.log",
        "proxy_url": "https://media.discordapp.net/attachments/1/2/trace.log",
    }
    message = incoming(
        adapter, message_payload(ALICE, "", channel_id=DM_CHANNEL_ID, guild=False, attachments=(attachment,))
    )
    assert message.text == ""
    assert [(item.kind, item.name, item.file_id, item.size) for item in message.items] == [
        ("document", "trace.log", attachment["url"], 10)
    ]


async def test_user_allowlist(discord_api):
    adapter = await open_adapter(discord_api, allowlist=Allowlist.of(users=[ALICE_ID]))
    try:
        assert incoming(adapter, message_payload(ALICE, "hi", channel_id=DM_CHANNEL_ID, guild=False))
        assert incoming(adapter, message_payload(BOB, "hi", channel_id=DM_CHANNEL_ID, guild=False)) is None
        assert incoming(adapter, message_payload(BOB, f"<@{BOT_ID}> hi", mentions=(mention(BOT),))) is None
    finally:
        await adapter.stop()


async def test_guild_allowlist_serves_listed_servers_only_and_no_dms(discord_api):
    listed = await open_adapter(discord_api, allowlist=Allowlist.of(guilds=[GUILD_ID]))
    other = await open_adapter(discord_api, allowlist=Allowlist.of(guilds=[snowflake()]))
    try:
        chatter = message_payload(ALICE, "hello")
        assert incoming(listed, chatter) is not None
        assert incoming(other, chatter) is None
        assert incoming(listed, message_payload(ALICE, "hi", channel_id=DM_CHANNEL_ID, guild=False)) is None
    finally:
        await listed.stop()
        await other.stop()


async def test_channel_allowlist_covers_the_threads_of_a_listed_channel(discord_api):
    adapter = await open_adapter(discord_api, allowlist=Allowlist.of(channels=[CHANNEL_ID]))
    try:
        assert incoming(adapter, message_payload(ALICE, "in general")) is not None
        assert incoming(adapter, message_payload(ALICE, "in the thread", channel_id=THREAD_ID)) is not None
        assert incoming(adapter, message_payload(ALICE, "elsewhere", channel_id=QUIET_CHANNEL_ID)) is None
    finally:
        await adapter.stop()


def test_from_settings_passes_tokens_allowlists_and_shards():
    settings = Settings(
        platforms={
            "local": {"enabled": False},
            "discord": {
                "enabled": True,
                "token": "t0ken",
                "allowed_guild_ids": [GUILD_ID],
                "shard_ids": [2, 3],
                "shard_count": 4,
            },
        }
    )
    sharded = DiscordAdapter.from_settings(settings)
    assert sharded.platform == "dc" and sharded.max_message_length == 2000 and sharded.token == "t0ken"
    assert isinstance(sharded.client, discord.AutoShardedClient)
    assert (sharded.client.shard_ids, sharded.client.shard_count) == ([2, 3], 4)
    assert sharded.allowlist == Allowlist.of(guilds=[GUILD_ID])
    intents = sharded.client.intents
    assert intents.message_content and intents.guild_messages and intents.dm_messages and intents.guilds
    assert not intents.members and not intents.presences

    single = DiscordAdapter.from_settings(
        Settings(platforms={"local": {"enabled": False}, "discord": {"enabled": True, "token": "t0ken"}})
    )
    assert not isinstance(single.client, discord.AutoShardedClient)
    with pytest.raises(ValueError):
        DiscordAdapter("")


async def test_a_wrong_token_fails_at_start(discord_api):
    """A token of the right shape that Discord refuses (401), as opposed to one that is not a token at all."""
    adapter = DiscordAdapter("NDI0Mg.wrong.not-the-hmac-discord-knows")
    try:
        with pytest.raises(discord.LoginFailure) as refused:
            await adapter.start(lambda message: asyncio.sleep(0, True))
        assert not isinstance(refused.value, DiscordTokenMalformed)  # Discord itself answered and refused it
    finally:
        await adapter.stop()


async def test_a_failing_intake_is_retried_before_the_message_is_given_up(adapter):
    taken: list[str] = []
    failures = iter([ConnectionError("redis restarting"), ConnectionError("still restarting")])

    async def flaky_intake(message) -> bool:
        error = next(failures, None)
        if error is not None:
            raise error
        taken.append(message.update_id)
        return True

    adapter.bind(flaky_intake)
    data = message_payload(ALICE, "are you up?", channel_id=DM_CHANNEL_ID, guild=False)
    assert (await adapter.handle(as_message(adapter, data))) is not None
    assert taken == [data["id"]]

    async def broken_intake(message) -> bool:
        raise ConnectionError("redis is gone")

    adapter.bind(broken_intake)
    with pytest.raises(ConnectionError):
        await adapter.handle(
            as_message(adapter, message_payload(ALICE, "hello?", channel_id=DM_CHANNEL_ID, guild=False))
        )


# --------------------------------------------------------------------------- through the gateway


async def test_dms_and_mentions_reach_the_runner_and_are_answered(adapter, discord_api, gateway, key_prefix):
    dm = message_payload(ALICE, "ping from a DM", channel_id=DM_CHANNEL_ID, guild=False)
    chatter = message_payload(BOB, "the canary is at 25%")
    asked = message_payload(ALICE, f"<@{BOT_ID}> how far is the canary?", mentions=(mention(BOT),))
    for data in (dm, chatter, asked):
        await receive(adapter, data)
    await gateway.wait_idle()

    assert discord_api.contents(DM_CHANNEL_ID) == ["echo: ping from a DM"]
    assert discord_api.contents(CHANNEL_ID) == ["echo: how far is the canary?"]
    (dm_post,) = [a for a in discord_api.attempts if a["channel_id"] == str(DM_CHANNEL_ID)]
    (guild_post,) = [a for a in discord_api.attempts if a["channel_id"] == str(CHANNEL_ID)]
    assert str(dm_post["message_reference"]["message_id"]) == dm["id"]
    assert str(guild_post["message_reference"]["message_id"]) == asked["id"]
    assert guild_post["message_reference"]["fail_if_not_exists"] is False
    assert guild_post["allowed_mentions"] == {"parse": []}  # nobody is pinged, not even the asker
    assert CHANNEL_ID in discord_api.typing and DM_CHANNEL_ID in discord_api.typing

    # the unaddressed chatter is in the channel's conversation, ahead of the question
    store = gateway.store
    chat = f"dc:{CHANNEL_ID}"
    texts = [m["content"] for m in await store.active(chat, await store.current_session(chat)) if m["role"] == "user"]
    assert texts == ["Bob: the canary is at 25%", "how far is the canary?"]


async def test_a_redelivered_message_is_answered_once(adapter, discord_api, gateway):
    asked = message_payload(ALICE, f"<@{BOT_ID}> once please", mentions=(mention(BOT),))
    await receive(adapter, asked)
    await receive(adapter, asked)  # the same MESSAGE_CREATE again, as after a gateway RESUME
    await gateway.wait_idle()
    assert discord_api.contents(CHANNEL_ID) == ["echo: once please"]


async def test_a_5000_character_reply_arrives_as_three_messages_in_order(adapter, discord_api, gateway, llm):
    await receive(adapter, message_payload(ALICE, "send the long report", channel_id=DM_CHANNEL_ID, guild=False))
    await gateway.wait_idle()
    reply = reply_for(llm.requests[-1]).text
    assert 4_800 <= len(reply) <= 5_200
    sent = discord_api.contents(DM_CHANNEL_ID)
    assert len(sent) == 3 and all(len(chunk) <= 2000 for chunk in sent)
    assert " ".join(sent).split() == reply.split()  # in order, nothing lost, only cut whitespace missing
    assert all(chunk.startswith("Section") for chunk in sent)  # cut at paragraph boundaries
    # only the first part answers the question
    references = [a.get("message_reference") for a in discord_api.attempts]
    assert references[0] is not None and references[1:] == [None, None]


async def test_a_rate_limited_reply_waits_and_still_arrives(adapter, discord_api, gateway):
    discord_api.faults = ["rate_limited"]
    await receive(adapter, message_payload(ALICE, "hello", channel_id=DM_CHANNEL_ID, guild=False))
    await gateway.wait_idle()
    assert len(discord_api.attempts) == 2  # refused with retry_after, then accepted
    assert discord_api.contents(DM_CHANNEL_ID) == ["echo: hello"]


async def test_a_chunk_whose_answer_was_lost_is_retried_without_posting_it_twice(adapter, discord_api):
    discord_api.faults = ["drop", "drop_after_create"]
    await adapter.send(str(CHANNEL_ID), "deploy finished", reply_to=str(snowflake()))
    assert len(discord_api.attempts) == 3
    assert len({(a["nonce"], a["enforce_nonce"]) for a in discord_api.attempts}) == 1  # one nonce, enforced
    assert discord_api.contents(CHANNEL_ID) == ["deploy finished"]


async def test_a_refusal_is_not_retried_and_reaches_the_caller(adapter, discord_api):
    discord_api.faults = ["forbidden"]
    with pytest.raises(discord.Forbidden):
        await adapter.send(str(CHANNEL_ID), "not allowed here")
    assert len(discord_api.attempts) == 1 and discord_api.created == []


async def test_typing_failures_do_not_stop_the_reply(adapter, discord_api, gateway):
    discord_api.typing_status = 403
    await receive(adapter, message_payload(ALICE, "still there?", channel_id=DM_CHANNEL_ID, guild=False))
    await gateway.wait_idle()
    assert discord_api.typing == [DM_CHANNEL_ID]
    assert discord_api.contents(DM_CHANNEL_ID) == ["echo: still there?"]


async def test_a_streamed_reply_is_one_message_edited_as_it_is_written(adapter, discord_api, gateway, llm):
    await receive(adapter, message_payload(ALICE, f"<@{BOT_ID}> tell it slowly", mentions=(mention(BOT),)))
    await gateway.wait_idle(timeout=60)
    assert discord_api.contents(CHANNEL_ID) == [SLOW_STORY]  # one message, holding the model's whole text
    (post,) = [a for a in discord_api.attempts if a["channel_id"] == str(CHANNEL_ID)]
    assert post["content"] != SLOW_STORY and SLOW_STORY.startswith(post["content"])  # sent early, as a preview
    edits = [e["content"] for e in discord_api.edits]
    assert len(edits) >= 2 and edits[-1] == SLOW_STORY and all(SLOW_STORY.startswith(e) for e in edits)
    assert llm.requests[-1].body["stream"] is True


# --------------------------------------------------------------------------- a question's buttons


def button_press(message: dict[str, Any], custom_id: str, user: dict[str, Any]) -> dict[str, Any]:
    """The INTERACTION_CREATE Discord's gateway sends when ``user`` presses a button of the bot's ``message``."""
    return {
        "id": str(snowflake()),
        "application_id": str(BOT_ID),
        "type": 3,
        "token": "press-token",
        "version": 1,
        "channel_id": message["channel_id"],
        "user": user,
        "message": message,
        "locale": "en-US",
        "channel": {"id": message["channel_id"], "type": 1, "recipients": [user]},  # a DM, as Discord sends it
        "data": {"custom_id": custom_id, "component_type": 2},
        "entitlements": [],
        "authorizing_integration_owners": {},
        "app_permissions": "0",
        "attachment_size_limit": 8388608,
    }


async def test_a_question_has_buttons_whose_press_is_the_pressers_answer(adapter, discord_api):
    received: list[IncomingMessage] = []

    async def intake(message: IncomingMessage) -> bool:
        received.append(message)
        return True

    adapter.bind(intake)
    prompt = ApprovalPrompt("5a47", "🔐 May I run notes__wipe {}?")
    asked_in = await adapter.ask_approval(str(DM_CHANNEL_ID), prompt)
    [asked] = [m for m in discord_api.created if m["id"] == asked_in]
    buttons = [component for row in asked["components"] for component in row["components"]]
    assert [(b["label"], b["custom_id"]) for b in buttons] == [("Approve", "fga:5a47:y"), ("Refuse", "fga:5a47:n")]
    adapter.client._connection.parse_interaction_create(button_press(asked, "fga:5a47:y", ALICE))
    await wait_for(lambda: received, what="the button press to reach intake")
    assert [(m.chat_id, m.user_id, m.text) for m in received] == [(str(DM_CHANNEL_ID), str(ALICE_ID), "/approve 5a47")]
    assert discord_api.interaction_answers and discord_api.interaction_answers[0]["type"] == 6  # acknowledged
    await adapter.settle_approval(str(DM_CHANNEL_ID), asked_in, prompt, "approved by Alice")
    assert asked["content"] == "🔐 May I run notes__wipe {}?\n→ approved by Alice" and asked["components"] == []


async def test_what_is_remembered_in_a_dm_is_private_and_in_a_channel_stays_there(adapter, discord_api, gateway):
    """A DM is marked as one by the adapter (DMChannel): what the person keeps there is their private memory."""
    await receive(
        adapter, message_payload(ALICE, "/remember I take my coffee black", channel_id=DM_CHANNEL_ID, guild=False)
    )
    await receive(
        adapter, message_payload(ALICE, f"<@{BOT_ID}> /remember I lead the standup", mentions=(mention(BOT),))
    )
    await gateway.wait_idle()
    assert discord_api.contents(DM_CHANNEL_ID) == ["Remembered (private) as #1: I take my coffee black"]
    assert discord_api.contents(CHANNEL_ID) == [f"Remembered (dc:{CHANNEL_ID}) as #2: I lead the standup"]
