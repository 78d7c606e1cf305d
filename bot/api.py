"""``repo-expert serve api``: the HTTP API and the web page, on aiohttp (like the webhook
receiver and Slack's HTTP mode: one server stack).

    GET  /                  the web page (bot/web/: one static page, no build step, offline)
    GET  /healthz           {"ok": true} — no key needed
    GET  /readyz            readiness (core/ops/health.py): 200 or 503 — no key needed
    GET  /openapi.json      the OpenAPI document of all of this — no key needed
    GET  /metrics           Prometheus text (core/ops/metrics.py); index age of the key's instances
    GET  /v1/instances      the instances this caller may use, with their indexed commit
    POST /v1/search         {"instance", "query", "k"?, "collection"?, "repo"?} → numbered sources
    POST /v1/ask            {"instance", "question", "conversation"?, "stream"?, "repo"?,
                            "default_repo"?} → the answer as
                            ``ask --json`` prints it, plus conversation and turn; "stream": true
                            → server-sent events: ``text`` (the reply so far, while a model
                            writes), then ``answer`` (the checked answer) or ``error``
    POST /v1/feedback       {"turn", "verdict": "up" | "down"}

Who may call is :func:`bot.gateway.authenticate` (API keys from the settings file, else
127.0.0.1 only). Bodies are capped at ``api.max_body_bytes``, questions at
``api.max_question_chars``; every error is ``{"error": {"code", "message"}}`` with one line,
never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from core.config import Instance
from core.errors import ConfigError
from core.ops.metrics import CONTENT_TYPE, Metrics
from core.service import OnText, RepoExpert

from .gateway import Caller, Gateway, Platform, Rejected, authenticate, error_of
from .openapi import document
from .settings import ServeConfig

log = logging.getLogger(__name__)

WEB = Path(__file__).parent / "web"
PAGE_FILES = {"/": ("index.html", "text/html"), "/app.js": ("app.js", "text/javascript"),
              "/app.css": ("app.css", "text/css")}  # fmt: skip
# The page loads nothing from anywhere else, and nothing may frame it.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
FIELDS = {
    "search": {"instance", "query", "k", "collection", "repo"},
    "ask": {"instance", "question", "conversation", "stream", "repo", "default_repo"},
    "feedback": {"turn", "verdict"},
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(r: Rejected) -> web.Response:
    return web.json_response({"error": {"code": r.code, "message": r.line}}, status=r.status)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


class ApiServer:
    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        self.config = gateway.config
        self.metrics: Metrics = gateway.metrics
        self.page = {route: ((WEB / f).read_bytes(), ctype) for route, (f, ctype) in
                     PAGE_FILES.items()}  # fmt: skip

    def web_app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.config.api.max_body_bytes,
            middlewares=[self._observe, self._errors],
        )
        r = app.router
        for route in self.page:
            r.add_get(route, self.static)
        r.add_get("/healthz", self.health)
        r.add_get("/readyz", self.gw.probe.readyz)
        r.add_get("/openapi.json", self.openapi)
        r.add_get("/metrics", self.metrics_text)
        r.add_get("/v1/instances", self.instances)
        r.add_post("/v1/search", self.search)
        r.add_post("/v1/ask", self.ask)
        r.add_post("/v1/feedback", self.feedback)
        return app

    # -- middleware --------------------------------------------------------------------------
    @web.middleware
    async def _observe(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        t = time.perf_counter()
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        finally:
            info = request.match_info.route.resource
            route = info.canonical if info is not None else "other"
            self.metrics.http_requests.labels(route, request.method, str(status)).inc()
            self.metrics.http_seconds.labels(route).observe(time.perf_counter() - t)

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            resp = await handler(request)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            code = _HTTP_CODES.get(e.status, "bad_request" if e.status < 500 else "internal")
            line = {404: f"no route {request.path}",
                    405: f"{request.method} is not allowed on {request.path}",
                    413: f"the body is larger than {self.config.api.max_body_bytes} bytes",
                    }.get(e.status, e.reason)  # fmt: skip
            resp = error_response(Rejected(code, e.status, line))
        except Exception as e:
            r = error_of(e)
            if r.status >= 500:
                log.error("%s %s failed: %s", request.method, request.path, e,
                          exc_info=not isinstance(e, Rejected))  # fmt: skip
            resp = error_response(r)
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("Referrer-Policy", "no-referrer")
        return resp

    # -- helpers -----------------------------------------------------------------------------
    def caller(self, request: web.Request) -> Caller:
        headers = {k.lower(): v for k, v in request.headers.items()}
        return authenticate(self.config, headers, request.remote)

    async def body(self, request: web.Request, kind: str) -> dict[str, Any]:
        limit = self.config.api.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise Rejected("too_large", 413, f"the body is larger than {limit} bytes")
        raw = await request.read()  # aiohttp refuses more than client_max_size (413)
        try:
            data = json.loads(raw or b"")
        except (ValueError, UnicodeDecodeError):
            raise Rejected("invalid_json", 400, "the body is not JSON") from None
        if not isinstance(data, dict):
            raise Rejected("invalid_json", 400, "the body must be a JSON object")
        unknown = sorted(set(data) - FIELDS[kind])
        if unknown:
            raise Rejected("bad_request", 400, f"unknown field {unknown[0]!r}; this endpoint "
                           f"takes {', '.join(sorted(FIELDS[kind]))}")  # fmt: skip
        return data

    # -- routes ------------------------------------------------------------------------------
    async def static(self, request: web.Request) -> web.Response:
        body, ctype = self.page[request.path]
        headers = {"Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-cache"}
        return web.Response(body=body, content_type=ctype, charset="utf-8", headers=headers)

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(document(self.config))

    async def metrics_text(self, request: web.Request) -> web.Response:
        """The metrics, with the index age of the instances this caller may use only."""
        text = await self.gw.probe.metrics_text(self.gw.visible(self.caller(request)))
        return web.Response(body=text, headers={"Content-Type": CONTENT_TYPE})

    async def instances(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        return web.json_response({"instances": await self.gw.list_instances(caller)})

    async def search(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        b = await self.body(request, "search")
        out = await self.gw.search(caller, b.get("instance"), b.get("query"), b.get("k"),
                                   b.get("collection"), b.get("repo"))  # fmt: skip
        return web.json_response(out)

    async def feedback(self, request: web.Request) -> web.Response:
        caller = self.caller(request)
        b = await self.body(request, "feedback")
        return web.json_response(await self.gw.feedback(caller, b.get("turn"), b.get("verdict")))

    async def ask(self, request: web.Request) -> web.StreamResponse:
        caller = self.caller(request)
        b = await self.body(request, "ask")
        web_page = request.headers.get("X-Repo-Expert-Client") == "web"
        platform: Platform = "web" if web_page else "api"
        instance, question = b.get("instance"), b.get("question")

        def run(on_text: OnText | None = None) -> Awaitable[dict[str, Any]]:
            return self.gw.ask(caller, platform, instance, question, b.get("conversation"),
                               on_text=on_text, repo=b.get("repo"),
                               default_repo=b.get("default_repo"))  # fmt: skip

        if not b.get("stream"):
            return web.json_response(await run())
        # Checked before the stream starts, so these are plain JSON errors with their status.
        inst = self.gw.instance(caller, instance)
        self.gw.text(question, "question")
        self.gw.app.check_repo(inst, self.gw.repo(b.get("repo")))
        self.gw.app.check_repo(inst, self.gw.repo(b.get("default_repo")))
        return await self._stream(request, run)

    async def _stream(
        self, request: web.Request, run: Callable[[OnText], Awaitable[dict[str, Any]]]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # a proxy must pass the events on as they come
        })  # fmt: skip
        await resp.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            line = json.dumps(data, ensure_ascii=False)
            await resp.write(f"event: {event}\ndata: {line}\n\n".encode())

        # The model's callback only records the latest text; one task sends it, so a slow
        # client never holds the model up (text arriving meanwhile: the latest wins).
        latest: list[str] = []
        changed = asyncio.Event()
        done = False

        async def on_text(text: str) -> None:
            latest[:] = [text]
            changed.set()

        async def pump() -> None:
            sent = None
            while True:
                await changed.wait()
                changed.clear()
                if latest and latest[0] != sent:
                    sent = latest[0]
                    await send("text", {"text": sent})
                if done:
                    return

        pumping = asyncio.create_task(pump())
        failure: dict[str, Any] = {}
        try:
            out = await run(on_text)
        except Exception as e:
            out = None
            r = error_of(e)
            if r.status >= 500:
                log.error("streamed ask failed: %s", e, exc_info=not isinstance(e, Rejected))
            failure = {"error": {"code": r.code, "message": r.line}}
        finally:
            done = True
            changed.set()
            with contextlib.suppress(Exception):
                await pumping
        try:
            await (send("answer", out) if out is not None else send("error", failure))
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            log.info("the client left before the answer was sent")
        return resp


async def serve_api(
    app: RepoExpert, config: ServeConfig, host: str = "0.0.0.0", port: int | None = None
) -> None:
    """Listen until cancelled (validates every instance first)."""
    instances: dict[str, Instance] = app.load_instances()
    if not instances:
        raise ConfigError(f"{app.settings.instances_dir}: no instance files to serve")
    await app.preload()  # the tuned reader, where an instance re-reads with it
    port = port or int(os.environ.get("PORT") or 8000)
    store = await app.conversations(config.database_path(app.layout.conversations))
    runner = web.AppRunner(ApiServer(Gateway(app, store, config, instances)).web_app())
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None
        who = f"{len(config.api.keys)} API keys" if config.api.keys else "127.0.0.1 only (no keys)"
        log.info("api: listening on http://%s:%d (the page at /; %s)", host, port, who)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await store.close()
