"""Writing a local build: into a hidden temporary folder, swapped in by renaming the
``current`` symlink (atomic on POSIX), older builds pruned. See ``local.py`` for the layout.

A build that carries collections (``base.Carry``) starts from a copy of the live build's SQLite
file with every other collection's rows, and meta, units and links (and, unless the code is
carried, the symbols and calls), cleared; the carried collections' vector files are hard links
to the live build's (a build is never written once committed, so sharing the file is safe;
pruning the old build unlinks only its name). Their rows, FTS5 index and postings are then byte
for byte the live build's, not derived again. A live build whose tables are not this version's
(the same stamp let it through) is not copied: its carried rows are inserted column by column
into this version's tables. A collection written again takes the lexical forms the live build
holds for the chunks it keeps (its FTS5 rows, by chunk id) rather than deriving them again (the
stamp's ``lexical`` version says they are this version's)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

import aiosqlite
import numpy as np
from usearch.io import save_matrix

from core.errors import StoreError
from core.layout import Layout
from core.lexical import lexical_form
from core.models import COLLECTIONS, Chunk, Collection, Document, Symbol
from core.store.base import Carry
from core.store.local_files import live_name, prune
from core.store.local_index import write_postings
from core.store.local_schema import CHUNK_COLS, FTS, SCHEMA, norm_name

P = ParamSpec("P")
R = TypeVar("R")


def _writes(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """A write that fails (the disk is full, the folder unwritable) is one StoreError line; the
    build is discarded and the previous one still serves."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except (OSError, sqlite3.OperationalError) as e:
            w = args[0]
            assert isinstance(w, LocalWriter)
            raise StoreError(
                f"{w.tmp}: cannot write the new build ({e}); the previous build still serves"
            ) from None

    return wrapper


