"""The local store (the embedded default): per instance, one build directory holding a SQLite
file (chunks, symbol table, indexed units and their content hashes, meta values, FTS5 tables)
and one usearch matrix file of vectors per collection. ``current`` is a symlink to the live
build; a new build is written into a hidden temporary folder and the symlink is swapped
atomically, so readers always see a complete index. Paths come from :class:`~core.layout.Layout`.

Search is exact (usearch's SIMD brute force over the memory-mapped matrix): measured here,
building an HNSW graph of 50k × 384 vectors took 47 s while an exact search over them takes
about 4 ms, and the recall of approximate search at default settings was poor.

This module and its two neighbours implement :mod:`core.store.base` (``local_schema.py``: the
build format; ``local_write.py``: writing and swapping a build); the SQL, the FTS5 syntax and the
vector files stay in them.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np
from usearch.index import MetricKind
from usearch.index import search as usearch_search

from core.layout import Layout
from core.models import COLLECTIONS, Chunk, Collection, Symbol, is_test_path
from core.store.base import Hit, IssueLinks, Unit
from core.store.local_files import load_vectors, unreadable
from core.store.local_schema import (
    CHUNK_COLS,
    SCHEMA_VERSION,
    SYMBOL_COLS,
    fts_match,
    norm_name,
    row_to_chunk,
    row_to_symbol,
)
from core.store.local_write import LocalWriter

LOCK_POLL_S = 0.05  # how often a waiting build looks at another process's lock again


class LocalReader:
    """A read-only view of one build: SQLite metadata plus memory-mapped vector matrices."""

    def __init__(self, path: Path, db: aiosqlite.Connection, vectors: dict[str, np.ndarray]):
        self.path = path
        self.build_id = path.name
        self.db = db
        self._vectors = vectors
        self.meta: dict[str, Any] = {}
        self._tests = np.zeros(0, dtype=bool)  # per code row: is it test code

    @classmethod
    async def open(cls, path: Path) -> LocalReader:
        """A reader of the build at ``path``; a build that cannot be read (``local_files``) is
        an IndexError_ naming the file."""
        db = await aiosqlite.connect(f"file:{path / 'meta.sqlite'}?mode=ro", uri=True)
        try:
            try:
                meta = await _read_meta(db)
                sql = "SELECT collection, COUNT(*) FROM chunks GROUP BY collection"
                async with db.execute(sql) as cur:
                    rows = {str(c): int(n) async for c, n in cur}
            except (sqlite3.DatabaseError, ValueError) as e:
                raise unreadable(path / "meta.sqlite", e) from None
            dim = (meta.get("stamp") or {}).get("dim")
            vectors = await asyncio.to_thread(load_vectors, path, rows, dim)
            reader = cls(path, db, vectors)
            reader.meta = meta
            if "code" in vectors:  # flags for retrieval's test_penalty, computed once
                sql = "SELECT row, path FROM chunks WHERE collection = 'code' AND path IS NOT NULL"
                async with db.execute(sql) as cur:
                    paths = [(int(r), str(p)) for r, p in await cur.fetchall()]
                reader._tests = await asyncio.to_thread(_test_flags, paths, len(vectors["code"]))
        except BaseException:
            await db.close()
            raise
        return reader

    async def close(self) -> None:
        await self.db.close()

    @property
    def stamp(self) -> dict[str, Any]:
        return dict(self.meta.get("stamp") or {})

    def size(self, collection: Collection) -> int:
        v = self._vectors.get(collection)
        return 0 if v is None else int(v.shape[0])

    # -- vectors -----------------------------------------------------------------------------
    def _dense_sync(self, collection: Collection, q: np.ndarray, n: int) -> list[Hit]:
        mat = self._vectors.get(collection)
        if mat is None or n <= 0:
            return []
        n = min(n, mat.shape[0])
        res = usearch_search(mat, q.astype(np.float32), n, MetricKind.IP, exact=True)
        return [
            Hit(int(key), 1.0 - float(d)) for key, d in zip(res.keys, res.distances, strict=True)
        ]

    async def dense(self, collection: Collection, query: np.ndarray, n: int) -> list[Hit]:
        return await asyncio.to_thread(self._dense_sync, collection, query, n)

    async def similarity(
        self, collection: Collection, query: np.ndarray, rows: Sequence[int]
    ) -> list[float]:
        mat = self._vectors.get(collection)
        if mat is None or not rows:
            return []
        return [float(s) for s in mat[list(rows)] @ query]

    def tests(self, collection: Collection, rows: Sequence[int]) -> set[int]:
        if collection != "code" or not self._tests.any():
            return set()
        return {r for r in rows if 0 <= r < len(self._tests) and self._tests[r]}

    # -- lexical -----------------------------------------------------------------------------
    async def lexical(self, collection: Collection, terms: Sequence[str], n: int) -> list[Hit]:
        match = fts_match(terms)
        if match is None or collection not in COLLECTIONS:
            return []
        t = f"fts_{collection}"
        sql = (
            f"SELECT c.row, -bm25({t}) FROM {t} JOIN chunks c ON c.id = {t}.rowid "
            f"WHERE {t} MATCH ? ORDER BY bm25({t}) LIMIT ?"
        )
        async with self.db.execute(sql, (match, n)) as cur:
            return [Hit(int(r), float(s)) async for r, s in cur]

    # -- chunks and lookups ------------------------------------------------------------------
    async def chunks(self, collection: Collection, rows: Sequence[int]) -> dict[int, Chunk]:
        if not rows:
            return {}
        q = ",".join("?" * len(rows))
        sql = f"SELECT {CHUNK_COLS} FROM chunks WHERE collection=? AND row IN ({q})"
        async with self.db.execute(sql, [collection, *rows]) as cur:
            return {r[2]: row_to_chunk(r) async for r in cur}

    async def all_chunks(self, collection: Collection | None = None) -> list[Chunk]:
        sql = f"SELECT {CHUNK_COLS} FROM chunks"
        args: list[Any] = []
        if collection:
            sql += " WHERE collection=?"
            args.append(collection)
        async with self.db.execute(sql + " ORDER BY collection, row", args) as cur:
            return [row_to_chunk(r) async for r in cur]

    async def _rows_where(self, collection: str, where: str, args: list[Any]) -> list[int]:
        sql = f"SELECT row FROM chunks WHERE collection=? AND ({where}) ORDER BY row"
        async with self.db.execute(sql, [collection, *args]) as cur:
            return [int(r[0]) async for r in cur]

    async def issue_rows(self, number: int) -> list[int]:
        return await self._rows_where("issues", "issue=?", [number])

    async def path_rows(self, collection: Collection, path: str) -> list[int]:
        return await self._rows_where(collection, "path=? OR path LIKE ?", [path, f"%/{path}"])

    async def symbols(self, name: str) -> list[Symbol]:
        # Indexed lookups only: this runs for every identifier a question names.
        sql = (
            f"SELECT {SYMBOL_COLS} FROM symbols WHERE qualname=? OR name=? OR norm=? "
            "ORDER BY (qualname=?) DESC, (name=?) DESC, path, start_line LIMIT 20"
        )
        args = [name, name, norm_name(name), name, name]
        async with self.db.execute(sql, args) as cur:
            return [row_to_symbol(r) async for r in cur]

    async def callers(self, name: str) -> list[Symbol]:
        cols = ", ".join(f"s.{c.strip()}" for c in SYMBOL_COLS.split(","))
        sql = (
            f"SELECT DISTINCT {cols} FROM calls c JOIN symbols s ON s.rowid = c.sym "
            "WHERE c.norm = ? ORDER BY s.path, s.start_line LIMIT 50"
        )
        async with self.db.execute(sql, (norm_name(name.rsplit(".", 1)[-1]),)) as cur:
            return [row_to_symbol(r) async for r in cur]

    async def links(self, numbers: Sequence[int]) -> dict[int, IssueLinks]:
        if not numbers:
            return {}
        nums = sorted(set(numbers))
        q = ",".join("?" * len(nums))
        files: dict[int, list[str]] = {}
        fixes: dict[int, list[int]] = {}
        fixed_by: dict[int, list[int]] = {}
        sql = f"SELECT issue, rel, target FROM links WHERE issue IN ({q}) ORDER BY rowid"
        async with self.db.execute(sql, nums) as cur:
            async for n, rel, target in cur:
                if rel == "file":
                    files.setdefault(int(n), []).append(str(target))
                elif rel == "fixes" and str(target).isdigit():
                    fixes.setdefault(int(n), []).append(int(target))
        sql = f"SELECT target, issue FROM links WHERE rel = 'fixes' AND target IN ({q})"
        async with self.db.execute(sql, [str(n) for n in nums]) as cur:
            async for target, n in cur:
                fixed_by.setdefault(int(target), []).append(int(n))
        out = {}
        for n in nums:
            if n in files or n in fixes or n in fixed_by:
                out[n] = IssueLinks(tuple(files.get(n, ())), tuple(fixes.get(n, ())),
                                    tuple(sorted(fixed_by.get(n, ()))))  # fmt: skip
        return out

    async def definition_rows(self, name: str) -> list[tuple[int, Symbol]]:
        out: list[tuple[int, Symbol]] = []
        for s in await self.symbols(name):
            rows = await self._rows_where(
                "code", "path=? AND start_line<=? AND end_line>=?",
                [s.path, s.start_line, s.start_line],
            )  # fmt: skip
            if not rows:  # the definition line may sit in a header repeated elsewhere
                rows = await self._rows_where(
                    "code", "path=? AND start_line>=? AND start_line<=?",
                    [s.path, s.start_line, s.end_line],
                )  # fmt: skip
            out.extend((r, s) for r in rows[:2])
        return out

    # -- what the next build reads -----------------------------------------------------------
    async def units(self) -> dict[str, Unit]:
        async with self.db.execute("SELECT key, collection, content_hash FROM units") as cur:
            return {k: Unit(c, h) async for k, c, h in cur}

    async def carried(self, keys: set[str]) -> tuple[list[tuple[Chunk, np.ndarray]], list[Symbol]]:
        kept: list[tuple[Chunk, np.ndarray]] = []
        if not keys:
            return kept, []
        sql = f"SELECT {CHUNK_COLS} FROM chunks ORDER BY collection, row"
        async with self.db.execute(sql) as cur:
            async for r in cur:
                if r[3] in keys:  # doc_key; r[2] is the row, the vector's index
                    kept.append((row_to_chunk(r), np.array(self._vectors[r[1]][r[2]])))
        async with self.db.execute(f"SELECT {SYMBOL_COLS} FROM symbols") as cur:
            symbols = [row_to_symbol(r) async for r in cur]
        return kept, [s for s in symbols if s.path in keys]


def _test_flags(paths: list[tuple[int, str]], n: int) -> np.ndarray:
    """``n`` booleans: which rows' paths are test code (``models.is_test_path``)."""
    flags = np.zeros(n, dtype=bool)
    for row, path in paths:
        if 0 <= row < n and is_test_path(path):
            flags[row] = True
    return flags


