"""The PostgreSQL store of the index (implements :mod:`core.store.base`): builds in tables of
their own (``build.py``), ``rx_live`` naming each instance's live build, an advisory lock per
instance for the one build or sync at a time.

Vectors: ``pgvector`` columns, searched by negative inner product (rows are unit vectors, so it
is the cosine). A collection under ``hnsw_min_rows`` is searched exactly (a scan); a bigger one
gets an HNSW index at commit and is searched through it with ``hnsw.ef_search`` candidates — the
recall against exact search, measured on e5 embeddings, is in ``benchmarks/RESULTS.md``. A
filter (some repositories of a build over several) is searched as a build of its rows alone
would be: exactly (through the ``repo`` index) when they are fewer than ``hnsw_min_rows``, else
through HNSW with pgvector's iterative scan (exact with pgvector < 0.8, or where the scan stops
short) — approximate, like that build's, but with a filter's recall, which falls with the
share of rows it keeps (benchmarks/RESULTS.md).

Lexical: BM25 from the build's postings of each lexical token (``core/store/bm25.py``), the same
formula, constants and code as the local store, scored in this process with numpy. PostgreSQL's
own full-text search was the first version here (a ``tsvector`` of the lexical forms, GIN, and
``ts_rank`` weighted by each term's IDF, since ``ts_rank`` has none): like FTS5, it scores every
matching row, and a question with common words matches a third of a collection — 44 ms p95 at
50,000 chunks, growing with the collection (benchmarks/RESULTS.md); ``ts_rank_cd`` rewards terms
standing close together, which an OR of identifier parts says little about. The postings read
is one indexed SELECT whatever the number of matches.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import asyncpg
import numpy as np

from core.errors import IndexError_
from core.models import COLLECTIONS, Chunk, Collection, Symbol, is_test_code, is_test_path
from core.store.base import Carry, Hit, IssueLinks, SharedVectors, Unit, as_named, group_links
from core.store.bm25 import Bm25, kept_ids, on_search_thread, read_postings, repo_groups
from core.store.doc_terms import DocMap, DocTerms
from core.store.postgres.build import (
    CHUNK_COLS,
    EF_SEARCH,
    HNSW_MIN_ROWS,
    SCHEMA_VERSION,
    SYMBOL_COLS,
    PgWriter,
    norm,
    owned,
)
from core.store.postgres.db import Database, json_value
from core.store.postgres.vectors import PgVectors

LOCK_CLASS = 0x5245  # pg_advisory_lock(LOCK_CLASS, hashtext(instance)): the build lock
LOCK_POLL_S = 0.05


def _symbol(r: Any) -> Symbol:
    return Symbol(r[0], r[1], r[2], r[3], r[4], r[5], tuple(r[6] or ()), r[7] or "")


def _vector(v: Any) -> np.ndarray:
    """pgvector's codec gives a ``Vector`` (pgvector ≥ 0.4) or an array."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, np.float32)


def _chunk(collection: Collection, r: Any) -> Chunk:
    return Chunk(
        id=r[0], collection=collection, doc_key=r[2], path=r[3], issue=r[4], start_line=r[5],
        end_line=r[6], title=r[7], symbol=r[8], kind=r[9] or "", text=r[10], text_hash=r[11],
        tokens=r[12], url=r[13], commit=r[14], repo=r[15] or "",
    )  # fmt: skip


def _version(text: str | None) -> tuple[int, ...]:
    """An extension's version ("0.8.6") as numbers ((): unknown)."""
    try:
        return tuple(int(p) for p in (text or "").split(".")[:2])
    except ValueError:
        return ()


