"""The local store (the embedded default): per instance, one build directory holding a SQLite
file (chunks, symbol table, indexed units and their content hashes, meta values, FTS5 tables)
and one usearch matrix file of vectors per collection. ``current`` is a symlink to the live
build; a new build is written into a hidden temporary folder and the symlink is swapped
atomically, so readers always see a complete index. Paths come from :class:`~core.layout.Layout`.

Search is exact: one BLAS matrix-vector product over the memory-mapped matrix and a partial
sort. Measured here, building an HNSW graph of 50k × 384 vectors took 47 s while an exact
search over them takes about 4 ms, and the recall of approximate search at default settings was
poor; at 300k × 384 the product takes 15 ms where usearch's own exact search took 37 ms
(``benchmarks/bench_store.py``). Lookups asked for every question — a file's rows by path or
path tail, an issue's rows — are answered from maps built when the reader opens, not by a scan.
Lexical hits are FTS5's BM25 computed from term postings stored with the build (``bm25.py``,
``local_index.py``): FTS5 itself scored every matching row (138 ms p95 at 500k chunks).

This module implements :mod:`core.store.base`; the SQL, the FTS5 syntax and the vector files stay
in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np
from usearch.io import load_matrix, save_matrix

from core.errors import IndexError_
from core.layout import Layout
from core.lexical import lexical_form, parts
from core.models import COLLECTIONS, Chunk, Collection, Document, Symbol
from core.store.base import Hit, Unit
from core.store.bm25 import Bm25, on_search_thread
from core.store.local_index import (
    Lookups,
    prune,
    search_postings,
    test_flags,
    tokens,
    write_postings,
)

SCHEMA_VERSION = 3  # 3: the code graph (symbols.calls, the calls table)

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE units (
    key TEXT PRIMARY KEY, collection TEXT NOT NULL, content_hash TEXT NOT NULL,
    path TEXT, issue INTEGER, title TEXT, url TEXT
);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY, collection TEXT NOT NULL, row INTEGER NOT NULL,
    doc_key TEXT NOT NULL, path TEXT, issue INTEGER, start_line INTEGER, end_line INTEGER,
    title TEXT NOT NULL, symbol TEXT, kind TEXT, text TEXT NOT NULL, text_hash TEXT NOT NULL,
    tokens INTEGER NOT NULL, url TEXT NOT NULL, commit_sha TEXT
);
CREATE UNIQUE INDEX chunks_row ON chunks(collection, row);
CREATE INDEX chunks_doc ON chunks(doc_key);
CREATE INDEX chunks_issue ON chunks(issue);
CREATE TABLE symbols (
    name TEXT NOT NULL, qualname TEXT NOT NULL, kind TEXT NOT NULL, path TEXT NOT NULL,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    norm TEXT NOT NULL,  -- parts joined, lower case: parse_config, parseConfig → parseconfig
    calls TEXT NOT NULL DEFAULT ''  -- the names it calls, one per line, first call first
);
CREATE TABLE calls (norm TEXT NOT NULL, sym INTEGER NOT NULL);  -- callee's norm → symbols.rowid
CREATE INDEX calls_norm ON calls(norm);
CREATE INDEX symbols_name ON symbols(name);
CREATE INDEX symbols_norm ON symbols(norm);
CREATE INDEX symbols_qualname ON symbols(qualname);
CREATE INDEX chunks_path ON chunks(path);
CREATE VIRTUAL TABLE fts_docs USING fts5(body, tokenize='unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE fts_code USING fts5(body, tokenize='unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE fts_issues USING fts5(body, tokenize='unicode61 remove_diacritics 2');
-- BM25 without FTS5's per-row bm25() (local_index.py): per token, the rows holding it and how
-- often (int32 / uint16 arrays, one part per slice of rows), and each row's token count.
-- Builds written before these tables existed are ranked by FTS5 alone.
CREATE TABLE postings (
    collection TEXT NOT NULL, term TEXT NOT NULL, part INTEGER NOT NULL,
    rows BLOB NOT NULL, tfs BLOB NOT NULL, PRIMARY KEY (collection, term, part)
) WITHOUT ROWID;
CREATE TABLE lexstats (collection TEXT PRIMARY KEY, lengths BLOB NOT NULL);
"""

