"""The per-instance state file (``{data}/{instance}/state.sqlite``): what is not the index.

- ``issues``: the local mirror of a GitHub repository's issues and pull requests, one row per
  number, with its comments. ``comments_for`` is the ``updated_at`` its comments were fetched
  for; a row whose ``comments_for`` differs from its ``updated_at`` (or is NULL) still needs its
  comments fetched — that flag lives in the file, so an interrupted sync resumes there.
- ``etags``: the ETag of a listing's first page, by request URL (conditional requests).
- ``kv``: high-water marks of the listings and the last sync's time, outcome and error.

Migrations are numbered by ``PRAGMA user_version`` and applied by ``store/sqlite.py``; the file's
path is ``Layout.state``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from core.store.sqlite import open_db

MIGRATIONS = [
    """
    CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE issues (
        number INTEGER PRIMARY KEY, is_pr INTEGER NOT NULL, state TEXT NOT NULL,
        updated_at TEXT NOT NULL, data TEXT NOT NULL, comments TEXT NOT NULL DEFAULT '[]',
        comments_for TEXT
    );
    CREATE TABLE etags (url TEXT PRIMARY KEY, etag TEXT NOT NULL);
    """,
    # 2: a pull request's changed files, fetched with its comments
    "ALTER TABLE issues ADD COLUMN files TEXT NOT NULL DEFAULT '[]'",
]


@dataclass
class IssueRow:
    """An issue or pull request as mirrored: ``data`` holds title, body, labels, url, dates."""

    number: int
    is_pr: bool
    state: str  # open | closed | merged
    updated_at: str  # ISO 8601 UTC, as GitHub writes it (sorts as text)
    data: dict[str, Any]
    comments: list[dict[str, Any]] = field(default_factory=list)
    comments_for: str | None = None
    files: list[str] = field(default_factory=list)  # a pull request's changed files

    @property
    def pending(self) -> bool:
        return self.comments_for != self.updated_at


class StateDB:
    """One instance's state file (aiosqlite; commits per call so progress is never lost)."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db

    @classmethod
    async def open(cls, path: Path) -> StateDB:
        return cls(await open_db(path, MIGRATIONS, "state file"))

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> StateDB:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- kv ------------------------------------------------------------------------------------
    async def get(self, key: str, default: Any = None) -> Any:
        async with self.db.execute("SELECT value FROM kv WHERE key=?", (key,)) as cur:
            row = await cur.fetchone()
        return json.loads(row[0]) if row else default

    async def put(self, **values: Any) -> None:
        await self._set(values)
        await self.db.commit()

    async def _set(self, values: dict[str, Any]) -> None:
        await self.db.executemany(
            "INSERT OR REPLACE INTO kv VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in values.items()],
        )

    # -- etags ---------------------------------------------------------------------------------
    async def etag(self, url: str) -> str | None:
        async with self.db.execute("SELECT etag FROM etags WHERE url=?", (url,)) as cur:
            row = await cur.fetchone()
        return str(row[0]) if row else None

    async def set_etag(self, url: str, etag: str | None) -> None:
        if etag:
            await self.db.execute("INSERT OR REPLACE INTO etags VALUES (?, ?)", (url, etag))
        else:
            await self.db.execute("DELETE FROM etags WHERE url=?", (url,))
        await self.db.commit()

    # -- the issues mirror ---------------------------------------------------------------------
    async def store_issues(self, rows: Iterable[IssueRow], marks: dict[str, Any]) -> int:
        """Upsert listed issues and advance ``marks`` in one transaction; returns how many were
        new or changed. A changed row's comments are due again (even at the same ``updated_at``:
        a full listing shows a deleted comment only as a lower count); a row seen again unchanged
        keeps its comments and is not counted."""
        changed = 0
        for r in rows:
            async with self.db.execute(
                "SELECT updated_at, state, data FROM issues WHERE number=?", (r.number,)
            ) as cur:
                old = await cur.fetchone()
            data = json.dumps(r.data, sort_keys=True)
            if old is not None and (old[0], old[1], old[2]) == (r.updated_at, r.state, data):
                continue
            changed += 1
            await self.db.execute(
                "INSERT INTO issues (number, is_pr, state, updated_at, data) VALUES (?,?,?,?,?) "
                "ON CONFLICT(number) DO UPDATE SET is_pr=excluded.is_pr, state=excluded.state, "
                "updated_at=excluded.updated_at, data=excluded.data, comments_for=NULL",
                (r.number, int(r.is_pr), r.state, r.updated_at, data),
            )
        await self._set(marks)
        await self.db.commit()
        return changed

    async def mark_stale(self, numbers: Iterable[int]) -> int:
        """Ask for these issues' comments to be fetched again (edited or deleted comments)."""
        nums = sorted(set(numbers))
        if not nums:
            return 0
        q = ",".join("?" * len(nums))
        cur = await self.db.execute(
            f"UPDATE issues SET comments_for=NULL WHERE number IN ({q})", nums
        )
        await self.db.commit()
        return int(cur.rowcount or 0)

    async def store_comments(
        self, number: int, comments: list[dict[str, Any]], for_updated_at: str,
        files: list[str] | None = None,
    ) -> None:  # fmt: skip
        """A row's comments (and, for a pull request, its changed files) as of
        ``for_updated_at``; ``files`` None leaves the stored ones."""
        if files is None:
            await self.db.execute(
                "UPDATE issues SET comments=?, comments_for=? WHERE number=?",
                (json.dumps(comments), for_updated_at, number),
            )
        else:
            await self.db.execute(
                "UPDATE issues SET comments=?, comments_for=?, files=? WHERE number=?",
                (json.dumps(comments), for_updated_at, json.dumps(files), number),
            )
        await self.db.commit()

    async def delete(self, numbers: Iterable[int]) -> int:
        nums = sorted(set(numbers))
        if not nums:
            return 0
        q = ",".join("?" * len(nums))
        cur = await self.db.execute(f"DELETE FROM issues WHERE number IN ({q})", nums)
        await self.db.commit()
        return int(cur.rowcount or 0)

    async def rows(self, where: str = "1", args: Iterable[Any] = ()) -> list[IssueRow]:
        sql = (
            "SELECT number, is_pr, state, updated_at, data, comments, comments_for, files "
            f"FROM issues WHERE {where} ORDER BY number"
        )
        async with self.db.execute(sql, list(args)) as cur:
            raw = list(await cur.fetchall())

        def decode() -> list[IssueRow]:  # a big mirror is seconds of JSON: off the event loop
            return [
                IssueRow(int(n), bool(pr), st, up, json.loads(d), json.loads(c), cf, json.loads(f))
                for n, pr, st, up, d, c, cf, f in raw
            ]

        return await asyncio.to_thread(decode)

    async def pending(self) -> list[IssueRow]:
        return await self.rows("comments_for IS NULL OR comments_for != updated_at")

    async def numbers(self) -> set[int]:
        async with self.db.execute("SELECT number FROM issues") as cur:
            return {int(r[0]) async for r in cur}

    async def counts(self) -> dict[str, int]:
        sql = (
            "SELECT COUNT(*), COALESCE(SUM(is_pr), 0), COALESCE(SUM(comments_for IS NULL OR "
            "comments_for != updated_at), 0) FROM issues"
        )
        async with self.db.execute(sql) as cur:
            row = await cur.fetchone()
        n, prs, pending = row if row else (0, 0, 0)
        return {"stored": int(n), "pull_requests": int(prs), "pending_comments": int(pending)}
