"""The platform-free parts of the bots: access rules, limits, splitting, rendering within limits,
the conversations store, startup checks, and the layering between core/ and bot/."""

from __future__ import annotations

import ast
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import make_repo

from bot.common import Access, Limits, Pick, Place, Refusal, split_text
from bot.discord_render import EMBED_DESCRIPTION_LIMIT, EMBED_TOTAL_LIMIT, answer_messages
from bot.serve import check_env, serve, slack_mode
from bot.settings import ServeConfig, SlackSettings, load_serve_config
from bot.slack_blocks import answer_messages as slack_messages
from bot.slack_blocks import clean_text
from core.config import Instance, load_all
from core.errors import ConfigError, RepoExpertError
from core.models import Answer, Source, Turn
from core.service import RepoExpert
from core.store.conversations import MIGRATIONS, ConversationStore

ROOT = Path(__file__).parent.parent


def inst(name: str, access: dict[str, Any]) -> Instance:
    return Instance.model_validate({"name": name, "repo": {"path": "."}, "access": access})


def slack(channel: str, team: str = "T1") -> Place:
    return Place("slack", team, channel)


# -- access --------------------------------------------------------------------------------------
def test_access_rules_open_restricted_and_private() -> None:
    a = Access({
        "open": inst("open", {}),
        "ws": inst("ws", {"slack": {"workspaces": ["T1"]}}),
        "chan": inst("chan", {"slack": {"channels": ["C1"]}, "discord": {"channels": [7]}}),
        "priv": inst("priv", {"private": True, "slack": {"default_channels": ["C2"]}}),
        "privws": inst("privws", {"private": True, "discord": {"guilds": [5]}}),
    })  # fmt: skip
    assert a.allowed(slack("C9")) == ["open", "ws"]
    assert a.allowed(slack("C9", "T2")) == ["open"]
    assert a.allowed(slack("C1")) == ["chan", "open", "ws"]
    assert a.allowed(slack("C2")) == ["open", "priv", "ws"]  # a default channel is allowed
    # ws restricts Slack only; privws is Discord guild 5 only; ids written as ints match
    assert a.allowed(Place("discord", "5", "1")) == ["open", "privws", "ws"]
    assert a.allowed(Place("discord", "6", "7")) == ["chan", "open", "ws"]
    assert a.allowed(Place("discord", None, "1")) == ["open", "ws"]
    assert a.default(slack("C2")) == "priv"
    assert a.default(slack("C9", "T2")) == "open"  # the only one allowed there
    assert a.default(slack("C9")) is None


def test_pick_reads_the_instance_word_and_keeps_private_names_invisible() -> None:
    a = Access({
        "widget": inst("widget", {"slack": {"default_channels": ["CGEN"]}}),
        "team": inst("team", {"slack": {"channels": ["CTEAM"]}}),
        "secret": inst("secret", {"private": True, "slack": {"channels": ["CSEC"]}}),
    })  # fmt: skip
    gen, sec = slack("CGEN"), slack("CSEC")
    assert a.pick(gen, "how does it work?", "/repo") == Pick("widget", "how does it work?")
    assert a.pick(gen, "widget: how?", "/repo") == Pick("widget", "how?")
    assert a.pick(gen, "secret how?", "/repo") == Pick("widget", "secret how?")
    assert a.pick(sec, "secret how?", "/repo") == Pick("secret", "how?")
    refusal = a.pick(gen, "team how?", "/repo")
    assert isinstance(refusal, Refusal) and "`team` is not available" in refusal.message
    refusal = a.pick(gen, "how?", "/ask", named="secret")  # an explicit argument
    assert isinstance(refusal, Refusal) and "secret" not in refusal.message.split(".", 1)[1]
    assert isinstance(a.pick(sec, "how?", "/repo"), Refusal)  # secret and widget: ambiguous
    assert a.pick(sec, "how?", "/repo", current="secret") == Pick("secret", "how?")
    assert a.pick(gen, "how?", "/repo", current="secret") == Pick("widget", "how?")


def test_one_default_per_channel(tmp_path: Path) -> None:
    make_repo(tmp_path / "r", {"a.md": "# A\n"})
    d = tmp_path / "instances"
    d.mkdir()
    for n in ("one", "two"):
        (d / f"{n}.yaml").write_text(
            f"repo: {{path: {tmp_path / 'r'}}}\naccess: {{discord: {{default_channels: [42]}}}}\n"
        )
    with pytest.raises(ConfigError, match=r"two.yaml: access.discord.default_channels: .*42.*"
                                          r"instance 'one' .*one.yaml"):  # fmt: skip
        Access(load_all(d))


