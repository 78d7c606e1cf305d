"""The per-instance state in PostgreSQL (``rx_kv``, ``rx_issues``, ``rx_etags``, keyed by
instance): the same methods and the same rules as :class:`core.store.state.StateDB` — every call
commits, ``store_issues`` upserts and advances the marks in one transaction."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from core.store.postgres.db import Database
from core.store.state import IssueRow

_ROW = "number, is_pr, state, updated_at, data, comments, comments_for, files"
_PENDING = "(comments_for IS NULL OR comments_for <> updated_at)"


class PgState:
    """One instance's state in the shared database (implements ``core.store.shared.State``)."""

    def __init__(self, pool: asyncpg.Pool, instance: str) -> None:
        self.pool = pool
        self.instance = instance

    # -- kv ------------------------------------------------------------------------------------
    async def get(self, key: str, default: Any = None) -> Any:
        got = await self.pool.fetchval(
            "SELECT value FROM rx_kv WHERE instance = $1 AND key = $2", self.instance, key
        )
        return json.loads(got) if got is not None else default

    async def put(self, **values: Any) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await self._set(conn, values)

    async def _set(self, conn: asyncpg.Connection, values: dict[str, Any]) -> None:
        await conn.executemany(
            "INSERT INTO rx_kv VALUES ($1, $2, $3) ON CONFLICT (instance, key) "
            "DO UPDATE SET value = excluded.value",
            [(self.instance, k, json.dumps(v)) for k, v in values.items()],
        )

    # -- etags ---------------------------------------------------------------------------------
    async def etag(self, url: str) -> str | None:
        got = await self.pool.fetchval(
            "SELECT etag FROM rx_etags WHERE instance = $1 AND url = $2", self.instance, url
        )
        return str(got) if got is not None else None

    async def set_etag(self, url: str, etag: str | None) -> None:
        if etag:
            await self.pool.execute(
                "INSERT INTO rx_etags VALUES ($1, $2, $3) ON CONFLICT (instance, url) "
                "DO UPDATE SET etag = excluded.etag",
                self.instance, url, etag,
            )  # fmt: skip
        else:
            await self.pool.execute(
                "DELETE FROM rx_etags WHERE instance = $1 AND url = $2", self.instance, url
            )

    # -- the issues mirror ---------------------------------------------------------------------
    async def store_issues(self, rows: Iterable[IssueRow], marks: dict[str, Any]) -> int:
        """As ``StateDB.store_issues``: changed rows upserted (their comments due again), marks
        advanced, in one transaction; returns how many were new or changed."""
        changed = 0
        async with self.pool.acquire() as conn, conn.transaction():
            for r in rows:
                old = await conn.fetchrow(
                    "SELECT updated_at, state, data FROM rx_issues "
                    "WHERE instance = $1 AND number = $2",
                    self.instance, r.number,
                )  # fmt: skip
                data = json.dumps(r.data, sort_keys=True)
                if old is not None and tuple(old) == (r.updated_at, r.state, data):
                    continue
                changed += 1
                await conn.execute(
                    "INSERT INTO rx_issues (instance, number, is_pr, state, updated_at, data) "
                    "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (instance, number) DO UPDATE "
                    "SET is_pr = excluded.is_pr, state = excluded.state, "
                    "updated_at = excluded.updated_at, data = excluded.data, comments_for = NULL",
                    self.instance, r.number, r.is_pr, r.state, r.updated_at, data,
                )  # fmt: skip
            await self._set(conn, marks)
        return changed

    async def mark_stale(self, numbers: Iterable[int]) -> int:
        nums = sorted(set(numbers))
        if not nums:
            return 0
        status = await self.pool.execute(
            "UPDATE rx_issues SET comments_for = NULL WHERE instance = $1 AND number = ANY($2)",
            self.instance, nums,
        )  # fmt: skip
        return _count(status)

    async def store_comments(
        self, number: int, comments: list[dict[str, Any]], for_updated_at: str,
        files: list[str] | None = None,
    ) -> None:  # fmt: skip
        await self.pool.execute(
            "UPDATE rx_issues SET comments = $3, comments_for = $4, files = COALESCE($5, files) "
            "WHERE instance = $1 AND number = $2",
            self.instance, number, json.dumps(comments), for_updated_at,
            None if files is None else json.dumps(files),
        )  # fmt: skip

    async def delete(self, numbers: Iterable[int]) -> int:
        nums = sorted(set(numbers))
        if not nums:
            return 0
        status = await self.pool.execute(
            "DELETE FROM rx_issues WHERE instance = $1 AND number = ANY($2)", self.instance, nums
        )
        return _count(status)

    async def _rows(self, where: str) -> list[IssueRow]:
        raw = await self.pool.fetch(
            f"SELECT {_ROW} FROM rx_issues WHERE instance = $1 AND {where} ORDER BY number",
            self.instance,
        )

        def decode() -> list[IssueRow]:  # a big mirror is seconds of JSON: off the event loop
            return [
                IssueRow(int(n), bool(pr), st, up, json.loads(d), json.loads(c), cf, json.loads(f))
                for n, pr, st, up, d, c, cf, f in raw
            ]

        return await asyncio.to_thread(decode)

    async def rows(self) -> list[IssueRow]:
        return await self._rows("TRUE")

    async def pending(self) -> list[IssueRow]:
        return await self._rows(_PENDING)

    async def numbers(self) -> set[int]:
        got = await self.pool.fetch(
            "SELECT number FROM rx_issues WHERE instance = $1", self.instance
        )
        return {int(r[0]) for r in got}

    async def counts(self) -> dict[str, int]:
        row = await self.pool.fetchrow(
            f"SELECT count(*), count(*) FILTER (WHERE is_pr), count(*) FILTER (WHERE {_PENDING}) "
            "FROM rx_issues WHERE instance = $1",
            self.instance,
        )
        n, prs, pending = row if row else (0, 0, 0)
        return {"stored": int(n), "pull_requests": int(prs), "pending_comments": int(pending)}


def _count(status: str) -> int:
    """``UPDATE 3`` → 3."""
    try:
        return int(status.rsplit(" ", 1)[-1])
    except ValueError:
        return 0


def state_opener(db: Database) -> Any:
    """``async with opener(name) as state``: the instance's state (nothing to close: the pool
    is the deployment's)."""

    @asynccontextmanager
    async def open_state(instance: str) -> AsyncIterator[PgState]:
        yield PgState(await db.pool(), instance)

    return open_state
