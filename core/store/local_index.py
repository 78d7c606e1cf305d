"""What the local store derives from a build to answer fast: BM25 from term postings
(:class:`Bm25`) and, in memory, rows by path and by issue (:class:`Lookups`) and test rows;
and the housekeeping of build folders (:func:`prune`).

BM25 without FTS5's per-row cost: term postings written with the build,
scored with numpy — the same scores as FTS5's ``bm25()``, computed from the same tokens.

FTS5 ranks an OR query by calling ``bm25()`` for every matching row: measured at 500,000 chunks
(300,000 code rows), counting the rows a 5-term question matches takes 6 ms, ranking them 83 ms
(0.65 µs a row), and a question with common words matches a third of the collection. Here each
lexical token of a collection has its *postings* — the rows holding it and how often — stored as
two arrays per build (``postings``), with each row's token count (``lexstats``); a question reads
the postings of its terms (one indexed SELECT) and sums, per row,

    idf × tf × (k1 + 1) / (tf + k1 × (1 − b + b × dl / avgdl)),   k1 = 1.2, b = 0.75,
    idf = ln((N − df + 0.5) / (df + 0.5)), or 1e-6 when that is ≤ 0

— FTS5's own formula and constants (``fts5Bm25Function``). The tokens are the FTS5 table's: the
lexical form (``core.lexical``) folded as the table's tokenizer (``unicode61 remove_diacritics
2``) folds it; how it folds each of the Latin-1 letters a lexical form can hold is asked of
SQLite itself once per process, so the two cannot drift apart. A term that folds into anything
but one token, or a build written before postings existed, is searched with FTS5 as before.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import re
import shutil
import sqlite3
import string
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import numpy as np

from core.models import is_test_path

T = TypeVar("T")
K1, B = 1.2, 0.75
# Searches (the BLAS product of dense search, BM25 scoring) run on one thread of their own:
# BLAS already uses every core for one product, and 32 concurrent questions each on a thread
# of the default pool ran at half the sequential throughput (oversubscribed cores).
_SEARCH = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-search")


async def on_search_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` on the one search thread, off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(_SEARCH, fn)


BATCH_ROWS = 50_000  # postings are written per slice of rows: bounded memory at any size


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


Posting = tuple[str, int, bytes, bytes]  # term, part, rows (int32), tfs (uint16)


def postings(forms: Sequence[str]) -> Iterator[list[Posting] | np.ndarray]:
    """Yields, per slice of rows, the ``(term, part, rows int32, tfs uint16)`` of every term in
    it, then the row lengths (an int32 array, last)."""
    vocab: dict[str, int] = {}
    lengths = np.zeros(len(forms), np.int32)
    for part, start in enumerate(range(0, len(forms), BATCH_ROWS)):
        toks = [tokens(f) for f in forms[start : start + BATCH_ROWS]]
        lens = np.fromiter(map(len, toks), np.int64, len(toks))
        lengths[start : start + len(toks)] = lens
        ids = np.fromiter((vocab.setdefault(t, len(vocab)) for ts in toks for t in ts),
                          np.int64, int(lens.sum()))  # fmt: skip
        rows = np.repeat(np.arange(start, start + len(toks), dtype=np.int64), lens)
        keys, tfs = np.unique(ids * len(forms) + rows, return_counts=True)  # by term, then row
        term_ids, row_ids = np.divmod(keys, len(forms))
        cuts = np.flatnonzero(np.diff(term_ids)) + 1
        names = {i: t for t, i in vocab.items()}
        if not len(keys):
            continue
        yield [
            (names[int(tid)], part, seg_rows.astype(np.int32).tobytes(),
             np.minimum(seg_tfs, 65535).astype(np.uint16).tobytes())
            for seg_rows, seg_tfs, tid in zip(
                np.split(row_ids, cuts), np.split(tfs, cuts), term_ids[np.r_[0, cuts]],
                strict=True,
            )
        ]  # fmt: skip
    yield lengths


async def write_postings(db: aiosqlite.Connection, collection: str, forms: Sequence[str]) -> None:
    """A collection's postings and row lengths into a build being written (slice by slice,
    computed off the event loop)."""
    made = postings(forms)
    while True:
        item = await asyncio.to_thread(next, made)
        if isinstance(item, np.ndarray):
            await db.execute("INSERT INTO lexstats VALUES (?, ?)", (collection, item.tobytes()))
            return
        await db.executemany(
            "INSERT INTO postings VALUES (?, ?, ?, ?, ?)", [(collection, *p) for p in item]
        )


async def search_postings(
    db: aiosqlite.Connection, collection: str, bm25: Bm25, terms: list[str], n: int
) -> list[tuple[int, float]]:
    """FTS5's BM25 top ``n`` of the OR of ``terms`` (folded tokens) from the postings: one
    indexed read, then numpy off the event loop."""
    wanted = sorted(set(terms))
    q = ",".join("?" * len(wanted))
    sql = (
        f"SELECT term, rows, tfs FROM postings WHERE collection = ? AND term IN ({q}) "
        "ORDER BY term, part"
    )
    async with db.execute(sql, [collection, *wanted]) as cur:
        parts = [(str(t), bytes(r), bytes(f)) for t, r, f in await cur.fetchall()]
    return await on_search_thread(lambda: bm25.top(terms, read_postings(parts), n))


class Bm25:
    """One collection's statistics: each row's token count, their mean."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = lengths.astype(np.float64)
        self.n = len(lengths)
        self.avgdl = float(self.lengths.mean()) if self.n else 0.0

    def top(
        self, terms: Sequence[str], found: dict[str, tuple[np.ndarray, np.ndarray]], n: int
    ) -> list[tuple[int, float]]:
        """The ``n`` best rows for the OR of ``terms`` (FTS5 tokens; a repeated term counts
        twice, as a repeated phrase does in FTS5), best first, ties by row."""
        if not self.n or n <= 0:
            return []
        rows_all, weights = [], []
        for t in terms:
            if t not in found:
                continue
            rows, tfs = found[t]
            df = len(rows)
            idf = math.log((self.n - df + 0.5) / (df + 0.5))
            idf = idf if idf > 0 else 1e-6
            tf = tfs.astype(np.float64)
            norm = K1 * (1 - B + B * self.lengths[rows] / self.avgdl)
            rows_all.append(rows)
            weights.append(idf * tf * (K1 + 1) / (tf + norm))
        if not rows_all:
            return []
        rows = np.concatenate(rows_all)
        scores = np.bincount(rows, np.concatenate(weights), self.n)
        hit = np.unique(rows)
        if len(hit) > n:
            hit = hit[np.argpartition(-scores[hit], n - 1)[:n]]
        order = np.lexsort((hit, -scores[hit]))
        return [(int(hit[i]), float(scores[hit[i]])) for i in order]


def read_postings(
    parts: list[tuple[str, bytes, bytes]],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``(term, rows, tfs)`` blobs by part order → arrays per term."""
    by: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for term, rows, tfs in parts:
        r, f = by.setdefault(term, ([], []))
        r.append(np.frombuffer(rows, np.int32))
        f.append(np.frombuffer(tfs, np.uint16))
    return {t: (np.concatenate(r), np.concatenate(f)) for t, (r, f) in by.items()}


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


def test_flags(paths: list[tuple[int, str]], n: int) -> np.ndarray:
    """``n`` booleans: which rows' paths are test code (``models.is_test_path``)."""
    flags = np.zeros(n, dtype=bool)
    for row, path in paths:
        if 0 <= row < n and is_test_path(path):
            flags[row] = True
    return flags


def prune(builds: Path, keep: set[str]) -> None:
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
        if pid != os.getpid() and not alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