class LocalWriter:
    """Writes one build into a hidden temporary folder; :meth:`commit` swaps it in atomically."""

    def __init__(self, layout: Layout, name: str, carry: Carry | None = None):
        self.root = layout.instance(name)
        self.carry = carry if carry and carry.collections else None
        self.base = carry.build_id if carry else None  # the live build: its lexical forms
        self.builds = layout.builds(name)
        self.link = layout.current(name)
        self.id = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        self.tmp = self.builds / f".tmp-{self.id}"
        self.db: aiosqlite.Connection | None = None

    @_writes
    async def __aenter__(self) -> LocalWriter:
        self.builds.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir()
        try:
            copied = self.carry is not None and await asyncio.to_thread(self._copy_base, self.carry)
            self.db = await aiosqlite.connect(str(self.tmp / "meta.sqlite"))
            await self.db.execute("PRAGMA journal_mode=OFF")
            await self.db.execute("PRAGMA synchronous=OFF")
            if self.carry is not None and copied:
                await self.db.executescript(_clear(self.carry.collections))
            else:
                await self.db.executescript(SCHEMA)
            if self.carry is not None and not copied:
                await self._insert_from_base(self.carry)
        except BaseException:  # __aexit__ will not run: leave nothing behind
            await self.__aexit__()
            raise
        return self

    def _copy_base(self, carry: Carry) -> bool:
        """The carried collections' vector files linked from the live build, and its SQLite
        file copied when its tables are this version's (``SCHEMA``); False: they are not (a
        build the same stamp let through from before a table changed), and the rows are
        inserted from it instead (``_insert_from_base``)."""
        base = self.builds / carry.build_id
        if live_name(self.link) != carry.build_id or not (base / "meta.sqlite").is_file():
            raise StoreError(f"{base}: not the live build; nothing can be carried from it")
        for c in carry.collections:
            src = base / f"{c}.fbin"
            if not src.exists():  # a collection without chunks has no vector file
                continue
            try:
                os.link(src, self.tmp / src.name)
            except OSError:  # a file system without hard links: a copy
                shutil.copyfile(src, self.tmp / src.name)
        if _tables(f"file:{base / 'meta.sqlite'}?mode=ro") != _tables(":memory:", SCHEMA):
            return False
        shutil.copyfile(base / "meta.sqlite", self.tmp / "meta.sqlite")
        return True

    async def _insert_from_base(self, carry: Carry) -> None:
        """The carried collections' rows, postings and FTS5 rows read from the live build into
        this version's tables, column by column (the FTS5 index is made again)."""
        assert self.db is not None
        base = self.builds / carry.build_id / "meta.sqlite"
        await self.db.execute("ATTACH DATABASE ? AS base", (str(base),))  # only read
        for c in sorted(carry.collections):
            await self.db.execute(
                f"INSERT INTO chunks ({CHUNK_COLS}) SELECT {CHUNK_COLS} FROM base.chunks "
                "WHERE collection = ?", (c,),
            )  # fmt: skip
            await self.db.execute(
                f"INSERT INTO fts_{c} (rowid, body) SELECT rowid, body FROM base.fts_{c}"
            )
            for t, cols in (("postings", "collection, term, part, rows, tfs"),
                            ("lexstats", "collection, lengths")):  # fmt: skip
                await self.db.execute(
                    f"INSERT INTO {t} ({cols}) SELECT {cols} FROM base.{t} WHERE collection = ?",
                    (c,),
                )
        if "code" in carry.collections:
            cols = "rowid, name, qualname, kind, path, start_line, end_line, norm, calls, repo"
            await self.db.execute(f"INSERT INTO symbols ({cols}) SELECT {cols} FROM base.symbols")
            await self.db.execute("INSERT INTO calls (norm, sym) SELECT norm, sym FROM base.calls")
        await self.db.commit()
        await self.db.execute("DETACH DATABASE base")

    def _forms(self, collection: Collection, chunks: Sequence[Chunk]) -> list[str]:
        """Each chunk's lexical form: the live build's for a chunk it keeps, else derived."""
        known = self._base_forms(collection, chunks)
        return [known.get(c.id) or lexical_form(c.text) for c in chunks]

    def _base_forms(self, collection: Collection, chunks: Sequence[Chunk]) -> dict[int | None, str]:
        """The lexical forms the live build holds for the chunks it keeps (by their id there, a
        kept chunk's ``id``), so that they are not derived again; {} without a live build."""
        ids = {c.id for c in chunks if c.id is not None}
        path = self.builds / str(self.base) / "meta.sqlite"
        if not ids or self.base is None or not path.is_file():
            return {}
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            got = db.execute(f"SELECT rowid, body FROM fts_{collection}")
            return {int(i): str(b) for i, b in got if i in ids and b is not None}
        except sqlite3.Error:  # an older build's tables: the forms are derived as before
            return {}
        finally:
            db.close()

    async def __aexit__(self, *exc: object) -> None:
        if self.db is not None:
            await self.db.close()
            self.db = None
        if self.tmp.exists():  # not committed: an error or a crash; the old build stays live
            shutil.rmtree(self.tmp, ignore_errors=True)

    @_writes
    async def add_units(self, docs: Sequence[Document]) -> None:
        assert self.db is not None
        await self.db.executemany(
            "INSERT INTO units VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (d.key, d.collection, d.content_hash, d.path, d.issue, d.title, d.url, d.repo)
                for d in docs
            ],
        )
        links = [
            row
            for d in docs
            if d.issue is not None
            for row in [*((d.issue, "file", f, d.repo) for f in d.files),
                        *((d.issue, "fixes", str(n), d.repo) for n in d.fixes)]
        ]  # fmt: skip
        await self.db.executemany("INSERT INTO links VALUES (?, ?, ?, ?)", links)

    @_writes
    async def add_chunks(
        self, collection: Collection, chunks: Sequence[Chunk], vectors: np.ndarray | None
    ) -> None:
        """Insert a collection's chunks (row i = vector i) and their lexical forms for FTS5."""
        assert self.db is not None
        await self.db.executemany(
            f"INSERT INTO chunks ({CHUNK_COLS}) VALUES "
            "(NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (collection, i, c.doc_key, c.path, c.issue, c.start_line, c.end_line, c.title,
                 c.symbol, c.kind, c.text, c.text_hash, c.tokens, c.url, c.commit, c.repo)
                for i, c in enumerate(chunks)
            ],
        )  # fmt: skip
        forms = await asyncio.to_thread(self._forms, collection, chunks)
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

    @_writes
    async def add_symbols(self, symbols: Sequence[Symbol]) -> None:
        assert self.db is not None
        async with self.db.execute("SELECT COALESCE(MAX(rowid), 0) FROM symbols") as cur:
            row = await cur.fetchone()
        first = int(row[0]) + 1 if row else 1
        await self.db.executemany(
            "INSERT INTO symbols (rowid, name, qualname, kind, path, start_line, end_line, norm, "
            "calls, repo) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(first + i, s.name, s.qualname, s.kind, s.path, s.start_line, s.end_line,
              norm_name(s.name), "\n".join(s.calls), s.repo) for i, s in enumerate(symbols)],
        )  # fmt: skip
        await self.db.executemany(
            "INSERT INTO calls VALUES (?, ?)",
            [(n, first + i) for i, s in enumerate(symbols)
             for n in sorted({norm_name(c) for c in s.calls} - {""})],
        )  # fmt: skip

    @_writes
    async def set_meta(self, key: str, value: Any) -> None:
        assert self.db is not None
        await self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    @_writes
    async def commit(self) -> str:
        """Make this build the live one: rename into place, then swap the ``current`` link."""
        assert self.db is not None
        await self.db.commit()
        await self.db.close()
        self.db = None
        return await asyncio.to_thread(self._swap)

    def _swap(self) -> str:
        final = self.builds / self.id
        previous = live_name(self.link)
        os.replace(self.tmp, final)
        tmp_link = self.root / f".current-{self.id}"
        os.symlink(os.path.relpath(final, self.root), tmp_link)
        os.replace(tmp_link, self.link)  # atomic on POSIX: readers see the old or the new build
        prune(self.root, self.builds, {final.name, previous or final.name}, os.getpid())
        return final.name


def _clear(carried: frozenset[Collection]) -> str:
    """The SQL that leaves a copied build holding only the carried collections' rows, FTS5
    tables and postings (and, with the code, its symbols and calls): meta, units and links are
    written by every build again."""
    sql = ["DELETE FROM meta;", "DELETE FROM units;", "DELETE FROM links;"]
    if "code" not in carried:  # the symbol table and calls are the code's
        sql += ["DELETE FROM symbols;", "DELETE FROM calls;"]
    for c in COLLECTIONS:
        if c in carried:
            continue
        sql += [f"DELETE FROM chunks WHERE collection = '{c}';",
                f"DELETE FROM postings WHERE collection = '{c}';",
                f"DELETE FROM lexstats WHERE collection = '{c}';",
                f"DROP TABLE fts_{c};", FTS.format(c=c)]  # fmt: skip
    return "\n".join(sql)


def _tables(uri: str, script: str = "") -> list[tuple[str, ...]]:
    """The tables and indexes of a SQLite file (or of ``script`` run in memory)."""
    db = sqlite3.connect(uri, uri=True)
    try:
        if script:
            db.executescript(script)
        return sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
    finally:
        db.close()
