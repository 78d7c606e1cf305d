"""Issue 17, item 1: nothing a question, an issue or a model writes becomes markup on a chat
platform — no live ``@channel``, no ping, no spoofed link — through the real Bolt app and the real
discord.py client over their wire stand-ins."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import discord
import pytest
import pytest_asyncio
from rigs import DiscordRig, SlackRig, close_slack, live_slack_markup, slack_rig
from stub_discord_api import StubDiscordApi

from bot.slack_blocks import clean_text
from core.store.conversations import ConversationStore

EVIL = "https://evil.example"
HOSTILE_ISSUE = {
    "number": 66,
    "title": "Deploy guide <!channel> [docs](https://evil.example/t)",
    "body": "The deploy guide says: <!channel> <@U0ADMIN> read [github.com/acme](https://evil."
    "example/phish) before every deploy.",
    "state": "OPEN", "labels": [], "comments": [],
    "url": "https://github.com/acme/widget/issues/66|x> <!channel> <https://evil.example/",
    "createdAt": "2024-01-01T00:00:00Z", "closedAt": None,
}  # fmt: skip
QUESTION = "what does the deploy guide say before every deploy?"


def add_hostile_issue(sample: dict[str, Any]) -> None:
    path = sample["tmp"] / "issues.json"
    path.write_text(json.dumps([*json.loads(path.read_text()), HOSTILE_ISSUE]))


def assert_no_live_markup(texts: list[str], allowed_user: str = "U1") -> None:
    """Only the asker's mention and links to the repository's own pages may be markup."""
    for text in texts:
        for m in live_slack_markup(text):
            inner = m[1:-1]
            if inner == f"@{allowed_user}":
                continue
            url, _, _label = inner.partition("|")
            assert re.fullmatch(r"https://github\.com/acme/widget/[\w./#%-]+", url), (m, text)


@pytest_asyncio.fixture
async def slack(sample: dict[str, Any]) -> AsyncIterator[SlackRig]:
    add_hostile_issue(sample)
    rig, _ = await slack_rig(sample)
    yield rig
    await close_slack(rig)


@pytest.mark.asyncio
async def test_a_typed_channel_mention_and_link_are_echoed_as_text(slack: SlackRig) -> None:
    # What Slack sends for a typed "<!channel> <@U0ADMIN> <https://evil|https://github.com/…>"
    # (escaped), then a real @here and a real mention of someone.
    typed = "&lt;!channel&gt; &lt;@U0ADMIN&gt; &lt;https://evil.example|https://github.com/acme&gt;"
    await slack.send(slack.command(f"{typed} <!here> <@U0BOSS> where is the timeout set?"))
    await slack.settle()
    root = slack.stub.of("chat.postMessage")[0]["text"]
    assert root.startswith("<@U1> asked *widget*:\n> ")
    assert "&lt;!channel&gt;" in root and "@here" in root and "@U0BOSS" in root
    assert_no_live_markup(slack.posted_texts())


@pytest.mark.asyncio
async def test_an_issue_body_and_url_cannot_write_markup_into_the_answer(slack: SlackRig) -> None:
    await slack.send(slack.mention(QUESTION, "100.000100"))
    await slack.settle()
    (update,) = slack.stub.of("chat.update")
    shown = "\n".join(slack.posted_texts())
    assert "deploy guide" in shown.lower() and "#66" in shown  # the issue was the answer
    assert "<!channel>" not in update["text"]  # the notification text, too
    assert_no_live_markup(slack.posted_texts())
    assert f"<{EVIL}" not in shown


def test_clean_text_turns_markup_into_the_words_it_shows() -> None:
    raw = "<@UBOT> <!channel> <!subteam^S1|@ops> <#C1|general> <@U2> <mailto:a@b.c|mail> &lt;x&gt;"
    assert clean_text(raw, "UBOT") == "@channel @ops #general @U2 mail <x>"


# -- Discord -----------------------------------------------------------------------------------
@pytest_asyncio.fixture
async def discord_rig(sample: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    add_hostile_issue(sample)
    from stub_bot_core import add_instances

    add_instances(sample)
    stub = StubDiscordApi()
    await stub.start()
    monkeypatch.setattr(discord.http.Route, "BASE", stub.base)
    store = await ConversationStore.open(sample["tmp"] / "conversations.sqlite")
    rig = DiscordRig(sample, stub, store)
    await rig.start()
    yield rig
    assert rig.bot is not None
    await rig.bot.drain()
    await rig.bot.close()
    await store.close()
    await stub.stop()


_LINK = re.compile(r"\]\(\s*<?\s*(https?://[^)\s>]*)")


def links(text: str) -> list[str]:
    """The destinations of the masked links Discord would render in ``text`` (outside code)."""
    text = re.sub(r"```.*?(?:```|$)|`[^`\n]*`", "", text, flags=re.S)
    return _LINK.findall(text)


@pytest.mark.asyncio
async def test_discord_renders_no_masked_link_from_issues_questions_or_models(
    discord_rig: DiscordRig,
) -> None:
    rig = discord_rig
    rig.say(QUESTION)
    rig.slash(f"[github.com/acme]({EVIL}/q) {QUESTION}")
    await rig.settle()
    posts = rig.posts()
    contents = [str(p.get("content") or "") for p in posts]
    assert any("deploy guide" in c.lower() for c in contents)
    embeds = [e for p in posts for e in p.get("embeds") or []]
    assert any("#66" in str(e.get("description")) for e in embeds)
    for text in contents + [str(e.get("description") or "") for e in embeds]:
        assert all(not u.startswith(EVIL) for u in links(text)), text
        assert all(u.startswith("https://github.com/acme/widget/") for u in links(text)), text
    for p in posts:  # mentions stay disabled on every message
        assert p["allowed_mentions"]["parse"] == [], p


@pytest.mark.asyncio
async def test_a_typed_instance_name_cannot_break_out_of_code(discord_rig: DiscordRig) -> None:
    rig = discord_rig
    rig.slash("where is the timeout?", instance=f"x` [a]({EVIL}) `")
    await rig.settle()
    (reply,) = rig.posts()
    assert links(str(reply["content"])) == []
