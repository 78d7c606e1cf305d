"""Every SQLite file of the store goes through one migration helper (core/store/sqlite.py): a
file written by a newer repo-expert is refused with one line, whichever file it is."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.errors import StoreError
from core.store import state
from core.store.cache import VectorCache
from core.store.conversations import MIGRATIONS, ConversationStore
from core.store.sqlite import migrate, statements
from core.store.state import StateDB


def bump(path: Path, by: int = 1) -> None:
    with sqlite3.connect(path) as db:
        v = db.execute("PRAGMA user_version").fetchone()[0]
        db.execute(f"PRAGMA user_version = {v + by}")


@pytest.mark.asyncio
async def test_a_newer_state_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    await (await StateDB.open(path)).close()
    bump(path)
    n = len(state.MIGRATIONS)
    with pytest.raises(StoreError, match=rf"state file schema {n + 1} is newer than .* \({n}\)"):
        await StateDB.open(path)


@pytest.mark.asyncio
async def test_a_newer_conversations_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite"
    await (await ConversationStore.open(path)).close()
    bump(path, 3)
    newer = len(MIGRATIONS) + 3
    with pytest.raises(StoreError, match=rf"conversations database schema {newer} is newer"):
        await ConversationStore.open(path)


def test_a_newer_embedding_cache_is_refused_and_an_old_one_adopted(tmp_path: Path) -> None:
    path = tmp_path / "embeddings.sqlite"
    with sqlite3.connect(path) as db:  # a cache from before migrations: the table, version 0
        db.execute(
            "CREATE TABLE vectors (model TEXT, hash TEXT, v BLOB, PRIMARY KEY (model, hash))"
        )
        db.execute("INSERT INTO vectors VALUES ('m', 'h', x'0000803f')")
    cache = VectorCache(path)  # adopted, nothing lost
    assert list(cache.get_many("m", ["h"], 1)) == ["h"]
    cache.close()
    bump(path)
    with pytest.raises(StoreError, match="embedding cache schema 2 is newer"):
        VectorCache(path)


def test_a_file_that_is_not_a_database_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    path.write_bytes(b"this is not sqlite, just a text file long enough to have a header" * 20)
    with pytest.raises(StoreError, match="not a usable SQLite file"):
        migrate(path, ["CREATE TABLE t (x)"], "state file")


def test_statements_split_where_sqlite_ends_them() -> None:
    script = """
        CREATE TABLE a (x TEXT DEFAULT 'semi;colon');
        CREATE TRIGGER t AFTER INSERT ON a BEGIN UPDATE a SET x = 'y;z'; END;
        INSERT INTO a VALUES ('last')
    """
    got = statements(script)
    assert len(got) == 3 and got[1].startswith("CREATE TRIGGER") and got[1].endswith("END;")
    assert "'semi;colon'" in got[0] and got[2].startswith("INSERT")
