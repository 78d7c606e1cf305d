"""A local stand-in for the Discord REST API, and the gateway payloads the tests feed the client.

discord.py's ``Route.BASE`` is pointed at this server; it answers the calls the bot makes the way
Discord does (JSON with ``Content-Type: application/json`` exactly — anything else discord.py
reads as text), records them, and can be told to fail a route (``fail("POST", r"/threads$",
403)``). The ``*_payload`` functions build gateway events in Discord's wire shape.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from stub_bot_core import GUILD as GUILD_ID
from stub_http import LocalServer

BOT_ID, APP_ID = 110000000000000001, 110000000000000002
NOW = "2025-01-01T00:00:00.000000+00:00"


def user_payload(uid: int, name: str, bot: bool = False) -> dict[str, Any]:
    return {"id": str(uid), "username": name, "discriminator": "0", "global_name": name,
            "avatar": None, "bot": bot}  # fmt: skip


def channel_payload(cid: int, name: str = "general") -> dict[str, Any]:
    return {"id": str(cid), "type": 0, "guild_id": str(GUILD_ID), "name": name, "position": 0,
            "permission_overwrites": [], "nsfw": False, "parent_id": None, "topic": None,
            "last_message_id": None, "rate_limit_per_user": 0, "flags": 0}  # fmt: skip


def thread_payload(tid: int, parent: int, name: str) -> dict[str, Any]:
    return {"id": str(tid), "type": 11, "guild_id": str(GUILD_ID), "parent_id": str(parent),
            "owner_id": str(BOT_ID), "name": name, "last_message_id": None,
            "message_count": 0, "member_count": 1, "rate_limit_per_user": 0, "flags": 0,
            "total_message_sent": 0,
            "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                "archive_timestamp": NOW, "locked": False}}  # fmt: skip


def ready_payload() -> dict[str, Any]:
    return {"v": 10, "user": user_payload(BOT_ID, "repo-expert", bot=True),
            "guilds": [{"id": str(GUILD_ID), "unavailable": True}], "session_id": "s1",
            "resume_gateway_url": "wss://127.0.0.1", "shard": [0, 1],
            "application": {"id": str(APP_ID), "flags": 0}}  # fmt: skip


def guild_payload(channels: list[int]) -> dict[str, Any]:
    everyone = {"id": str(GUILD_ID), "name": "@everyone", "permissions": "2248473465835073",
                "position": 0, "color": 0, "hoist": False, "managed": False,
                "mentionable": False, "flags": 0}  # fmt: skip
    return {"id": str(GUILD_ID), "name": "Acme", "icon": None, "owner_id": "1",
            "roles": [everyone], "emojis": [], "stickers": [], "features": [],
            "member_count": 3, "large": False, "unavailable": False, "joined_at": NOW,
            "channels": [channel_payload(c, f"c{c}") for c in channels], "threads": [],
            "members": [], "voice_states": [], "presences": [], "premium_tier": 0,
            "mfa_level": 0, "verification_level": 0, "explicit_content_filter": 0,
            "default_message_notifications": 0, "system_channel_flags": 0,
            "preferred_locale": "en-US", "nsfw_level": 0, "afk_timeout": 300}  # fmt: skip


def message_payload(mid: int, channel: int, content: str, author: dict[str, Any],
                    mentions: list[dict[str, Any]] | None = None,
                    guild: bool = True) -> dict[str, Any]:  # fmt: skip
    data = {"id": str(mid), "channel_id": str(channel), "author": author, "content": content,
            "timestamp": NOW, "edited_timestamp": None, "tts": False,
            "mention_everyone": False, "mentions": mentions or [], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": False, "type": 0, "flags": 0,
            "components": []}  # fmt: skip
    if guild:
        data["guild_id"] = str(GUILD_ID)
        data["member"] = {"roles": [], "joined_at": NOW, "deaf": False, "mute": False,
                          "flags": 0}  # fmt: skip
    return data


def interaction_payload(iid: int, channel: dict[str, Any], user: dict[str, Any],
                        options: list[dict[str, Any]], kind: int = 2,
                        command: str = "ask") -> dict[str, Any]:  # fmt: skip
    return {"id": str(iid), "application_id": str(APP_ID), "type": kind, "token": f"tok{iid}",
            "version": 1, "guild_id": str(GUILD_ID), "channel_id": channel["id"],
            "channel": channel, "locale": "en-US", "guild_locale": "en-US",
            "app_permissions": "2248473465835073", "entitlements": [],
            "attachment_size_limit": 8388608, "context": 0,
            "authorizing_integration_owners": {"0": str(GUILD_ID)},
            "member": {"user": user, "roles": [], "joined_at": NOW, "deaf": False,
                       "mute": False, "flags": 0, "permissions": "2248473465835073"},
            "data": {"id": "7001", "name": command, "type": 1, "options": options}}  # fmt: skip


@dataclass
class Call:
    method: str
    path: str
    body: Any
    auth: str
    at: float = 0.0


class StubDiscordApi(LocalServer):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.failures: list[tuple[str, re.Pattern[str], int, dict[str, Any]]] = []
        self.channels: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(120000000000000000)
        # The gateway (a real websocket, for a bot in a process of its own): what it was told,
        # when it closed and how.
        self.guild_channels: list[int] = []
        self.members: set[int] = set()  # the users GET /guilds/{g}/members/{u} finds
        self.identified = asyncio.Event()
        self.gateway_closed = asyncio.Event()
        self.close_code: int | None = None
        self.closed_at = 0.0
        self._ws: web.WebSocketResponse | None = None
        self._seq = itertools.count(1)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    def fail(self, method: str, path: str, status: int, message: str = "Missing Permissions",
             code: int = 50013) -> None:  # fmt: skip
        self.failures.append((method, re.compile(path), status, {"message": message,
                                                                 "code": code}))  # fmt: skip

    def of(self, method: str, path: str) -> list[Any]:
        rx = re.compile(path)
        return [c.body for c in self.calls if c.method == method and rx.search(c.path)]

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{tail:.*}", self._handle)

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a gateway event (op 0) to the connected client."""
        assert self._ws is not None
        await self._ws.send_json({"op": 0, "t": event, "s": next(self._seq), "d": data})

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        """HELLO; IDENTIFY → READY and GUILD_CREATE; heartbeats acked; the close recorded."""
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": 41250}})
        async for msg in ws:
            payload = json.loads(msg.data)
            if payload.get("op") == 2:
                self.identified.set()
                await self.dispatch("READY", ready_payload())
                await self.dispatch("GUILD_CREATE", guild_payload(self.guild_channels))
            elif payload.get("op") == 1:
                await ws.send_json({"op": 11})
        self.close_code, self.closed_at = ws.close_code, time.monotonic()
        self.gateway_closed.set()
        return ws

    @staticmethod
    def _json(data: Any, status: int = 200) -> web.Response:
        return web.Response(body=json.dumps(data).encode(), status=status,
                            headers={"Content-Type": "application/json"})  # fmt: skip

    def _message(self, channel: int | str, body: dict[str, Any]) -> dict[str, Any]:
        bot = user_payload(BOT_ID, "repo-expert", bot=True)
        msg = message_payload(next(self._ids), int(channel), body.get("content") or "", bot,
                              guild=False)  # fmt: skip
        msg["embeds"] = body.get("embeds") or []
        return msg

    async def _handle(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["tail"]
        body: Any = await request.json() if request.can_read_body else None
        auth = request.headers.get("Authorization", "")
        self.calls.append(Call(request.method, path, body, auth, time.monotonic()))
        for method, rx, status, err in self.failures:
            if method == request.method and rx.search(path):
                return self._json(err, status)
        m = request.method
        if m == "GET" and (hit := re.fullmatch(r"/guilds/\d+/members/(\d+)", path)):
            uid = int(hit.group(1))
            if uid not in self.members:
                return self._json({"message": "Unknown Member", "code": 10007}, 404)
            return self._json({"user": user_payload(uid, f"u{uid}"), "roles": [],
                               "joined_at": NOW, "deaf": False, "mute": False,
                               "flags": 0})  # fmt: skip
        if m == "GET" and path == "/gateway/bot":
            limit = {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}
            return self._json({"url": f"ws://127.0.0.1:{self.port}/gateway", "shards": 1,
                               "session_start_limit": limit})  # fmt: skip
        if m == "GET" and path == "/users/@me":
            return self._json(user_payload(BOT_ID, "repo-expert", bot=True))
        if m == "GET" and path == "/oauth2/applications/@me":
            return self._json({"id": str(APP_ID), "name": "repo-expert", "icon": None,
                               "description": "", "bot_public": True,
                               "bot_require_code_grant": False, "verify_key": "k", "flags": 0,
                               "owner": user_payload(1, "owner")})  # fmt: skip
        if m == "PUT" and (hit := re.fullmatch(r"/applications/\d+/commands", path)):
            return self._json(
                [
                    {
                        **c,
                        "id": str(7000 + i),
                        "application_id": str(APP_ID),
                        "version": "1",
                        "default_member_permissions": None,
                        "type": c.get("type", 1),
                    }
                    for i, c in enumerate(body)
                ]
            )
        if m == "POST" and (hit := re.fullmatch(r"/channels/(\d+)/messages/(\d+)/threads", path)):
            tid = int(hit.group(2))  # as Discord does: a thread on a message has the message's id
            thread = thread_payload(tid, int(hit.group(1)), body["name"])
            self.channels[tid] = thread
            return self._json(thread, 201)
        if m in ("PUT", "DELETE") and re.fullmatch(r"/channels/\d+/messages/\d+/reactions/.+",
                                                 path):  # fmt: skip
            return web.Response(status=204)
        if m == "POST" and re.fullmatch(r"/channels/\d+/typing", path):
            return web.Response(status=204)
        if m == "POST" and (hit := re.fullmatch(r"/channels/(\d+)/messages", path)):
            return self._json(self._message(hit.group(1), body))
        if m == "PATCH" and (hit := re.fullmatch(r"/channels/(\d+)/messages/(\d+)", path)):
            msg = self._message(hit.group(1), body)
            msg["id"], msg["edited_timestamp"] = hit.group(2), NOW
            return self._json(msg)
        if m == "GET" and (hit := re.fullmatch(r"/channels/(\d+)", path)):
            ch = self.channels.get(int(hit.group(1)))
            return self._json(ch) if ch else self._json({"message": "Unknown Channel",
                                                          "code": 10003}, 404)  # fmt: skip
        if m == "POST" and (hit := re.fullmatch(r"/interactions/(\d+)/([^/]+)/callback", path)):
            data = body.get("data") or {}
            msg = self._message(0, data)
            flags = int(data.get("flags") or 0)
            return self._json({
                "interaction": {"id": hit.group(1), "type": 2, "response_message_id": msg["id"],
                                "response_message_loading": False,
                                "response_message_ephemeral": bool(flags & 64)},
                "resource": {"type": body["type"], "message": msg} if body["type"] == 4 else None,
            })  # fmt: skip
        if m == "POST" and re.fullmatch(r"/webhooks/\d+/[^/]+", path):
            return self._json(self._message(0, body))
        return self._json({"message": f"stub: no route {m} {path}", "code": 0}, 404)
