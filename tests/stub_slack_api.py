"""A local stand-in for the Slack Web API, response_url hooks and the Socket Mode websocket.

It answers the methods the bot calls the way Slack does (``{"ok": true, ...}``, ``ts`` values
that grow), records every call with its parsed arguments, and can be told to fail a method with a
Slack error (``fail("reactions.add", "missing_scope", needed="reactions:write")``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from stub_http import LocalServer


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    reply: dict[str, Any] = field(default_factory=dict)  # what the stub answered


class StubSlackApi(LocalServer):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.responses: list[dict[str, Any]] = []  # bodies posted to response_url
        self.failures: dict[str, dict[str, Any]] = {}
        self._ts = 1_700_000_000.0
        self.socket_acks: list[dict[str, Any]] = []  # what the app sent back over the socket
        self.socket_open = asyncio.Event()
        self.socket_closed = asyncio.Event()  # the app closed its socket (close_code, closed_at)
        self.close_code: int | None = None
        self.closed_at = 0.0
        self._socket: web.WebSocketResponse | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def response_url(self, name: str = "r1") -> str:
        return f"http://127.0.0.1:{self.port}/respond/{name}"

    def fail(self, method: str, error: str, **extra: Any) -> None:
        self.failures[method] = {"ok": False, "error": error, **extra}

    def of(self, method: str) -> list[dict[str, Any]]:
        return [c.args for c in self.calls if c.method == method]

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/{method}", self._api)
        app.router.add_post("/respond/{name}", self._respond)
        app.router.add_get("/socket", self._websocket)

    def _next_ts(self) -> str:
        self._ts += 1
        return f"{self._ts:.6f}"

    async def _args(self, request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            args.update(await request.json())
        else:
            args.update(await request.post())
        for k in ("blocks", "attachments"):  # form-encoded JSON
            if isinstance(args.get(k), str):
                args[k] = json.loads(args[k])
        args["_auth"] = request.headers.get("Authorization", "")
        return args

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await self._args(request)
        call = Call(method, args)
        self.calls.append(call)
        if method in self.failures:
            return web.json_response(self.failures[method])
        body: dict[str, Any] = {"ok": True}
        if method == "auth.test":
            body |= {"url": "https://acme.slack.com/", "team": "Acme", "user": "repo-expert",
                     "team_id": "T1", "user_id": "UBOT", "bot_id": "BBOT"}  # fmt: skip
        elif method == "chat.postMessage":
            ts = self._next_ts()
            body |= {"channel": args.get("channel"), "ts": ts,
                     "message": {"text": args.get("text"), "ts": ts, "user": "UBOT",
                                 "thread_ts": args.get("thread_ts")}}  # fmt: skip
        elif method == "chat.update":
            body |= {"channel": args.get("channel"), "ts": args.get("ts"), "text": args.get("text")}
        elif method == "chat.postEphemeral":
            body |= {"message_ts": self._next_ts()}
        elif method == "apps.connections.open":
            body |= {"url": f"ws://127.0.0.1:{self.port}/socket"}
        call.reply = body
        return web.json_response(body)

    async def _respond(self, request: web.Request) -> web.Response:
        self.responses.append(await request.json())
        return web.Response(text="ok")

    async def push(self, envelope: dict[str, Any]) -> None:
        """Send a Socket Mode envelope (e.g. a slash command) to the connected app."""
        assert self._socket is not None
        await self._socket.send_json(envelope)

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._socket = ws
        await ws.send_json({"type": "hello", "num_connections": 1,
                            "connection_info": {"app_id": "A1"}})  # fmt: skip
        self.socket_open.set()
        async for msg in ws:
            self.socket_acks.append(json.loads(msg.data))
        self.close_code, self.closed_at = ws.close_code, time.monotonic()
        self.socket_closed.set()
        return ws
