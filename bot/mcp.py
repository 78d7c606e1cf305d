"""``repo-expert serve mcp``: the instances as tools for coding agents, over the Model Context
Protocol, with the official SDK (``mcp``, :class:`MCPServer`).

Over stdio (the default) the agent that started the process is the caller: it may use the
instances ``mcp.instances`` of the settings file names (``"*"``: the public ones). Over
streamable HTTP (``--http HOST:PORT``, the endpoint ``/mcp``; ``/healthz``, ``/readyz`` and
``/metrics`` beside it, as every process has: core/ops/health.py) each request is
authenticated like the HTTP API's (``Authorization: Bearer KEY``, else 127.0.0.1 only) and sees
the instances of its key.

Tools — every result names the commit it was read at, so an agent can pin what it cites:

    list_instances()                                 names, descriptions, repositories, commits
    search(instance, query, collection?, k?, repo?)  numbered sources with permalinks and text
    ask(instance, question, conversation?)           the checked answer, as ``ask --json``
    read_source(instance, path, start_line?, end_line?)   an indexed file's lines at the commit
    feedback(turn, verdict)                          👍/👎 on an answer (``repo-expert feedback``)

A refusal or failure is a tool error with one line (the agent reads it); details go to the log
on stderr (stdout is the protocol's).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from core.errors import ConfigError
from core.ops.metrics import CONTENT_TYPE
from core.service import RepoExpert

from .gateway import Caller, Gateway, Rejected, authenticate, error_of
from .settings import ServeConfig

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "repo-expert answers questions about the code repositories listed by list_instances, "
    "citing numbered sources pinned to the indexed commit. Use search to find where something "
    "is (docs, code, issues), read_source to read a file's exact lines, ask for a written "
    "answer with citations. Cite sources by their permalink."
)

Instance = Annotated[str, Field(description="An instance name from list_instances")]


def _principal(gw: Gateway, ctx: Context, http: bool) -> Caller:
    if not http:
        return Caller("stdio", tuple(gw.config.mcp.instances))
    if not gw.config.api.keys:
        return Caller("local", ("*",))  # the ASGI guard let only local calls through
    headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
    return authenticate(gw.config, headers, None)


async def _call(what: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await what()
    except Exception as e:
        r = error_of(e)
        if r.status >= 500:
            log.error("mcp tool failed: %s", e, exc_info=not isinstance(e, Rejected))
        raise ToolError(f"{r.code}: {r.line}") from None


def build_server(gw: Gateway, http: bool = False) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("repo-expert", instructions=INSTRUCTIONS)

    @server.tool(description="List the repositories you can ask about: name, description, "
                 "repository URL and the commit each is indexed at.")  # fmt: skip
    async def list_instances(ctx: Context) -> dict[str, Any]:
        caller = _principal(gw, ctx, http)
        return {"instances": await _call(lambda: gw.list_instances(caller))}

    @server.tool(description="Find the passages of a repository's docs, code and issues that "
                 "match a query: numbered sources with path or issue, line range, title, "
                 "permalink at the indexed commit, score and text, and the further "
                 "passages of its file that match (lines, link).")  # fmt: skip
    async def search(
        instance: Instance,
        query: Annotated[str, Field(description="What to look for, in words or identifiers")],
        ctx: Context,
        collection: Annotated[
            Literal["docs", "code", "issues"] | None,
            Field(description="Only this collection (default: all three)"),
        ] = None,
        k: Annotated[int | None, Field(ge=1, le=50, description="How many sources")] = None,
        repo: Annotated[
            str | None,
            Field(description="Only this repository or scope (an instance over several)"),
        ] = None,
    ) -> dict[str, Any]:
        caller = _principal(gw, ctx, http)
        return await _call(lambda: gw.search(caller, instance, query, k, collection, repo))

    @server.tool(description="Ask a question about a repository: a written answer whose [n] "
                 "markers cite the numbered sources (permalinks at the indexed commit), as "
                 "`repo-expert ask --json` gives it. Pass the returned conversation to follow "
                 "up.")  # fmt: skip
    async def ask(
        instance: Instance,
        question: Annotated[str, Field(description="The question, in any language")],
        ctx: Context,
        conversation: Annotated[
            str | None, Field(description="The conversation of an earlier answer, to follow up")
        ] = None,
        repo: Annotated[
            str | None,
            Field(description="Only this repository or scope (an instance over several)"),
        ] = None,
    ) -> dict[str, Any]:
        caller = _principal(gw, ctx, http)
        return await _call(lambda: gw.ask(caller, "mcp", instance, question, conversation,
                                          repo=repo))  # fmt: skip

    @server.tool(description="Read lines of a docs or code file of a repository exactly as "
                 "indexed (at the indexed commit), with their permalink; at most 400 lines a "
                 "call (next_start_line says where to go on). Paths are relative to the "
                 "repository root.")  # fmt: skip
    async def read_source(
        instance: Instance,
        path: Annotated[str, Field(description="File path relative to the repository root")],
        ctx: Context,
        start_line: Annotated[int | None, Field(ge=1, description="First line (1-based)")] = None,
        end_line: Annotated[int | None, Field(ge=1, description="Last line (inclusive)")] = None,
    ) -> dict[str, Any]:
        caller = _principal(gw, ctx, http)
        return await _call(lambda: gw.read_source(caller, instance, path, start_line, end_line))

    @server.tool(description="Tell the maintainers whether an answer helped: verdict 'up' or "
                 "'down' on the turn an ask returned.")  # fmt: skip
    async def feedback(
        turn: Annotated[int, Field(description="The turn number an ask returned")],
        verdict: Literal["up", "down"],
        ctx: Context,
    ) -> dict[str, Any]:
        caller = _principal(gw, ctx, http)
        return await _call(lambda: gw.feedback(caller, turn, verdict))

    @server.custom_route("/healthz", methods=["GET"], include_in_schema=False)
    async def health(request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"ok": True})

    @server.custom_route("/readyz", methods=["GET"], include_in_schema=False)
    async def ready(request: Any) -> Any:
        from starlette.responses import JSONResponse

        ok, body = await gw.probe.readiness()
        return JSONResponse(body, status_code=200 if ok else 503)

    @server.custom_route("/metrics", methods=["GET"], include_in_schema=False)
    async def metrics(request: Any) -> Any:  # authenticated by guard(): ages of what it may use
        from starlette.responses import Response

        headers = {k.lower(): v for k, v in request.headers.items()}
        who = authenticate(gw.config, headers, request.client.host if request.client else None)
        text = await gw.probe.metrics_text(gw.visible(who))
        return Response(text, headers={"Content-Type": CONTENT_TYPE})

    return server


ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


def guard(app: ASGIApp, config: ServeConfig) -> ASGIApp:
    """Every HTTP request but ``/healthz`` and ``/readyz`` authenticated as the API's, before
    the MCP app."""

    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") not in ("/healthz", "/readyz"):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers") or []}  # fmt: skip
            client = scope.get("client")
            try:
                authenticate(config, headers, client[0] if client else None)
            except Rejected as r:
                from starlette.responses import JSONResponse

                body = {"error": {"code": r.code, "message": r.line}}
                await JSONResponse(body, status_code=r.status)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--http {text}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    return host.strip("[]"), int(port)


async def serve_mcp(app: RepoExpert, config: ServeConfig, http: str | None = None) -> None:
    """Serve over stdio until the client closes it, or over HTTP until cancelled."""
    address = parse_address(http) if http else None
    instances = app.load_instances()
    if not instances:
        raise ConfigError(f"{app.settings.instances_dir}: no instance files to serve")
    await app.preload()  # the tuned reader, where an instance re-reads with it
    store = await app.conversations(config.database_path(app.layout.conversations))
    try:
        gw = Gateway(app, store, config, instances)
        server = build_server(gw, http=address is not None)
        if address is None:
            log.info("mcp: serving %s over stdio", ", ".join(gw.visible(Caller("stdio",
                     tuple(config.mcp.instances)))) or "no instance")  # fmt: skip
            await server.run_stdio_async()
            return
        import uvicorn

        host, port = address
        asgi = guard(server.streamable_http_app(host=host), config)
        log.info("mcp: listening on http://%s:%d/mcp", host, port)
        web_server = uvicorn.Server(
            # log_config=None: uvicorn's loggers go through ours (redacted; text or JSON lines).
            uvicorn.Config(
                asgi, host=host, port=port, log_level="warning", lifespan="on", log_config=None
            )
        )
        try:
            await web_server.serve()
        except SystemExit:  # uvicorn's way of saying it could not start (logged above)
            raise ConfigError(f"--http {http}: cannot listen there (see the line above)") from None
    finally:
        await store.close()
