"""Support-channel mode over the wire (bot/support.py): on Slack through the real Bolt app and
Web API client (the Slack stand-in), on Discord through discord.py (the Discord stand-in) — new
top-level questions answered unasked only when retrieval's top fused score reaches
``min_score`` (here set below or above the sample's real scores, so each side of the threshold
is the real comparison) and an answer was found; silence or a reaction otherwise; "no bot" and
a stop reaction keep the bot out of a thread; forum posts on Discord."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import pytest_asyncio
from stub_bot_core import GENERAL, GUILD, TEAM_CH
from stub_discord_api import channel_payload, guild_payload, message_payload, thread_payload
from test_discord import ANA, _ids, only_thread
from test_discord import World as DiscordWorld
from test_discord import world as _discord_world
from test_slack import World as SlackWorld
from test_slack import event, signed, turns
from test_slack import world as _slack_world

from bot.settings import ServeConfig
from core.models import Answer

SURE, NEVER = -1000.0, 1000.0  # below / above any top score the sample gives
# The adapters' own worlds (test_slack.py, test_discord.py), under names of their own here.
slack_world = pytest_asyncio.fixture(_slack_world.__wrapped__, name="slack_world")  # type: ignore[attr-defined]
discord_world = pytest_asyncio.fixture(_discord_world.__wrapped__, name="discord_world")  # type: ignore[attr-defined]


def support(platform: str, channel: str, min_score: float, **more: Any) -> ServeConfig:
    ch = {"platform": platform, "channel": channel, "min_score": min_score, **more}
    return ServeConfig.model_validate({"support": {"channels": [ch]}})


def reaction(name: str, ts: str, channel: str = "CGEN") -> Any:
    body = {"token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
            "event": {"type": "reaction_added", "user": "U2", "reaction": name,
                      "item": {"type": "message", "channel": channel, "ts": ts},
                      "event_ts": ts},
            "event_id": f"EvR{ts}{name}", "event_time": int(time.time()),
            "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": True}]}  # fmt: skip
    return signed(json.dumps(body), "application/json")


class NoAnswer:
    """The real answerer, but it says the sources don't hold the answer."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name = inner, inner.name

    async def answer(self, *args: Any, **kw: Any) -> Answer:
        a: Answer = await self.inner.answer(*args, **kw)
        a.no_answer = True
        return a


# -- Slack ---------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_slack_answers_a_confident_new_question_unasked(slack_world: SlackWorld) -> None:
    w = slack_world
    w.make_bot(support("slack", "CGEN", SURE), thread_replies=True)
    queries = w.sample["embedder"].queries
    await w.send(event("message", "what is the default timeout?", "300.000100"))
    await w.send(event("message", "unrelated chatter", "300.000200", channel="CTEAM"))
    await w.send(event("message", "a bot", "300.000300", bot_id="B9"))
    await w.settle()
    (posted,) = w.stub.of("chat.postMessage")  # no "Searching …" message: just the answer
    assert posted["thread_ts"] == "300.000100" and posted["channel"] == "CGEN"
    assert "thirty seconds" in json.dumps(posted["blocks"])
    assert not w.stub.of("chat.update")
    assert [r["name"] for r in w.stub.of("reactions.add")] == ["eyes"]  # while working
    assert len(w.stub.of("reactions.remove")) == 1
    assert await turns(w) == [("T1:CGEN:300.000100", "widget", "what is the default timeout?")]
    # one search: the answer used what the gate found
    assert queries.count("what is the default timeout?") == 1
    assert w.bot is not None
    m = w.bot.core.metrics
    assert m.support.labels("slack", "answered")._value.get() == 1
    # A follow-up in that thread is answered (thread_replies), as in any thread it answered.
    await w.send(event("message", "and where is it set?", "300.000400", thread_ts="300.000100"))
    await w.settle()
    assert len(w.stub.of("chat.postMessage")) == 2 and len(w.stub.of("chat.update")) == 1


@pytest.mark.asyncio
async def test_slack_stays_silent_or_reacts_when_not_confident(slack_world: SlackWorld) -> None:
    w = slack_world
    w.make_bot(support("slack", "CGEN", NEVER))
    await w.send(event("message", "what is the default timeout?", "310.000100"))
    await w.settle()
    assert not w.stub.of("chat.postMessage") and not w.stub.of("reactions.add")
    assert w.recorder.calls == []  # not even answered: retrieval alone decided
    w.make_bot(support("slack", "CGEN", NEVER, otherwise="react"))
    await w.send(event("message", "what is the default timeout?", "310.000200"))
    await w.settle()
    assert [r["name"] for r in w.stub.of("reactions.add")] == ["thinking_face"]
    assert not w.stub.of("chat.postMessage")


@pytest.mark.asyncio
async def test_slack_no_answer_is_never_posted_but_is_listed(slack_world: SlackWorld) -> None:
    w = slack_world
    w.app.answerer = NoAnswer(w.recorder)
    w.make_bot(support("slack", "CGEN", SURE, otherwise="react"))
    await w.send(event("message", "how do I frobnicate the quux?", "320.000100"))
    await w.settle()
    assert not w.stub.of("chat.postMessage")
    assert "thinking_face" in [r["name"] for r in w.stub.of("reactions.add")]
    (rec,) = await w.store.unanswered("widget")  # feedback --unanswered shows it
    assert rec.no_answer and rec.question == "how do I frobnicate the quux?"