# -- limits --------------------------------------------------------------------------------------
def test_rate_limit_window_and_concurrency() -> None:
    now = [0.0]
    lim = Limits(per_user=2, window=10, concurrent=2, clock=lambda: now[0])
    a, b = lim.admit("u"), lim.admit("u")
    third = lim.admit("u")
    assert isinstance(third, Refusal) and "try again in 10 s" in third.message
    busy = lim.admit("v")
    assert isinstance(busy, Refusal) and "a lot of questions" in busy.message
    assert not isinstance(a, Refusal) and not isinstance(b, Refusal)
    a.release()
    a.release()  # once only
    assert lim.active == 1
    assert not isinstance(lim.admit("v"), Refusal)
    now[0] = 10.5
    b.release()
    assert not isinstance(lim.admit("u"), Refusal)  # the window moved on


# -- splitting and rendering ---------------------------------------------------------------------
def test_split_text_keeps_everything_within_the_limit() -> None:
    rng = random.Random(4)
    words = ["alpha", "beta", "\n", "\n\n", "x" * 70, "gamma,", "δέλτα"]
    for _ in range(200):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 400)))
        pieces = split_text(text, 100)
        assert all(len(p) <= 100 for p in pieces)
        assert "".join(text.split()) == "".join("".join(pieces).split())
    assert split_text("x" * 250, 100) == ["x" * 92, "x" * 92, "x" * 66]  # hard cut, nothing lost


def test_split_text_closes_and_reopens_code_fences() -> None:
    text = "Intro.\n```python\n" + "\n".join(f"line_{i} = {i}" for i in range(40)) + "\n```\nEnd."
    pieces = split_text(text, 120)
    assert len(pieces) > 2
    assert all(p.count("```") % 2 == 0 and len(p) <= 120 for p in pieces)


def answer_with(n_sources: int, text: str = "See [1].", title: str = "T") -> Answer:
    sources = [
        Source(
            "docs",
            title,
            f"https://example.com/f{i}.md#L1-L2",
            "x",
            1.0,
            path=f"f{i}.md",
            start_line=1,
            end_line=2,
            n=i,
        )
        for i in range(1, n_sources + 1)
    ]
    return Answer(text=text, sources=sources)


def test_slack_blocks_respect_section_and_block_limits() -> None:
    a = answer_with(3, "Use <b> & [1] " + "word " * 3000 + "[3]")
    msgs = slack_messages(a, turn_id=9, section_limit=500, max_blocks=10)
    assert len(msgs) > 1
    for m in msgs:
        assert len(m.blocks) <= 10
        for b in m.blocks:
            if b["type"] == "section":
                assert len(b["text"]["text"]) <= 500
    first = msgs[0].blocks[0]["text"]["text"]
    assert first.startswith("Use &lt;b&gt; &amp; <https://example.com/f1.md#L1-L2|[1]>")
    assert msgs[-1].blocks[-2]["type"] == "actions"
    assert sum(json.dumps(m.blocks).count("word") for m in msgs) == 3000
    no_sources = slack_messages(Answer(text="Nothing.", sources=[]), turn_id=None)
    assert [b["type"] for b in no_sources[0].blocks] == ["section"]
    # an index in quoted code is not a citation: kept as written, not linked
    code = slack_messages(answer_with(2, "Read `args[1]` first [2]."), turn_id=None)
    assert "Read `args[1]` first <https://example.com/f2.md#L1-L2|[2]>" in json.dumps(
        code[0].blocks
    )


def test_discord_sources_embeds_respect_embed_limits() -> None:
    a = answer_with(50, "Text [1].", title="A long heading " * 8)
    msgs = answer_messages(a)
    embeds = [e for m in msgs for e in m.embeds]
    assert len(embeds) > 1
    for m in msgs:
        assert len(m.embeds) <= 10
        assert sum(len(e.title or "") + len(e.description or "") for e in m.embeds) <= (
            EMBED_TOTAL_LIMIT
        )
        assert all(len(e.description or "") <= EMBED_DESCRIPTION_LIMIT for e in m.embeds)
    listed = "\n".join(e.description or "" for e in embeds)
    assert [f"**[{i}]**" in listed for i in range(1, 51)] == [True] * 50
    assert msgs[0].content == "Text [1]."


