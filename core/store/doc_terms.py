"""Which documents hold a question's terms: what grep sees of a whole file.

The ranker's coverage feature (``retrieve/rank.py``, ``cover``) asks of a question's lexical
terms how many documents (files, issue threads) of the build — of a filter's repositories, when
the question has one — hold each, and which of them a candidate's *document* holds — in any of
its chunks, not only the retrieved one. Both stores
answer from the BM25 postings they already keep (the rows holding each term) and a row →
document map made when the reader opens: no table more in a build, nothing to rebuild.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from core.models import Collection
from core.store.bm25 import read_postings


@dataclass(frozen=True)
class DocTerms:
    """The document-level view of a question's terms in one build."""

    docs: int = 0  # documents in the build (every collection; a filter's repositories' only)
    df: dict[str, int] = field(default_factory=dict)  # term → documents holding it (0: left out)
    # (collection, row) → the terms that row's document holds anywhere
    held: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)


class DocMap:
    """Per collection, each row's document id (ids unique across collections; -1: unknown)."""

    def __init__(
        self, ids: dict[str, np.ndarray], docs: int, doc_repo: np.ndarray | None = None
    ) -> None:
        self.ids = ids
        self.docs = docs
        # each document's repository (``bm25.repo_groups``); None: the build holds one
        self.doc_repo = doc_repo

    @classmethod
    def of(
        cls, rows: Iterable[tuple[str, int, str]], sizes: Mapping[str, int],
        groups: Mapping[str, np.ndarray] | None = None,
    ) -> DocMap:  # fmt: skip
        """From ``(collection, row, doc_key)`` triples; ``sizes``: rows per collection;
        ``groups``: per collection, each row's repository (None: the build holds one)."""
        ids = {c: np.full(n, -1, np.int32) for c, n in sizes.items()}
        seen: dict[tuple[str, str], int] = {}
        repo_of: list[int] = []
        for coll, row, key in rows:
            arr = ids.get(coll)
            if arr is not None and 0 <= row < len(arr):
                doc = arr[row] = seen.setdefault((coll, key), len(seen))
                if groups is not None and doc == len(repo_of):  # a new document
                    repo_of.append(int(groups[coll][row]))
        doc_repo = np.array(repo_of, np.int32) if groups is not None else None
        return cls(ids, len(seen), doc_repo)

    def answer(
        self, parts: Mapping[str, list[tuple[str, bytes, bytes]]], keys: Mapping[str, str],
        rows: Mapping[Collection, Sequence[int]], keep: Sequence[int] | None = None,
    ) -> DocTerms:  # fmt: skip
        """``parts``: per collection, the postings blobs of the question's terms as the store
        read them (``bm25.read_postings`` decodes them here, off the event loop); ``keys``: each
        question term → its postings term; ``rows``: per collection, the candidates to say which
        terms their documents hold; ``keep``: count only the documents of these repositories
        (``bm25.repo_groups``' numbers: a filter's), as their own instance would."""
        inside = None
        docs = self.docs
        if keep is not None and self.doc_repo is not None:
            inside = np.isin(self.doc_repo, sorted(set(keep)))
            docs = int(inside.sum())
        per_term: dict[str, list[np.ndarray]] = {}
        for coll, blobs in parts.items():
            m = self.ids.get(coll)
            if m is None:
                continue
            got = read_postings(blobs)
            for t, key in keys.items():
                if key in got:
                    rs = got[key][0]
                    per_term.setdefault(t, []).append(m[rs[(rs >= 0) & (rs < len(m))]])
        cand_keys = [(c, int(r)) for c, rs in rows.items() for r in rs]
        cand = np.array([self._id(c, r) for c, r in cand_keys], np.int64)
        df: dict[str, int] = {}
        held: dict[tuple[str, int], set[str]] = {k: set() for k in cand_keys}
        for t, arrs in per_term.items():
            d = np.unique(np.concatenate(arrs))
            d = d[d >= 0]
            if inside is not None:
                d = d[inside[d]]
            df[t] = len(d)
            if len(d) and len(cand):
                for i in np.flatnonzero(np.isin(cand, d)):
                    held[cand_keys[i]].add(t)
        return DocTerms(docs, df, {k: frozenset(v) for k, v in held.items()})

    def _id(self, coll: str, row: int) -> int:
        m = self.ids.get(coll)
        return int(m[row]) if m is not None and 0 <= row < len(m) else -1
