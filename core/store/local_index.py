"""What the local store derives from a build to answer fast: BM25 from term postings
(:class:`Bm25`) and, in memory, rows by path and by issue (:class:`Lookups`) and test rows.

BM25 without FTS5's per-row cost (``bm25.py``): the postings are stored per build (tables
``postings`` and ``lexstats``) and give the same scores as FTS5's ``bm25()``, computed from the
same tokens. The tokens are the FTS5 table's: the
lexical form (``core.lexical``) folded as the table's tokenizer (``unicode61 remove_diacritics
2``) folds it; how it folds each of the Latin-1 letters a lexical form can hold is asked of
SQLite itself once per process, so the two cannot drift apart. A term that folds into anything
but one token, or a build written before postings existed, is searched with FTS5 as before.
"""

from __future__ import annotations

import asyncio
import functools
import re
import sqlite3
import string
from collections.abc import Sequence
from typing import Any

import aiosqlite
import numpy as np

from core.models import is_test_code, is_test_path
from core.store.bm25 import Bm25, on_search_thread, postings, read_postings


@functools.cache
def _fold_table() -> dict[int, str]:
    """How FTS5's unicode61 (remove_diacritics 2) folds U+00C0–U+00FF, the only non-ASCII
    characters a lexical form holds: asked of SQLite, once."""
    db = sqlite3.connect(":memory:")
    try:
        db.execute(
            "CREATE VIRTUAL TABLE f USING fts5(body, tokenize='unicode61 remove_diacritics 2')"
        )
        db.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, f, 'row')")
        table: dict[int, str] = {}
        for cp in range(0xC0, 0x100):
            db.execute("DELETE FROM f")
            db.execute("INSERT INTO f (body) VALUES (?)", (f"q{chr(cp)}z",))
            toks = [str(r[0]) for r in db.execute("SELECT term FROM v")]
            if toks == ["q", "z"]:
                table[cp] = " "  # a separator (× ÷)
            elif len(toks) == 1 and len(toks[0]) == 3:
                table[cp] = toks[0][1]
        return table
    finally:
        db.close()


def tokens(form: str) -> list[str]:
    """The tokens FTS5 indexes for a lexical form (lower case already)."""
    return form.translate(_fold_table()).split()


async def write_postings(db: aiosqlite.Connection, collection: str, forms: Sequence[str]) -> None:
    """A collection's postings and row lengths into a build being written (slice by slice,
    computed off the event loop)."""
    made = postings(forms, tokens)
    while True:
        item = await asyncio.to_thread(next, made)
        if isinstance(item, np.ndarray):
            await db.execute("INSERT INTO lexstats VALUES (?, ?)", (collection, item.tobytes()))
            return
        await db.executemany(
            "INSERT INTO postings VALUES (?, ?, ?, ?, ?)", [(collection, *p) for p in item]
        )


async def search_postings(
    db: aiosqlite.Connection, collection: str, bm25: Bm25, terms: list[str], n: int,
    keep: Sequence[int] | None = None,
) -> list[tuple[int, float]]:  # fmt: skip
    """FTS5's BM25 top ``n`` of the OR of ``terms`` (folded tokens) from the postings: one
    indexed read, then numpy off the event loop (``keep``: of these repositories only)."""
    parts = await read_terms(db, collection, terms)
    return await on_search_thread(lambda: bm25.top(terms, read_postings(parts), n, keep))


async def read_terms(
    db: aiosqlite.Connection, collection: str, terms: Sequence[str]
) -> list[tuple[str, bytes, bytes]]:
    """The postings of ``terms`` (folded tokens) in a collection: ``(term, rows, tfs)`` blobs
    by term and part, one indexed read."""
    wanted = sorted(set(terms))
    if not wanted:
        return []
    q = ",".join("?" * len(wanted))
    sql = (
        f"SELECT term, rows, tfs FROM postings WHERE collection = ? AND term IN ({q}) "
        "ORDER BY term, part"
    )
    async with db.execute(sql, [collection, *wanted]) as cur:
        return [(str(t), bytes(r), bytes(f)) for t, r, f in await cur.fetchall()]


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _like_lower(text: str) -> str:
    """Lower case as SQLite's LIKE compares: ASCII letters only."""
    return text.translate(_ASCII_LOWER)


class Lookups:
    """Per build, in memory: rows by exact path and by file name (per collection), rows by issue
    number. ``path_rows`` answers what ``path = ? OR path LIKE '%/' || ?`` answered (SQLite's
    LIKE: ASCII case-insensitive, ``%`` and ``_`` wildcards) without scanning every chunk."""

    def __init__(self) -> None:
        self.paths: dict[str, dict[str, list[int]]] = {}  # collection → path → rows
        self.names: dict[str, dict[str, list[str]]] = {}  # collection → file name → paths
        self.issues: dict[int, list[int]] = {}

    @classmethod
    def of(cls, rows: list[Any]) -> Lookups:
        out = cls()
        for coll, row, path, issue in sorted(rows, key=lambda r: (r[0], r[1])):
            if path is not None:
                by_path = out.paths.setdefault(coll, {})
                if path not in by_path:
                    name = _like_lower(path.rsplit("/", 1)[-1])
                    out.names.setdefault(coll, {}).setdefault(name, []).append(path)
                by_path.setdefault(path, []).append(int(row))
            if issue is not None and coll == "issues":
                out.issues.setdefault(int(issue), []).append(int(row))
        return out

    def path_rows(self, collection: str, path: str) -> list[int]:
        by_path = self.paths.get(collection, {})
        tail = _like_lower("/" + path)
        if "%" in path or "_" in path:  # LIKE wildcards: match as LIKE would, path by path
            like = re.compile(
                ".*" + "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch)
                               for ch in tail) + r"\Z", re.DOTALL,
            )  # fmt: skip
            found = [p for p in by_path if p == path or like.match(_like_lower(p))]
        else:
            named = self.names.get(collection, {}).get(_like_lower(path.rsplit("/", 1)[-1]), [])
            found = [p for p in named if p == path or _like_lower(p).endswith(tail)]
            if path in by_path and path not in found:
                found.append(path)
        return sorted(r for p in found for r in by_path[p])


TEST_CHUNK, TEST_FILE = 1, 2  # a source file's own test code; a chunk of a test file


def test_flags(rows: list[tuple[int, str | None, str | None]], n: int) -> np.ndarray:
    """Per row of ``n`` (row, path, kind): 0, or test code (``models.is_test_code``) —
    ``TEST_FILE`` in a test file (``models.is_test_path``), else ``TEST_CHUNK``."""
    flags = np.zeros(n, dtype=np.int8)
    for row, path, kind in rows:
        if 0 <= row < n:
            if is_test_path(path):
                flags[row] = TEST_FILE
            elif is_test_code(path, kind):  # a source file's own tests (kind ``test``)
                flags[row] = TEST_CHUNK
    return flags
