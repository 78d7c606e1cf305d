"""The Discord adapter through discord.py itself, over the wire.

discord.py's HTTP layer (``Route.BASE``) points at a local stand-in for the Discord REST API
(tests/stub_discord_api.py); the client logs in against it, then is fed real gateway payloads
(READY, GUILD_CREATE, MESSAGE_CREATE, THREAD_CREATE, INTERACTION_CREATE) through its own
connection-state parsers. The core is the ``sample`` RepoExpert on the fake embedder.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from itertools import pairwise
from typing import Any

import discord
import pytest
import pytest_asyncio
from stub_bot_core import (
    GENERAL,
    SECRET_CH,
    TEAM_CH,
    GatedAnswerer,
    RecordingAnswerer,
    StreamingAnswerer,
    add_instances,
)
from stub_discord_api import (
    APP_ID,
    BOT_ID,
    StubDiscordApi,
    channel_payload,
    guild_payload,
    interaction_payload,
    message_payload,
    ready_payload,
    user_payload,
)

from bot.common import ChatCore
from bot.discord import DiscordBot
from bot.messages import WRITING
from bot.settings import DiscordSettings, ServeConfig
from core.answer.extractive import ExtractiveAnswerer
from core.models import Turn
from core.store.conversations import ConversationStore

ANA = user_payload(110000000000000042, "ana")
BEA = user_payload(110000000000000043, "bea")
BOT = user_payload(BOT_ID, "repo-expert", bot=True)
_ids = itertools.count(130000000000000000)


class World:
    def __init__(self, sample: dict[str, Any], stub: StubDiscordApi, store: ConversationStore):
        self.sample, self.stub, self.store = sample, stub, store
        self.app = sample["app"]
        self.recorder = RecordingAnswerer(ExtractiveAnswerer())
        self.app.answerer = self.recorder
        self.bot: DiscordBot | None = None

    async def start(self, config: ServeConfig | None = None, **discord_settings: Any) -> DiscordBot:
        if self.bot is not None:
            await self.bot.close()
        config = config or ServeConfig()
        core = ChatCore(self.app, self.store, config)
        self.bot = DiscordBot(core, DiscordSettings(**discord_settings), guild_ready_timeout=0.01)
        await self.bot.login("discord-test-token")  # /users/@me, the app, then setup_hook
        state: Any = self.bot._connection
        state.parse_ready(ready_payload())
        state.parse_guild_create(guild_payload([GENERAL, SECRET_CH, TEAM_CH]))
        await asyncio.wait_for(self.bot.wait_until_ready(), 5)
        return self.bot

    @property
    def state(self) -> Any:
        assert self.bot is not None
        return self.bot._connection

    def say(self, content: str, channel: int = GENERAL, mention: bool = True,
            author: dict[str, Any] = ANA) -> int:  # fmt: skip
        mid = next(_ids)
        text = f"<@{BOT_ID}> {content}" if mention else content
        self.state.parse_message_create(
            message_payload(mid, channel, text, author, [BOT] if mention else [])
        )
        return mid

    def slash(self, question: str | None = None, instance: str | None = None,
              channel: dict[str, Any] | None = None, kind: int = 2,
              focused: str | None = None, user: dict[str, Any] = ANA) -> int:  # fmt: skip
        iid = next(_ids)
        opts: list[dict[str, Any]] = []
        if question is not None:
            opts.append({"name": "question", "type": 3, "value": question})
        if instance is not None:
            opts.append({"name": "instance", "type": 3, "value": instance,
                         **({"focused": True} if focused == "instance" else {})})  # fmt: skip
        ch = channel or channel_payload(GENERAL)
        self.state.parse_interaction_create(interaction_payload(iid, ch, user, opts, kind))
        return iid

    async def events(self) -> None:
        """Wait for the handlers discord.py started for the payloads fed so far."""
        await asyncio.sleep(0)
        pending = [t for t in asyncio.all_tasks() if not t.done()
                   and t.get_name().startswith(("discord.py: ", "CommandTree"))]  # fmt: skip
        if pending:
            await asyncio.wait(pending, timeout=8)

    async def settle(self) -> None:
        """Wait for discord.py's event tasks, then for the answers they started."""
        assert self.bot is not None
        for _ in range(2):
            await self.events()
            await asyncio.wait_for(self.bot.drain(), 8)

    def sent(self, channel: int | str) -> list[dict[str, Any]]:
        return self.stub.of("POST", rf"^/channels/{channel}/messages$")


