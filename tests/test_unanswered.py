"""The questions users asked that got no answer or a 👎: ``no_answer`` recorded per turn (both
stores, a numbered migration for old files), ``repo-expert feedback NAME --unanswered`` and
``--export-eval FILE`` (a real process), and ``eval`` refusing the skeleton until a person fills
the gold — one line, no traceback."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import ConfigError
from core.eval.metrics import load_questions
from core.models import Answer, Source
from core.store.conversations import MIGRATIONS, ConversationStore

ROOT = Path(__file__).parent.parent


def answer(no_answer: bool = False, issue: int | None = None) -> Answer:
    src = Source("issues" if issue else "docs", "T", "https://example.com/f.md", "x", 1.0,
                 path=None if issue else "docs/f.md", issue=issue, n=1)  # fmt: skip
    return Answer(text="The sources don't say." if no_answer else "A [1]", sources=[src],
                  no_answer=no_answer)  # fmt: skip


async def fill(s: Any) -> dict[str, int]:
    t = {
        "good": await s.add_turn("slack", "T:C:1", "w", "U1", "how do I retry?", answer()),
        "none": await s.add_turn("slack", "T:C:2", "w", "U1", "what is flux?", answer(True)),
        "down": await s.add_turn("discord", "9", "w", "U2", "Why does it hang?", answer(issue=4)),
        "liked": await s.add_turn("api", "k:1", "w", "U3", "where are themes?", answer()),
        "other": await s.add_turn("slack", "T:C:3", "w2", "U1", "elsewhere?", answer(True)),
    }
    await s.record_feedback("discord", t["down"], "U5", "down")
    await s.record_feedback("discord", t["down"], "U6", "down")
    await s.record_feedback("api", t["liked"], "U3", "up")
    return t


@pytest.mark.asyncio
async def test_no_answer_and_thumbs_down_are_listed_alike_on_both_stores(
    conversations: Any,
) -> None:
    s = conversations
    t = await fill(s)
    got = await s.unanswered("w")
    assert [(r.turn_id, r.no_answer, r.down) for r in got] == [
        (t["down"], False, 2),
        (t["none"], True, 0),
    ]  # newest first; the liked and the answered turn are not there, nor another instance
    assert got[0].sources[0]["issue"] == 4 and got[1].question == "what is flux?"
    assert [r.turn_id for r in await s.unanswered("w", limit=1)] == [t["down"]]


@pytest.mark.asyncio
async def test_an_old_conversations_file_gains_the_column_by_a_migration(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:  # as repo-expert wrote it before migration 3
        for m in MIGRATIONS[:2]:
            assert callable(m)
            m(db)
        db.execute("PRAGMA user_version = 2")
        db.execute(
            "INSERT INTO turns (platform, thread, instance, user, question, answer, sources, "
            "created) VALUES ('slack', 't', 'w', 'U', 'q', 'a', '[]', 1.0)"
        )
    s = await ConversationStore.open(path)
    try:
        assert await s.unanswered("w") == []  # the old turn counts as answered
        await s.add_turn("slack", "t", "w", "U", "q2", answer(True))
        assert [r.question for r in await s.unanswered("w")] == ["q2"]
    finally:
        await s.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def cli(sample: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", "--instances", str(sample["tmp"] / "instances"),
         "--data", str(sample["tmp"] / "data"), *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.asyncio
async def test_feedback_unanswered_and_the_eval_skeleton_end_to_end(
    sample: dict[str, Any], tmp_path: Path
) -> None:
    app = sample["app"]
    s = await ConversationStore.open(app.layout.conversations)
    try:
        await fill(s)  # instance w's turns: not listed for widget
        for name in ("widget", "widget"):  # the same question twice: one eval question
            await s.add_turn("slack", "T:C:9", name, "U1", "What is flux?", answer(True))
        await s.add_turn("slack", "T:C:9", "widget", "U1", "¿Dónde se configura el tema?",
                         answer(True))  # fmt: skip
        await s.add_turn("discord", "8", "widget", "U1", "Why is #4 open?", answer(issue=4))
        cur = await s._db.execute("SELECT max(id) FROM turns")
        last = (await cur.fetchone())[0]
        await s.record_feedback("discord", last, "U9", "down")
    finally:
        await s.close()

    listed = cli(sample, "feedback", "widget", "--unanswered")
    assert listed.returncode == 0, listed.stderr
    assert "widget: 4 question(s) with no answer or a 👎" in listed.stdout
    assert "Q: Why is #4 open?" in listed.stdout and "1 👎" in listed.stdout
    assert "how do I retry" not in listed.stdout  # another instance's

    out = tmp_path / "next-eval.yaml"
    wrote = cli(sample, "feedback", "widget", "--export-eval", str(out))
    assert wrote.returncode == 0, wrote.stderr
    assert "wrote 3 question(s)" in wrote.stdout
    items = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert [q["question"] for q in items] == [
        "What is flux?",
        "¿Dónde se configura el tema?",
        "Why is #4 open?",
    ]
    assert [q["route"] for q in items] == ["docs", "docs", "issues"]
    assert items[1]["lang"] == "es"
    assert all(q["gold"] == {"paths": [], "issues": []} for q in items)
    assert out.read_text(encoding="utf-8").startswith("# Questions users asked about widget")

    refused = cli(sample, "eval", "widget", "--questions", str(out))
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert "gold is empty for widget-turn-" in refused.stderr
    assert "expected gold.paths or gold.issues" in refused.stderr

    for q in items:  # what the person filling it does
        q["gold"]["paths"] = ["README.md"]
    out.write_text(yaml.safe_dump(items, allow_unicode=True), encoding="utf-8")
    assert [q.id for q in load_questions(out)] == [q["id"] for q in items]
    with pytest.raises(ConfigError, match="gold is empty for x"):
        out.write_text("- {id: x, route: docs, question: q, gold: {}}\n")
        load_questions(out)


def test_an_empty_database_says_so(tmp_path: Path, sample: dict[str, Any]) -> None:
    r = cli(sample, "feedback", "widget", "--unanswered")
    assert r.returncode == 0 and "every recorded question got an answer" in r.stdout
