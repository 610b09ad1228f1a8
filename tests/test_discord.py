"""The Discord adapter with the real discord.py client, never connected to Discord's gateway.

Messages are built by discord.py itself from the raw MESSAGE_CREATE / GUILD_CREATE payloads Discord's
gateway sends, on the client's own connection state. The client's REST side (login, sending,
typing) talks to a fake Discord API: a real HTTP server on loopback that discord.py's HTTP layer is
pointed at, so its rate-limit handling runs for real. Pipeline tests put the adapter in front of the
gateway ``foldgate run`` opens (shipped settings, shared send budget) on real Redis, the fake LLM server echoing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import discord
import pytest
import pytest_asyncio
from aiohttp import web

from gateway.config import Settings
from gateway.platforms.base import ApprovalPrompt, IncomingMessage
from gateway.platforms.discord import Allowlist, DiscordAdapter, DiscordTokenMalformed
from gateway.worker.runner import GatewayRunner
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.platform_gateway import platform_gateway

#: Shaped like a bot token (user id in base64, timestamp, HMAC), too short to pass for a real one.
TOKEN = "NDI0Mg.test.fake-hmac-for-the-fake-api"
DISCORD_EPOCH_MS = 1_420_070_400_000
_sequence = itertools.count(1)


def snowflake() -> int:
    """A fresh id shaped like Discord's: creation time in the high bits."""
    return ((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22) | (next(_sequence) & 0x3FFFFF)


BOT_ID, ALICE_ID, BOB_ID, OTHER_BOT_ID = snowflake(), snowflake(), snowflake(), snowflake()
GUILD_ID, CHANNEL_ID, QUIET_CHANNEL_ID, THREAD_ID, BOT_ROLE_ID = (snowflake() for _ in range(5))
DM_CHANNEL_ID = snowflake()


# --------------------------------------------------------------------------- gateway payloads


def user_payload(user_id: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(user_id),
        "username": name.lower(),
        "global_name": name,
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
    }


BOT = user_payload(BOT_ID, "Foldbot", bot=True)
ALICE = user_payload(ALICE_ID, "Alice")
BOB = user_payload(BOB_ID, "Bob")


def guild_payload() -> dict[str, Any]:
    """GUILD_CREATE for a server with two text channels, a thread, and the bot's managed role."""
    role = {
        "id": str(GUILD_ID),
        "name": "@everyone",
        "permissions": "0",
        "position": 0,
        "color": 0,
        "hoist": False,
        "managed": False,
        "mentionable": False,
    }
    bot_role = {
        **role,
        "id": str(BOT_ROLE_ID),
        "name": "Foldbot",
        "position": 1,
        "managed": True,
        "tags": {"bot_id": str(BOT_ID)},
    }
    channels = [
        {
            "id": str(CHANNEL_ID),
            "type": 0,
            "name": "general",
            "position": 0,
            "guild_id": str(GUILD_ID),
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
        },
        {
            "id": str(QUIET_CHANNEL_ID),
            "type": 0,
            "name": "quiet",
            "position": 1,
            "guild_id": str(GUILD_ID),
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
        },
    ]
    thread = {
        "id": str(THREAD_ID),
        "type": 11,
        "name": "incident-42",
        "guild_id": str(GUILD_ID),
        "parent_id": str(CHANNEL_ID),
        "owner_id": str(ALICE_ID),
        "message_count": 0,
        "member_count": 1,
        "rate_limit_per_user": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "locked": False,
            "archive_timestamp": "2025-01-01T00:00:00+00:00",
        },
    }
    me = {
        "user": BOT,
        "roles": [str(BOT_ROLE_ID)],
        "joined_at": "2025-01-01T00:00:00+00:00",
        "deaf": False,
        "mute": False,
        "flags": 0,
    }
    return {
        "id": str(GUILD_ID),
        "name": "Ops",
        "icon": None,
        "owner_id": str(ALICE_ID),
        "features": [],
        "roles": [role, bot_role],
        "emojis": [],
        "stickers": [],
        "channels": channels,
        "threads": [thread],
        "members": [me],
        "member_count": 3,
        "large": False,
        "unavailable": False,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "premium_tier": 0,
        "preferred_locale": "en-US",
        "nsfw_level": 0,
        "voice_states": [],
        "presences": [],
    }


