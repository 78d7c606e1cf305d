"""``/healthz``, ``/readyz`` and ``/metrics`` for every long-running process.

* ``GET /healthz`` — liveness: ``{"ok": true}`` while the event loop answers. Nothing else is
  checked, so a restart is never triggered by a slow database.
* ``GET /readyz`` — readiness: 200 ``{"ready": true, "instances": N, "indexed": M,
  "problems": []}`` when instances are loaded, the index store (and the conversations store, for
  the bots) answers, and every platform connection is up (Slack signed in, Socket Mode or the
  Discord gateway connected); else 503 with one line per problem. Counts only, never instance
  names (the endpoint needs no key). Not indexed yet is not a problem: the first question
  builds the index.
* ``GET /metrics`` — the Prometheus text (``metrics.py``), with each instance's index age.

Processes with an HTTP server of their own (``serve api``, ``serve webhooks``, Slack's HTTP mode,
``serve mcp --http``) serve these routes there; the others (Slack Socket Mode, Discord,
``sync --watch``) start :func:`start_health_server` on ``--health-port`` (or the serve
settings' ``health.port``, else ``$PORT`` when set).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from core.config import redact
from core.ops.metrics import CONTENT_TYPE, Metrics, index_ages
from core.service import RepoExpert

if TYPE_CHECKING:  # aiohttp is imported where a route or server runs: MCP's extra has none
    from aiohttp import web

log = logging.getLogger(__name__)

Check = Callable[[], Awaitable[object]]
CHECK_SECONDS = 5.0


class Probe:
    """What the health routes of one process read. Faces register what they wait for
    (:meth:`waiting`, then :meth:`up` / :meth:`down`) and the stores they use (:meth:`check`)."""

    def __init__(self, app: RepoExpert, names: list[str], metrics: Metrics | None = None) -> None:
        self.app, self.names = app, list(names)
        self.metrics = metrics or Metrics()
        self._checks: list[tuple[str, Check]] = []
        self._connected: dict[str, bool] = {}

    def check(self, what: str, probe: Check) -> None:
        self._checks.append((what, probe))

    def waiting(self, what: str) -> None:
        self._connected.setdefault(what, False)

    def up(self, what: str) -> None:
        self._connected[what] = True

    def down(self, what: str) -> None:
        self._connected[what] = False

    async def readiness(self) -> tuple[bool, dict[str, object]]:
        problems = [f"{what}: not connected" for what, ok in self._connected.items() if not ok]
        if not self.names:
            problems.append("no instances loaded")
        indexed = 0
        try:
            for n in self.names:
                indexed += await asyncio.wait_for(self.app.has_index(n), CHECK_SECONDS)
        except Exception as e:  # what the store says is the line (no secret: redacted)
            problems.append(f"index store: {_line(e)}")
        for what, probe in self._checks:
            try:
                await asyncio.wait_for(probe(), CHECK_SECONDS)
            except Exception as e:
                problems.append(f"{what}: {_line(e)}")
        body = {"ready": not problems, "instances": len(self.names), "indexed": indexed,
                "problems": problems}  # fmt: skip
        return not problems, body

    async def metrics_text(self, names: list[str] | None = None) -> bytes:
        """The metrics, with the index age of ``names`` (default: every instance)."""
        try:
            ages = await index_ages(self.app, self.names if names is None else names)
        except Exception as e:  # a scrape still gets the counters
            log.warning("metrics: index age unavailable: %s", _line(e))
            ages = {}
        return self.metrics.render(ages)

    # -- the routes --------------------------------------------------------------------------
    async def healthz(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response({"ok": True})

    async def readyz(self, request: web.Request) -> web.Response:
        from aiohttp import web

        ok, body = await self.readiness()
        return web.json_response(body, status=200 if ok else 503)

    async def metrics_route(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(body=await self.metrics_text(),
                            headers={"Content-Type": CONTENT_TYPE})  # fmt: skip

    def add_routes(self, app: web.Application, metrics: bool = True) -> None:
        """``/healthz`` and ``/readyz`` (and ``/metrics`` unless the app serves its own)."""
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        if metrics:
            app.router.add_get("/metrics", self.metrics_route)


def _line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return redact(text)[:200]


async def start_health_server(probe: Probe, host: str, port: int) -> web.AppRunner:
    """The small server of a process without one: the three routes on ``host:port``."""
    from aiohttp import web

    app = web.Application()
    probe.add_routes(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as e:
        await runner.cleanup()
        from core.errors import ConfigError

        why = os.strerror(e.errno) if e.errno else str(e)
        raise ConfigError(f"health server: cannot listen on {host}:{port}: {why}") from None
    log.info("health: /healthz /readyz /metrics on http://%s:%d", host, port)
    return runner
