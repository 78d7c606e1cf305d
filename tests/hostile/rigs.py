"""What the hostile tests share: the bots over their wire stand-ins (Slack: signed requests into
the real Bolt app, its Web API client talking HTTP to ``stub_slack_api``; Discord: discord.py
logged in against ``stub_discord_api`` and fed gateway payloads), the CLI in a subprocess on the
fake embedder (``fake_cli.py``), and the checks many tests make (one line, no traceback)."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from stub_bot_core import GENERAL, add_instances
from stub_discord_api import (
    BOT_ID,
    StubDiscordApi,
    channel_payload,
    guild_payload,
    interaction_payload,
    message_payload,
    ready_payload,
    user_payload,
)
from stub_slack_api import StubSlackApi

from bot.common import ChatCore
from bot.discord import DiscordBot
from bot.settings import DiscordSettings, ServeConfig, SlackSettings
from bot.slack import SlackBot
from core.store.conversations import ConversationStore

ROOT = Path(__file__).parents[2]
FAKE_CLI = Path(__file__).parent / "fake_cli.py"
SLACK_SECRET, SLACK_TOKEN = "test-signing-secret", "xoxb-test-token"
ANA = user_payload(110000000000000042, "ana")
_ids = itertools.count(140000000000000000)


# -- the command line ----------------------------------------------------------------------------
def cli(inst: Path, data: Path, *args: str, timeout: float = 60, real: bool = False,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``repo-expert --instances INST --data DATA ARGS`` in a subprocess (the fake embedder unless
    ``real``); a hang fails the test (``timeout``)."""
    entry = ["-m", "core.cli"] if real else [str(FAKE_CLI)]
    return subprocess.run(
        [sys.executable, *entry, "--instances", str(inst), "--data", str(data), *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT, env=env,
    )  # fmt: skip


def one_line(r: subprocess.CompletedProcess[str], *names: str) -> str:
    """rc 2, no traceback, one line on stderr that starts ``repo-expert:`` and names each of
    ``names`` (a file, a key, an argument); returns it."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("repo-expert: "), r.stderr[-3000:]
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# -- Slack -------------------------------------------------------------------------------------
def signed(body: str, content_type: str, secret: str = SLACK_SECRET,
           headers: dict[str, str] | None = None) -> AsyncBoltRequest:  # fmt: skip
    ts = str(int(time.time()))
    sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    h: dict[str, str | Sequence[str]] = {
        "content-type": [content_type], "x-slack-signature": [sig or ""],
        "x-slack-request-timestamp": [ts], **{k: [v] for k, v in (headers or {}).items()},
    }  # fmt: skip
    return AsyncBoltRequest(body=body, headers=h)


class SlackRig:
    """The Slack bot of the ``sample`` app (instances with access rules) on the stub Web API."""

    def __init__(self, sample: dict[str, Any], stub: StubSlackApi, store: ConversationStore):
        self.sample, self.stub, self.store, self.app = sample, stub, store, sample["app"]
        self.bot = self.make_bot()

    def make_bot(self, config: ServeConfig | None = None, **slack: Any) -> SlackBot:
        core = ChatCore(self.app, self.store, config or ServeConfig())
        client = AsyncWebClient(token=SLACK_TOKEN, base_url=self.stub.base_url)
        self.bot = SlackBot.create(core, SlackSettings(**slack), SLACK_TOKEN, SLACK_SECRET,
                                   client=client)  # fmt: skip
        return self.bot

    def command_body(self, text: str, trigger: str = "1.2.3", user: str = "U1") -> str:
        return urlencode({
            "token": "legacy", "team_id": "T1", "team_domain": "acme", "channel_id": "CGEN",
            "channel_name": "general", "user_id": user, "user_name": "ana", "command": "/repo",
            "text": text, "api_app_id": "A1", "trigger_id": trigger,
            "response_url": self.stub.response_url(),
        })  # fmt: skip

    def command(self, text: str, trigger: str = "1.2.3", **headers: str) -> AsyncBoltRequest:
        return signed(self.command_body(text, trigger), "application/x-www-form-urlencoded",
                      headers=headers)  # fmt: skip

    def mention(self, text: str, ts: str, event_id: str | None = None,
                **headers: str) -> AsyncBoltRequest:  # fmt: skip
        ev = {"type": "app_mention", "user": "U1", "text": f"<@UBOT> {text}", "ts": ts,
              "channel": "CGEN", "team": "T1", "event_ts": ts}  # fmt: skip
        body = {"token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
                "event": ev, "event_id": event_id or f"Ev{ts}", "event_time": int(time.time()),
                "authorizations": [{"team_id": "T1", "user_id": "UBOT",
                                    "is_bot": True}]}  # fmt: skip
        return signed(json.dumps(body), "application/json", headers=headers)

    async def send(self, req: AsyncBoltRequest) -> Any:
        return await asyncio.wait_for(self.bot.app.async_dispatch(req), 5)

    async def settle(self) -> None:
        await asyncio.wait_for(self.bot.drain(), 20)

    def posted_texts(self) -> list[str]:
        """Every string the bot sent to Slack for display: texts and all strings in blocks."""
        out: list[str] = []
        for c in self.stub.calls:
            if c.method.startswith("chat."):
                out.append(str(c.args.get("text") or ""))
                out.extend(strings(c.args.get("blocks") or []))
        out.extend(str(r.get("text") or "") for r in self.stub.responses)
        return out


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


async def slack_rig(sample: dict[str, Any]) -> tuple[SlackRig, StubSlackApi]:
    add_instances(sample)
    stub = StubSlackApi()
    await stub.start()
    store = await ConversationStore.open(sample["tmp"] / "conversations.sqlite")
    return SlackRig(sample, stub, store), stub


async def close_slack(rig: SlackRig) -> None:
    await rig.bot.drain()
    await rig.store.close()
    await rig.stub.stop()


# -- Discord -----------------------------------------------------------------------------------
class DiscordRig:
    """discord.py logged in against the stub REST API, fed gateway payloads (``Route.BASE`` is
    pointed at the stub by the caller)."""

    def __init__(self, sample: dict[str, Any], stub: StubDiscordApi, store: ConversationStore):
        self.sample, self.stub, self.store, self.app = sample, stub, store, sample["app"]
        self.bot: DiscordBot | None = None

    async def start(self) -> DiscordBot:
        core = ChatCore(self.app, self.store, ServeConfig())
        self.bot = DiscordBot(core, DiscordSettings(), guild_ready_timeout=0.01)
        await self.bot.login("discord-test-token")
        state: Any = self.bot._connection
        state.parse_ready(ready_payload())
        state.parse_guild_create(guild_payload([GENERAL]))
        await asyncio.wait_for(self.bot.wait_until_ready(), 5)
        return self.bot

    def say(self, content: str) -> int:
        mid = next(_ids)
        bot = user_payload(BOT_ID, "repo-expert", bot=True)
        payload = message_payload(mid, GENERAL, f"<@{BOT_ID}> {content}", ANA, [bot])
        self.bot._connection.parse_message_create(payload)  # type: ignore[union-attr]
        return mid

    def slash(self, question: str, instance: str | None = None) -> None:
        opts: list[dict[str, Any]] = [{"name": "question", "type": 3, "value": question}]
        if instance is not None:
            opts.append({"name": "instance", "type": 3, "value": instance})
        payload = interaction_payload(next(_ids), channel_payload(GENERAL), ANA, opts)
        self.bot._connection.parse_interaction_create(payload)  # type: ignore[union-attr]

    async def settle(self) -> None:
        assert self.bot is not None
        for _ in range(2):
            await asyncio.sleep(0)
            pending = [t for t in asyncio.all_tasks() if not t.done()
                       and t.get_name().startswith(("discord.py: ", "CommandTree"))]  # fmt: skip
            if pending:
                await asyncio.wait(pending, timeout=8)
            await asyncio.wait_for(self.bot.drain(), 20)

    def posts(self) -> list[dict[str, Any]]:
        """Every message body the bot sent or edited (channels, interactions, webhooks)."""
        out = []
        for c in self.stub.calls:
            if c.method in ("POST", "PATCH") and isinstance(c.body, dict):
                body = c.body.get("data") if "/callback" in c.path else c.body
                if isinstance(body, dict) and ("content" in body or "embeds" in body):
                    out.append(body)
        return out


MARKUP = re.compile(r"<[^<>]*>")


def live_slack_markup(text: str) -> list[str]:
    """The ``<…>`` sequences Slack would act on in ``text`` (mentions, links, commands)."""
    return MARKUP.findall(text)
