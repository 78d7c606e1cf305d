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

In an instance over several repositories, N, df and avgdl are each row's *repository's*
(:func:`repo_groups`): a row scores as it does in its repository's own instance — the
statistics the learned ranker was fitted on — whichever repositories share the build. With all
twenty dev-set repositories in one build, a question filtered to one of them (commander) ranked
``Command.helpInformation`` third by BM25 instead of first: "terminal", "width" and "wrap" weigh
differently over twenty repositories' code.
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


def repo_groups(
    rows: Iterable[tuple[str, int, str]], sizes: Mapping[str, int]
) -> dict[str, np.ndarray] | None:
    """Per collection, each row's repository as a number (the same in every collection), from
    ``(collection, row, repository)``; ``sizes``: rows per collection. None when the build
    holds one repository: the statistics are then the collection's, as they always were."""
    ids: dict[str, int] = {}
    out = {c: np.zeros(n, np.int32) for c, n in sizes.items()}
    for coll, row, repo in rows:
        arr = out.get(coll)
        if arr is not None and 0 <= row < len(arr):
            arr[row] = ids.setdefault(repo, len(ids))
    return out if len(ids) > 1 else None


class Bm25:
    """One collection's statistics: each row's token count, their mean — per repository when
    ``groups`` (each row's repository, :func:`repo_groups`) is given."""

    def __init__(self, lengths: np.ndarray, groups: np.ndarray | None = None) -> None:
        self.lengths = lengths.astype(np.float64)
        self.n = len(lengths)
        self.avgdl = float(self.lengths.mean()) if self.n else 0.0
        self.groups: np.ndarray | None = None
        if groups is not None and len(groups) == self.n and self.n:
            self.groups = groups.astype(np.intp)
            self.group_n = np.bincount(self.groups).astype(np.float64)
            total = np.bincount(self.groups, self.lengths)
            self.group_avgdl = np.divide(total, self.group_n, out=np.ones_like(total),
                                         where=self.group_n > 0)  # fmt: skip

    def _weights(self, rows: np.ndarray, tfs: np.ndarray) -> np.ndarray:
        tf = tfs.astype(np.float64)
        if self.groups is None:
            df = len(rows)
            idf = math.log((self.n - df + 0.5) / (df + 0.5))
            idf = idf if idf > 0 else 1e-6
            norm = K1 * (1 - B + B * self.lengths[rows] / self.avgdl)
            return idf * tf * (K1 + 1) / (tf + norm)
        g = self.groups[rows]  # each row's repository: its N, df and avgdl
        n = self.group_n
        dfs = np.bincount(g, minlength=len(n)).astype(np.float64)
        idfs = np.log((n - dfs + 0.5) / (dfs + 0.5))
        idfs[~(idfs > 0)] = 1e-6
        norm = K1 * (1 - B + B * self.lengths[rows] / self.group_avgdl[g])
        return np.asarray(idfs[g] * tf * (K1 + 1) / (tf + norm))

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
            rows_all.append(rows)
            weights.append(self._weights(rows, tfs))
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
