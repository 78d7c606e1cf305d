"""Robustness claims that only show under failure or load, tested with real components.

- The state file's schema migrations run in one transaction with the version bump: a process
  killed mid-migration (a real child process, SIGKILLed from inside SQLite) leaves the file at
  the old version with its data intact, and the next open completes the migration.
- Decoding a big issues mirror (JSON, then ``Issue`` objects) runs off the event loop: a ticker
  task keeps being scheduled while it loads.
- ``repo.token`` needs git >= 2.31; an older ``git`` (a real fake executable first on PATH)
  gives an error that names the instance file, before any git command sees the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.config import load_instance
from core.errors import SourceError
from core.ingest import repo as repo_source
from core.ingest.issues import keep_issue
from core.ingest.mirror import mirrored_issues, row_to_issue
from core.ingest.repo import checkout
from core.layout import Layout
from core.store import state
from core.store.state import IssueRow, StateDB

ROOT = Path(__file__).parent.parent


# -- 1. migrations: all or nothing -------------------------------------------------------------
# Run in a child process. SQLite calls crash() when a migration runs ``SELECT crash()``, and
# crash() SIGKILLs the process there: mid-transaction, after the statements before it ran.
CHILD = r"""
import asyncio, os, signal, sys
from pathlib import Path

import sqlite3

from core.store import state

path, mode = Path(sys.argv[1]), sys.argv[2]


def crash():
    os.kill(os.getpid(), signal.SIGKILL)


_connect = sqlite3.connect


def connect(*args, **kw):  # every connection, aiosqlite's included, knows crash()
    db = _connect(*args, **kw)
    db.create_function("crash", 0, crash)
    return db


sqlite3.connect = connect

if mode == "fresh":  # the real first migration, killed after its first statement
    stmts = [s for s in state.MIGRATIONS[0].split(";") if s.strip()]
    assert len(stmts) >= 2, stmts
    state.MIGRATIONS[0] = ";".join(stmts[:1] + ["SELECT crash()"] + stmts[1:])
else:  # two new migrations, killed at the end of the second one
    state.MIGRATIONS += [sys.argv[3], sys.argv[4] + "; SELECT crash(); CREATE TABLE never (x)"]


async def main():
    db = await state.StateDB.open(path)
    print("opened", flush=True)
    await db.close()