_CHUNK_COLS = (
    "id, collection, row, doc_key, path, issue, start_line, end_line, title, symbol, kind, "
    "text, text_hash, tokens, url, commit_sha"
)
_SYMBOL_COLS = "name, qualname, kind, path, start_line, end_line, calls"
LOCK_POLL_S = 0.05  # how often a waiting build looks at another process's lock again


def _norm(name: str) -> str:
    return "".join(parts(name))


def fts_match(terms: Sequence[str]) -> str | None:
    """The FTS5 MATCH expression for any of ``terms`` (each quoted: a term is a literal token)."""
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _row_to_symbol(r: Any) -> Symbol:
    return Symbol(r[0], r[1], r[2], r[3], r[4], r[5], tuple(r[6].split("\n")) if r[6] else ())


def _row_to_chunk(r: Any) -> Chunk:
    return Chunk(
        id=r[0], collection=r[1], doc_key=r[3], path=r[4], issue=r[5], start_line=r[6],
        end_line=r[7], title=r[8], symbol=r[9], kind=r[10] or "", text=r[11], text_hash=r[12],
        tokens=r[13], url=r[14], commit=r[15],
    )  # fmt: skip


class LocalReader:
    """A read-only view of one build: SQLite metadata plus memory-mapped vector matrices."""

    def __init__(self, path: Path, db: aiosqlite.Connection, vectors: dict[str, np.ndarray]):
        self.path = path
        self.build_id = path.name
        self.db = db
        self._vectors = vectors
        self.meta: dict[str, Any] = {}
        self._tests = np.zeros(0, dtype=bool)  # per code row: is it test code
        self._lookups = Lookups()
        self._bm25: dict[str, Bm25] = {}  # collections with postings (newer builds)

    @classmethod
    async def open(cls, path: Path) -> LocalReader:
        db = await aiosqlite.connect(f"file:{path / 'meta.sqlite'}?mode=ro", uri=True)
        try:
            vectors: dict[str, np.ndarray] = {}
            for c in COLLECTIONS:
                f = path / f"{c}.fbin"
                if f.exists() and f.stat().st_size > 8:
                    mat = await asyncio.to_thread(load_matrix, str(f), view=True)
                    if mat is None:
                        raise IndexError_(f"{f}: unreadable vector file; re-index with --full")
                    vectors[c] = mat
            reader = cls(path, db, vectors)
            reader.meta = await _read_meta(db)
            sql = (
                "SELECT collection, row, path, issue FROM chunks "
                "WHERE path IS NOT NULL OR issue IS NOT NULL"
            )
            async with db.execute(sql) as cur:
                rows = list(await cur.fetchall())
            reader._lookups = await asyncio.to_thread(Lookups.of, rows)
            async with db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'lexstats'"
            ) as cur:
                has_postings = await cur.fetchone() is not None
            if has_postings:
                async with db.execute("SELECT collection, lengths FROM lexstats") as cur:
                    for coll, blob in await cur.fetchall():
                        reader._bm25[str(coll)] = Bm25(np.frombuffer(blob, np.int32))
            if "code" in vectors:  # flags for retrieval's test_penalty, computed once
                paths = [(int(r), str(p)) for c, r, p, _ in rows if c == "code" and p is not None]
                reader._tests = await asyncio.to_thread(test_flags, paths, len(vectors["code"]))
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
        sims = mat @ q.astype(np.float32)  # exact: every row (BLAS, off the event loop)
        top = np.argpartition(-sims, n - 1)[:n] if n < len(sims) else np.arange(len(sims))
        top = top[np.argsort(-sims[top], kind="stable")]
        return [Hit(int(r), float(sims[r])) for r in top]

    async def dense(self, collection: Collection, query: np.ndarray, n: int) -> list[Hit]:
        return await on_search_thread(lambda: self._dense_sync(collection, query, n))

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
        if not terms or collection not in COLLECTIONS:
            return []
        bm25 = self._bm25.get(collection)
        folded = [tokens(t) for t in terms]
        if bm25 is not None and all(len(f) == 1 for f in folded):
            got = await search_postings(self.db, collection, bm25, [f[0] for f in folded], n)
            return [Hit(r, sc) for r, sc in got]
        return await self._lexical_fts(collection, terms, n)

    async def _lexical_fts(self, collection: Collection, terms: Sequence[str], n: int) -> list[Hit]:
        match = fts_match(terms)
        if match is None:
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
        sql = f"SELECT {_CHUNK_COLS} FROM chunks WHERE collection=? AND row IN ({q})"
        async with self.db.execute(sql, [collection, *rows]) as cur:
            return {r[2]: _row_to_chunk(r) async for r in cur}

    async def all_chunks(self, collection: Collection | None = None) -> list[Chunk]:
        sql = f"SELECT {_CHUNK_COLS} FROM chunks"
        args: list[Any] = []
        if collection:
            sql += " WHERE collection=?"
            args.append(collection)
        async with self.db.execute(sql + " ORDER BY collection, row", args) as cur:
            return [_row_to_chunk(r) async for r in cur]

    async def _rows_where(self, collection: str, where: str, args: list[Any]) -> list[int]:
        # `+collection`: not the (collection, row) index — with it SQLite walked every row of the
        # collection in order instead of looking the path up (1.7 s p95 at 2M chunks).
        sql = f"SELECT row FROM chunks WHERE +collection=? AND ({where}) ORDER BY row"
        async with self.db.execute(sql, [collection, *args]) as cur:
            return [int(r[0]) async for r in cur]

    async def issue_rows(self, number: int) -> list[int]:
        return list(self._lookups.issues.get(number, ()))

    async def path_rows(self, collection: Collection, path: str) -> list[int]:
        return self._lookups.path_rows(collection, path)

    async def symbols(self, name: str) -> list[Symbol]:
        # Indexed lookups only: this runs for every identifier a question names.
        sql = (
            f"SELECT {_SYMBOL_COLS} FROM symbols WHERE qualname=? OR name=? OR norm=? "
            "ORDER BY (qualname=?) DESC, (name=?) DESC, path, start_line LIMIT 20"
        )
        args = [name, name, _norm(name), name, name]
        async with self.db.execute(sql, args) as cur:
            return [_row_to_symbol(r) async for r in cur]

    async def callers(self, name: str) -> list[Symbol]:
        cols = ", ".join(f"s.{c.strip()}" for c in _SYMBOL_COLS.split(","))
        sql = (
            f"SELECT DISTINCT {cols} FROM calls c JOIN symbols s ON s.rowid = c.sym "
            "WHERE c.norm = ? ORDER BY s.path, s.start_line LIMIT 50"
        )
        async with self.db.execute(sql, (_norm(name.rsplit(".", 1)[-1]),)) as cur:
            return [_row_to_symbol(r) async for r in cur]

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
        sql = f"SELECT {_CHUNK_COLS} FROM chunks ORDER BY collection, row"
        async with self.db.execute(sql) as cur:
            async for r in cur:
                if r[3] in keys:  # doc_key; r[2] is the row, the vector's index
                    kept.append((_row_to_chunk(r), np.array(self._vectors[r[1]][r[2]])))
        async with self.db.execute(f"SELECT {_SYMBOL_COLS} FROM symbols") as cur:
            symbols = [_row_to_symbol(r) async for r in cur]
        return kept, [s for s in symbols if s.path in keys]


