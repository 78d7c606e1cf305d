"""The index on disk: per instance, one build directory holding a SQLite file (chunks, symbol
table, indexed units and their content hashes, the stamp) and one usearch matrix file of vectors
per collection. ``current`` is a symlink to the live build; a new build is written aside and the
symlink is swapped atomically, so readers always see a complete index.

Layout::

    {data}/{instance}/current -> builds/{id}
    {data}/{instance}/builds/{id}/meta.sqlite        chunks, symbols, units, meta (stamp, summary)
    {data}/{instance}/builds/{id}/{collection}.fbin  float32 vectors, row i = chunk with row i
    {data}/{instance}/checkout/                      clone of a ``repo.url`` instance
    {data}/cache/embeddings.sqlite                   passage vectors by (model, text hash)

Search is exact (usearch's SIMD brute force over the memory-mapped matrix): measured here,
building an HNSW graph of 50k × 384 vectors took 47 s while an exact search over them takes
about 4 ms, and the recall of approximate search at default settings was poor.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np
from usearch.index import MetricKind
from usearch.index import search as usearch_search
from usearch.io import load_matrix, save_matrix

from core.errors import IndexError_
from core.lexical import lexical_form, parts
from core.models import COLLECTIONS, Chunk, Collection, Symbol, is_test_path

SCHEMA_VERSION = 2

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
    norm TEXT NOT NULL  -- parts joined, lower case: parse_config, parseConfig → parseconfig
);
CREATE INDEX symbols_name ON symbols(name);
CREATE INDEX symbols_norm ON symbols(norm);
CREATE INDEX symbols_qualname ON symbols(qualname);
CREATE INDEX chunks_path ON chunks(path);
CREATE VIRTUAL TABLE fts_docs USING fts5(body, tokenize='unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE fts_code USING fts5(body, tokenize='unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE fts_issues USING fts5(body, tokenize='unicode61 remove_diacritics 2');
"""

_CHUNK_COLS = (
    "id, collection, row, doc_key, path, issue, start_line, end_line, title, symbol, kind, "
    "text, text_hash, tokens, url, commit_sha"
)


def instance_dir(data_dir: Path, name: str) -> Path:
    return data_dir / name


def current_build(data_dir: Path, name: str) -> Path | None:
    link = instance_dir(data_dir, name) / "current"
    if not link.is_symlink() and not link.exists():
        return None
    target = link.resolve()
    return target if (target / "meta.sqlite").exists() else None


def _norm(name: str) -> str:
    return "".join(parts(name))


def row_to_chunk(r: Any) -> Chunk:
    return Chunk(
        id=r[0], collection=r[1], doc_key=r[3], path=r[4], issue=r[5], start_line=r[6],
        end_line=r[7], title=r[8], symbol=r[9], kind=r[10] or "", text=r[11], text_hash=r[12],
        tokens=r[13], url=r[14], commit=r[15],
    )  # fmt: skip


@dataclass
class Hit:
    collection: Collection
    row: int
    score: float  # cosine similarity


def _test_flags(paths: list[tuple[int, str]], n: int) -> np.ndarray:
    """``n`` booleans: which rows' paths are test code (``models.is_test_path``)."""
    flags = np.zeros(n, dtype=bool)
    for row, path in paths:
        if 0 <= row < n and is_test_path(path):
            flags[row] = True
    return flags


