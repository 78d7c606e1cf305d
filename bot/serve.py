"""``repo-expert serve slack|discord|all``: check everything, then connect and answer.

Before connecting it loads and validates every instance file (including the access rules: one
default instance per channel) and checks that the environment holds the tokens the chosen
platforms and modes need. Tokens are read from the environment only and never logged: errors
name the variable, never its value.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Literal

import aiohttp
import yarl
from aiohttp import web

from core.errors import ConfigError, RepoExpertError
from core.ops.health import Probe, start_health_server
from core.service import RepoExpert

from .common import ChatCore
from .settings import ServeConfig, SlackSettings

# Each platform's SDK is imported where it runs: `serve slack` needs only the slack extra.
if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from .slack import SlackBot

log = logging.getLogger(__name__)

Which = Literal["slack", "discord", "all"]


def slack_mode(s: SlackSettings, env: Mapping[str, str]) -> Literal["socket", "http"]:
    if s.mode != "auto":
        return s.mode
    if not env.get("SLACK_APP_TOKEN") and env.get("SLACK_SIGNING_SECRET"):
        return "http"
    return "socket"


def check_env(which: Which, config: ServeConfig, env: Mapping[str, str]) -> None:
    """Every variable the chosen platforms need is set (names in the error, never values)."""
    missing: list[str] = []
    if which in ("slack", "all"):
        if not env.get("SLACK_BOT_TOKEN"):
            missing.append("SLACK_BOT_TOKEN (the bot token, xoxb-…)")
        mode = slack_mode(config.slack, env)
        if mode == "socket" and not env.get("SLACK_APP_TOKEN"):
            missing.append(
                "SLACK_APP_TOKEN (an app-level token, xapp-…, for Socket Mode) or "
                "SLACK_SIGNING_SECRET (for HTTP mode)"
            )
        if mode == "http" and not env.get("SLACK_SIGNING_SECRET"):
            missing.append("SLACK_SIGNING_SECRET (HTTP mode verifies every request with it)")
        if mode == "socket" and env.get("SLACK_APP_TOKEN", "xapp-").split("-")[0] != "xapp":
            raise ConfigError("SLACK_APP_TOKEN is not an app-level token (it starts with xapp-)")
    if which in ("discord", "all") and not env.get("DISCORD_TOKEN"):
        missing.append("DISCORD_TOKEN (the bot token of your Discord application)")
    if missing:
        raise ConfigError("missing environment variables:\n  " + "\n  ".join(missing))


def health_port(
    which: Which, config: ServeConfig, env: Mapping[str, str], given: int | None
) -> int | None:
    """The health server's port: ``--health-port``, else ``health.port``, else ``$PORT`` —
    unless Slack's HTTP mode serves the routes on its own server (then only an explicit one)."""
    if given or config.health.port:
        return given or config.health.port
    slack_http = which in ("slack", "all") and slack_mode(config.slack, env) == "http"
    return None if slack_http or not env.get("PORT") else int(env["PORT"])


async def serve(
    which: Which,
    app: RepoExpert,
    config: ServeConfig,
    env: Mapping[str, str] | None = None,
    health: int | None = None,
) -> None:
    """Until cancelled (SIGTERM: ``core/cli`` cancels; the answers in progress drain)."""
    env = os.environ if env is None else env
    instances = app.load_instances()
    if not instances:
        raise ConfigError(f"{app.settings.instances_dir}: no instance files to serve")
    check_env(which, config, env)
    await app.preload()  # the tuned reader, where an instance re-reads with it
    # The SQLite file, or the shared database's tables when the store is PostgreSQL.
    store = await app.conversations(config.database_path(app.layout.conversations))
    runner: web.AppRunner | None = None
    try:
        core = ChatCore(app, store, config, instances)
        probe = Probe(app, sorted(instances), core.metrics)
        probe.check("conversations store", lambda: store.thread_instance("health", "-"))
        port = health_port(which, config, env, health)
        if port is not None:
            runner = await start_health_server(probe, config.health.host, port)
        cold = [n for n in instances if not await app.has_index(n)]
        if cold:
            log.warning("not indexed yet (the first question builds it): %s", ", ".join(cold))
        runs: list[Awaitable[None]] = []
        if which in ("slack", "all"):
            runs.append(run_slack(core, config.slack, env, probe=probe))
        if which in ("discord", "all"):
            runs.append(run_discord(core, config, env, probe=probe))
        await asyncio.gather(*runs)
    finally:
        if runner is not None:
            await runner.cleanup()
        await store.close()