def test_clean_text_reads_what_the_person_typed() -> None:
    raw = "<@UBOT> is &lt;b&gt; safe? see <https://x.io/a|the doc> &amp; <https://y.io>"
    assert clean_text(raw, "UBOT") == "is <b> safe? see the doc & https://y.io"


# -- conversations store --------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_conversation_store_history_feedback_and_migrations(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    s = await ConversationStore.open(path)
    a = answer_with(1, "A [1]")
    t1 = await s.add_turn("slack", "T:C:1", "w", "U1", "q1", a)
    await s.add_turn("slack", "T:C:1", "w", "U1", "q2", a)
    await s.add_turn("slack", "T:C:1", "w2", "U1", "q3", a)
    await s.add_turn("discord", "T:C:1", "w", "U1", "other platform", a)
    assert await s.history("slack", "T:C:1", 2) == [Turn("q2", "A [1]"), Turn("q3", "A [1]")]
    assert await s.thread_instance("slack", "T:C:1") == "w2"
    assert await s.thread_instance("slack", "T:C:2") is None
    assert await s.record_feedback("discord", t1, "U2", "up") is None  # wrong platform
    assert await s.record_feedback("slack", 999, "U2", "up") is None
    rec = await s.record_feedback("slack", t1, "U2", "up")
    assert rec is not None and (rec.question, rec.verdict, rec.instance) == ("q1", "up", "w")
    assert rec.sources[0]["url"] == "https://example.com/f1.md#L1-L2"
    assert "text" not in rec.sources[0]
    await s.record_feedback("slack", t1, "U2", "down")
    assert [(r.user, r.verdict) for r in await s.feedback("w")] == [("U2", "down")]
    await s.close()
    s = await ConversationStore.open(path)  # reopening migrates nothing again
    assert len(await s.feedback("w")) == 1
    await s.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(RepoExpertError, match="newer than this program"):
        await ConversationStore.open(path)


