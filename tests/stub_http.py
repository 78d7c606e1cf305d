"""A local aiohttp server on 127.0.0.1 and a free port: the base of the platform stand-ins, and
how a test serves one of our own aiohttp apps (the webhook receiver, Slack's HTTP mode)."""

from __future__ import annotations

from aiohttp import web


class LocalServer:
    """Subclasses add routes in :meth:`routes`, or pass a ready ``app``; :meth:`start` binds a
    free port."""

    def __init__(self, app: web.Application | None = None) -> None:
        self._app = app
        self._runner: web.AppRunner | None = None
        self.port = 0

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def address(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        app = self._app
        if app is None:
            app = web.Application()
            self.routes(app)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