asyncio.run(main())
"""

# Migrations 2 and 3 of a future schema: each changes existing rows as well as the schema.
M2 = (
    "ALTER TABLE issues ADD COLUMN note TEXT; UPDATE issues SET note = 'note ' || number; "
    "INSERT INTO kv VALUES ('migrated', '2')"
)
M3 = (
    "CREATE TABLE notes (number INTEGER PRIMARY KEY, text TEXT NOT NULL); "
    "INSERT INTO notes SELECT number, note FROM issues; UPDATE issues SET state = upper(state); "
    "DELETE FROM kv WHERE key = 'issues_mark'"
)


def run_child(path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(path), mode, M2, M3],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )  # fmt: skip


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as c:
        return int(c.execute("PRAGMA user_version").fetchone()[0])


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as c:
        return {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path) as c:
        return [r[1] for r in c.execute(f"PRAGMA table_info({table})")]


def killed_mid_migration(r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stdout, r.stderr)
    assert "opened" not in r.stdout


ROWS = [
    IssueRow(7, False, "open", "2024-01-02T00:00:00Z", {"title": "Dark theme", "comments": 1}),
    IssueRow(42, True, "closed", "2024-01-03T00:00:00Z", {"title": "Timeout", "comments": 0}),
]
COMMENTS = [{"id": 1, "author": "ana", "created_at": "2024-01-02T00:00:00Z", "body": "same"}]


@pytest.mark.asyncio
async def test_a_first_migration_killed_midway_leaves_no_half_schema(tmp_path: Path) -> None:
    path = tmp_path / "inst" / "state.sqlite"
    path.parent.mkdir()
    killed_mid_migration(run_child(path, "fresh"))
    # The statement before the kill (CREATE TABLE ...) is not there: still version 0, empty.
    assert user_version(path) == 0
    assert tables(path) == set()
    async with await StateDB.open(path) as db:  # the next open runs the whole migration
        assert await db.store_issues(ROWS, {"issues_mark": "2024-01-03T00:00:00Z"}) == 2
        await db.set_etag("https://api.github.com/x", '"e1"')
    assert user_version(path) == len(state.MIGRATIONS)
    assert {"kv", "issues", "etags"} <= tables(path)


@pytest.mark.asyncio
async def test_an_upgrade_killed_midway_keeps_the_old_version_and_data_then_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "inst" / "state.sqlite"
    async with await StateDB.open(path) as db:  # the current schema, with data in every table
        await db.store_issues(ROWS, {"issues_mark": "2024-01-03T00:00:00Z"})
        await db.store_comments(7, COMMENTS, "2024-01-02T00:00:00Z")
        await db.set_etag("https://api.github.com/x", '"e1"')
    old = len(state.MIGRATIONS)
    assert user_version(path) == old

    killed_mid_migration(run_child(path, "upgrade"))  # in migration old + 2, after old + 1 ran

    assert user_version(path) == old
    assert "note" not in columns(path, "issues")
    assert not {"notes", "never"} & tables(path)

    async def check_data(db: StateDB, states: tuple[str, str]) -> None:
        rows = await db.rows()
        assert [(r.number, r.is_pr, r.state, r.data) for r in rows] == [
            (7, False, states[0], ROWS[0].data),
            (42, True, states[1], ROWS[1].data),
        ]
        assert rows[0].comments == COMMENTS and not rows[0].pending
        assert await db.etag("https://api.github.com/x") == '"e1"'

    async with await StateDB.open(path) as db:  # this code: nothing pending, data intact
        await check_data(db, ("open", "closed"))
        assert await db.get("issues_mark") == "2024-01-03T00:00:00Z"
        assert await db.get("migrated") is None
    assert user_version(path) == old

    # A later open by the code that has both migrations completes them, once.
    monkeypatch.setattr(state, "MIGRATIONS", [*state.MIGRATIONS, M2, M3])
    async with await StateDB.open(path) as db:
        await check_data(db, ("OPEN", "CLOSED"))
        assert await db.get("issues_mark") is None
        assert await db.get("migrated") == 2
    assert user_version(path) == old + 2
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT * FROM notes ORDER BY number").fetchall() == [
            (7, "note 7"),
            (42, "note 42"),
        ]
    async with await StateDB.open(path) as db:  # and not again
        assert await db.get("migrated") == 2
    assert user_version(path) == old + 2


# -- 2. the issues mirror decodes off the event loop -------------------------------------------
N_ISSUES, N_COMMENTS = 3000, 25


def fill_mirror(path: Path) -> list[tuple[Any, ...]]:
    """Thousands of issues with comments, written straight into a real state file."""
    raw = []
    for n in range(1, N_ISSUES + 1):
        data = {
            "title": f"Issue {n} about the renderer",
            "body": "The chart renderer drops points when the timeout fires. " * 40,
            "labels": ["bug", "renderer"],
            "url": f"https://github.com/acme/widget/issues/{n}",
            "author": "ana",
            "created_at": "2024-01-01T00:00:00Z",
            "closed_at": "",
            "comments": N_COMMENTS,
        }
        comments = [
            {"id": n * 100 + i, "author": f"user{i}", "created_at": "2024-01-02T00:00:00Z",
             "body": f"Comment {i}: seen it too with widget.toml settings. " * 6}
            for i in range(N_COMMENTS)
        ]  # fmt: skip
        up = "2024-01-02T00:00:00Z"
        raw.append((n, n % 3 == 0, "open", up, json.dumps(data), json.dumps(comments), up))
    with sqlite3.connect(path) as c:
        c.executemany(
            "INSERT INTO issues (number, is_pr, state, updated_at, data, comments, comments_for)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            raw,
        )
    return raw


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """A full garbage collection holds the GIL whichever thread triggers it (tens of ms among
    100k fresh objects): not the code under test blocking the loop, so none runs meanwhile."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def max_tick_gap(load: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """Run ``load`` while a task ticks every millisecond; the longest time between two ticks."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    with no_gc():
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        gaps.clear()
        try:
            result = await load()
        finally:
            done.set()
            await task
    return max(gaps, default=float("inf")), result


