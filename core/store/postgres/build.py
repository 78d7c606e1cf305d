"""A build in PostgreSQL: its tables and how it is written.

Each build owns tables named after its id (``schema.py``): one per collection
(``rx_b{id}_{collection}``: the chunk columns and ``embedding vector(dim)``, kept in the row so an
exact scan reads no TOAST), per collection ``_post`` (the postings of each lexical token, for
BM25: ``core/store/bm25.py``), ``_lengths`` (each row's token count), ``_symbols``, ``_calls``
and ``_units``. The writer creates and fills them inside **one
transaction** on a connection of its own and, in that same transaction, records the build and
moves the instance's live pointer (``rx_live``): readers see the whole build or the previous one,
and a writer that fails, is cancelled or is killed (its connection drops) leaves nothing behind.

A collection the build carries (``base.Carry``) is not written at all: the build reads the live
build's tables for it (the collection's, its ``_post``, and with the code ``_symbols`` and
``_calls``), indexes and all, and names their owner in its meta (``shared_tables``: the
owner's, when the live build shares them itself). A shared table outlives the build that made
it while the live or the previous build reads it; that build's row in ``rx_builds`` stays until
then. The collections written after it are numbered past its ids. Every process of a deployment
must run a version that knows this format (``SCHEMA_VERSION`` 5).

Lexical tokens are the lexical forms' (``core.lexical.lexical_form``) as they are: the tokens the
local store indexes, before FTS5's tokenizer folds diacritics, and those ``query_terms`` gives.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Sequence
from typing import Any

import asyncpg
import numpy as np

from core.errors import StoreError
from core.lexical import lexical_form, parts
from core.models import COLLECTIONS, Chunk, Collection, Document, Symbol
from core.store.base import Carry
from core.store.bm25 import postings

SCHEMA_VERSION = 5  # the format of a build's tables (part of every stamp); 2: BM25 postings;
# 3: links (a pull request's changed files and the issues it closes); 4: repo columns; 5: a
# build may read an older build's tables (meta ``shared_tables``). Bump it,
# too, when what the writer derives from the chunks changes, or the HNSW settings below: an
# update that finds nothing changed keeps the live build (``build._keep_live``), its indexes
# included, unless the stamp differs.
HNSW_MIN_ROWS = 100_000  # a collection this big gets an HNSW index (benchmarks/RESULTS.md)
HNSW_M, HNSW_EF_CONSTRUCTION = 16, 64  # pgvector's defaults; recall measured in bench_store.py
# HNSW candidates per search, set per connection (raised per query above it). recall@10 against
# exact search on e5 vectors, 30,000 rows: 0.78 at 40 (pgvector's default), 0.90 at 100, 0.97 at
# 200, 0.99 at 400 for 4 ms (benchmarks/RESULTS.md).
EF_SEARCH = 400

CHUNK_COLS = (
    "id, row, doc_key, path, issue, start_line, end_line, title, symbol, kind, text, text_hash, "
    "tokens, url, commit_sha, repo"
)
SYMBOL_COLS = "name, qualname, kind, path, start_line, end_line, calls, repo"


def new_build_id() -> str:
    """Lower case letters, digits and ``_`` only: the id is part of table names."""
    return time.strftime("%Y%m%dt%H%M%S") + "_" + secrets.token_hex(4)


def table(build_id: str, what: str) -> str:
    if not build_id.replace("_", "").isalnum() or not build_id.islower():
        raise ValueError(f"not a build id: {build_id!r}")
    return f"rx_b{build_id}_{what}"


def build_tables(build_id: str) -> list[str]:
    names = [*COLLECTIONS, *(f"{c}_post" for c in COLLECTIONS), "lengths", "symbols", "calls",
             "units", "links"]  # fmt: skip
    return [table(build_id, n) for n in names]


SHARED = "shared_tables"  # meta: table (collection, collection_post, symbols, calls) → owner id


def owned(meta: dict[str, Any], build_id: str, what: str) -> str:
    """The table a build reads for ``what``: its own, or the one an older build made that it
    shares (a carried collection's: ``PgWriter._carry``)."""
    return table(str((meta.get(SHARED) or {}).get(what, build_id)), what)


def shared_tables(meta: dict[str, Any]) -> set[str]:
    """The tables of older builds a build reads (they are not dropped with their builds)."""
    return {table(str(o), w) for w, o in (meta.get(SHARED) or {}).items()}


def norm(name: str) -> str:
    return "".join(parts(name))


class PgWriter:
    """Writes one build in one transaction; :meth:`commit` swaps it in and commits."""

    def __init__(self, store: Any, instance: str, carry: Carry | None = None) -> None:
        self.store = store
        self.instance = instance
        self.carry = carry if carry and carry.collections else None
        self.id = new_build_id()
        self.conn: asyncpg.Connection | None = None
        self._tx: Any = None
        self._meta: dict[str, Any] = {}
        self._sizes: dict[str, int] = {}
        self._dim: int | None = None
        self._next_id = 1
        self._next_symbol = 1
        self._next_link = 1
        self._owners: dict[str, str] = {}  # shared tables: what → the build that made it

    async def __aenter__(self) -> PgWriter:
        await self.store.db.pool()  # migrated first
        self.conn = conn = await self.store.db.connect()
        try:
            self._tx = conn.transaction()
            await self._tx.start()
            await conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
            t = self._t
            await conn.execute(
                f"CREATE TABLE {t('units')} (key TEXT PRIMARY KEY, collection TEXT NOT NULL, "
                "content_hash TEXT NOT NULL, path TEXT, issue INTEGER, title TEXT, url TEXT, "
                "repo TEXT NOT NULL DEFAULT '');"
                f"CREATE TABLE {t('symbols')} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "qualname TEXT NOT NULL, kind TEXT NOT NULL, path TEXT NOT NULL, "
                "start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, norm TEXT NOT NULL, "
                "calls TEXT[] NOT NULL, repo TEXT NOT NULL DEFAULT '');"
                f"CREATE TABLE {t('calls')} (norm TEXT NOT NULL, sym INTEGER NOT NULL);"
                f"CREATE TABLE {t('lengths')} (collection TEXT PRIMARY KEY, "
                "lengths BYTEA NOT NULL);"
                f"CREATE TABLE {t('links')} (ord INTEGER NOT NULL, issue INTEGER NOT NULL, "
                "rel TEXT NOT NULL, target TEXT NOT NULL, repo TEXT NOT NULL DEFAULT '');"
            )
            if self.carry is not None:
                await self._carry(self.carry)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            if self._tx is not None:  # not committed: an error or a cancellation
                await self._tx.rollback()
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            pass  # the connection is gone: the server rolls back by itself
        finally:
            conn.terminate() if conn.is_closed() else await conn.close()

    def _t(self, what: str) -> str:
        return table(self.id, what)

    async def _carry(self, carry: Carry) -> None:
        """The carried collections' tables are the live build's own (or those it shares): this
        build names them (meta ``shared_tables``) rather than copying rows and indexes; the code
        brings its symbol table and calls. Only the row lengths are copied."""
        assert self.conn is not None
        got = await self.conn.fetchrow(
            "SELECT b.sizes, b.dim, b.meta FROM rx_live l JOIN rx_builds b ON b.id = l.build_id "
            "WHERE l.instance = $1 AND b.id = $2",
            self.instance, carry.build_id,
        )  # fmt: skip
        if got is None:
            raise StoreError(
                f"build {carry.build_id} of {self.instance} is no longer the live build: "
                "nothing can be carried from it"
            )
        sizes, dim, meta = json.loads(got[0]), got[1], json.loads(got[2])
        made = dict(meta.get(SHARED) or {})  # what the live build itself shares
        shared = [w for c in sorted(carry.collections) for w in (c, f"{c}_post")]
        if "code" in carry.collections:  # the symbol table and calls are the code's
            shared += ["symbols", "calls"]
        self._owners = {w: str(made.get(w, carry.build_id)) for w in shared}
        base = lambda what: table(self._owners[what], what)  # noqa: E731
        if "code" in carry.collections:
            await self.conn.execute(f"DROP TABLE {self._t('symbols')}, {self._t('calls')}")
            top = await self.conn.fetchval(f"SELECT MAX(id) FROM {base('symbols')}")
            self._next_symbol = int(top or 0) + 1
        for c in sorted(carry.collections):
            n = int(sizes.get(c, 0))
            self._sizes[c] = n
            if n:
                self._dim = self._dim or dim
            await self.conn.execute(
                f"INSERT INTO {self._t('lengths')} (collection, lengths) "
                f"SELECT collection, lengths FROM {table(carry.build_id, 'lengths')} "
                f"WHERE collection = '{c}'"
            )
            top = await self.conn.fetchval(f"SELECT MAX(id) FROM {base(c)}")
            self._next_id = max(self._next_id, int(top or 0) + 1)

    async def add_units(self, docs: Sequence[Document]) -> None:
        assert self.conn is not None
        await self.conn.copy_records_to_table(
            self._t("units"),
            records=[(d.key, d.collection, d.content_hash, d.path, d.issue, d.title, d.url,
                      d.repo) for d in docs],
        )  # fmt: skip
        links = [
            (d.issue, rel, target, d.repo)
            for d in docs
            if d.issue is not None
            for rel, target in [*(("file", f) for f in d.files),
                                *(("fixes", str(n)) for n in d.fixes)]
        ]  # fmt: skip
        start = self._next_link
        self._next_link += len(links)
        await self.conn.copy_records_to_table(
            self._t("links"), records=[(start + i, *row) for i, row in enumerate(links)]
        )

    async def _create_chunks(self, collection: Collection, dim: int | None) -> None:
        assert self.conn is not None
        vec = f"vector({dim})" if dim else "vector"
        await self.conn.execute(
            f"CREATE TABLE {self._t(collection)} (row INTEGER PRIMARY KEY, id BIGINT NOT NULL, "
            "doc_key TEXT NOT NULL, path TEXT, issue INTEGER, start_line INTEGER, "
            "end_line INTEGER, title TEXT NOT NULL, symbol TEXT, kind TEXT, text TEXT NOT NULL, "
            "text_hash TEXT NOT NULL, tokens INTEGER NOT NULL, url TEXT NOT NULL, "
            "commit_sha TEXT, repo TEXT NOT NULL DEFAULT '', "
            f"embedding {vec} STORAGE PLAIN)"
            + f"; CREATE TABLE {self._t(collection + '_post')} (term TEXT NOT NULL, "
            "part INTEGER NOT NULL, rows BYTEA NOT NULL, tfs BYTEA NOT NULL)"
        )
        self._sizes[collection] = 0

    async def add_chunks(
        self, collection: Collection, chunks: Sequence[Chunk], vectors: np.ndarray | None
    ) -> None:
        """Copy a collection's chunks in (row i = vector i) and their lexical postings."""
        assert self.conn is not None
        if collection in self._sizes:
            raise ValueError(f"add_chunks({collection!r}) called twice for one build")
        vecs = None if vectors is None or not len(chunks) else np.asarray(vectors, np.float32)
        if vecs is not None:
            self._dim = self._dim or int(vecs.shape[1])
        await self._create_chunks(collection, None if vecs is None else int(vecs.shape[1]))
        first = self._next_id
        self._next_id += len(chunks)

        def records() -> list[tuple[Any, ...]]:
            return [
                (i, first + i, c.doc_key, c.path, c.issue, c.start_line, c.end_line, c.title,
                 c.symbol, c.kind, c.text, c.text_hash, c.tokens, c.url, c.commit, c.repo,
                 None if vecs is None else vecs[i])
                for i, c in enumerate(chunks)
            ]  # fmt: skip

        rows = await asyncio.to_thread(records)
        cols = ["row", "id", *(c.strip() for c in CHUNK_COLS.split(",")[2:]), "embedding"]
        await self.conn.copy_records_to_table(self._t(collection), records=rows, columns=cols)
        self._sizes[collection] = len(chunks)
        forms = await asyncio.to_thread(lambda: [lexical_form(c.text) for c in chunks])
        made = postings(forms, str.split)
        while True:
            item = await asyncio.to_thread(next, made)
            if isinstance(item, np.ndarray):  # the row lengths come last
                await self.conn.execute(
                    f"INSERT INTO {self._t('lengths')} VALUES ($1, $2)", collection, item.tobytes()
                )
                break
            await self.conn.copy_records_to_table(self._t(collection + "_post"), records=item)

    async def add_symbols(self, symbols: Sequence[Symbol]) -> None:
        assert self.conn is not None
        first = self._next_symbol
        self._next_symbol += len(symbols)
        await self.conn.copy_records_to_table(
            self._t("symbols"),
            records=[(first + i, s.name, s.qualname, s.kind, s.path, s.start_line, s.end_line,
                      norm(s.name), list(s.calls), s.repo) for i, s in enumerate(symbols)],
        )  # fmt: skip
        await self.conn.copy_records_to_table(
            self._t("calls"),
            records=[(n, first + i) for i, s in enumerate(symbols)
                     for n in sorted({norm(c) for c in s.calls} - {""})],
        )  # fmt: skip

    async def set_meta(self, key: str, value: Any) -> None:
        self._meta[key] = json.loads(json.dumps(value))  # JSON-serialisable, as recorded

    async def commit(self) -> str:
        """Index the tables, record the build, move the live pointer, drop builds older than
        the previous one — and commit all of it at once."""
        conn = self.conn
        assert conn is not None
        for c in COLLECTIONS:
            if c not in self._sizes:
                await self._create_chunks(c, None)
        t = self._t
        for c in COLLECTIONS:
            if c in self._owners:  # shared: indexed by the build that made it
                continue
            await conn.execute(
                f"CREATE INDEX ON {t(c)} (doc_key); CREATE INDEX ON {t(c)} (path);"
                f'CREATE INDEX ON {t(c)} ((reverse(path)) COLLATE "C");'
                f"CREATE INDEX ON {t(c)} (issue); CREATE INDEX ON {t(c)} (repo);"
                f"CREATE INDEX ON {t(c + '_post')} (term, part);"
            )
            if self._sizes[c] >= self.store.hnsw_min_rows and self._dim:
                await conn.execute(
                    f"CREATE INDEX ON {t(c)} USING hnsw (embedding vector_ip_ops) "
                    f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
                )
        own_code = "symbols" not in self._owners
        await conn.execute(
            (f"CREATE INDEX ON {t('symbols')} (name); CREATE INDEX ON {t('symbols')} (norm);"
             f"CREATE INDEX ON {t('symbols')} (qualname); CREATE INDEX ON {t('calls')} (norm);"
             f"ANALYZE {t('symbols')}; ANALYZE {t('calls')};" if own_code else "")
            + f"CREATE INDEX ON {t('links')} (issue); CREATE INDEX ON {t('links')} (rel, target);"
            f"ANALYZE {t('units')}; ANALYZE {t('links')};"
            + "".join(f"ANALYZE {t(c)}; ANALYZE {t(c + '_post')};"
                      for c in COLLECTIONS if c not in self._owners)
        )  # fmt: skip
        if self._owners:
            self._meta[SHARED] = self._owners
        await conn.execute(
            "INSERT INTO rx_builds (id, instance, meta, sizes, dim) VALUES ($1, $2, $3, $4, $5)",
            self.id, self.instance, json.dumps(self._meta), json.dumps(self._sizes), self._dim,
        )  # fmt: skip
        previous = await conn.fetchval(
            "SELECT build_id FROM rx_live WHERE instance = $1 FOR UPDATE", self.instance
        )
        await conn.execute(
            "INSERT INTO rx_live (instance, build_id) VALUES ($1, $2) ON CONFLICT (instance) "
            "DO UPDATE SET build_id = excluded.build_id, swapped_at = now()",
            self.instance, self.id,
        )  # fmt: skip
        was = await conn.fetchval("SELECT meta FROM rx_builds WHERE id = $1", previous or "")
        keep = shared_tables(self._meta) | (shared_tables(json.loads(was)) if was else set())
        olds = await conn.fetch(
            "SELECT id FROM rx_builds WHERE instance = $1 AND id <> $2 AND id <> $3",
            self.instance, self.id, previous or "",
        )  # fmt: skip
        for (old,) in olds:  # the previous build stays for readers still on it
            gone = [n for n in build_tables(old) if n not in keep]
            await conn.execute(
                "DROP TABLE IF EXISTS " + ", ".join(gone) + ";"
                + ("" if len(gone) < len(build_tables(old))  # still shared: kept, named
                   else "DELETE FROM rx_builds WHERE id = " + _literal(old))
            )  # fmt: skip
        await self._tx.commit()
        self._tx = None
        return self.id


def _literal(build_id: str) -> str:
    table(build_id, "x")  # validates: letters, digits and '_' only
    return f"'{build_id}'"