async def _read_meta(db: aiosqlite.Connection) -> dict[str, Any]:
    async with db.execute("SELECT key, value FROM meta") as cur:
        return {k: json.loads(v) async for k, v in cur}


class LocalWriter:
    """Writes one build into a hidden temporary folder; :meth:`commit` swaps it in atomically."""

    def __init__(self, layout: Layout, name: str):
        self.root = layout.instance(name)
        self.builds = layout.builds(name)
        self.link = layout.current(name)
        self.id = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        self.tmp = self.builds / f".tmp-{self.id}"
        self.db: aiosqlite.Connection | None = None

    async def __aenter__(self) -> LocalWriter:
        self.builds.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir()
        try:
            self.db = await aiosqlite.connect(str(self.tmp / "meta.sqlite"))
            await self.db.execute("PRAGMA journal_mode=OFF")
            await self.db.execute("PRAGMA synchronous=OFF")
            await self.db.executescript(SCHEMA)
        except BaseException:  # __aexit__ will not run: leave nothing behind
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.db is not None:
            await self.db.close()
            self.db = None
        if self.tmp.exists():  # not committed: an error or a crash; the old build stays live
            shutil.rmtree(self.tmp, ignore_errors=True)

    async def add_units(self, docs: Sequence[Document]) -> None:
        assert self.db is not None
        await self.db.executemany(
            "INSERT INTO units VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(d.key, d.collection, d.content_hash, d.path, d.issue, d.title, d.url) for d in docs],
        )

    async def add_chunks(
        self, collection: Collection, chunks: Sequence[Chunk], vectors: np.ndarray | None
    ) -> None:
        """Insert a collection's chunks (row i = vector i) and their lexical forms for FTS5."""
        assert self.db is not None
        await self.db.executemany(
            f"INSERT INTO chunks ({_CHUNK_COLS}) VALUES "
            "(NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (collection, i, c.doc_key, c.path, c.issue, c.start_line, c.end_line, c.title,
                 c.symbol, c.kind, c.text, c.text_hash, c.tokens, c.url, c.commit)
                for i, c in enumerate(chunks)
            ],
        )  # fmt: skip
        forms = await asyncio.to_thread(lambda: [lexical_form(c.text) for c in chunks])
        async with self.db.execute(
            "SELECT id FROM chunks WHERE collection=? ORDER BY row", (collection,)
        ) as cur:
            ids = [int(r[0]) async for r in cur]
        await self.db.executemany(
            f"INSERT INTO fts_{collection} (rowid, body) VALUES (?, ?)",
            list(zip(ids, forms, strict=True)),
        )
        await write_postings(self.db, collection, forms)
        if vectors is not None and len(chunks):
            await asyncio.to_thread(
                save_matrix,
                np.ascontiguousarray(vectors, np.float32),
                str(self.tmp / f"{collection}.fbin"),
            )

    async def add_symbols(self, symbols: Sequence[Symbol]) -> None:
        assert self.db is not None
        async with self.db.execute("SELECT COALESCE(MAX(rowid), 0) FROM symbols") as cur:
            row = await cur.fetchone()
        first = int(row[0]) + 1 if row else 1
        await self.db.executemany(
            "INSERT INTO symbols (rowid, name, qualname, kind, path, start_line, end_line, norm, "
            "calls) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(first + i, s.name, s.qualname, s.kind, s.path, s.start_line, s.end_line,
              _norm(s.name), "\n".join(s.calls)) for i, s in enumerate(symbols)],
        )  # fmt: skip
        await self.db.executemany(
            "INSERT INTO calls VALUES (?, ?)",
            [(n, first + i) for i, s in enumerate(symbols)
             for n in sorted({_norm(c) for c in s.calls} - {""})],
        )  # fmt: skip

    async def set_meta(self, key: str, value: Any) -> None:
        assert self.db is not None
        await self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    async def commit(self) -> str:
        """Make this build the live one: rename into place, then swap the ``current`` link."""
        assert self.db is not None
        await self.db.commit()
        await self.db.close()
        self.db = None
        return await asyncio.to_thread(self._swap)

    def _swap(self) -> str:
        final = self.builds / self.id
        os.replace(self.tmp, final)
        tmp_link = self.root / f".current-{self.id}"
        os.symlink(os.path.relpath(final, self.root), tmp_link)
        os.replace(tmp_link, self.link)  # atomic on POSIX: readers see the old or the new build
        prune(self.builds, keep={final.name})
        return final.name


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
        async with aiosqlite.connect(f"file:{path / 'meta.sqlite'}?mode=ro", uri=True) as db:
            return await _read_meta(db)

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