async def best_of_three(load: Callable[[], Awaitable[Any]], budget: float) -> tuple[float, Any]:
    """The smallest max gap of up to three loads (a busy machine may stall one of them; code
    that decodes on the loop stalls them all)."""
    best, result = float("inf"), None
    for _ in range(3):
        gap, result = await max_tick_gap(load)
        best = min(best, gap)
        if best < budget:
            break
    return best, result


@pytest.mark.asyncio
async def test_loading_a_big_mirror_does_not_block_the_event_loop(tmp_path: Path) -> None:
    inst_file = tmp_path / "widget.yaml"
    inst_file.write_text("repo: {path: .}\nissues: {github: acme/widget, pull_requests: false}\n")
    inst = load_instance(inst_file)
    data_dir = tmp_path / "data"
    path = Layout(data_dir).state(inst.name)
    async with await StateDB.open(path):
        pass  # the schema
    raw = fill_mirror(path)

    # What each stage costs when it runs on the calling thread (here, before any ticking; the
    # faster of two runs, as the loads below run on warm memory too).
    decode_s = convert_s = float("inf")
    with no_gc():
        for _ in range(2):
            t0 = time.perf_counter()
            rows = [IssueRow(n, bool(p), s, u, json.loads(d), json.loads(c), f)
                    for n, p, s, u, d, c, f in raw]  # fmt: skip
            t1 = time.perf_counter()
            kept = [i for i in (row_to_issue(r) for r in rows) if keep_issue(i, inst.issues)]
            t2 = time.perf_counter()
            decode_s, convert_s = min(decode_s, t1 - t0), min(convert_s, t2 - t1)
            del rows
    del raw
    assert decode_s > 0.03 and convert_s > 0.03, f"too little work: {decode_s=} {convert_s=}"

    async def read_rows() -> list[IssueRow]:
        async with await StateDB.open(path) as db:
            return await db.rows()

    # Decoding on the loop would stall the ticker for about the whole decode; in a thread the
    # GIL hands the loop a turn every few milliseconds.
    budget = decode_s / 3
    gap, got_rows = await best_of_three(read_rows, budget)
    assert len(got_rows) == N_ISSUES and len(got_rows[-1].comments) == N_COMMENTS
    assert gap < budget, (
        f"StateDB.rows stalled the loop {gap:.3f}s (decoding takes {decode_s:.3f}s)"
    )
    del got_rows

    # mirrored_issues runs two stages (decode, then convert) and hands the loop more objects
    # to collect: a looser budget, still well under either stage run on the loop.
    budget = 0.6 * min(decode_s, convert_s)
    gap, issues = await best_of_three(lambda: mirrored_issues(inst, Layout(data_dir)), budget)
    assert [i.number for i in issues] == [i.number for i in kept]  # pull requests filtered out
    assert gap < budget, (
        f"mirrored_issues stalled the loop {gap:.3f}s "
        f"(decoding takes {decode_s:.3f}s, converting {convert_s:.3f}s)"
    )