@pytest.mark.asyncio
async def test_slack_people_stop_it_by_text_or_reaction(slack_world: SlackWorld) -> None:
    w = slack_world
    w.make_bot(support("slack", "CGEN", SURE), thread_replies=True)
    await w.send(event("message", "what is the default timeout? no bot please", "330.000100"))
    await w.settle()
    assert not w.stub.of("chat.postMessage")  # "no bot" in the question itself
    for root in ("330.000200", "330.000300"):
        await w.send(event("message", "what is the default timeout?", root))
    await w.settle()
    assert len(w.stub.of("chat.postMessage")) == 2
    await w.send(event("message", "No  Bot here, thanks", "330.000210", thread_ts="330.000200"))
    await w.send(reaction("no_entry_sign", "330.000300"))
    await w.send(reaction("tada", "330.000100"))  # another reaction stops nothing
    for n, root in enumerate(("330.000200", "330.000300")):
        await w.send(event("message", "and the themes?", f"330.00050{n}", thread_ts=root))
    await w.settle()
    assert len(w.stub.of("chat.postMessage")) == 2  # neither follow-up answered
    await w.send(event("app_mention", "<@UBOT> and the themes?", "330.000600",
                       thread_ts="330.000200"))  # fmt: skip
    await w.settle()
    assert len(w.stub.of("chat.update")) == 1  # a mention is asking: answered


# -- Discord -------------------------------------------------------------------------------------
FORUM = 110000000000000950


def forum_payload() -> dict[str, Any]:
    return {**channel_payload(FORUM, "help"), "type": 15, "available_tags": [],
            "default_reaction_emoji": None, "default_sort_order": None,
            "default_forum_layout": 0, "default_thread_rate_limit_per_user": 0}  # fmt: skip


async def start_support(w: DiscordWorld, config: ServeConfig) -> None:
    await w.start(config)
    guild = guild_payload([GENERAL, TEAM_CH])
    guild["channels"].append(forum_payload())
    w.state.parse_guild_create(guild)


def support_discord(min_score: float, **more: Any) -> ServeConfig:
    chans = [{"platform": "discord", "channel": str(c), "min_score": min_score, **more}
             for c in (GENERAL, FORUM)]  # fmt: skip
    return ServeConfig.model_validate({"support": {"channels": chans}})


@pytest.mark.asyncio
async def test_discord_answers_new_messages_and_forum_posts_unasked(
    discord_world: DiscordWorld,
) -> None:
    w = discord_world
    await start_support(w, support_discord(SURE))
    assert w.bot is not None and w.bot.intents.message_content and w.bot.intents.guild_reactions
    w.say("what is the default timeout?", mention=False)
    await w.settle()
    thread = only_thread(w)  # a thread opened on the message, with the answer
    (msg,) = w.sent(thread["id"])
    assert "thirty seconds" in msg["content"] and len(msg["components"][0]["components"]) == 2
    # A forum post: the thread exists; its starter message (same id) is answered in it.
    post = next(_ids)
    w.state.parse_thread_create({**thread_payload(post, FORUM, "timeouts?"),
                                 "owner_id": ANA["id"], "newly_created": True})  # fmt: skip
    w.state.parse_message_create(message_payload(post, post, "what is the default timeout?", ANA))
    await w.settle()
    (answer,) = w.sent(post)
    assert "thirty seconds" in answer["content"]
    assert len(w.stub.of("POST", r"/threads$")) == 1  # no thread was opened for the post
    # Other messages in the post are follow-ups (thread_replies), not new questions.
    assert [t[0] for t in await w.store._db.execute_fetchall("SELECT thread FROM turns")] == [
        thread["id"],
        str(post),
    ]


@pytest.mark.asyncio
async def test_discord_is_silent_or_reacts_when_not_confident_and_can_be_stopped(
    discord_world: DiscordWorld,
) -> None:
    w = discord_world
    await start_support(w, support_discord(NEVER, otherwise="react"))
    mid = w.say("what is the default timeout?", mention=False)
    await w.settle()
    assert not w.stub.of("POST", r"/threads$") and w.recorder.calls == []
    (put,) = [c for c in w.stub.calls if c.method == "PUT" and "/reactions/" in c.path]
    assert put.path.startswith(f"/channels/{GENERAL}/messages/{mid}/reactions/")
    # Stopped: "no bot" in the question; a 🚫 on a forum post.
    await start_support(w, support_discord(SURE))
    w.say("what is the timeout? no bot", mention=False)
    await w.settle()
    assert not w.stub.of("POST", r"/threads$")
    post = next(_ids)
    w.state.parse_thread_create({**thread_payload(post, FORUM, "q"), "newly_created": True})
    w.state.parse_message_reaction_add({"user_id": ANA["id"], "channel_id": str(post),
                                    "message_id": str(post), "guild_id": str(GUILD),
                                    "emoji": {"id": None, "name": "🚫"}, "burst": False,
                                    "type": 0})  # fmt: skip
    w.state.parse_message_create(message_payload(post, post, "what is the timeout?", ANA))
    await w.settle()
    assert not w.sent(post) and w.recorder.calls == []


@pytest.mark.asyncio
async def test_support_settings_are_checked(tmp_path: Any) -> None:
    from bot.settings import load_serve_config
    from core.errors import ConfigError

    f = tmp_path / "serve.yaml"
    f.write_text("support: {channels: [{platform: teams, channel: C1}]}\n")
    with pytest.raises(
        ConfigError, match=r"support\.channels\[0\]\.platform: Input should be 'slack' or 'discord'"
    ):
        load_serve_config(str(f))
    f.write_text("support: {channels: [{platform: discord, channel: 1234}]}\n")
    (ch,) = load_serve_config(str(f)).support.channels
    assert ch.channel == "1234" and ch.min_score == 6.0 and ch.otherwise == "silent"
