"""BM25 from term postings, scored with numpy: what both stores rank lexical hits with.

A full-text engine ranks an OR query by scoring every matching row: measured at 500,000 chunks
(300,000 code rows), FTS5 counts the rows a 5-term question matches in 6 ms and ranks them in
83 ms (``bm25()``, 0.65 µs a row), and a question with common words matches a third of the
collection. Here each lexical token of a collection has its *postings* — the rows holding it and
how often — written with the build as two arrays (int32 rows, uint16 counts), with each row's
token count; a question reads the postings of its terms and sums, per row,

    idf × tf × (k1 + 1) / (tf + k1 × (1 − b + b × dl / avgdl)),   k1 = 1.2, b = 0.75,
    idf = ln((N − df + 0.5) / (df + 0.5)), or 1e-6 when that is ≤ 0

— FTS5's own formula and constants (``fts5Bm25Function``): a few milliseconds whatever the
number of matches. The local store keeps the tokens of its FTS5 table (``local_index.py``); the
PostgreSQL store the lexical tokens as they are.

A question filtered to some repositories of an instance over several (``repo:NAME``, a scope,
a channel's default) is scored with *those repositories'* N, df and avgdl
(:func:`repo_groups`): as their own instance would score it — the statistics the learned ranker
was fitted on. With the twenty dev-set repositories in one build, ``repo:commander`` ranked
``Command.helpInformation`` third by BM25, not first: "terminal", "width" and "wrap" weighed as
twenty repositories' code has them. Without a filter the build's statistics serve.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

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

Posting = tuple[str, int, bytes, bytes]  # term, part, rows (int32), tfs (uint16)


def postings(
    forms: Sequence[str], tokenize: Callable[[str], list[str]]
) -> Iterator[list[Posting] | np.ndarray]:
    """Yields, per slice of rows, the ``(term, part, rows int32, tfs uint16)`` of every term in
    it (``tokenize``: a lexical form → its tokens), then the row lengths (an int32 array,
    last)."""
    vocab: dict[str, int] = {}
    lengths = np.zeros(len(forms), np.int32)
    for part, start in enumerate(range(0, len(forms), BATCH_ROWS)):
        toks = [tokenize(f) for f in forms[start : start + BATCH_ROWS]]
        lens = np.fromiter(map(len, toks), np.int64, len(toks))
        lengths[start : start + len(toks)] = lens
        ids = np.fromiter((vocab.setdefault(t, len(vocab)) for ts in toks for t in ts),
                          np.int64, int(lens.sum()))  # fmt: skip
        rows = np.repeat(np.arange(start, start + len(toks), dtype=np.int64), lens)
        keys, tfs = np.unique(ids * len(forms) + rows, return_counts=True)  # by term, then row
        term_ids, row_ids = np.divmod(keys, len(forms))
        if not len(keys):
            continue
        names = {i: t for t, i in vocab.items()}
        # Each term's run of rows and counts, cut from one byte string each (not an array per
        # term: a slice of bytes is all a term needs).
        bounds = np.r_[0, np.flatnonzero(np.diff(term_ids)) + 1, len(keys)]
        rows32 = row_ids.astype(np.int32).tobytes()
        tfs16 = np.minimum(tfs, 65535).astype(np.uint16).tobytes()
        yield [
            (names[tid], part, rows32[4 * a : 4 * b], tfs16[2 * a : 2 * b])
            for tid, a, b in zip(
                term_ids[bounds[:-1]].tolist(), bounds[:-1].tolist(), bounds[1:].tolist(),
                strict=True,
            )
        ]  # fmt: skip
    yield lengths


def repo_groups(
    rows: Iterable[tuple[str, int, str]], sizes: Mapping[str, int]
) -> tuple[dict[str, np.ndarray] | None, dict[str, int]]:
    """Per collection, each row's repository as a number (the same in every collection), and
    the numbers by name, from ``(collection, row, repository)``; ``sizes``: rows per
    collection. ``(None, {})`` when the build holds one repository."""
    ids: dict[str, int] = {}
    out = {c: np.full(n, -1, np.int32) for c, n in sizes.items()}  # -1: no chunk (none kept)
    for coll, row, repo in rows:
        arr = out.get(coll)
        if arr is not None and 0 <= row < len(arr):
            arr[row] = ids.setdefault(repo, len(ids))
    return (out, ids) if len(ids) > 1 else (None, {})


def kept_ids(ids: Mapping[str, int], repos: Sequence[str]) -> list[int] | None:
    """A filter's repositories as :func:`repo_groups`' numbers; None without a filter or in a
    build of one repository (every row: the build's statistics)."""
    if not repos or not ids:
        return None
    return [ids[r] for r in repos if r in ids]


class Bm25:
    """One collection's statistics: each row's token count, their mean; with ``groups`` (each
    row's repository, :func:`repo_groups`) also each repository's rows and total length, for a
    filter that keeps some of them."""

    def __init__(self, lengths: np.ndarray, groups: np.ndarray | None = None) -> None:
        self.lengths = lengths.astype(np.float64)
        self.n = len(lengths)
        self.avgdl = float(self.lengths.mean()) if self.n else 0.0
        self.groups = groups if groups is not None and len(groups) == self.n else None
        self._rows: np.ndarray = np.zeros(0)  # per repository: its rows, their total length
        self._length: np.ndarray = np.zeros(0)
        if self.groups is not None:
            inside = self.groups >= 0
            self._rows = np.bincount(self.groups[inside]).astype(np.float64)
            self._length = np.bincount(self.groups[inside], self.lengths[inside])

    def kept(self, keep: Sequence[int]) -> tuple[np.ndarray, int, float] | None:
        """The repositories ``keep`` (sorted numbers), their rows' number and mean length; None
        without repositories (the build holds one: every row)."""
        if self.groups is None:
            return None
        ids: np.ndarray = np.array(sorted({k for k in keep if 0 <= k < len(self._rows)}), np.intp)
        n = int(self._rows[ids].sum())
        return ids, n, float(self._length[ids].sum() / n) if n else 0.0

    def top(
        self, terms: Sequence[str], found: dict[str, tuple[np.ndarray, np.ndarray]], n: int,
        keep: Sequence[int] | None = None,
    ) -> list[tuple[int, float]]:  # fmt: skip
        """The ``n`` best rows for the OR of ``terms`` (FTS5 tokens; a repeated term counts
        twice, as a repeated phrase does in FTS5), best first, ties by row. ``keep``: only the
        rows of these repositories (:func:`repo_groups`' numbers), scored with their
        statistics."""
        total, avgdl, groups, ids = self.n, self.avgdl, None, np.zeros(0, np.intp)
        scope = self.kept(keep) if keep is not None else None
        if scope is not None:
            (ids, total, avgdl), groups = scope, self.groups
        if not total or n <= 0:
            return []
        rows_all, weights = [], []
        for t in terms:
            if t not in found:
                continue
            rows, tfs = found[t]
            if groups is not None:  # a filter: its repositories' rows only
                inside = np.isin(groups[rows], ids)
                rows, tfs = rows[inside], tfs[inside]
            df = len(rows)
            idf = math.log((total - df + 0.5) / (df + 0.5))
            idf = idf if idf > 0 else 1e-6
            tf = tfs.astype(np.float64)
            norm = K1 * (1 - B + B * self.lengths[rows] / avgdl)
            rows_all.append(rows)
            weights.append(idf * tf * (K1 + 1) / (tf + norm))
        if not rows_all:
            return []
        rows = np.concatenate(rows_all)
        scores = np.bincount(rows, np.concatenate(weights), self.n)
        hit = np.flatnonzero(scores)  # every contribution is > 0: the rows that matched
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