class IndexReader:
    """A read-only view of one build: SQLite metadata plus memory-mapped vector matrices."""

    def __init__(self, path: Path, db: aiosqlite.Connection, vectors: dict[str, np.ndarray]):
        self.path = path
        self.db = db
        self.vectors = vectors
        self.meta: dict[str, Any] = {}
        # per collection (code only: docs about testing are docs), per row: is the chunk test
        # code (``models.is_test_path``)
        self.test_rows: dict[str, np.ndarray] = {}

    @classmethod
    async def open(cls, path: Path) -> IndexReader:
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
            async with db.execute("SELECT key, value FROM meta") as cur:
                reader.meta = {k: json.loads(v) async for k, v in cur}
            if "code" in vectors:  # per row: test code? (for retrieval's test_penalty)
                sql = "SELECT row, path FROM chunks WHERE collection = 'code' AND path IS NOT NULL"
                async with db.execute(sql) as cur:
                    paths = [(int(r), str(p)) for r, p in await cur.fetchall()]
                reader.test_rows["code"] = await asyncio.to_thread(
                    _test_flags, paths, len(vectors["code"])
                )
        except BaseException:
            await db.close()
            raise
        return reader

    async def close(self) -> None:
        await self.db.close()

    @property
    def stamp(self) -> dict[str, Any]:
        return dict(self.meta.get("stamp") or {})

    def size(self, collection: str) -> int:
        v = self.vectors.get(collection)
        return 0 if v is None else int(v.shape[0])

    def _search_sync(self, collection: str, q: np.ndarray, n: int) -> list[Hit]:
        mat = self.vectors.get(collection)
        if mat is None or n <= 0:
            return []
        n = min(n, mat.shape[0])
        res = usearch_search(mat, q.astype(np.float32), n, MetricKind.IP, exact=True)
        return [
            Hit(collection, int(key), 1.0 - float(d))  # type: ignore[arg-type]
            for key, d in zip(res.keys, res.distances, strict=True)
        ]

    async def search(self, collection: str, q: np.ndarray, n: int) -> list[Hit]:
        """The ``n`` nearest chunks of a collection by cosine similarity (exact)."""
        return await asyncio.to_thread(self._search_sync, collection, q, n)

    async def chunks_by_rows(self, collection: str, rows: list[int]) -> dict[int, Chunk]:
        if not rows:
            return {}
        q = ",".join("?" * len(rows))
        sql = f"SELECT {_CHUNK_COLS} FROM chunks WHERE collection=? AND row IN ({q})"
        async with self.db.execute(sql, [collection, *rows]) as cur:
            return {r[2]: row_to_chunk(r) async for r in cur}

    async def all_chunks(self, collection: str | None = None) -> list[Chunk]:
        sql = f"SELECT {_CHUNK_COLS} FROM chunks"
        args: list[Any] = []
        if collection:
            sql += " WHERE collection=?"
            args.append(collection)
        async with self.db.execute(sql + " ORDER BY collection, row", args) as cur:
            return [row_to_chunk(r) async for r in cur]

    async def lexical(self, collection: str, match: str, n: int) -> list[tuple[int, float]]:
        """BM25 top ``n`` of a collection for an FTS5 MATCH expression: (row, score ≥ 0)."""
        sql = (
            f"SELECT c.row, -bm25(fts_{collection}) FROM fts_{collection} "
            f"JOIN chunks c ON c.id = fts_{collection}.rowid "
            f"WHERE fts_{collection} MATCH ? ORDER BY bm25(fts_{collection}) LIMIT ?"
        )
        async with self.db.execute(sql, (match, n)) as cur:
            return [(int(r), float(s)) async for r, s in cur]

    async def rows_where(self, collection: str, where: str, args: list[Any]) -> list[int]:
        sql = f"SELECT row FROM chunks WHERE collection=? AND ({where}) ORDER BY row"
        async with self.db.execute(sql, [collection, *args]) as cur:
            return [int(r[0]) async for r in cur]

    async def issue_rows(self, number: int) -> list[int]:
        return await self.rows_where("issues", "issue=?", [number])

    async def definition_rows(self, name: str) -> list[tuple[int, Symbol]]:
        """Code chunks holding the definition of a symbol named ``name`` (or its qualname)."""
        out: list[tuple[int, Symbol]] = []
        for s in await self.symbols(name):
            rows = await self.rows_where(
                "code", "path=? AND start_line<=? AND end_line>=?",
                [s.path, s.start_line, s.start_line],
            )  # fmt: skip
            if not rows:  # the definition line may sit in a header repeated elsewhere
                rows = await self.rows_where(
                    "code", "path=? AND start_line>=? AND start_line<=?",
                    [s.path, s.start_line, s.end_line],
                )  # fmt: skip
            out.extend((r, s) for r in rows[:2])
        return out

    async def symbols(self, name: str) -> list[Symbol]:
        """Definitions named ``name``: by qualified name (``Parser.parse``), by name (which also
        finds methods), or by any spelling (``parseConfig`` finds ``parse_config``). Indexed
        lookups only: this runs for every identifier a question names."""
        sql = (
            "SELECT name, qualname, kind, path, start_line, end_line FROM symbols "
            "WHERE qualname=? OR name=? OR norm=? "
            "ORDER BY (qualname=?) DESC, (name=?) DESC, path, start_line LIMIT 20"
        )
        args = [name, name, _norm(name), name, name]
        async with self.db.execute(sql, args) as cur:
            return [Symbol(*r) async for r in cur]

    async def units(self) -> dict[str, str]:
        async with self.db.execute("SELECT key, content_hash FROM units") as cur:
            return {k: h async for k, h in cur}

    async def unit_collections(self) -> dict[str, str]:
        async with self.db.execute("SELECT key, collection FROM units") as cur:
            return {k: c async for k, c in cur}


