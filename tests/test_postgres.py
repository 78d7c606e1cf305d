"""The PostgreSQL side beyond the index contract: the conversations twin, the shared state read
by ``status``, migrations (numbered, concurrent, a newer schema refused), the store setting (one
line for a bad URL, the password never shown), and the faces that enqueue instead of syncing.
A real server (tests/pg.py), one fresh database per test."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers import FakeApp

from bot.webhooks import SyncScheduler
from core.cli import main
from core.cli.watch import Queued, watch
from core.errors import ConfigError, StoreError
from core.models import Answer, Source, Turn
from core.service import SyncRequest
from core.store.postgres.db import Database, migrate
from core.store.postgres.schema import MIGRATIONS
from core.store.postgres.url import redact


def an_answer() -> Answer:
    src = Source("docs", "T", "https://example.com/f1.md#L1-L2", "x", 1.0, path="f1.md", n=1)
    return Answer(text="A [1]", sources=[src])


# -- conversations: the same behaviour on both stores ---------------------------------------
@pytest.mark.asyncio
async def test_conversations_twins_behave_alike(conversations: Any) -> None:
    s = conversations
    a = an_answer()
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


# -- migrations -------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_migrations_run_once_even_when_processes_race(pg_url: str) -> None:
    dbs = [Database(pg_url) for _ in range(3)]
    await asyncio.gather(*(d.pool() for d in dbs))  # three "processes" migrate at once
    conn = await dbs[0].connect()
    try:
        assert await conn.fetchval("SELECT version FROM rx_schema") == len(MIGRATIONS)
        assert await conn.fetchval("SELECT count(*) FROM rx_schema") == 1
        assert await migrate(conn, MIGRATIONS, "db") == len(MIGRATIONS)  # nothing left to do
    finally:
        await conn.close()
        for d in dbs:
            await d.close()


@pytest.mark.asyncio
async def test_a_newer_database_schema_is_refused_with_one_line(pg_url: str) -> None:
    db = Database(pg_url)
    await db.pool()
    await (await db.pool()).execute("UPDATE rx_schema SET version = version + 1")
    await db.close()
    newer = len(MIGRATIONS) + 1
    with pytest.raises(
        StoreError, match=rf"database schema {newer} is newer than this program knows"
    ):
        await Database(pg_url).pool()


# -- the store setting ----------------------------------------------------------------------
def test_the_password_is_masked_wherever_the_url_is_shown() -> None:
    url = "postgresql://bot:s3cr3t-pw@db.internal:5432/rx?sslmode=require"
    assert redact(url) == "postgresql://bot:***@db.internal:5432/rx?sslmode=require"
    assert "s3cr3t" not in Database(url).where


@pytest.mark.asyncio
async def test_an_unreachable_database_is_one_line_without_the_password(tmp_path: Path) -> None:
    db = Database(f"postgresql://bot:s3cr3t-pw@/rx?host={tmp_path}")  # no server there
    with pytest.raises(StoreError) as e:
        await db.pool()
    assert "cannot connect" in str(e.value) and "s3cr3t" not in str(e.value)
    assert "***" in str(e.value)


def test_a_bad_store_setting_is_one_line(
    sample: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    inst = str(sample["tmp"] / "instances")
    rc = main(["--instances", inst, "--store", "mysql://u:hunter2@h/db", "instances"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "postgresql://" in err
    assert "hunter2" not in err and "Traceback" not in err
    with pytest.raises(ConfigError, match="shared store"):  # no queue without PostgreSQL
        asyncio.run(sample["app"].enqueue("widget"))


def test_worker_needs_a_shared_store(
    sample: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["--instances", str(sample["tmp"] / "instances"), "worker", "--once"])
    assert rc == 2 and "REPO_EXPERT_STORE" in capsys.readouterr().err


# -- shared state and the faces that enqueue ---------------------------------------------------
@pytest.mark.asyncio
async def test_status_reads_the_shared_state_and_faces_enqueue(
    sample: dict[str, Any], pg_url: str
) -> None:
    tmp = sample["tmp"]
    a = FakeApp(tmp / "instances", tmp / "data-a", store=pg_url)
    b = FakeApp(tmp / "instances", tmp / "data-b", store=pg_url)  # another machine's folder
    try:
        await a.index("widget")
        st = await b.status("widget")  # b never synced: it reads what a recorded
        assert st["last_sync_ok"] is True and st["indexed_commit"] == sample["sha"]
        assert not (tmp / "data-a" / "widget" / "state.sqlite").exists()
        live = await b.store.live_id("widget")
        # The webhook receiver queues; it builds nothing itself.
        sched = SyncScheduler(b, debounce=0.01)
        sched.request("widget", SyncRequest(repo=False, issues=True, numbers=frozenset({7})))
        sched.request("widget", SyncRequest(repo=True, issues=False))
        await sched.idle()
        # `sync --watch` queues too; everything merges into the one queued job.
        seen: list[Any] = []
        stop = asyncio.Event()
        task = asyncio.create_task(
            watch(b, ["widget"], lambda n, r: (seen.append(r), stop.set()), stop=stop)
        )
        await asyncio.wait_for(task, 10)
        assert isinstance(seen[0], Queued) and seen[0].line().startswith("queued sync of widget")
        jobs = await b.backend.jobs.jobs("widget")
        assert [j["state"] for j in jobs] == ["queued"] and jobs[0]["id"] == seen[0].job
        assert jobs[0]["request"]["numbers"] == [7] and jobs[0]["request"]["repo"] is True
        assert await b.store.live_id("widget") == live
    finally:
        await a.close()
        await b.close()