def message_payload(
    author: dict[str, Any],
    content: str,
    *,
    channel_id: int = CHANNEL_ID,
    guild: bool = True,
    mentions: tuple[dict[str, Any], ...] = (),
    mention_roles: tuple[int, ...] = (),
    mention_everyone: bool = False,
    replying_to: dict[str, Any] | None = None,
    message_type: int = 0,
    attachments: tuple[dict[str, Any], ...] = (),
    webhook_id: int | None = None,
    message_id: int | None = None,
) -> dict[str, Any]:
    """A MESSAGE_CREATE payload as Discord's gateway sends it."""
    data: dict[str, Any] = {
        "id": str(message_id or snowflake()),
        "channel_id": str(channel_id),
        "author": author,
        "content": content,
        "timestamp": "2025-06-01T09:00:00.000000+00:00",
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": mention_everyone,
        "mentions": list(mentions),
        "mention_roles": [str(role) for role in mention_roles],
        "attachments": list(attachments),
        "embeds": [],
        "pinned": False,
        "type": message_type,
        "flags": 0,
        "components": [],
    }
    if guild:
        data["guild_id"] = str(GUILD_ID)
        data["member"] = {
            "roles": [],
            "joined_at": "2025-01-01T00:00:00+00:00",
            "deaf": False,
            "mute": False,
            "flags": 0,
            "nick": None,
        }
    if replying_to is not None:
        data["type"] = 19
        data["message_reference"] = {
            "message_id": replying_to["id"],
            "channel_id": replying_to["channel_id"],
            **({"guild_id": str(GUILD_ID)} if guild else {}),
        }
        data["referenced_message"] = replying_to
    if webhook_id is not None:
        data["webhook_id"] = str(webhook_id)
    return data


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON with Discord's exact content type (discord.py parses a body as JSON only then)."""
    return web.Response(
        body=json.dumps(body).encode(), status=status, headers={"Content-Type": "application/json", **(headers or {})}
    )


def mention(user: dict[str, Any]) -> dict[str, Any]:
    """An entry of a message's ``mentions`` as the gateway sends it in a server (user plus partial member)."""
    return {
        **user,
        "member": {"roles": [], "joined_at": "2025-01-01T00:00:00+00:00", "deaf": False, "mute": False, "flags": 0},
    }


# --------------------------------------------------------------------------- a fake Discord REST API


