"""The Slack adapter through the real Bolt app and Web API client, over the wire.

Signed requests (slash command, app_mention / message events, block actions) go through
``AsyncApp.async_dispatch``; the app's ``AsyncWebClient`` talks HTTP to a local stand-in for the
Slack Web API (tests/stub_slack_api.py). The core is the ``sample`` RepoExpert (a real index on
the fake embedder).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Sequence
from itertools import count, pairwise
from typing import Any
from urllib.parse import parse_qsl, urlencode

import aiohttp
import pytest
import pytest_asyncio
from prom import value
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from stub_bot_core import (
    GatedAnswerer,
    RecordingAnswerer,
    StreamingAnswerer,
    add_instances,
    section_texts,
)
from stub_http import LocalServer
from stub_slack_api import StubSlackApi

from bot.common import ChatCore
from bot.messages import WRITING
from bot.serve import http_app, run_slack
from bot.settings import ServeConfig, SlackSettings
from bot.slack import SlackBot
from core.answer.extractive import ExtractiveAnswerer
from core.cli import parser
from core.cli.commands import cmd_feedback
from core.models import Turn
from core.store.conversations import ConversationStore

SECRET = "test-signing-secret"
_triggers = count(1)


def trigger() -> str:
    """A new trigger_id, as Slack gives every invocation (the bot handles each one once)."""
    return f"1.2.{next(_triggers)}"


TOKEN = "xoxb-test-token"


class World:
    def __init__(self, sample: dict[str, Any], stub: StubSlackApi, store: ConversationStore):
        self.sample, self.stub, self.store = sample, stub, store
        self.app = sample["app"]
        self.recorder = RecordingAnswerer(ExtractiveAnswerer())
        self.app.answerer = self.recorder
        self.bot: SlackBot | None = None

    def make_bot(self, config: ServeConfig | None = None, **slack: Any) -> SlackBot:
        config = config or ServeConfig()
        core = ChatCore(self.app, self.store, config)
        client = AsyncWebClient(token=TOKEN, base_url=self.stub.base_url)
        self.bot = SlackBot.create(core, SlackSettings(**slack), TOKEN, SECRET, client=client)
        return self.bot

    async def send(self, req: AsyncBoltRequest, bot: SlackBot | None = None) -> Any:
        bot = bot or self.bot
        assert bot is not None
        resp = await asyncio.wait_for(bot.app.async_dispatch(req), 3)
        return resp

    async def settle(self) -> None:
        assert self.bot is not None
        await asyncio.wait_for(self.bot.drain(), 8)


@pytest_asyncio.fixture
async def world(sample: dict[str, Any]) -> Any:
    add_instances(sample)
    stub = StubSlackApi()
    await stub.start()
    store = await ConversationStore.open(sample["tmp"] / "conversations.sqlite")
    w = World(sample, stub, store)
    w.make_bot()
    yield w
    if w.bot is not None:
        await w.bot.drain()
    await store.close()
    await w.app.close()
    await stub.stop()


def signed(body: str, content_type: str, secret: str = SECRET) -> AsyncBoltRequest:
    ts = str(int(time.time()))
    sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    headers: dict[str, str | Sequence[str]] = {
        "content-type": [content_type], "x-slack-signature": [sig or ""],
        "x-slack-request-timestamp": [ts],
    }  # fmt: skip
    return AsyncBoltRequest(body=body, headers=headers)


def command_body(w: World, text: str, channel: str = "CGEN", user: str = "U1",
                 team: str = "T1") -> str:  # fmt: skip
    return urlencode({
        "token": "legacy", "team_id": team, "team_domain": "acme", "channel_id": channel,
        "channel_name": "general", "user_id": user, "user_name": user.lower(),
        "command": "/repo", "text": text, "api_app_id": "A1", "trigger_id": trigger(),
        "response_url": w.stub.response_url(),
    })  # fmt: skip


def command(w: World, text: str, **kw: str) -> AsyncBoltRequest:
    return signed(command_body(w, text, **kw), "application/x-www-form-urlencoded")


def event(kind: str, text: str, ts: str, channel: str = "CGEN", user: str = "U1",
          thread_ts: str | None = None, team: str = "T1",
          channel_type: str = "channel", **extra: Any) -> AsyncBoltRequest:  # fmt: skip
    ev: dict[str, Any] = {"type": kind, "user": user, "text": text, "ts": ts,
                          "channel": channel, "team": team, "event_ts": ts, **extra}  # fmt: skip
    if kind == "message":
        ev["channel_type"] = channel_type
    if thread_ts:
        ev["thread_ts"] = thread_ts
    body = {"token": "legacy", "team_id": team, "api_app_id": "A1", "type": "event_callback",
            "event": ev, "event_id": f"Ev{ts}", "event_time": int(time.time()),
            "authorizations": [{"team_id": team, "user_id": "UBOT", "is_bot": True}]}  # fmt: skip
    return signed(json.dumps(body), "application/json")


def mention(text: str, ts: str, **kw: Any) -> AsyncBoltRequest:
    return event("app_mention", f"<@UBOT> {text}", ts, **kw)


def button(action_id: str, value: str, user: str = "U2", channel: str = "CGEN",
           thread_ts: str = "1.0") -> AsyncBoltRequest:  # fmt: skip
    payload = {
        "type": "block_actions", "team": {"id": "T1", "domain": "acme"},
        "user": {"id": user, "username": user.lower(), "team_id": "T1"},
        "api_app_id": "A1", "token": "legacy", "trigger_id": trigger(),
        "channel": {"id": channel, "name": "general"},
        "container": {"type": "message", "message_ts": "2.0", "channel_id": channel},
        "message": {"type": "message", "ts": "2.0", "thread_ts": thread_ts, "text": "x"},
        "actions": [{"type": "button", "action_id": action_id, "block_id": f"feedback-{value}",
                     "value": value, "action_ts": "3.0"}],
        "response_url": "http://127.0.0.1:9/unused",
    }  # fmt: skip
    return signed(urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded")


def ack_text(resp: Any) -> str:
    assert resp.status == 200, resp.body
    return str(json.loads(resp.body)["text"]) if resp.body else ""


async def turns(w: World) -> list[tuple[str, str, str]]:
    cur = await w.store._db.execute("SELECT thread, instance, question FROM turns ORDER BY id")
    return [(r[0], r[1], r[2]) for r in await cur.fetchall()]


# -- slash command -----------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_slash_command_posts_question_and_answers_in_its_thread(world: World) -> None:
    w, sha = world, world.sample["sha"]
    resp = await w.send(command(w, "what is the default timeout?"))
    assert ack_text(resp) == ""  # a plain ack: the work happens after it
    await w.settle()
    posts = w.stub.of("chat.postMessage")
    assert posts[0]["channel"] == "CGEN" and "thread_ts" not in posts[0]
    assert posts[0]["text"] == "<@U1> asked *widget*:\n> what is the default timeout?"
    assert all(c["_auth"] == f"Bearer {TOKEN}" for c in w.stub.of("chat.postMessage"))
    root_ts = "1700000001.000000"
    assert posts[1]["thread_ts"] == root_ts and posts[1]["text"] == "Searching `widget` …"
    (update,) = w.stub.of("chat.update")
    assert update["ts"] == "1700000002.000000" and update["channel"] == "CGEN"
    texts = section_texts(update["blocks"])
    url = f"https://github.com/acme/widget/blob/{sha}/README.md#L9-L12"
    assert "The default timeout is thirty seconds." in texts[0]
    assert f"<{url}|[1]>" in texts[0]  # citation markers link to their permalink
    assert "*Sources*" in texts
    assert f"*[1]* <{url}|README.md:9-12> Widget › Configuration" in "\n".join(texts)
    numbers = [int(x) for x in re.findall(r"\*\[(\d+)\]\*", "\n".join(texts))]
    assert numbers == list(range(1, len(numbers) + 1))
    actions = [b for b in update["blocks"] if b["type"] == "actions"]
    ids = [e["action_id"] for e in actions[0]["elements"]]
    assert ids == ["feedback_up", "feedback_down"]
    assert await turns(w) == [(f"T1:CGEN:{root_ts}", "widget", "what is the default timeout?")]


@pytest.mark.asyncio
async def test_help_and_bare_command_explain_usage_ephemerally(world: World) -> None:
    w = world
    for text in ("", "help"):
        resp = await w.send(command(w, text))
        body = json.loads(resp.body)
        assert body["response_type"] == "ephemeral"
        assert "/repo [instance] your question" in body["text"]
        assert "Available in this channel: `widget`" in body["text"]
        assert "`widget` answers here" in body["text"]
    await w.settle()
    assert w.stub.of("chat.postMessage") == []


@pytest.mark.asyncio
async def test_ack_comes_back_at_once_while_a_slow_core_works(world: World) -> None:
    w = world
    gate = GatedAnswerer(w.recorder)
    w.app.answerer = gate
    t = time.perf_counter()
    resp = await w.send(command(w, "what is the default timeout?"))
    elapsed = time.perf_counter() - t
    assert resp.status == 200 and elapsed < 1.0, elapsed  # Slack's limit is 3 s
    await asyncio.wait_for(gate.entered.wait(), 5)  # the core is now working, blocked
    assert [p["text"] for p in w.stub.of("chat.postMessage")][1] == "Searching `widget` …"
    assert w.stub.of("chat.update") == []
    gate.release.set()
    await w.settle()
    assert "thirty seconds" in section_texts(w.stub.of("chat.update")[0]["blocks"])[0]


# -- mentions and follow-ups -------------------------------------------------------------------
@pytest.mark.asyncio
async def test_mention_answers_in_its_thread_and_follow_up_gets_the_history(
    world: World,
) -> None:
    w = world
    resp = await w.send(mention("what is the default timeout?", "100.000100"))
    assert resp.status == 200
    await w.settle()
    assert w.stub.of("reactions.add") == [
        {"channel": "CGEN", "timestamp": "100.000100", "name": "eyes", "_auth": f"Bearer {TOKEN}"}
    ]
    assert len(w.stub.of("reactions.remove")) == 1  # done working
    status = w.stub.of("chat.postMessage")[0]
    assert status["thread_ts"] == "100.000100"
    first = w.recorder.calls[-1]
    assert first[1] is None  # no history for the first question

    await w.send(mention("where is it set?", "100.000500", thread_ts="100.000100"))
    await w.settle()
    question, conversation, _ = w.recorder.calls[-1]
    assert question == "where is it set?"
    assert conversation == [Turn("what is the default timeout?", first[2])]
    assert w.stub.of("chat.postMessage")[-1]["thread_ts"] == "100.000100"
    assert [t[0] for t in await turns(w)] == ["T1:CGEN:100.000100"] * 2


@pytest.mark.asyncio
async def test_a_direct_message_is_answered_in_its_thread_and_followed_up(world: World) -> None:
    w = world
    await w.send(event("message", "what is the default timeout?", "150.000100", channel="D1",
                       channel_type="im"))  # fmt: skip
    await w.settle()
    status = w.stub.of("chat.postMessage")[0]
    assert (status["channel"], status["thread_ts"]) == ("D1", "150.000100")
    assert "thirty seconds" in section_texts(w.stub.of("chat.update")[0]["blocks"])[0]
    await w.send(event("message", "where is it set?", "150.000300", channel="D1",
                       channel_type="im", thread_ts="150.000100"))  # fmt: skip
    await w.settle()
    assert w.recorder.calls[-1][1] is not None  # the follow-up came with the DM's first turn
    # The bot's own messages, edits and other bots are not questions.
    for extra in ({"subtype": "message_changed"}, {"bot_id": "B2"}):
        await w.send(event("message", "hello", f"150.0009{len(extra)}", channel="D1",
                           channel_type="im", **extra))  # fmt: skip
    await w.settle()
    assert [t[0] for t in await turns(w)] == ["T1:D1:150.000100"] * 2


@pytest.mark.asyncio
async def test_no_token_warning_on_start(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)  # as `serve slack` runs: Bolt reads it too
    caplog.set_level(logging.DEBUG)
    w = world
    w.make_bot()
    assert not [r for r in caplog.records if "will be unused" in r.getMessage()]
    logging.getLogger("slack_bolt.AsyncApp").warning("another warning")  # only that one goes
    assert [r.getMessage() for r in caplog.records if r.name == "slack_bolt.AsyncApp"] == [
        "another warning"
    ]


@pytest.mark.asyncio
async def test_thread_replies_without_mention_only_when_configured(world: World) -> None:
    w = world
    await w.send(mention("what is the default timeout?", "200.000100"))
    await w.settle()
    await w.send(event("message", "and the themes?", "200.000300", thread_ts="200.000100"))
    await w.send(event("message", "not in a bot thread", "201.000300", thread_ts="201.000100"))
    await w.settle()
    assert len(w.recorder.calls) == 1  # default: replies need a mention

    bot = w.make_bot(thread_replies=True)
    await w.send(event("message", "and the themes?", "200.000400", thread_ts="200.000100"), bot)
    await w.send(event("message", "not in a bot thread", "201.000400", thread_ts="201.000100"))
    await w.settle()
    assert [c[0] for c in w.recorder.calls] == ["what is the default timeout?", "and the themes?"]
    assert w.recorder.calls[1][1] is not None and len(w.recorder.calls[1][1]) == 1


# -- access ------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_private_instance_never_answers_outside_its_channels(world: World) -> None:
    w = world
    # Named in a channel it does not allow: invisible, so the channel's own instance answers.
    await w.send(command(w, "secret what is the default timeout?"))
    await w.send(mention("secret what is the default timeout?", "300.000100"))
    # Its own channel, but another workspace: still not allowed (and widget is T1-only).
    other = command(w, "secret what is the default timeout?", channel="CSECRET", team="T2")
    assert ack_text(await w.send(other)).startswith("No repository is available")
    await w.settle()
    assert {t[1] for t in await turns(w)} == {"widget"}
    assert not await w.app.has_index("secret")
    help_text = json.loads((await w.send(command(w, "help"))).body)["text"]
    assert "secret" not in help_text
    # Where it is allowed, naming it picks it.
    await w.send(command(w, "secret what is the default timeout?", channel="CSECRET"))
    await w.settle()
    assert (await turns(w))[-1][1:] == ("secret", "what is the default timeout?")


@pytest.mark.asyncio
async def test_restricted_and_ambiguous_choices_are_explained_ephemerally(world: World) -> None:
    w = world
    text = ack_text(await w.send(command(w, "team how do I install it?")))
    assert text == "`team` is not available in this channel. Available here: `widget`."
    text = ack_text(await w.send(command(w, "how do I install it?", channel="CSECRET")))
    assert text.startswith("Several repositories are available here: `secret`, `widget`.")
    text = ack_text(await w.send(command(w, "widget")))
    assert text.startswith("What would you like to know about `widget`?")
    text = ack_text(await w.send(command(w, "how?", channel="CNONE", team="T9")))
    assert text.startswith("No repository is available in this channel.")  # widget: T1 only
    await w.settle()
    assert w.stub.of("chat.postMessage") == [] and w.recorder.calls == []


# -- feedback ----------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_feedback_buttons_are_recorded_and_printed(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    w = world
    await w.send(command(w, "what is the default timeout?"))
    await w.settle()
    blocks = w.stub.of("chat.update")[0]["blocks"]
    turn = next(b for b in blocks if b["type"] == "actions")["elements"][0]["value"]
    await w.send(button("feedback_up", turn, user="U2"))
    await w.send(button("feedback_down", turn, user="U3"))
    await w.send(button("feedback_down", turn, user="U2"))  # changes U2's mind
    await w.send(button("feedback_up", "999"))
    await w.settle()
    thanks = [e["text"] for e in w.stub.of("chat.postEphemeral")]
    assert thanks[:3] == ["Thanks, glad it helped.", *["Thanks: noted, that helps us improve."] * 2]
    assert thanks[3].startswith("I can't find that answer")
    records = await w.store.feedback("widget")
    assert sorted((r.user, r.verdict) for r in records) == [("U2", "down"), ("U3", "down")]
    assert records[0].question == "what is the default timeout?"
    assert records[0].sources[0]["n"] == 1 and "README.md#L9-L12" in records[0].sources[0]["url"]

    args = parser().parse_args(["feedback", "widget", "--db", str(w.store.path), "--limit", "10"])
    assert await cmd_feedback(w.app, args) == 0
    out = capsys.readouterr().out
    assert "widget: 0 👍  2 👎" in out and "Q: what is the default timeout?" in out
    assert "README.md#L9-L12" in out and "slack user U2" in out
    args.json = True
    assert await cmd_feedback(w.app, args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["user"], r["verdict"], r["instance"]) for r in rows} == {
        ("U2", "down", "widget"), ("U3", "down", "widget")}  # fmt: skip


# -- limits, splitting, failures ---------------------------------------------------------------
@pytest.mark.asyncio
async def test_rate_limit_per_user_and_global_busy_limit(world: World) -> None:
    w = world
    w.make_bot(ServeConfig(rate_limit=2, rate_window=60, max_concurrent=1))
    gate = GatedAnswerer(w.recorder)
    w.app.answerer = gate
    assert ack_text(await w.send(command(w, "what is the default timeout?"))) == ""
    await asyncio.wait_for(gate.entered.wait(), 5)
    busy = ack_text(await w.send(command(w, "what about themes?", user="U2")))
    assert busy == "I'm answering a lot of questions right now: please ask again in a minute."
    gate.release.set()
    await w.settle()
    assert ack_text(await w.send(command(w, "what about themes?"))) == ""
    await w.settle()
    limited = ack_text(await w.send(command(w, "and installation?")))
    assert limited.startswith("You're asking faster than I can answer: please try again in")
    assert ack_text(await w.send(command(w, "and installation?", user="U2"))) == ""
    await w.settle()
    assert len(w.stub.of("chat.update")) == 3


@pytest.mark.asyncio
async def test_long_answer_continues_in_further_messages_nothing_cut(world: World) -> None:
    w = world
    w.recorder.expand = 5000  # paragraphs appended to the real answer: ~185k characters
    await w.send(command(w, "what is the default timeout?"))
    await w.settle()
    first = w.stub.of("chat.update")[0]
    rest = [p for p in w.stub.of("chat.postMessage") if p.get("blocks")]
    messages = [first, *rest]
    assert len(messages) >= 2
    for m in messages:
        assert len(m["blocks"]) <= 50
        assert all(len(t) <= 3000 for t in section_texts(m["blocks"]))
        assert m is first or m["thread_ts"] == "1700000001.000000"  # the question's thread
    body = "\n".join(t for m in messages for t in section_texts(m["blocks"]))
    found = re.findall(r"paragraph (\d+) of the long answer\.", body)
    assert [int(x) for x in found] == list(range(5000))  # every one, once, in order
    assert "(part 1 of" in json.dumps(first["blocks"])
    assert messages[-1]["blocks"][-2]["type"] == "actions"  # buttons end the last message


@pytest.mark.asyncio
async def test_a_streamed_answer_is_previewed_at_the_interval_then_replaced(world: World) -> None:
    w = world
    streaming = StreamingAnswerer(w.recorder, steps=20, gap=0.05)  # ~1 s of streaming
    w.app.answerer = streaming
    w.make_bot(stream_interval=0.2)
    t = time.monotonic()
    await w.send(command(w, "what is the default timeout?"))
    await w.settle()
    took = time.monotonic() - t
    *previews, final = w.stub.of("chat.update")
    assert all(u["ts"] == "1700000002.000000" for u in [*previews, final])
    assert 2 <= len(previews) <= took / 0.2 + 1  # at most one per interval
    texts = [section_texts(p["blocks"])[0] for p in previews]
    assert all(b.startswith(a) and len(b) > len(a) for a, b in pairwise(texts))
    assert all(WRITING in section_texts(p["blocks"])[1] for p in previews)
    assert final["blocks"][-1]["type"] == "actions"  # the answer with its buttons, as before
    assert "*Sources*" in section_texts(final["blocks"])
    assert WRITING not in json.dumps(final["blocks"])
    # A long preview is one section, clipped with an ellipsis; the answer is not cut.
    w.stub.calls.clear()
    streaming.preview = "a & b " * 2000
    await w.send(command(w, "what is the default timeout?"))
    await w.settle()
    *previews, final = w.stub.of("chat.update")
    assert previews and all(len(p["blocks"]) == 2 for p in previews)
    long = section_texts(previews[-1]["blocks"])[0]
    assert len(long) <= 3000 and long.endswith("…") and "&amp;" in long
    assert re.fullmatch(r"(a &amp; b )+(a( &amp;( b)?)?)?…", long)
    # stream_interval 0: no previews, and extractive answers never stream.
    w.make_bot(stream_interval=0)
    w.stub.calls.clear()
    await w.send(command(w, "what is the default timeout?"))
    await w.settle()
    assert len(w.stub.of("chat.update")) == 1
    w.app.answerer = w.recorder
    w.make_bot(stream_interval=0.01)
    w.stub.calls.clear()
    await w.send(command(w, "what is the default timeout?"))
    await w.settle()
    assert len(w.stub.of("chat.update")) == 1


@pytest.mark.asyncio
async def test_failure_is_one_line_in_the_thread_and_logged(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    w = world
    w.recorder.fail = RuntimeError("model exploded")
    with caplog.at_level(logging.ERROR, logger="bot.slack"):
        await w.send(command(w, "what is the default timeout?"))
        await w.settle()
    (update,) = w.stub.of("chat.update")
    assert update["text"] == (
        "Sorry, I couldn't answer that: something went wrong on my side. "
        "The details are in the bot's log."
    )
    assert update["blocks"] == []
    assert any(r.exc_info and "model exploded" in str(r.exc_info[1]) for r in caplog.records)


@pytest.mark.asyncio
async def test_missing_scope_and_channel_errors_are_reported(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    w = world
    w.stub.fail("chat.postMessage", "not_in_channel")
    await w.send(command(w, "what is the default timeout?"))
    await w.settle()
    (said,) = w.stub.responses
    assert said["response_type"] == "ephemeral"
    assert said["text"].startswith("I can't post in this channel (not_in_channel).")

    w.stub.fail("chat.postMessage", "missing_scope", needed="chat:write")
    await w.send(command(w, "what is the default timeout?"))
    await w.settle()
    assert "permission `chat:write`" in w.stub.responses[-1]["text"]

    del w.stub.failures["chat.postMessage"]
    w.stub.fail("reactions.add", "missing_scope", needed="reactions:write")
    with caplog.at_level(logging.WARNING, logger="bot.slack"):
        await w.send(mention("what is the default timeout?", "400.000100"))
        await w.settle()
    assert "thirty seconds" in section_texts(w.stub.of("chat.update")[-1]["blocks"])[0]
    assert any("reactions:write" in r.getMessage() for r in caplog.records)

    w.stub.fail("chat.update", "missing_scope", needed="chat:write")
    await w.send(mention("what is the default timeout?", "401.000100"))
    await w.settle()  # cannot update the status message: logged, nothing silently dropped
    assert any("could not tell CGEN" in r.getMessage() for r in caplog.records)


# -- HTTP mode ---------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_http_mode_verifies_signatures_over_real_http(world: World) -> None:
    w = world
    assert w.bot is not None
    server = LocalServer(http_app(w.bot, SlackSettings(), 0))
    await server.start()
    url = server.address("/slack/events")
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(server.address("/healthz")) as r:
                assert r.status == 200 and await r.json() == {"ok": True}
            async with http.get(server.address("/readyz")) as r:
                assert r.status == 200 and (await r.json())["ready"] is True
            async with http.get(server.address("/metrics")) as r:
                assert value(await r.text(), "repo_expert_answers_in_progress") == 0
            body = command_body(w, "what is the default timeout?")
            for secret, status in (("not-the-secret", 401), (SECRET, 200)):
                req = signed(body, "application/x-www-form-urlencoded", secret)
                headers = {k: v[0] for k, v in req.headers.items()}
                async with http.post(url, data=body, headers=headers) as r:
                    assert r.status == status
            async with http.post(
                url, data=body, headers={"content-type": headers["content-type"]}
            ) as r:
                assert r.status == 401  # unsigned
        await w.settle()
    finally:
        await server.stop()
    assert len(w.stub.of("chat.update")) == 1  # only the signed request was answered


@pytest.mark.asyncio
async def test_a_command_while_shutting_down_is_told_to_ask_again(world: World) -> None:
    w = world
    assert w.bot is not None
    await w.bot.drain(grace=0)  # what SIGTERM does: nothing in progress, no new work
    resp = await w.send(command(w, "what is the default timeout?"))
    assert ack_text(resp) == "The bot is restarting: please ask again in a minute."
    await w.send(mention("what is the default timeout?", "400.000100"))
    await w.settle()
    assert not w.stub.of("chat.postMessage") and w.recorder.calls == []
    assert w.bot.core.limits.active == 0  # no slot kept


# -- Socket Mode and logs ------------------------------------------------------------------------
async def until(check: Any, within: float = 5) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.asyncio
async def test_socket_mode_serves_a_slash_command_over_the_websocket(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    w = world
    core = ChatCore(w.app, w.store, ServeConfig())
    env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_APP_TOKEN": "xapp-secret-app-token"}
    client = AsyncWebClient(token=TOKEN, base_url=w.stub.base_url)
    caplog.set_level(logging.DEBUG)
    task = asyncio.create_task(run_slack(core, SlackSettings(), env, client=client))
    try:
        await asyncio.wait_for(w.stub.socket_open.wait(), 5)
        (opened,) = w.stub.of("apps.connections.open")
        assert opened["_auth"] == "Bearer xapp-secret-app-token"
        payload = dict(parse_qsl(command_body(w, "what is the default timeout?")))
        await w.stub.push({"envelope_id": "env-1", "type": "slash_commands",
                           "accepts_response_payload": True, "payload": payload})  # fmt: skip
        await until(lambda: w.stub.of("chat.update"))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert w.stub.socket_acks[0]["envelope_id"] == "env-1"  # acked over the socket
    assert "thirty seconds" in section_texts(w.stub.of("chat.update")[0]["blocks"])[0]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert TOKEN not in logged and "xapp-secret-app-token" not in logged
    assert "signed in as repo-expert in Acme; socket mode" in logged


@pytest.mark.asyncio
async def test_a_slow_preview_update_never_holds_up_the_model() -> None:
    import asyncio
    import time as _time

    from bot.slack import Preview

    class SlowClient:
        calls = 0

        async def chat_update(self, **kw: Any) -> None:
            SlowClient.calls += 1
            await asyncio.sleep(0.5)

    p = Preview(SlowClient(), "C1", "1.0", 0.0)  # type: ignore[arg-type]
    t = _time.perf_counter()
    await p("partial")
    await p("partial answer")  # the first update is still in flight: skipped, not queued
    assert _time.perf_counter() - t < 0.1
    await p.settle()
    assert SlowClient.calls == 1 and p.updates == 1
