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
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np

from core.layout import Layout
from core.models import COLLECTIONS, Chunk, Collection, Symbol, unit_key
from core.store.base import Carry, Hit, IssueLinks, SharedVectors, Unit, as_named, group_links
from core.store.bm25 import Bm25, kept_ids, on_search_thread, repo_groups
from core.store.doc_terms import DocMap, DocTerms
from core.store.local_files import load_vectors, prune, unreadable
from core.store.local_index import (
    TEST_CHUNK,
    TEST_FILE,
    Lookups,
    read_terms,
    search_postings,
    test_flags,
    tokens,
)
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
        self.shared_vectors: SharedVectors | None = None  # none: the embedding cache serves
        self._vectors = vectors
        self.meta: dict[str, Any] = {}
        self._tests = np.zeros(0, dtype=np.int8)  # per code row: test code? (``test_flags``)
        self._lookups = Lookups()
        self._bm25: dict[str, Bm25] = {}  # collections with postings (newer builds)
        self._docs = DocMap({}, 0)  # row → document, for ``doc_terms``
        self._repo_ids: dict[str, int] = {}  # several repositories: bm25.repo_groups' numbers
        self._groups: dict[str, np.ndarray] = {}  # …and each row's, per collection

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
            sql = "SELECT collection, row, path, issue, doc_key, kind, repo FROM chunks"
            async with db.execute(sql) as cur:
                located = list(await cur.fetchall())
            reader._lookups = await asyncio.to_thread(Lookups.of, [r[:4] for r in located])
            # several repositories: a filter's statistics are its repositories' (bm25.py)
            groups, reader._repo_ids = await asyncio.to_thread(
                repo_groups, [(str(c), int(r), str(g)) for c, r, *_, g in located], rows
            )
            reader._groups = groups or {}
            reader._docs = await asyncio.to_thread(
                DocMap.of, [(str(c), int(r), str(k)) for c, r, _, _, k, _, _ in located], rows,
                groups,
            )  # fmt: skip
            async with db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'lexstats'"
            ) as cur:
                has_postings = await cur.fetchone() is not None
            if has_postings:
                async with db.execute("SELECT collection, lengths FROM lexstats") as cur:
                    for coll, blob in await cur.fetchall():
                        reader._bm25[str(coll)] = Bm25(
                            np.frombuffer(blob, np.int32),
                            groups.get(str(coll)) if groups else None,
                        )
            if "code" in vectors:  # flags for retrieval's test_penalty, computed once
                code = [(int(r), p, kind) for c, r, p, _, _, kind, _ in located if c == "code"]
                reader._tests = await asyncio.to_thread(test_flags, code, len(vectors["code"]))
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
    def _dense_sync(
        self, collection: Collection, q: np.ndarray, n: int, keep: list[int] | None
    ) -> list[Hit]:
        mat = self._vectors.get(collection)
        if mat is None or n <= 0:
            return []
        sims = mat @ q.astype(np.float32)  # exact: every row (BLAS, off the event loop)
        rows = np.arange(len(sims))
        if keep is not None:  # a filter: its repositories' rows (each row's: repo_groups)
            rows = np.flatnonzero(np.isin(self._groups[collection], keep))
        n = min(n, len(rows))
        if n <= 0:
            return []
        top = rows[np.argpartition(-sims[rows], n - 1)[:n]] if n < len(rows) else rows
        top = top[np.argsort(-sims[top], kind="stable")]
        return [Hit(int(r), float(sims[r])) for r in top]

    async def dense(
        self, collection: Collection, query: np.ndarray, n: int, repos: Sequence[str] = ()
    ) -> list[Hit]:
        keep = kept_ids(self._repo_ids, repos)
        return await on_search_thread(lambda: self._dense_sync(collection, query, n, keep))

    async def similarity(
        self, collection: Collection, query: np.ndarray, rows: Sequence[int]
    ) -> list[float]:
        mat = self._vectors.get(collection)
        if mat is None or not rows:
            return []
        return [float(s) for s in mat[list(rows)] @ query]

    def tests(self, collection: Collection, rows: Sequence[int], files: bool = False) -> set[int]:
        if collection != "code" or not self._tests.any():
            return set()
        least = TEST_FILE if files else TEST_CHUNK
        return {r for r in rows if 0 <= r < len(self._tests) and self._tests[r] >= least}

    # -- lexical -----------------------------------------------------------------------------
    async def lexical(
        self, collection: Collection, terms: Sequence[str], n: int, repos: Sequence[str] = ()
    ) -> list[Hit]:
        if not terms or collection not in COLLECTIONS:
            return []
        bm25 = self._bm25.get(collection)
        folded = [tokens(t) for t in terms]
        if bm25 is not None and all(len(f) == 1 for f in folded):
            keep = kept_ids(self._repo_ids, repos)
            got = await search_postings(self.db, collection, bm25, [f[0] for f in folded], n,
                                        keep)  # fmt: skip
            return [Hit(r, sc) for r, sc in got]
        # older builds (no postings) and terms FTS5 splits: FTS5's statistics, the build's
        # (a filter: its repositories' rows only)
        return await self._lexical_fts(collection, terms, n, repos)

    async def doc_terms(
        self, terms: Sequence[str], rows: Mapping[Collection, Sequence[int]],
        repos: Sequence[str] = (),
    ) -> DocTerms:  # fmt: skip
        folded = {t: f[0] for t in terms if len(f := tokens(t)) == 1}
        wanted = sorted(set(folded.values()))
        # collections with postings (older builds: no coverage)
        parts = {coll: await read_terms(self.db, coll, wanted) for coll in self._bm25}
        keep = kept_ids(self._repo_ids, repos)
        return await on_search_thread(lambda: self._docs.answer(parts, folded, rows, keep))

    async def _lexical_fts(
        self, collection: Collection, terms: Sequence[str], n: int, repos: Sequence[str] = ()
    ) -> list[Hit]:
        match = fts_match(terms)
        if match is None:
            return []
        t = f"fts_{collection}"
        only, kept = self._only(repos, "c.repo")
        sql = (
            f"SELECT c.row, -bm25({t}) FROM {t} JOIN chunks c ON c.id = {t}.rowid "
            f"WHERE {t} MATCH ?{only} ORDER BY bm25({t}) LIMIT ?"
        )
        async with self.db.execute(sql, (match, *kept, n)) as cur:
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
        # `+collection`: not the (collection, row) index — with it SQLite walked every row of the
        # collection in order instead of looking the path up (1.7 s p95 at 2M chunks).
        sql = f"SELECT row FROM chunks WHERE +collection=? AND ({where}) ORDER BY row"
        async with self.db.execute(sql, [collection, *args]) as cur:
            return [int(r[0]) async for r in cur]

    async def issue_rows(self, number: int) -> list[int]:
        return list(self._lookups.issues.get(number, ()))

    async def path_rows(self, collection: Collection, path: str) -> list[int]:
        return self._lookups.path_rows(collection, path)

    async def next_chunk(
        self, collection: Collection, path: str, repo: str, after: int, within: int
    ) -> tuple[int, Chunk] | None:
        # The path index (`+collection`: not the (collection, row) one; see _rows_where).
        sql = (
            f"SELECT {CHUNK_COLS} FROM chunks WHERE path=? AND +collection=? AND repo=? "
            "AND start_line > ? AND start_line <= ? ORDER BY start_line, row LIMIT 1"
        )
        async with self.db.execute(sql, (path, collection, repo, after, after + within)) as cur:
            got = await cur.fetchone()
        return None if got is None else (int(got[2]), row_to_chunk(got))

    def _only(self, repos: Sequence[str], column: str) -> tuple[str, list[str]]:
        """A filter's SQL condition on ``column`` (a build of one repository: none)."""
        if not repos or not self._repo_ids:
            return "", []
        return f" AND {column} IN ({','.join('?' * len(repos))})", list(repos)

    async def symbols(self, name: str, repos: Sequence[str] = ()) -> list[Symbol]:
        # Indexed lookups only: this runs for every identifier a question names.
        only, kept = self._only(repos, "repo")
        sql = (
            f"SELECT {SYMBOL_COLS} FROM symbols WHERE (qualname=? OR name=? OR norm=?){only} "
            "ORDER BY (qualname=?) DESC, (name=?) DESC, path, start_line LIMIT 20"
        )
        args = [name, name, norm_name(name), *kept, name, name]
        async with self.db.execute(sql, args) as cur:
            return as_named(name, [row_to_symbol(r) async for r in cur])

    async def callers(self, name: str, repos: Sequence[str] = ()) -> list[Symbol]:
        cols = ", ".join(f"s.{c.strip()}" for c in SYMBOL_COLS.split(","))
        only, kept = self._only(repos, "s.repo")
        sql = (
            f"SELECT DISTINCT {cols} FROM calls c JOIN symbols s ON s.rowid = c.sym "
            f"WHERE c.norm = ?{only} ORDER BY s.path, s.start_line LIMIT 50"
        )
        async with self.db.execute(sql, (norm_name(name.rsplit(".", 1)[-1]), *kept)) as cur:
            return [row_to_symbol(r) async for r in cur]

    async def links(self, numbers: Sequence[int], repo: str | None = None) -> dict[int, IssueLinks]:
        if not numbers:
            return {}
        nums = sorted(set(numbers))
        q = ",".join("?" * len(nums))
        only = "" if repo is None else " AND repo = ?"
        tail = [] if repo is None else [repo]
        sql = f"SELECT issue, rel, target FROM links WHERE issue IN ({q}){only} ORDER BY rowid"
        async with self.db.execute(sql, [*nums, *tail]) as cur:
            forward = list(await cur.fetchall())
        sql = f"SELECT target, issue FROM links WHERE rel = 'fixes' AND target IN ({q}){only}"
        async with self.db.execute(sql, [*(str(n) for n in nums), *tail]) as cur:
            backward = list(await cur.fetchall())
        return group_links(nums, forward, backward)

    async def definition_rows(
        self, name: str, repos: Sequence[str] = ()
    ) -> list[tuple[int, Symbol]]:
        out: list[tuple[int, Symbol]] = []
        for s in await self.symbols(name, repos):
            rows = await self._rows_where(
                "code", "path=? AND repo=? AND start_line<=? AND end_line>=?",
                [s.path, s.repo, s.start_line, s.start_line],
            )  # fmt: skip
            if not rows:  # the definition line may sit in a header repeated elsewhere
                rows = await self._rows_where(
                    "code", "path=? AND repo=? AND start_line>=? AND start_line<=?",
                    [s.path, s.repo, s.start_line, s.end_line],
                )  # fmt: skip
            out.extend((r, s) for r in rows[:2])
        return out

    # -- what the next build reads -----------------------------------------------------------
    async def units(self) -> dict[str, Unit]:
        async with self.db.execute("SELECT key, collection, content_hash FROM units") as cur:
            return {k: Unit(c, h) async for k, c, h in cur}

    async def carried(
        self, keys: set[str], without: frozenset[Collection] = frozenset()
    ) -> tuple[list[tuple[Chunk, np.ndarray]], list[Symbol]]:
        kept: list[tuple[Chunk, np.ndarray]] = []
        if not keys:
            return kept, []
        read = [c for c in COLLECTIONS if c not in without]
        sql = (f"SELECT {CHUNK_COLS} FROM chunks WHERE collection IN "
               f"({', '.join('?' * len(read))}) ORDER BY collection, row")  # fmt: skip
        async with self.db.execute(sql, read) as cur:
            async for r in cur:
                if r[3] in keys:  # doc_key; r[2] is the row, the vector's index
                    kept.append((row_to_chunk(r), np.array(self._vectors[r[1]][r[2]])))
        async with self.db.execute(f"SELECT {SYMBOL_COLS} FROM symbols") as cur:
            symbols = [row_to_symbol(r) async for r in cur]
        return kept, [s for s in symbols if unit_key(s.repo, s.path) in keys]


async def _read_meta(db: aiosqlite.Connection) -> dict[str, Any]:
    async with db.execute("SELECT key, value FROM meta") as cur:
        return {k: json.loads(v) async for k, v in cur}


class LocalStore:
    """Builds of every instance under one data folder (implements ``IndexStore``)."""

    schema = SCHEMA_VERSION
    shared_vectors: SharedVectors | None = None  # none: the data folder's embedding cache

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

    def writer(self, instance: str, carry: Carry | None = None) -> LocalWriter:
        return LocalWriter(self.layout, instance, carry)

    async def tidy(self, instance: str) -> None:
        """Dead writers' temporary folders and links go; every build stays."""
        builds, root = self.layout.builds(instance), self.layout.instance(instance)

        def clear() -> None:
            if builds.is_dir():
                keep = {p.name for p in builds.iterdir() if not p.name.startswith(".tmp-")}
                prune(root, builds, keep, os.getpid())

        await asyncio.to_thread(clear)

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