class FakeDiscordAPI:
    """Discord's REST API, the part a bot uses, on loopback.

    Message posts can be scripted to fail (``faults``, consumed one per post): ``rate_limited``
    (429 with ``retry_after``, as Discord's edge answers), ``drop`` (connection closed, nothing
    created), ``drop_after_create`` (created, then the connection closed before the answer),
    ``forbidden`` (403). Like Discord, it refuses content over 2,000 characters (400), and a post
    repeating a nonce with ``enforce_nonce`` gets the message created the first time, not a new one.
    A post with files comes as Discord takes it: multipart, the JSON in ``payload_json`` and each file
    in a ``files[n]`` part; the message gets its ``attachments`` (``uploads`` keeps name and bytes), and
    a file over a bot's 10 MiB is refused with Discord's 413, a post with neither content nor files
    with its 50006.
    """

    def __init__(self) -> None:
        self.attempts: list[dict[str, Any]] = []  # every message post, as received
        self.created: list[dict[str, Any]] = []  # messages that exist afterwards
        self.typing: list[int] = []
        self.faults: list[str] = []
        self.typing_status = 204
        self.edits: list[dict[str, Any]] = []  # every message edit, as received
        self.uploads: list[tuple[str, str, bytes]] = []  # (channel id, file name, bytes) of every file posted
        self.interaction_answers: list[dict[str, Any]] = []  # every acknowledged button press
        self._by_nonce: dict[str, dict[str, Any]] = {}
        self._runner: web.AppRunner | None = None
        self.base = ""
        #: Where the gateway websocket listens (``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`` in tests).
        self.gateway = ""
        #: The IDENTIFY payloads received: one per gateway session a client opened.
        self.identified: list[dict[str, Any]] = []
        self._sockets: set[web.WebSocketResponse] = set()
        self._sequence = 0

    async def __aenter__(self) -> FakeDiscordAPI:
        app = web.Application()
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_post("/api/v10/channels/{channel_id}/messages", self._post_message)
        app.router.add_post("/api/v10/channels/{channel_id}/typing", self._typing)
        app.router.add_post("/api/v10/interactions/{interaction_id}/{token}/callback", self._interaction_callback)
        app.router.add_patch("/api/v10/channels/{channel_id}/messages/{message_id}", self._edit_message)
        app.router.add_delete("/api/v10/channels/{channel_id}/messages/{message_id}", self._delete_message)
        app.router.add_get("/gateway", self._gateway)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base = f"http://{host}:{port}/api/v10"
        self.gateway = f"ws://{host}:{port}/gateway"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        for socket in list(self._sockets):
            await socket.close()
        await self._runner.cleanup()

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a gateway event (``MESSAGE_CREATE`` …) to every connected session, as Discord pushes it."""
        for socket in list(self._sockets):
            self._sequence += 1
            await socket.send_json({"op": 0, "t": event, "s": self._sequence, "d": data})

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        """The gateway as a bot's session sees it, in plain JSON text frames: HELLO, heartbeats acknowledged,
        IDENTIFY answered with READY (no guilds) then the server's GUILD_CREATE; a wrong token closed with 4004."""
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self._sockets.add(socket)
        try:
            await socket.send_json({"op": 10, "d": {"heartbeat_interval": 41_250}})
            async for frame in socket:
                if frame.type != web.WSMsgType.TEXT:
                    break
                message = json.loads(frame.data)
                if message.get("op") == 1:
                    await socket.send_json({"op": 11})
                elif message.get("op") == 2:
                    if message["d"].get("token") != TOKEN:
                        await socket.close(code=4004, message=b"Authentication failed.")
                        break
                    self.identified.append(message["d"])
                    ready = {
                        "v": 10,
                        "user": BOT,
                        "guilds": [],
                        "session_id": "fake-session",
                        "resume_gateway_url": self.gateway,
                        "application": {"id": str(BOT_ID), "flags": 0},
                    }
                    self._sequence += 2
                    await socket.send_json({"op": 0, "t": "READY", "s": self._sequence - 1, "d": ready})
                    await socket.send_json({"op": 0, "t": "GUILD_CREATE", "s": self._sequence, "d": guild_payload()})
        finally:
            self._sockets.discard(socket)
        return socket

    def contents(self, channel_id: int) -> list[str]:
        return [m["content"] for m in self.created if m["channel_id"] == str(channel_id)]

    @staticmethod
    def _authorized(request: web.Request) -> None:
        if request.headers.get("Authorization") != f"Bot {TOKEN}":
            raise web.HTTPUnauthorized(text=json.dumps({"message": "401: Unauthorized", "code": 0}))

    async def _me(self, request: web.Request) -> web.Response:
        self._authorized(request)
        return json_response(BOT)

    async def _application(self, request: web.Request) -> web.Response:
        self._authorized(request)
        return json_response(
            {
                "id": str(BOT_ID),
                "name": "Foldbot",
                "description": "",
                "icon": None,
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": ALICE,
                "verify_key": "0" * 64,
                "flags": 0,
            }
        )

    async def _typing(self, request: web.Request) -> web.Response:
        self._authorized(request)
        self.typing.append(int(request.match_info["channel_id"]))
        if self.typing_status != 204:
            return json_response({"message": "Missing Access", "code": 50001}, status=self.typing_status)
        return web.Response(status=204)

    async def _post_message(self, request: web.Request) -> web.Response:
        self._authorized(request)
        body, files = await self._message_body(request)
        channel_id = request.match_info["channel_id"]
        self.attempts.append({"channel_id": channel_id, **body})
        fault = self.faults.pop(0) if self.faults else None
        if fault == "rate_limited":
            return json_response(
                {"message": "You are being rate limited.", "retry_after": 0.05, "global": False},
                status=429,
                headers={"Via": "1.1 google", "Retry-After": "1"},
            )
        if fault == "forbidden":
            return json_response({"message": "Missing Permissions", "code": 50013}, status=403)
        if fault == "drop":
            return self._drop(request)
        if len(body.get("content") or "") > 2000:
            return json_response(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {
                        "content": {
                            "_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]
                        }
                    },
                },
                status=400,
            )
        if not body.get("content") and not files:
            return json_response({"message": "Cannot send an empty message", "code": 50006}, status=400)
        if any(len(data) > 10 * 1024 * 1024 for _, data, _ in files):
            return json_response({"message": "Request entity too large", "code": 40005}, status=413)
        nonce = body.get("nonce")
        existing = self._by_nonce.get(nonce) if nonce and body.get("enforce_nonce") else None
        message = existing or self._create(channel_id, body, files)
        if fault == "drop_after_create":
            return self._drop(request)
        return json_response(message)

    def _find(self, request: web.Request) -> dict[str, Any]:
        channel_id, message_id = request.match_info["channel_id"], request.match_info["message_id"]
        for message in self.created:
            if message["channel_id"] == channel_id and message["id"] == message_id:
                return message
        raise web.HTTPNotFound(
            text=json.dumps({"message": "Unknown Message", "code": 10008}), content_type="application/json"
        )

    async def _edit_message(self, request: web.Request) -> web.Response:
        self._authorized(request)
        body = await request.json()
        message = self._find(request)
        if len(body.get("content") or "") > 2000:
            return json_response({"message": "Invalid Form Body", "code": 50035}, status=400)
        self.edits.append({"id": message["id"], **body})
        message["content"] = body.get("content", message["content"])
        message["components"] = body.get("components", message.get("components", []))
        return json_response(message)

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        """``POST /interactions/{id}/{token}/callback``: the bot acknowledges a button press (no bot token needed);
        asked ``with_response``, Discord answers with the interaction's callback (else 204)."""
        body = await request.json()
        interaction_id = request.match_info["interaction_id"]
        self.interaction_answers.append({"id": interaction_id, **body})
        if request.query.get("with_response") not in ("1", "true"):
            return web.Response(status=204)
        return json_response(
            {
                "interaction": {
                    "id": interaction_id,
                    "type": 3,
                    "response_message_loading": False,
                    "response_message_ephemeral": False,
                },
                "resource": {"type": body.get("type", 6)},
            }
        )

    async def _delete_message(self, request: web.Request) -> web.Response:
        self._authorized(request)
        self.created.remove(self._find(request))
        return web.Response(status=204)

    @staticmethod
    async def _message_body(request: web.Request) -> tuple[dict[str, Any], list[tuple[str, bytes, str]]]:
        """The post's JSON and its files ``(name, bytes, type)``: plain JSON, or multipart as discord.py sends files."""
        if not request.content_type.startswith("multipart/"):
            return await request.json(), []
        body: dict[str, Any] = {}
        files = []
        async for part in await request.multipart():
            if part.name == "payload_json":
                body = json.loads(await part.text())
            elif (part.name or "").startswith("files["):
                files.append((part.filename or "", bytes(await part.read()), part.headers.get("Content-Type", "")))
        return body, files

    def _create(
        self, channel_id: str, body: dict[str, Any], files: list[tuple[str, bytes, str]] = ()
    ) -> dict[str, Any]:  # type: ignore[assignment]
        message = message_payload(BOT, body.get("content") or "", channel_id=int(channel_id), guild=False)
        message["components"] = body.get("components", [])
        message["attachments"] = [
            {
                "id": str(snowflake()),
                "filename": name,
                "size": len(data),
                "content_type": kind,
                "url": f"{self.base}/attachments/{channel_id}/{name}",
                "proxy_url": "",
            }
            for name, data, kind in files
        ]
        self.uploads += [(channel_id, name, data) for name, data, _ in files]
        message["nonce"] = body.get("nonce")
        self.created.append(message)
        if body.get("nonce"):
            self._by_nonce[body["nonce"]] = message
        return message

    @staticmethod
    def _drop(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()  # the client sees the connection end without an answer
        return web.Response(status=500)


# --------------------------------------------------------------------------- fixtures


@pytest_asyncio.fixture
async def discord_api(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as api:
        monkeypatch.setattr(discord.http.Route, "BASE", api.base)
        yield api


async def open_adapter(api: FakeDiscordAPI, **options: Any) -> DiscordAdapter:
    """An adapter whose client logged in to the fake REST API and knows the server; no gateway connection."""
    adapter = DiscordAdapter(TOKEN, retry_delay=0.01, **options)
    await adapter.client.login(TOKEN)
    adapter.client._connection.parse_guild_create(guild_payload())
    return adapter


@pytest_asyncio.fixture
async def adapter(discord_api: FakeDiscordAPI) -> AsyncIterator[DiscordAdapter]:
    made = await open_adapter(discord_api)
    yield made
    await made.stop()


def as_message(adapter: DiscordAdapter, data: dict[str, Any]) -> discord.Message:
    """discord.py's Message for a payload, on the adapter's connection state, in the channel it names."""
    client = adapter.client
    state = client._connection
    channel_id = int(data["channel_id"])
    if "guild_id" in data:
        channel = client.get_channel(channel_id) or client.get_partial_messageable(channel_id, guild_id=GUILD_ID)
    else:
        channel = discord.DMChannel(
            me=client.user, state=state, data={"id": str(channel_id), "type": 1, "recipients": [data["author"]]}
        )
    return discord.Message(state=state, channel=channel, data=data)


def incoming(adapter: DiscordAdapter, data: dict[str, Any]):
    return adapter.to_incoming(as_message(adapter, data))


async def receive(adapter: DiscordAdapter, data: dict[str, Any]) -> None:
    """Deliver a MESSAGE_CREATE as the gateway connection would, and wait for the adapter's handler."""
    adapter.client._connection.parse_message_create(data)
    handlers = [task for task in asyncio.all_tasks() if task.get_name() == "discord.py: on_message"]
    await asyncio.gather(*handlers)


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


@pytest_asyncio.fixture
async def gateway(
    adapter: DiscordAdapter, llm: FakeLLMServer, redis, redis_url, key_prefix
) -> AsyncIterator[GatewayRunner]:
    """The gateway ``foldgate run`` opens, with the shipped settings, whose platform is the Discord adapter.

    The adapter is bound to the runner's intake rather than started: the tests hand it gateway payloads
    themselves (:func:`receive`) instead of connecting it to a gateway websocket.
    """
    settings: Settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=64_000)
    async with platform_gateway(settings, redis, {"dc": adapter}) as running:
        adapter.bind(running.runner.intake)
        yield running.runner


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
    for _ in range(100):
        if received:
            break
        await asyncio.sleep(0.02)
    assert [(m.chat_id, m.user_id, m.text) for m in received] == [(str(DM_CHANNEL_ID), str(ALICE_ID), "/approve 5a47")]
    assert discord_api.interaction_answers and discord_api.interaction_answers[0]["type"] == 6  # acknowledged
    await adapter.settle_approval(str(DM_CHANNEL_ID), asked_in, prompt, "approved by Alice")
    assert asked["content"] == "🔐 May I run notes__wipe {}?\n→ approved by Alice" and asked["components"] == []