class BuildWriter:
    """Writes one build into a hidden temporary folder; :meth:`commit` swaps it in atomically."""

    def __init__(self, data_dir: Path, name: str):
        self.root = instance_dir(data_dir, name)
        self.builds = self.root / "builds"
        self.id = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        self.tmp = self.builds / f".tmp-{self.id}"
        self.db: aiosqlite.Connection | None = None

    async def __aenter__(self) -> BuildWriter:
        self.builds.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir()
        self.db = await aiosqlite.connect(str(self.tmp / "meta.sqlite"))
        await self.db.execute("PRAGMA journal_mode=OFF")
        await self.db.execute("PRAGMA synchronous=OFF")
        await self.db.executescript(SCHEMA)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.db is not None:
            await self.db.close()
            self.db = None
        if self.tmp.exists():  # not committed: an error or a crash; the old build stays live
            shutil.rmtree(self.tmp, ignore_errors=True)

    async def add_unit(self, key: str, collection: str, content_hash: str, path: str | None,
                       issue: int | None, title: str, url: str | None) -> None:  # fmt: skip
        assert self.db is not None
        await self.db.execute(
            "INSERT INTO units VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key, collection, content_hash, path, issue, title, url),
        )

    async def add_chunks(self, collection: str, chunks: list[Chunk]) -> None:
        """Insert a collection's chunks (row i = vector i) and their lexical forms for FTS5."""
        assert self.db is not None
        await self.db.executemany(
            f"INSERT INTO chunks ({_CHUNK_COLS}) VALUES "
            "(NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    collection,
                    i,
                    c.doc_key,
                    c.path,
                    c.issue,
                    c.start_line,
                    c.end_line,
                    c.title,
                    c.symbol,
                    c.kind,
                    c.text,
                    c.text_hash,
                    c.tokens,
                    c.url,
                    c.commit,
                )
                for i, c in enumerate(chunks)
            ],
        )
        forms = await asyncio.to_thread(lambda: [lexical_form(c.text) for c in chunks])
        async with self.db.execute(
            "SELECT id FROM chunks WHERE collection=? ORDER BY row", (collection,)
        ) as cur:
            ids = [int(r[0]) async for r in cur]
        await self.db.executemany(
            f"INSERT INTO fts_{collection} (rowid, body) VALUES (?, ?)",
            list(zip(ids, forms, strict=True)),
        )

    async def add_symbols(self, symbols: list[Symbol]) -> None:
        assert self.db is not None
        await self.db.executemany(
            "INSERT INTO symbols VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (s.name, s.qualname, s.kind, s.path, s.start_line, s.end_line, _norm(s.name))
                for s in symbols
            ],
        )

    async def set_meta(self, key: str, value: Any) -> None:
        assert self.db is not None
        await self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    async def write_vectors(self, collection: str, vectors: np.ndarray) -> None:
        await asyncio.to_thread(
            save_matrix,
            np.ascontiguousarray(vectors, np.float32),
            str(self.tmp / f"{collection}.fbin"),
        )

    async def commit(self) -> Path:
        """Make this build the live one: rename into place, then swap the ``current`` link."""
        assert self.db is not None
        await self.db.commit()
        await self.db.close()
        self.db = None
        return await asyncio.to_thread(self._swap)

    def _swap(self) -> Path:
        final = self.builds / self.id
        os.replace(self.tmp, final)
        link = self.root / "current"
        tmp_link = self.root / f".current-{self.id}"
        os.symlink(os.path.relpath(final, self.root), tmp_link)
        os.replace(tmp_link, link)  # atomic on POSIX: readers see the old or the new build
        _prune(self.builds, keep={final.name})
        return final


def _prune(builds: Path, keep: set[str]) -> None:
    """Remove abandoned temp folders and old builds (the newest previous one is kept)."""
    olds = sorted(
        (p for p in builds.iterdir() if p.name not in keep and not p.name.startswith(".tmp-")),
        key=lambda p: p.name,
    )
    for p in olds[:-1]:
        shutil.rmtree(p, ignore_errors=True)
    for p in builds.glob(".tmp-*"):
        # Only temp folders of dead writers: ours are committed or removed by __aexit__.
        try:
            pid = int(p.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def open_current(data_dir: Path, name: str) -> IndexReader:
    path = current_build(data_dir, name)
    if path is None:
        raise IndexError_(f"instance '{name}' has no index yet: run `repo-expert index {name}`")
    return await IndexReader.open(path)