# -- 3. repo.token and the git version ---------------------------------------------------------
FAKE_GIT = """#!/bin/sh
# A stand-in git: reports version {version}, records every call, runs nothing.
echo "$* | GIT_CONFIG_COUNT=${{GIT_CONFIG_COUNT:-}}" >> "{log}"
if [ "$1" = "--version" ]; then echo "git version {version}"; exit 0; fi
echo "fake git: not running $1" >&2
exit 1
"""
TOKEN = "ghp_s3cretvalue"


@pytest.fixture
def fake_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Path]]:
    """``fake_git("2.30.1")`` puts a git reporting that version first on PATH; returns its log."""
    bin_dir, log = tmp_path / "fakebin", tmp_path / "git-calls.log"

    def install(version: str) -> Path:
        bin_dir.mkdir(exist_ok=True)
        exe = bin_dir / "git"
        exe.write_text(FAKE_GIT.format(version=version, log=log))
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        repo_source._git_version.cache_clear()  # the version is read once per process
        return log

    yield install
    repo_source._git_version.cache_clear()  # the next test sees the real git again


def private_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PRIVATE_REPO_TOKEN", TOKEN)
    inst_dir = tmp_path / "instances"
    inst_dir.mkdir()
    f = inst_dir / "private.yaml"
    f.write_text(
        "repo: {url: 'https://git.example.invalid/acme/private.git', "
        "token: '${PRIVATE_REPO_TOKEN}'}\n"
    )
    return f


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.asyncio
@pytest.mark.parametrize("version", ["2.30.1", "2.9.5", "1.8.3.1", "2.25.1 (Apple Git-128)"])
async def test_repo_token_with_git_older_than_2_31_names_the_instance_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_git: Callable[[str], Path], version: str
) -> None:
    log = fake_git(version)
    inst = load_instance(private_instance(tmp_path, monkeypatch))
    with pytest.raises(SourceError) as e:
        await checkout(inst, Layout(tmp_path / "data"))
    msg = str(e.value)
    assert msg.startswith(
        f"{(tmp_path / 'instances' / 'private.yaml').resolve()}: repo.token needs git 2.31"
    )
    assert ".".join(version.split(".")[:2]) in msg  # the git it found
    assert TOKEN not in msg
    assert calls(log) == ["--version | GIT_CONFIG_COUNT="]  # no clone was tried
    assert not (tmp_path / "data" / inst.name / "checkout").exists()


@pytest.mark.asyncio
@pytest.mark.parametrize("version", ["2.31.0", "2.39.2 (Apple Git-143)", "3.0.0"])
async def test_repo_token_with_git_2_31_or_newer_passes_it_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_git: Callable[[str], Path], version: str
) -> None:
    log = fake_git(version)
    inst = load_instance(private_instance(tmp_path, monkeypatch))
    with pytest.raises(SourceError, match="cannot clone") as e:  # the fake git clones nothing
        await checkout(inst, Layout(tmp_path / "data"))
    assert "2.31" not in str(e.value) and TOKEN not in str(e.value)
    got = calls(log)
    assert got[0] == "--version | GIT_CONFIG_COUNT="
    clone = [c for c in got if " clone " in f" {c}"]
    assert len(clone) == 1 and clone[0].endswith("| GIT_CONFIG_COUNT=1"), got
    assert TOKEN not in log.read_text()  # not on the command line


def test_the_cli_reports_an_old_git_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_git: Callable[[str], Path]
) -> None:
    log = fake_git("2.30.1")
    f = private_instance(tmp_path, monkeypatch)
    # The child inherits PATH (the fake git first) and the token from the environment.
    r = subprocess.run(
        [sys.executable, "-m", "core.cli", "--instances", str(f.parent),
         "--data", str(tmp_path / "data"), "index", "private"],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [
        f"repo-expert: {f.resolve()}: repo.token needs git 2.31 or newer to pass the token without "
        "writing it anywhere (this git is 2.30)"
    ]
    assert TOKEN not in r.stdout + r.stderr
    assert calls(log) == ["--version | GIT_CONFIG_COUNT="]