class PgReader:
    """One build, read through the pool (every call is one statement: no transaction held)."""

    def __init__(self, pool: asyncpg.Pool, build_id: str, meta: dict[str, Any],
                 sizes: dict[str, int], hnsw: set[Collection],
                 vectors: SharedVectors | None) -> None:  # fmt: skip
        self.pool = pool
        self.shared_vectors = vectors  # the deployment's shared vectors (rx_vectors)
        self.build_id = build_id
        self.meta = meta
        self._sizes = sizes
        self._hnsw = hnsw  # collections searched through their HNSW index
        self._tests: set[int] = set()
        self._test_files: set[int] = set()  # of those, the rows in test files
        self._bm25: dict[str, Bm25] = {}  # per collection: row lengths for BM25
        self._docs = DocMap({}, 0)  # row → document, for ``doc_terms``
        self._repo_ids: dict[str, int] = {}  # several repositories: bm25.repo_groups' numbers
        self._groups: dict[str, np.ndarray] = {}  # …and each row's, per collection
        self.iterative = True  # pgvector ≥ 0.8: a filter's HNSW scan goes on until n rows pass
        self.exact_below = HNSW_MIN_ROWS  # a filter keeping fewer rows is searched exactly
        self.exact = False  # True: never the HNSW index (benchmarks measure recall with it)
        self.ef_search = EF_SEARCH  # HNSW candidates (benchmarks sweep it)

    def _t(self, what: str) -> str:
        return owned(self.meta, self.build_id, what)  # its own table, or a shared one

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        try:
            return list(await self.pool.fetch(sql, *args))
        except asyncpg.UndefinedTableError:
            raise IndexError_(
                f"build {self.build_id} was removed while being read: ask again"
            ) from None

    @property
    def stamp(self) -> dict[str, Any]:
        return dict(self.meta.get("stamp") or {})

    def size(self, collection: Collection) -> int:
        return int(self._sizes.get(collection, 0))

    # -- vectors -----------------------------------------------------------------------------
    async def dense(
        self, collection: Collection, query: np.ndarray, n: int, repos: Sequence[str] = ()
    ) -> list[Hit]:
        if n <= 0 or not self.size(collection):
            return []
        q = np.asarray(query, np.float32)
        kept = self._kept(repos)  # a filter, in a build over several: the nearest of its rows
        if kept == []:
            return []
        indexed = collection in self._hnsw
        held = self._rows_of(collection, kept) if kept is not None and indexed else 0
        if kept is not None and indexed and held < self.exact_below:
            # as the kept repositories' own build would: exact below hnsw_min_rows — their
            # rows through the repo index, the distance an expression HNSW cannot serve
            return await self._dense_rows(
                "WHERE repo = ANY($3::text[]) ORDER BY (embedding <#> $1) + 0", [], collection,
                q, n, kept,
            )  # fmt: skip
        where = "" if kept is None else "WHERE repo = ANY($3::text[]) "
        order = f"{where}ORDER BY embedding <#> $1"
        ef = max(self.ef_search, n)
        exact = ["SET LOCAL enable_indexscan = off"]
        if not indexed or (not self.exact and ef == EF_SEARCH and kept is None):  # one statement
            return await self._dense_rows(order, [], collection, q, n, kept)
        if self.exact or (kept is not None and not self.iterative):
            return await self._dense_rows(order, exact, collection, q, n, kept)  # pgvector < 0.8
        # more than ef_search candidates, or a filter: the index scanned on until n of its rows
        # pass (pgvector ≥ 0.8), exact where that stops short (hnsw.max_scan_tuples)
        it = [] if kept is None else ["SET LOCAL hnsw.iterative_scan = strict_order"]
        hits = await self._dense_rows(
            order, [f"SET LOCAL hnsw.ef_search = {int(ef)}", *it], collection, q, n, kept
        )
        if kept is not None and len(hits) < min(n, held):
            hits = await self._dense_rows(order, exact, collection, q, n, kept)
        return hits

    async def _dense_rows(
        self, order: str, settings: Sequence[str], collection: Collection, q: np.ndarray, n: int,
        kept: list[str] | None,
    ) -> list[Hit]:  # fmt: skip
        """``dense``'s statement: ``order`` its WHERE and ORDER BY, under ``settings``."""
        sql = f"SELECT row, (embedding <#> $1) * -1 FROM {self._t(collection)} {order} LIMIT $2"
        args: list[Any] = [q, n] if kept is None else [q, n, kept]
        got = await (self._fetch_set(settings, sql, *args) if settings else self._fetch(sql, *args))
        return [Hit(int(r), float(s)) for r, s in got]

    def _rows_of(self, collection: Collection, repos: Sequence[str]) -> int:
        """How many rows of ``collection`` the repositories hold."""
        ids = kept_ids(self._repo_ids, repos)
        groups = self._groups.get(collection)
        return int(np.isin(groups, ids).sum()) if ids and groups is not None else 0

    async def _fetch_set(self, settings: Sequence[str], sql: str, *args: Any) -> list[Any]:
        """``_fetch`` under ``SET LOCAL`` settings (one transaction)."""
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                for setting in settings:
                    await conn.execute(setting)
                return list(await conn.fetch(sql, *args))
        except asyncpg.UndefinedTableError:
            raise IndexError_(
                f"build {self.build_id} was removed while being read: ask again"
            ) from None

    async def similarity(
        self, collection: Collection, query: np.ndarray, rows: Sequence[int]
    ) -> list[float]:
        if not rows or not self.size(collection):
            return []
        got = await self._fetch(
            f"SELECT row, (embedding <#> $1) * -1 FROM {self._t(collection)} "
            "WHERE row = ANY($2::int[])",
            np.asarray(query, np.float32), list(rows),
        )  # fmt: skip
        by_row = {int(r): float(s) for r, s in got}
        return [by_row.get(r, 0.0) for r in rows]

    def tests(self, collection: Collection, rows: Sequence[int], files: bool = False) -> set[int]:
        if collection != "code" or not self._tests:
            return set()
        flagged = self._test_files if files else self._tests
        return {r for r in rows if r in flagged}

    # -- lexical -----------------------------------------------------------------------------
    async def lexical(
        self, collection: Collection, terms: Sequence[str], n: int, repos: Sequence[str] = ()
    ) -> list[Hit]:
        """BM25 (``core/store/bm25.py``) of the OR of ``terms`` from the postings."""
        bm25 = self._bm25.get(collection)
        if not terms or n <= 0 or bm25 is None or collection not in COLLECTIONS:
            return []
        parts = await self._postings(collection, terms)
        keep = kept_ids(self._repo_ids, repos)
        found = await on_search_thread(lambda: bm25.top(list(terms), read_postings(parts), n, keep))
        return [Hit(r, s) for r, s in found]

    async def _postings(
        self, collection: str, terms: Sequence[str]
    ) -> list[tuple[str, bytes, bytes]]:
        got = await self._fetch(
            f"SELECT term, rows, tfs FROM {self._t(collection + '_post')} "
            "WHERE term = ANY($1::text[]) ORDER BY term, part",
            sorted(set(terms)),
        )
        return [(str(t), bytes(r), bytes(f)) for t, r, f in got]

    async def doc_terms(
        self, terms: Sequence[str], rows: Mapping[Collection, Sequence[int]],
        repos: Sequence[str] = (),
    ) -> DocTerms:  # fmt: skip
        parts: dict[str, list[tuple[str, bytes, bytes]]] = {
            coll: await self._postings(coll, terms) for coll in COLLECTIONS
            if terms and coll in self._bm25 and self.size(coll)
        }  # fmt: skip
        keep = kept_ids(self._repo_ids, repos)
        return await on_search_thread(
            lambda: self._docs.answer(parts, {t: t for t in terms}, rows, keep)
        )

    # -- chunks and lookups ------------------------------------------------------------------
    async def chunks(self, collection: Collection, rows: Sequence[int]) -> dict[int, Chunk]:
        if not rows or not self.size(collection):
            return {}
        got = await self._fetch(
            f"SELECT {CHUNK_COLS} FROM {self._t(collection)} WHERE row = ANY($1::int[])",
            list(rows),
        )
        return {int(r[1]): _chunk(collection, r) for r in got}

    async def all_chunks(self, collection: Collection | None = None) -> list[Chunk]:
        out: list[Chunk] = []
        for c in sorted(COLLECTIONS):  # by collection, then row (as the local store orders)
            if collection in (None, c) and self.size(c):
                got = await self._fetch(f"SELECT {CHUNK_COLS} FROM {self._t(c)} ORDER BY row")
                out.extend(_chunk(c, r) for r in got)
        return out

    async def _rows_where(self, collection: str, where: str, *args: Any) -> list[int]:
        if not self.size(collection):  # type: ignore[arg-type]
            return []
        sql = f"SELECT row FROM {self._t(collection)} WHERE {where} ORDER BY row"
        return [int(r[0]) for r in await self._fetch(sql, *args)]

    async def issue_rows(self, number: int) -> list[int]:
        return await self._rows_where("issues", "issue = $1", number)

    async def path_rows(self, collection: Collection, path: str) -> list[int]:
        """The file at ``path`` or one whose path ends in ``/path`` — a range of the index on
        the reversed path (a scan otherwise: 8 ms at 30,000 rows)."""
        tail = ("/" + path)[::-1]
        return await self._rows_where(
            collection,
            'path = $1 OR (reverse(path) COLLATE "C" >= $2 AND reverse(path) COLLATE "C" < $3)',
            path, tail, tail + "\U0010ffff",
        )  # fmt: skip

    async def next_chunk(
        self, collection: Collection, path: str, repo: str, after: int, within: int
    ) -> tuple[int, Chunk] | None:
        """The file at exactly ``path``: an equality on the reversed-path index."""
        if not self.size(collection):
            return None
        got = await self._fetch(
            f"SELECT {CHUNK_COLS} FROM {self._t(collection)} "
            'WHERE reverse(path) COLLATE "C" = $1 AND repo = $2 AND start_line > $3 '
            "AND start_line <= $4 ORDER BY start_line, row LIMIT 1",
            path[::-1], repo, after, after + within,
        )  # fmt: skip
        return (int(got[0][1]), _chunk(collection, got[0])) if got else None

    def _kept(self, repos: Sequence[str]) -> list[str] | None:
        """A filter's repositories of this build (None: no filter, or a build of one)."""
        return [r for r in repos if r in self._repo_ids] if repos and self._repo_ids else None

    async def symbols(self, name: str, repos: Sequence[str] = ()) -> list[Symbol]:
        kept = self._kept(repos)
        sql = (
            f"SELECT {SYMBOL_COLS} FROM {self._t('symbols')} "
            "WHERE (qualname = $1 OR name = $1 OR norm = $2)"
            + ("" if kept is None else " AND repo = ANY($3::text[])")
            + ' ORDER BY (qualname = $1) DESC, (name = $1) DESC, path COLLATE "C", start_line '
            "LIMIT 20"
        )
        args = [name, norm(name)] + ([] if kept is None else [kept])
        return as_named(name, [_symbol(r) for r in await self._fetch(sql, *args)])

    async def callers(self, name: str, repos: Sequence[str] = ()) -> list[Symbol]:
        cols = ", ".join(f"s.{c.strip()}" for c in SYMBOL_COLS.split(","))
        kept = self._kept(repos)
        sql = (
            f'SELECT DISTINCT {cols}, s.path COLLATE "C" AS p FROM {self._t("calls")} c '
            f"JOIN {self._t('symbols')} s ON s.id = c.sym WHERE c.norm = $1 "
            + ("" if kept is None else "AND s.repo = ANY($2::text[]) ")
            + "ORDER BY p, s.start_line LIMIT 50"
        )
        args = [norm(name.rsplit(".", 1)[-1])] + ([] if kept is None else [kept])
        return [_symbol(r) for r in await self._fetch(sql, *args)]

    async def links(self, numbers: Sequence[int], repo: str | None = None) -> dict[int, IssueLinks]:
        nums = sorted(set(numbers))
        if not nums:
            return {}
        t = self._t("links")
        only = "" if repo is None else " AND repo = $2"
        tail = [] if repo is None else [repo]
        forward = await self._fetch(
            f"SELECT issue, rel, target FROM {t} WHERE issue = ANY($1::int[]){only} ORDER BY ord",
            nums, *tail,
        )  # fmt: skip
        backward = await self._fetch(
            f"SELECT target, issue FROM {t} WHERE rel = 'fixes' AND target = ANY($1::text[])"
            + only,
            [str(n) for n in nums], *tail,
        )  # fmt: skip
        return group_links(nums, forward, backward)

    async def definition_rows(
        self, name: str, repos: Sequence[str] = ()
    ) -> list[tuple[int, Symbol]]:
        out: list[tuple[int, Symbol]] = []
        for s in await self.symbols(name, repos):
            rows = await self._rows_where(
                "code", "path = $1 AND repo = $3 AND start_line <= $2 AND end_line >= $2",
                s.path, s.start_line, s.repo,
            )  # fmt: skip
            if not rows:  # the definition line may sit in a header repeated elsewhere
                rows = await self._rows_where(
                    "code", "path = $1 AND repo = $4 AND start_line >= $2 AND start_line <= $3",
                    s.path, s.start_line, s.end_line, s.repo,
                )  # fmt: skip
            out.extend((r, s) for r in rows[:2])
        return out

    # -- what the next build reads -----------------------------------------------------------
    async def units(self) -> dict[str, Unit]:
        got = await self._fetch(f"SELECT key, collection, content_hash FROM {self._t('units')}")
        return {k: Unit(c, h) for k, c, h in got}

    async def carried(
        self, keys: set[str], without: frozenset[Collection] = frozenset()
    ) -> tuple[list[tuple[Chunk, np.ndarray]], list[Symbol]]:
        kept: list[tuple[Chunk, np.ndarray]] = []
        if not keys:
            return kept, []
        for c in sorted(COLLECTIONS):
            if not self.size(c) or c in without:
                continue
            got = await self._fetch(
                f"SELECT {CHUNK_COLS}, embedding FROM {self._t(c)} "
                "WHERE doc_key = ANY($1::text[]) ORDER BY row",
                sorted(keys),
            )
            kept.extend((_chunk(c, r), _vector(r[16])) for r in got)
        got = await self._fetch(
            f"SELECT {SYMBOL_COLS} FROM {self._t('symbols')} WHERE (CASE WHEN repo = '' "
            "THEN path ELSE repo || ':' || path END) = ANY($1::text[]) ORDER BY id",
            sorted(keys),
        )
        return kept, [_symbol(r) for r in got]

    async def close(self) -> None:
        return None  # the pool belongs to the store