async def run_slack(
    core: ChatCore,
    s: SlackSettings,
    env: Mapping[str, str],
    client: AsyncWebClient | None = None,
    probe: Probe | None = None,
) -> None:
    """Until cancelled. ``client``: the Web API client (default: ``slack.api_url`` with the bot
    token). Cancelled (shutdown): no new events are taken (the socket is closed, or the HTTP
    server stops), the answers in progress get ``drain_seconds`` to finish."""
    probe = probe or Probe(core.app, sorted(core.access.instances), core.metrics)
    probe.waiting("slack")
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_sdk.errors import SlackApiError

    from .slack import SlackBot

    mode = slack_mode(s, env)
    token, secret = env["SLACK_BOT_TOKEN"], env.get("SLACK_SIGNING_SECRET")
    bot = SlackBot.create(core, s, token, secret, client=client)
    try:
        who = await bot.client.auth_test()
    except SlackApiError as e:
        raise ConfigError(f"Slack refused SLACK_BOT_TOKEN: {e.response.get('error')}") from None
    except (aiohttp.ClientError, OSError) as e:
        raise RepoExpertError(f"cannot reach Slack: {e}") from None
    log.info("slack: signed in as %s in %s; %s mode", who.get("user"), who.get("team"), mode)
    grace = core.config.drain_seconds
    if mode == "socket":
        handler = AsyncSocketModeHandler(bot.app, env["SLACK_APP_TOKEN"])
        try:
            await handler.connect_async()
            probe.up("slack")
            await asyncio.Event().wait()
        finally:
            probe.down("slack")
            await handler.close_async()  # the socket closes first: no new events
            log.info("slack: Socket Mode connection closed")
            await bot.drain(grace)
    else:
        port = s.port or int(env.get("PORT") or 3000)
        runner = web.AppRunner(http_app(bot, s, port, probe))
        await runner.setup()
        try:
            await web.TCPSite(runner, s.host, port).start()
            log.info("slack: listening on http://%s:%d%s", s.host, port, s.path)
            probe.up("slack")
            await asyncio.Event().wait()
        finally:
            probe.down("slack")
            await bot.drain(grace)  # new events are refused meanwhile (``Background``)
            await runner.cleanup()


def http_app(
    bot: SlackBot, s: SlackSettings, port: int, probe: Probe | None = None
) -> web.Application:
    """Slack's HTTP mode: Bolt's events endpoint, and ``/healthz``, ``/readyz``, ``/metrics``
    as every HTTP face has (core/ops/health.py)."""
    core = bot.core
    probe = probe or Probe(core.app, sorted(core.access.instances), core.metrics)
    app = bot.app.web_app(path=s.path, port=port)
    probe.add_routes(app)
    return app


async def run_discord(
    core: ChatCore, config: ServeConfig, env: Mapping[str, str], probe: Probe | None = None
) -> None:
    import discord

    from .discord import DiscordBot

    # discord.py keeps the REST base and the gateway on its classes: one client per process.
    discord.http.Route.BASE = config.discord.api_url.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(config.discord.gateway_url)
    bot = DiscordBot(core, config.discord, probe=probe)
    async with bot:
        try:
            await bot.start(env["DISCORD_TOKEN"])
        except (aiohttp.ClientError, OSError) as e:
            raise RepoExpertError(f"cannot reach Discord: {e}") from None
        except discord.LoginFailure:
            raise ConfigError("Discord refused DISCORD_TOKEN") from None
        except discord.PrivilegedIntentsRequired:
            raise ConfigError(
                "Discord refused the Message Content intent: enable it for the bot in the "
                "Developer Portal, or set discord.thread_replies: false in the serve settings"
            ) from None
        finally:
            await bot.drain(config.drain_seconds)
