"""One way to open and migrate every SQLite file of repo-expert (state, conversations, the
embedding cache).

A file's schema is a list of numbered migrations: migration *n* (1-based) is ``migrations[n-1]``,
and ``PRAGMA user_version`` says how many have been applied. A migration is a SQL script or a
function of a ``sqlite3.Connection``; a script is split into statements the way SQLite itself
reads them (:func:`statements`), so a ``;`` inside a string literal or a trigger body is not a
cut. :func:`migrate` applies every pending migration *and* the version bump in one transaction
(``BEGIN IMMEDIATE``: a second process waits, then finds the work done): a process killed midway
leaves the file exactly at its old version with its data intact, and the next open completes it.
A file whose version is newer than the code's list is refused with one line (a newer
repo-expert wrote it), never read half-understood.

Migrations run on a plain ``sqlite3`` connection of their own (off the event loop in
:func:`open_db`); the connection the caller then uses — aiosqlite or sqlite3 — sees the result.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import aiosqlite

from core.errors import CorruptFile, StoreError

Migration = str | Callable[[sqlite3.Connection], None]


def statements(script: str) -> list[str]:
    """The statements of a SQL script, split where SQLite would end each one."""
    out: list[str] = []
    current = ""
    for piece in script.split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \t\r\n;"):
                out.append(current.strip())
            current = ""
    if current.strip(" \t\r\n;"):
        out.append(current.strip().rstrip(";"))
    return out


def version(db: sqlite3.Connection) -> int:
    row = db.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row else 0


def migrate(path: Path, migrations: Sequence[Migration], what: str, busy_ms: int = 10000) -> int:
    """Bring ``path`` to ``len(migrations)``; returns the version found before. ``what`` names the
    file in errors ("state file", "conversations database")."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _migrate(path, migrations, what, busy_ms)
    except sqlite3.OperationalError as e:  # locked past the busy timeout, unreadable, …
        raise StoreError(f"{path}: cannot open the {what}: {e}") from None
    except sqlite3.DatabaseError as e:  # not a database at all
        raise CorruptFile(f"{path}: the {what} is not a usable SQLite file: {e}") from None


def _migrate(path: Path, migrations: Sequence[Migration], what: str, busy_ms: int) -> int:
    db = sqlite3.connect(str(path), isolation_level=None, timeout=busy_ms / 1000)
    try:
        db.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        found = version(db)
        _refuse_newer(path, what, found, len(migrations))
        if found == len(migrations):
            return found
        db.execute("BEGIN IMMEDIATE")
        try:
            done = version(db)  # another process may have migrated while we waited
            _refuse_newer(path, what, done, len(migrations))
            for step in migrations[done:]:
                if isinstance(step, str):
                    for stmt in statements(step):
                        db.execute(stmt)
                else:
                    step(db)
            db.execute(f"PRAGMA user_version={len(migrations)}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return found
    finally:
        db.close()


def _refuse_newer(path: Path, what: str, found: int, known: int) -> None:
    if found > known:
        raise StoreError(
            f"{path}: {what} schema {found} is newer than this program knows ({known}): "
            "upgrade repo-expert"
        )


async def open_db(
    path: Path, migrations: Sequence[Migration], what: str, *, wal: bool = True,
    busy_ms: int = 10000,
) -> aiosqlite.Connection:  # fmt: skip
    """An aiosqlite connection to ``path``, migrated first (off the event loop)."""
    await asyncio.to_thread(migrate, path, migrations, what, busy_ms)
    db = await aiosqlite.connect(str(path))
    try:
        if wal:
            await db.execute("PRAGMA journal_mode=WAL")
        await db.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
    except BaseException:
        await db.close()
        raise
    return db