class PostgresStore:
    """Builds of every instance of a deployment in one database (implements ``IndexStore``)."""

    schema = SCHEMA_VERSION

    def __init__(self, db: Database, *, hnsw_min_rows: int = HNSW_MIN_ROWS) -> None:
        self.db = db
        self.hnsw_min_rows = hnsw_min_rows
        self.shared_vectors: SharedVectors | None = PgVectors(db)
        self._locks: dict[str, asyncio.Lock] = {}

    async def live_id(self, instance: str) -> str | None:
        pool = await self.db.pool()
        got = await pool.fetchval("SELECT build_id FROM rx_live WHERE instance = $1", instance)
        return str(got) if got is not None else None

    async def live_meta(self, instance: str) -> dict[str, Any] | None:
        pool = await self.db.pool()
        got = await pool.fetchval(
            "SELECT b.meta FROM rx_live l JOIN rx_builds b ON b.id = l.build_id "
            "WHERE l.instance = $1",
            instance,
        )
        return None if got is None else dict(json_value(got))

    async def open_live(self, instance: str) -> PgReader | None:
        pool = await self.db.pool()
        row = await pool.fetchrow(
            "SELECT b.id, b.meta, b.sizes FROM rx_live l JOIN rx_builds b ON b.id = l.build_id "
            "WHERE l.instance = $1",
            instance,
        )
        if row is None:
            return None
        build_id, meta = str(row[0]), dict(json_value(row[1]))
        sizes = {str(k): int(v) for k, v in json_value(row[2]).items()}
        hnsw = {
            c for c in COLLECTIONS
            if await pool.fetchval(
                "SELECT count(*) FROM pg_indexes WHERE tablename = $1 AND indexdef LIKE "
                "'%USING hnsw%'", owned(meta, build_id, c),
            )
        }  # fmt: skip
        reader = PgReader(pool, build_id, meta, sizes, hnsw, self.shared_vectors)
        located = [
            (c, int(r), str(k), str(g)) for c in COLLECTIONS if sizes.get(c)
            for r, k, g in await reader._fetch(
                f"SELECT row, doc_key, repo FROM {reader._t(c)}")
        ]  # fmt: skip
        # several repositories: a filter's statistics are its repositories' (bm25.py)
        groups, reader._repo_ids = await asyncio.to_thread(
            repo_groups, [(c, r, g) for c, r, _, g in located], sizes
        )
        reader._groups = groups or {}
        version = await pool.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        )
        reader.iterative = _version(version) >= (0, 8)
        reader.exact_below = self.hnsw_min_rows  # as a build of the kept rows alone would
        for coll, blob in await reader._fetch(
            f"SELECT collection, lengths FROM {reader._t('lengths')}"
        ):
            reader._bm25[str(coll)] = Bm25(np.frombuffer(bytes(blob), np.int32),
                                           groups.get(str(coll)) if groups else None)  # fmt: skip
        reader._docs = await asyncio.to_thread(
            DocMap.of, [(c, r, k) for c, r, k, _ in located], sizes, groups
        )
        if sizes.get("code"):  # flags for retrieval's test_penalty, computed once
            got = await reader._fetch(f"SELECT row, path, kind FROM {reader._t('code')}")
            reader._tests, reader._test_files = await asyncio.to_thread(_test_rows, got)
        return reader

    def writer(self, instance: str, carry: Carry | None = None) -> PgWriter:
        return PgWriter(self, instance, carry)

    async def tidy(self, instance: str) -> None:
        """Nothing to clear: a writer that dies has its transaction rolled back."""

    @contextlib.asynccontextmanager
    async def lock(self, instance: str) -> AsyncIterator[None]:
        """An asyncio lock for this process, then a session advisory lock on a connection of
        its own for every process on every machine. Tried without blocking and retried on the
        event loop (a cancelled waiter stops at once); closing the connection releases it —
        also when the process dies."""
        async with self._locks.setdefault(instance, asyncio.Lock()):
            conn = await self.db.connect(init=False)
            try:
                sql = "SELECT pg_try_advisory_lock($1, hashtext($2))"
                while True:
                    if await conn.fetchval(sql, LOCK_CLASS, instance):
                        break
                    await asyncio.sleep(LOCK_POLL_S)  # another process builds: look again
                yield
            finally:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def close(self) -> None:
        await self.db.close()


def _test_rows(got: Sequence[Any]) -> tuple[set[int], set[int]]:
    """Of (row, path, kind) rows: the test code (``models.is_test_code``), and of it the rows in
    test files (``models.is_test_path``)."""
    tests = {int(r) for r, p, kind in got if is_test_code(p, kind)}
    return tests, {int(r) for r, p, _ in got if is_test_path(p)}  # a test file's: test code