# -- startup -------------------------------------------------------------------------------------
def test_env_check_names_variables_never_values() -> None:
    cfg = ServeConfig()
    with pytest.raises(ConfigError) as e:
        check_env("all", cfg, {"SLACK_BOT_TOKEN": "xoxb-secret-value"})
    msg = str(e.value)
    assert "SLACK_APP_TOKEN" in msg and "DISCORD_TOKEN" in msg and "SLACK_BOT_TOKEN" not in msg
    assert "xoxb-secret-value" not in msg
    with pytest.raises(ConfigError, match="app-level token"):
        check_env("slack", cfg, {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xoxb-oops"})
    check_env("slack", cfg, {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"})
    assert slack_mode(SlackSettings(), {"SLACK_SIGNING_SECRET": "s"}) == "http"
    assert slack_mode(SlackSettings(), {"SLACK_APP_TOKEN": "xapp-1"}) == "socket"
    assert slack_mode(SlackSettings(mode="http"), {"SLACK_APP_TOKEN": "xapp-1"}) == "http"
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        check_env("slack", ServeConfig(slack=SlackSettings(mode="http")),
                  {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"})  # fmt: skip


@pytest.mark.asyncio
async def test_serve_validates_instances_before_connecting(sample: dict[str, Any]) -> None:
    app: RepoExpert = sample["app"]
    inst_dir = sample["tmp"] / "instances"
    widget = (inst_dir / "widget.yaml").read_text()
    (inst_dir / "other.yaml").write_text(widget + "access: {slack: {default_channels: [C1]}}\n")
    (inst_dir / "widget.yaml").write_text(widget + "access: {slack: {default_channels: [C1]}}\n")
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}  # never used: fails first
    with pytest.raises(ConfigError, match="one default per channel"):
        await serve("slack", app, ServeConfig(), env)
    (inst_dir / "other.yaml").write_text(widget + "acess: {}\n")
    with pytest.raises(ConfigError, match="acess: unknown key"):
        await serve("slack", app, ServeConfig(), env)


def test_serve_settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "serve.yaml"
    f.write_text("slack: {command: '/ask-repo', mode: '${SLACK_MODE:-http}'}\nrate_limit: 3\n")
    cfg = load_serve_config(str(f))
    assert (cfg.slack.command, cfg.slack.mode, cfg.rate_limit) == ("/ask-repo", "http", 3)
    monkeypatch.setenv("REPO_EXPERT_SERVE_CONFIG", str(f))
    assert load_serve_config().rate_limit == 3
    f.write_text("slack: {command: repo}\n")
    with pytest.raises(ConfigError, match=r"slack.command: .*starts with '/'"):
        load_serve_config(str(f))


# -- layering -------------------------------------------------------------------------------------
def imports(path: Path) -> list[tuple[str, ast.AST]]:
    out: list[tuple[str, ast.AST]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node))
        elif isinstance(node, ast.Import):
            out += [(a.name, node) for a in node.names]
    return out


def test_bot_imports_only_the_core_surface_and_core_not_bot() -> None:
    allowed = {"core.service", "core.models", "core.config", "core.store.conversations",
               "core.errors", "core.answer", "core.ops.health", "core.ops.metrics"}  # fmt: skip
    for f in (ROOT / "bot").glob("*.py"):
        for mod, _ in imports(f):
            if mod.startswith("core"):
                assert mod in allowed, f"{f.name} imports {mod}"
    for f in (ROOT / "core").rglob("*.py"):
        tree = ast.parse(f.read_text())
        top_level = {id(n) for n in tree.body}
        for mod, node in imports(f):
            if mod.split(".")[0] == "bot":
                # Only the CLI's `serve` command reaches up to start the bots, inside it.
                where = f.relative_to(ROOT / "core").as_posix()
                assert where == "cli/__init__.py" and id(node) not in top_level, (
                    f"{f} imports {mod}"
                )


# -- deployment files ----------------------------------------------------------------------------
def test_manifest_and_procfile_match_the_bot() -> None:
    import yaml

    from core.cli import parser

    m = yaml.safe_load((ROOT / "slack-manifest.yaml").read_text())
    (cmd,) = m["features"]["slash_commands"]
    assert cmd["command"] == SlackSettings().command
    assert set(m["settings"]["event_subscriptions"]["bot_events"]) >= {"app_mention"}
    scopes = set(m["oauth_config"]["scopes"]["bot"])
    assert scopes >= {"app_mentions:read", "chat:write", "commands", "reactions:write"}
    assert m["settings"]["interactivity"]["is_enabled"] and m["settings"]["socket_mode_enabled"]
    # Direct messages (bot/slack.py on_message): the event, its scope and the Messages tab.
    assert "message.im" in m["settings"]["event_subscriptions"]["bot_events"]
    assert "im:history" in scopes and m["features"]["app_home"]["messages_tab_enabled"]
    assert not m["features"]["app_home"]["messages_tab_read_only_enabled"]
    # Support channels (bot/support.py): every message of a channel, and the stop reaction.
    events = set(m["settings"]["event_subscriptions"]["bot_events"])
    assert {"message.channels", "reaction_added"} <= events and "reactions:read" in scopes
    procs = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, command = line.split(":", 1)
            argv = command.split()
            assert argv[0] == "repo-expert"
            procs[name] = parser().parse_args(argv[1:])  # every command exists
    serve = {n: a.platform for n, a in procs.items() if a.cmd == "serve"}
    assert serve == {"web": "api", "slack": "slack", "discord": "discord", "webhooks": "webhooks"}
    assert procs["sync"].cmd == "sync" and procs["sync"].watch


def test_cli_serve_without_tokens_names_what_is_missing(sample: dict[str, Any]) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "DISCORD_"))}
    r = subprocess.run(
        [sys.executable, "-m", "core.cli", "--instances", str(sample["tmp"] / "instances"),
         "--data", str(sample["tmp"] / "data"), "serve", "all"],
        capture_output=True, text=True, timeout=60, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    assert r.returncode == 2
    assert "missing environment variables" in r.stderr and "DISCORD_TOKEN" in r.stderr


def test_unsupported_sentences_are_shown_on_both_platforms() -> None:
    src = Source(collection="docs", title="Guide", url="https://x/README.md#L1", text="t",
                 score=0.9, path="README.md", start_line=1, end_line=2, n=1)  # fmt: skip
    a = Answer(text="The timeout is 30s [1].", sources=[src], unsupported=["The timeout is 30s."])
    d = answer_messages(a)
    assert "Not supported by the sources they cite" in d[0].content
    assert "The timeout is 30s." in d[0].content.split("⚠", 1)[1]
    blocks = slack_messages(a, turn_id=None)[0].blocks
    texts = json.dumps(blocks, ensure_ascii=False)
    assert "Not supported by the sources they cite" in texts
    plain = Answer(text="The timeout is 30s [1].", sources=[src])
    assert "Not supported" not in json.dumps(slack_messages(plain, turn_id=None)[0].blocks)
