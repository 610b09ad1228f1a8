"""Discord's side of the wire, on loopback: the REST API a bot uses and the gateway websocket its session
opens (:class:`FakeDiscordAPI`), the payloads Discord's gateway sends (``MESSAGE_CREATE``, ``GUILD_CREATE``,
users, mentions), and the real :class:`DiscordAdapter` logged in to the fake and fed those payloads.

Tests point discord.py's HTTP layer at the fake (``discord.http.Route.BASE``; the ``discord_api`` fixture in
tests/conftest.py does it), so its rate-limit handling runs for real. The ids are shaped like Discord's
snowflakes and made once per process, when this module is imported.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import discord
from aiohttp import web

from gateway.platforms.discord import DiscordAdapter

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


# --------------------------------------------------------------------------- the real adapter on the fake


async def open_adapter(api: FakeDiscordAPI, **options: Any) -> DiscordAdapter:
    """An adapter whose client logged in to the fake REST API and knows the server; no gateway connection."""
    adapter = DiscordAdapter(TOKEN, retry_delay=0.01, **options)
    await adapter.client.login(TOKEN)
    adapter.client._connection.parse_guild_create(guild_payload())
    return adapter


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


async def receive(adapter: DiscordAdapter, data: dict[str, Any]) -> None:
    """Deliver a MESSAGE_CREATE as the gateway connection would, and wait for the adapter's handler."""
    adapter.client._connection.parse_message_create(data)
    handlers = [task for task in asyncio.all_tasks() if task.get_name() == "discord.py: on_message"]
    await asyncio.gather(*handlers)
