"""One PostgreSQL database shared by every process of a deployment: the connection pool, the
URL (its password never logged), and the numbered migrations of the shared tables.

The schema is a list of numbered migrations (``schema.py``), the same rule as the SQLite files
(``store/sqlite.py``): migration *n* is ``MIGRATIONS[n-1]``, the table ``rx_schema`` says how many
have been applied, and :func:`migrate` applies every pending one *and* the version bump in one
transaction under an advisory lock (a second process waits, then finds the work done; a process
killed midway leaves the database at its old version). A database whose version is newer than
the code's list is refused with one line: a newer repo-expert wrote it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from core.errors import StoreError
from core.store.postgres.build import EF_SEARCH
from core.store.postgres.url import is_postgres_url, redact

log = logging.getLogger(__name__)

MIGRATION_LOCK = 0x5245_0001  # pg_advisory_xact_lock key while migrating ("RE" 1)


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)


class Database:
    """A lazily opened asyncpg pool over one database URL, migrated on first use."""

    def __init__(self, url: str, *, max_size: int = 10) -> None:
        if not is_postgres_url(url):
            raise StoreError(f"store URL {redact(url)!r}: expected postgresql://…")
        self.url = url
        self.where = redact(url)
        self.max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()

    async def pool(self) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        async with self._opening:
            if self._pool is None:
                conn = await self.connect(migrate_first=True)
                await conn.close()
                try:
                    self._pool = await asyncpg.create_pool(
                        self.url, min_size=1, max_size=self.max_size, init=_init_connection,
                        server_settings={"hnsw.ef_search": str(EF_SEARCH)},
                    )  # fmt: skip
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
                    raise StoreError(f"{self.where}: cannot connect: {why(e)}") from None
        assert self._pool is not None
        return self._pool

    async def connect(
        self, *, migrate_first: bool = False, init: bool = True
    ) -> asyncpg.Connection:
        """A connection of its own (a lock holder, a listener, a long build): the caller
        closes it. ``client_connection_check_interval``: a statement of a client that died
        (a killed worker in the middle of an index build) is cancelled within seconds."""
        try:
            conn = await asyncpg.connect(self.url)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            raise StoreError(f"{self.where}: cannot connect: {why(e)}") from None
        try:
            if migrate_first:
                from core.store.postgres.schema import MIGRATIONS

                await migrate(conn, MIGRATIONS, self.where)
            if init:
                await _init_connection(conn)
                await conn.execute("SET client_connection_check_interval = '2s'")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def why(e: BaseException) -> str:
    """An error's text without anything from the URL (asyncpg's messages hold no password)."""
    return f"{type(e).__name__}: {e}".strip()


async def version(conn: asyncpg.Connection) -> int:
    exists = await conn.fetchval("SELECT to_regclass('rx_schema') IS NOT NULL")
    if not exists:
        return 0
    return int(await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM rx_schema") or 0)


def _refuse_newer(where: str, found: int, known: int) -> None:
    if found > known:
        raise StoreError(
            f"{where}: database schema {found} is newer than this program knows ({known}): "
            "upgrade repo-expert"
        )


async def migrate(conn: asyncpg.Connection, migrations: Sequence[str], where: str) -> int:
    """Bring the database to ``len(migrations)``; returns the version found before."""
    found = await version(conn)
    _refuse_newer(where, found, len(migrations))
    if found == len(migrations):
        return found
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            await conn.execute("CREATE TABLE IF NOT EXISTS rx_schema (version INTEGER NOT NULL)")
            done = await version(conn)  # another process may have migrated while we waited
            _refuse_newer(where, done, len(migrations))
            for step in migrations[done:]:
                await conn.execute(step)
            await conn.execute("DELETE FROM rx_schema")
            await conn.execute("INSERT INTO rx_schema VALUES ($1)", len(migrations))
    except asyncpg.InsufficientPrivilegeError as e:
        raise StoreError(
            f"{where}: cannot create repo-expert's tables ({e}); the database owner must run "
            "`CREATE EXTENSION vector` or grant CREATE"
        ) from None
    log.info("migrated %s from schema %d to %d", where, found, len(migrations))
    return found


def json_value(v: Any) -> Any:
    """asyncpg hands JSONB back as text: decode it."""
    import json

    return json.loads(v) if isinstance(v, str) else v