async def _read_meta(db: aiosqlite.Connection) -> dict[str, Any]:
    async with db.execute("SELECT key, value FROM meta") as cur:
        return {k: json.loads(v) async for k, v in cur}


class LocalStore:
    """Builds of every instance under one data folder (implements ``IndexStore``)."""

    schema = SCHEMA_VERSION

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._locks: dict[str, asyncio.Lock] = {}

    def live_path(self, instance: str) -> Path | None:
        """The live build's folder (local only: tests and tools look at the files)."""
        link = self.layout.current(instance)
        if not link.is_symlink() and not link.exists():
            return None
        target = link.resolve()
        return target if (target / "meta.sqlite").exists() else None

    async def live_id(self, instance: str) -> str | None:
        path = self.live_path(instance)
        return path.name if path is not None else None

    async def live_meta(self, instance: str) -> dict[str, Any] | None:
        path = self.live_path(instance)
        if path is None:
            return None
        try:
            async with aiosqlite.connect(f"file:{path / 'meta.sqlite'}?mode=ro", uri=True) as db:
                return await _read_meta(db)
        except (sqlite3.DatabaseError, ValueError) as e:
            raise unreadable(path / "meta.sqlite", e) from None

    async def open_live(self, instance: str) -> LocalReader | None:
        path = self.live_path(instance)
        return await LocalReader.open(path) if path is not None else None

    def writer(self, instance: str) -> LocalWriter:
        return LocalWriter(self.layout, instance)

    @contextlib.asynccontextmanager
    async def lock(self, instance: str) -> AsyncIterator[None]:
        """An asyncio lock for this process, then ``flock`` on ``{data}/{instance}/.lock`` for
        the others. The flock is tried without blocking and retried on the event loop (never a
        thread blocked in ``flock``): a waiter that is cancelled stops waiting at once, and the
        file is closed only by the task that opened it."""
        async with self._locks.setdefault(instance, asyncio.Lock()):
            path = self.layout.lock(instance)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:  # another process builds: look again shortly
                        await asyncio.sleep(LOCK_POLL_S)
                yield
            finally:
                os.close(fd)  # closing the file releases the flock