@pytest_asyncio.fixture
async def world(sample: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    add_instances(sample)
    stub = StubDiscordApi()
    await stub.start()
    monkeypatch.setattr(discord.http.Route, "BASE", stub.base)
    store = await ConversationStore.open(sample["tmp"] / "conversations.sqlite")
    w = World(sample, stub, store)
    await w.start()
    yield w
    if w.bot is not None:
        await w.bot.drain()
        await w.bot.close()
    await store.close()
    await w.app.close()
    await stub.stop()


def only_thread(w: World) -> dict[str, Any]:
    (thread,) = w.stub.channels.values()
    return thread


@pytest.mark.asyncio
async def test_login_registers_the_ask_command_with_autocomplete(world: World) -> None:
    (commands,) = world.stub.of("PUT", rf"^/applications/{APP_ID}/commands$")
    (ask,) = commands
    assert ask["name"] == "ask"
    opts = {o["name"]: o for o in ask["options"]}
    assert opts["question"]["required"] is True
    assert opts["instance"]["required"] is False and opts["instance"]["autocomplete"] is True


@pytest.mark.asyncio
async def test_mention_opens_a_thread_and_answers_with_a_sources_embed(world: World) -> None:
    w, sha = world, world.sample["sha"]
    mid = w.say("what is the default timeout?")
    await w.settle()
    (create,) = w.stub.of("POST", rf"^/channels/{GENERAL}/messages/{mid}/threads$")
    assert create["name"] == "what is the default timeout?"
    thread = only_thread(w)
    assert w.stub.of("POST", rf"^/channels/{thread['id']}/typing$")  # typing while working
    (msg,) = w.sent(thread["id"])
    assert "The default timeout is thirty seconds. [1]" in msg["content"]
    assert msg["allowed_mentions"]["parse"] == []  # repository text never pings anyone
    (embed,) = msg["embeds"]
    assert embed["title"] == "Sources"
    url = f"https://github.com/acme/widget/blob/{sha}/README.md#L9-L12"
    assert (
        embed["description"].splitlines()[0]
        == f"**[1]** [README.md:9-12]({url}) Widget › Configuration"
    )
    assert w.recorder.calls[0][:2] == ("what is the default timeout?", None)


@pytest.mark.asyncio
async def test_follow_ups_in_the_thread_carry_the_history(world: World) -> None:
    w = world
    w.say("what is the default timeout?")
    await w.settle()
    thread = only_thread(w)
    # Not cached yet: the bot fetches the channel to learn its parent (access is per parent).
    w.say("where is it set?", channel=int(thread["id"]), mention=False)
    await w.settle()
    assert w.stub.of("GET", rf"^/channels/{thread['id']}$")
    question, history, _ = w.recorder.calls[-1]
    assert question == "where is it set?"
    assert history == [Turn("what is the default timeout?", w.recorder.calls[0][2])]
    # Once THREAD_CREATE has cached it, follow-ups need no fetch.
    w.state.parse_thread_create({**thread, "newly_created": True})
    fetches = len(w.stub.of("GET", r"^/channels/"))
    w.say("and the themes?", channel=int(thread["id"]), mention=False)
    await w.settle()
    assert len(w.stub.of("GET", r"^/channels/")) == fetches
    assert len(w.recorder.calls[-1][1] or []) == 2
    assert len(w.sent(thread["id"])) == 3
    # Chatter elsewhere is ignored; so is the bot itself.
    w.say("unrelated", mention=False)
    w.say("echo", channel=int(thread["id"]), mention=False, author=BOT)
    await w.settle()
    assert len(w.recorder.calls) == 3


@pytest.mark.asyncio
async def test_slash_ask_replies_and_opens_a_thread(world: World) -> None:
    w = world
    iid = w.slash("what is the default timeout?", "widget")
    await w.settle()
    (cb,) = w.stub.of("POST", rf"^/interactions/{iid}/tok{iid}/callback$")
    assert cb["type"] == 4 and cb["data"]["content"].startswith(
        "<@110000000000000042> asked **widget**:"
    )
    (create,) = w.stub.of("POST", rf"^/channels/{GENERAL}/messages/\d+/threads$")
    assert create["name"] == "what is the default timeout?"
    (msg,) = w.sent(only_thread(w)["id"])
    assert "thirty seconds" in msg["content"] and msg["embeds"][0]["title"] == "Sources"


@pytest.mark.asyncio
async def test_autocomplete_offers_only_instances_allowed_here(world: World) -> None:
    w = world
    expected = {GENERAL: ["widget"], SECRET_CH: ["secret", "widget"], TEAM_CH: ["team", "widget"]}
    for ch, names in expected.items():
        iid = w.slash("q", "", channel=channel_payload(ch), kind=4, focused="instance")
        await w.settle()
        (cb,) = w.stub.of("POST", rf"^/interactions/{iid}/tok{iid}/callback$")
        assert cb["type"] == 8
        assert [c["value"] for c in cb["data"]["choices"]] == names


@pytest.mark.asyncio
async def test_private_instance_never_answers_outside_its_channels(world: World) -> None:
    w = world
    iid = w.slash("what is the default timeout?", "secret")  # named explicitly, wrong channel
    await w.settle()
    (cb,) = w.stub.of("POST", rf"^/interactions/{iid}/")
    assert cb["data"]["flags"] == 64  # ephemeral
    assert (
        cb["data"]["content"]
        == "`secret` is not available in this channel. Available here: `widget`."
    )
    w.say("secret what is the default timeout?")  # as the first word: invisible here
    await w.settle()
    turns = await w.store._db.execute("SELECT instance FROM turns")
    assert [r[0] for r in await turns.fetchall()] == ["widget"]
    assert not await w.app.has_index("secret")
    iid = w.slash("what is the default timeout?", "secret", channel=channel_payload(SECRET_CH))
    await w.settle()
    turns = await w.store._db.execute("SELECT instance FROM turns ORDER BY id")
    assert [r[0] for r in await turns.fetchall()] == ["widget", "secret"]


@pytest.mark.asyncio
async def test_ambiguous_channel_and_help_reply_politely(world: World) -> None:
    w = world
    mid = w.say("how do I install it?", channel=SECRET_CH)
    await w.settle()
    (reply,) = w.sent(SECRET_CH)
    assert reply["content"].startswith(
        "Several repositories are available here: `secret`, `widget`."
    )
    assert int(reply["message_reference"]["message_id"]) == mid
    w.say("help")
    await w.settle()
    assert "Available in this channel: `widget`" in w.sent(GENERAL)[-1]["content"]
    assert not w.stub.channels and not w.recorder.calls  # no thread, no question asked


@pytest.mark.asyncio
async def test_long_answer_splits_at_2000_characters(world: World) -> None:
    w = world
    w.recorder.expand = 300  # ~11k characters
    w.say("what is the default timeout?")
    await w.settle()
    sent = w.sent(only_thread(w)["id"])
    assert len(sent) >= 6 and all(len(m["content"] or "") <= 2000 for m in sent)
    text = "\n\n".join(m["content"] for m in sent if m["content"])
    assert text == w.recorder.calls[0][2]  # nothing lost, nothing added
    assert sent[-1]["embeds"] and not any(m["embeds"] for m in sent[:-1])


@pytest.mark.asyncio
async def test_rate_limit_and_busy_are_polite(world: World) -> None:
    w = world
    await w.start(ServeConfig(rate_limit=1, rate_window=60, max_concurrent=1))
    gate = GatedAnswerer(w.recorder)
    w.app.answerer = gate
    w.say("what is the default timeout?")
    await asyncio.wait_for(gate.entered.wait(), 5)
    iid = w.slash("themes?", "widget", channel=channel_payload(TEAM_CH), user=BEA)
    await w.events()  # answered while the first question still holds the only slot
    gate.release.set()
    await w.settle()
    (cb,) = w.stub.of("POST", rf"^/interactions/{iid}/")
    assert cb["data"]["content"].startswith("I'm answering a lot of questions right now")
    w.say("and again?")
    await w.settle()
    assert w.sent(GENERAL)[-1]["content"].startswith("You're asking faster than I can answer")


@pytest.mark.asyncio
async def test_errors_are_one_line_in_the_thread(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    w = world
    w.recorder.fail = RuntimeError("index on fire")
    with caplog.at_level(logging.ERROR, logger="bot.discord"):
        w.say("what is the default timeout?")
        await w.settle()
    (msg,) = w.sent(only_thread(w)["id"])
    assert msg["content"] == (
        "Sorry, I couldn't answer that: something went wrong on my side. "
        "The details are in the bot's log."
    )
    assert any(r.exc_info and "index on fire" in str(r.exc_info[1]) for r in caplog.records)


@pytest.mark.asyncio
async def test_missing_thread_permission_is_reported(world: World) -> None:
    w = world
    w.stub.fail("POST", r"/threads$", 403)
    w.say("what is the default timeout?")
    await w.settle()
    (reply,) = w.sent(GENERAL)
    assert reply["content"].startswith("I can't open a thread here (Missing Permissions)")
    assert not w.recorder.calls
    iid = w.slash("what is the default timeout?", "widget")
    await w.settle()
    (follow,) = w.stub.of("POST", rf"^/webhooks/{APP_ID}/tok{iid}$")
    assert follow["content"].startswith("I can't open a thread here") and follow["flags"] == 64


@pytest.mark.asyncio
async def test_the_token_never_reaches_the_logs(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    w = world
    caplog.set_level(logging.DEBUG)
    await w.start()  # logs in again, with everything logged
    w.say("what is the default timeout?")
    await w.settle()
    assert w.recorder.calls
    assert "discord-test-token" not in "\n".join(r.getMessage() for r in caplog.records)
    bot_calls = [c for c in w.stub.calls if c.path.startswith("/channels/")]
    assert bot_calls and {c.auth for c in bot_calls} == {"Bot discord-test-token"}


@pytest.mark.asyncio
async def test_a_streamed_answer_is_previewed_at_the_interval_then_replaced(world: World) -> None:
    w = world
    streaming = StreamingAnswerer(w.recorder, steps=20, gap=0.05)  # ~1 s of streaming
    w.app.answerer = streaming
    await w.start(stream_interval=0.2)
    t = time.monotonic()
    w.say("what is the default timeout?")
    await w.settle()
    took = time.monotonic() - t
    tid = only_thread(w)["id"]
    (posted,) = w.sent(tid)  # the preview is the thread's only new message
    *edits, final = w.stub.of("PATCH", rf"^/channels/{tid}/messages/\d+$")
    previews = [posted["content"], *(e["content"] for e in edits)]
    assert 2 <= len(previews) <= took / 0.2 + 1  # at most one per interval
    assert all(p.endswith(f"\n-# {WRITING}") for p in previews) and not posted.get("embeds")
    bodies = [p.removesuffix(f"\n-# {WRITING}") for p in previews]
    assert all(b.startswith(a) and len(b) > len(a) for a, b in pairwise(bodies))
    # the answer replaces the preview: checked text, the sources embed, no preview marker
    assert "The default timeout is thirty seconds. [1]" in final["content"]
    assert WRITING not in final["content"]
    assert [e["title"] for e in final["embeds"]] == ["Sources"]
    # a long preview is clipped to one message; the answer itself is not cut
    w.stub.calls.clear()
    streaming.preview = "word " * 1000
    w.say("what is the default timeout?")
    await w.settle()
    tid = [t for t in w.stub.channels if str(t) != tid][-1]
    (posted,) = w.sent(tid)
    *edits, final = w.stub.of("PATCH", rf"^/channels/{tid}/messages/\d+$")
    previews = [posted["content"], *(e["content"] for e in edits)]
    assert all(len(p) <= 2000 for p in previews)
    assert previews[-1].endswith(f"…\n-# {WRITING}")
    assert "The default timeout is thirty seconds. [1]" in final["content"]


@pytest.mark.asyncio
async def test_no_preview_without_streaming_or_with_interval_zero(world: World) -> None:
    w = world
    w.app.answerer = StreamingAnswerer(w.recorder, steps=10, gap=0.02)
    await w.start(stream_interval=0)
    w.say("what is the default timeout?")
    await w.settle()
    (msg,) = w.sent(only_thread(w)["id"])
    assert "[1]" in msg["content"] and msg["embeds"]
    assert not w.stub.of("PATCH", r"/messages/")
    # the extractive answerer never streams: one message even with previews on
    w.app.answerer = w.recorder
    await w.start(stream_interval=0.01)
    w.stub.calls.clear()
    w.say("what is the default timeout?")
    await w.settle()
    assert not w.stub.of("PATCH", r"/messages/")


@pytest.mark.asyncio
async def test_a_failure_after_the_answer_replaced_the_preview_keeps_the_answer(
    world: World,
) -> None:
    w = world
    w.app.answerer = StreamingAnswerer(w.recorder, steps=10, gap=0.05)
    await w.start(stream_interval=0.1)
    w.recorder.expand = 2000  # the answer needs more messages than the (edited) preview
    w.say("what is the default timeout?")
    for _ in range(200):  # until the preview is posted, then posting is forbidden
        await asyncio.sleep(0.01)
        if w.stub.channels and w.sent(only_thread(w)["id"]):
            break
    w.stub.fail("POST", r"^/channels/\d+/messages$", 403)
    await w.settle()
    tid = only_thread(w)["id"]
    assert len(w.sent(tid)) >= 2  # the preview, then the refused continuation
    *_, answer, last = w.stub.of("PATCH", rf"^/channels/{tid}/messages/\d+$")
    # the answer's first part stays (cut to make room), with the failure said under it
    assert "The default timeout is thirty seconds. [1]" in answer["content"]
    body, _, said = last["content"].rpartition("\n-# ")
    assert body.endswith("…") and answer["content"].startswith(body[:-1])
    assert "Send Messages in Threads" in said and len(last["content"]) <= 2000


@pytest.mark.asyncio
async def test_a_failure_before_the_answer_replaces_the_preview(world: World) -> None:
    w = world

    class StreamsThenFails(StreamingAnswerer):
        async def answer(self, *args: Any, **kwargs: Any) -> Any:
            await super().answer(*args, **kwargs)
            raise RuntimeError("model exploded")

    w.app.answerer = StreamsThenFails(w.recorder, steps=10, gap=0.05)
    await w.start(stream_interval=0.1)
    w.say("what is the default timeout?")
    await w.settle()
    tid = only_thread(w)["id"]
    (preview,) = w.sent(tid)
    assert preview["content"].endswith(WRITING)
    last = w.stub.of("PATCH", rf"^/channels/{tid}/messages/\d+$")[-1]
    assert last["content"].startswith("Sorry, I couldn't answer that") and last["embeds"] == []


# -- DMs, feedback buttons, command sync (issue 16) ----------------------------------------------
def components(msg: dict[str, Any]) -> list[str]:
    return [c["custom_id"] for row in msg.get("components") or [] for c in row["components"]]


@pytest.mark.asyncio
async def test_feedback_buttons_under_the_answer_are_recorded_like_slacks(world: World) -> None:
    w = world
    w.say("what is the default timeout?")
    await w.settle()
    thread = only_thread(w)
    (msg,) = w.sent(thread["id"])
    (turn,) = [t for t in (await w.store._db.execute_fetchall("SELECT id FROM turns"))]
    assert components(msg) == [f"rx:feedback:up:{turn[0]}", f"rx:feedback:down:{turn[0]}"]
    for custom_id, user in ((components(msg)[1], BEA), ("rx:feedback:up:999999", ANA)):
        payload = interaction_payload(next(_ids), channel_payload(GENERAL), user, [], kind=3)
        payload["data"] = {"custom_id": custom_id, "component_type": 2}
        w.state.parse_interaction_create(payload)
        await w.settle()
    replies = [b["data"] for b in w.stub.of("POST", r"^/interactions/\d+/[^/]+/callback$")]
    assert [r["content"] for r in replies] == [
        "Thanks: noted, that helps us improve.",
        "I can't find that answer any more, so the feedback wasn't recorded.",
    ]
    assert all(r["flags"] & 64 for r in replies)  # ephemeral: only the clicker sees it
    (record,) = await w.store.feedback("widget")
    assert (record.platform, record.user, record.verdict) == ("discord", BEA["id"], "down")
    assert record.question == "what is the default timeout?"


@pytest.mark.asyncio
async def test_a_direct_message_is_answered_there_with_a_dms_instances(world: World) -> None:
    w = world
    dm = 140000000000000001
    w.stub.members = {int(ANA["id"])}  # ana is a member of the guild, bea is not
    inst = w.sample["tmp"] / "instances"  # guildonly: private, the guild only (no channel list)
    (inst / "guildonly.yaml").write_text(
        (inst / "secret.yaml").read_text().replace(f", channels: [{SECRET_CH}]", "")
    )
    await w.start()
    w.state.parse_message_create(message_payload(next(_ids), dm, "what is the default timeout?",
                                                 ANA, guild=False))  # fmt: skip
    await w.settle()
    assert "guildonly" in w.sent(dm)[-1]["content"]  # two are hers here: which one?
    w.state.parse_message_create(
        message_payload(next(_ids), dm, "widget what is the default timeout?", ANA, guild=False)
    )
    await w.settle()
    msg = w.sent(dm)[-1]  # in the DM itself (no thread there), with the buttons
    assert "thirty seconds" in msg["content"] and len(components(msg)) == 2
    assert not w.stub.of("POST", r"/threads$")
    w.state.parse_message_create(message_payload(next(_ids), dm, "where is it set?", ANA,
                                                 guild=False))  # fmt: skip
    await w.settle()
    assert w.recorder.calls[-1][1] is not None  # a follow-up: the DM is one conversation
    # Not "secret" nor "team": restricted to channels, and a DM is no channel of the guild.
    w.state.parse_message_create(message_payload(next(_ids), dm, "secret what is it?", ANA,
                                                 guild=False))  # fmt: skip
    await w.settle()
    assert w.recorder.calls[-1][0] == "secret what is it?"  # just words: asked of widget
    w.state.parse_message_create(message_payload(next(_ids), dm, "team themes?", ANA,
                                                 guild=False))  # fmt: skip
    await w.settle()
    assert "team" in w.sent(dm)[-1]["content"]  # refused: not available here
    assert len(w.recorder.calls) == 3
    # An instance of the guild only: ana (a member) may use it in her DM; bea may not.
    w.state.parse_message_create(message_payload(next(_ids), dm, "guildonly themes?", ANA,
                                                 guild=False))  # fmt: skip
    await w.settle()
    assert w.recorder.calls[-1][0] == "themes?" and len(w.recorder.calls) == 4
    dm2 = 140000000000000002
    w.state.parse_message_create(message_payload(next(_ids), dm2, "guildonly themes?", BEA,
                                                 guild=False))  # fmt: skip
    await w.settle()
    assert w.recorder.calls[-1][0] == "guildonly themes?"  # just words to bea: widget answers
    assert len(w.stub.of("GET", r"^/guilds/\d+/members/")) == 2  # once per asker (remembered)


@pytest.mark.asyncio
async def test_nothing_new_is_started_while_shutting_down(world: World) -> None:
    w = world
    assert w.bot is not None
    await w.bot.drain(grace=0)  # what SIGTERM does
    w.say("what is the default timeout?")
    w.slash("what is the default timeout?")
    await w.settle()
    assert not w.stub.of("POST", r"/threads$") and w.recorder.calls == []
    (reply,) = [b["data"] for b in w.stub.of("POST", r"^/interactions/\d+/[^/]+/callback$")]
    assert reply["content"] == "The bot is restarting: please ask again in a minute."
    assert w.bot.core.limits.active == 0


@pytest.mark.asyncio
async def test_application_commands_are_synced_only_when_they_changed(world: World) -> None:
    w = world
    puts = rf"^/applications/{APP_ID}/commands$"
    assert len(w.stub.of("PUT", puts)) == 1  # the first start
    await w.start()  # a restart with the same command
    assert len(w.stub.of("PUT", puts)) == 1
    await w.start(command="question")  # renamed: synced again
    (_, renamed) = w.stub.of("PUT", puts)
    assert [c["name"] for c in renamed] == ["question"]
    await w.start(command="question")
    assert len(w.stub.of("PUT", puts)) == 2
    w.app.layout.discord_commands.write_text("not json")  # damaged: synced, file rewritten
    await w.start(command="question")
    assert len(w.stub.of("PUT", puts)) == 3
    assert json.loads(w.app.layout.discord_commands.read_text())[str(APP_ID)]
