"""Retrieval: search every collection, then share the result slots between them in proportion
to how well each fits *this* question.

Why not RRF: reciprocal-rank fusion gives every collection's first hit the same fused score, so
across collections it degenerates into round-robin — a docs question gets code in slot 2 however
irrelevant the code is. Raw cosine ratios don't work either: e5 similarities bunch in a narrow
band (0.75–0.90), so "0.80 vs 0.84" says nothing on its own.

The allocation (:func:`allocate`):

1. Pool the candidate scores of all collections for this question; ``lo``/``hi`` are the pool's
   minimum and maximum. Each candidate's *relevance* is its place in that range:
   ``rel = (s - lo) / (hi - lo)`` — the best hit of the question is 1.
2. A candidate is *relevant* when ``rel >= floor`` (``retrieval.relevance_floor``, default 0.5:
   it must be in the upper half of this question's range).
3. A collection's *fit* is the sum, over its best ``k`` relevant candidates, of
   ``(rel - floor) / (1 - floor)``, times its route weight. A collection with no relevant
   candidate has fit 0 and gets **no slot**.
4. The ``k`` slots are divided in proportion to fit (largest remainder), each collection capped
   at its number of relevant candidates; spare slots go to the others by fit.

The seam for routing and lexical search (a later issue) is the per-collection ``weights`` and the
candidate lists themselves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .embed import EmbedService
from .models import COLLECTIONS, Collection, Retrieval, Source
from .store import IndexReader


@dataclass
class Candidate:
    collection: Collection
    row: int
    score: float
    rel: float = 0.0


def allocate(
    cands: dict[Collection, list[float]],
    k: int,
    floor: float = 0.5,
    weights: dict[Collection, float] | None = None,
) -> dict[Collection, int]:
    """Slots per collection for ``k`` results, given each collection's candidate scores."""
    pool = [s for ss in cands.values() for s in ss]
    slots: dict[Collection, int] = {c: 0 for c in cands}
    if not pool or k <= 0:
        return slots
    lo, hi = min(pool), max(pool)
    span = hi - lo
    fit: dict[Collection, float] = {}
    cap: dict[Collection, int] = {}
    for c, ss in cands.items():
        rels = sorted(((s - lo) / span if span > 1e-9 else 1.0 for s in ss), reverse=True)
        relevant = [r for r in rels if r >= floor]
        cap[c] = len(relevant)
        w = (weights or {}).get(c, 1.0)
        fit[c] = w * sum((r - floor) / (1.0 - floor) for r in relevant[:k])
    left = k
    active = {c for c in cands if fit[c] > 0 and cap[c] > 0}
    if not active:  # all candidates tie at the floor: the best one still answers
        best = max(cands, key=lambda c: max(cands[c], default=-1.0))
        slots[best] = 1
        return slots
    while left > 0 and active:
        total = sum(fit[c] for c in active)
        quotas = {c: left * fit[c] / total for c in active}
        give = {c: min(int(q), cap[c] - slots[c]) for c, q in quotas.items()}
        rest = left - sum(give.values())
        # Largest remainder for the slots the integer parts left over.
        order = sorted(active, key=lambda c: (quotas[c] - int(quotas[c]), fit[c]), reverse=True)
        for c in order:
            if rest <= 0:
                break
            if slots[c] + give[c] < cap[c]:
                give[c] += 1
                rest -= 1
        if sum(give.values()) == 0:
            break
        for c, g in give.items():
            slots[c] += g
        left = k - sum(slots.values())
        active = {c for c in active if slots[c] < cap[c]}
    return slots


def select(
    hits: dict[Collection, list[Candidate]],
    k: int,
    floor: float,
    weights: dict[Collection, float] | None = None,
) -> tuple[list[Candidate], dict[Collection, int]]:
    """Pick the top candidates of each collection per :func:`allocate`, best first."""
    slots = allocate({c: [h.score for h in hs] for c, hs in hits.items()}, k, floor, weights)
    pool = [h.score for hs in hits.values() for h in hs]
    lo, hi = (min(pool), max(pool)) if pool else (0.0, 1.0)
    span = hi - lo
    chosen: list[Candidate] = []
    for c, hs in hits.items():
        for h in sorted(hs, key=lambda h: -h.score)[: slots.get(c, 0)]:
            h.rel = (h.score - lo) / span if span > 1e-9 else 1.0
            chosen.append(h)
    chosen.sort(key=lambda h: -h.score)
    return chosen, slots


async def retrieve(
    reader: IndexReader,
    embedder: EmbedService,
    question: str,
    k: int,
    candidates: int,
    floor: float,
    weights: dict[Collection, float] | None = None,
    collections: tuple[Collection, ...] = COLLECTIONS,
) -> Retrieval:
    """Dense search in every collection, proportional fusion, sources with their metadata."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    q = await embedder.embed_query(question)
    timings["embed_query"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    hits = await search_all(reader, q, candidates, collections)
    timings["search"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    chosen, slots = select(hits, k, floor, weights)
    sources = await to_sources(reader, chosen)
    timings["fuse"] = (time.perf_counter() - t) * 1000
    route = {"weights": {c: (weights or {}).get(c, 1.0) for c in hits}, "signals": {}}
    return Retrieval(sources=sources, route=route, slots={str(c): n for c, n in slots.items()}, timings_ms=timings)


async def search_all(
    reader: IndexReader, q: np.ndarray, n: int, collections: tuple[Collection, ...] = COLLECTIONS
) -> dict[Collection, list[Candidate]]:
    hits: dict[Collection, list[Candidate]] = {}
    for c in collections:
        if reader.size(c):
            hits[c] = [Candidate(c, h.row, h.score) for h in await reader.search(c, q, n)]
    return hits


async def to_sources(reader: IndexReader, chosen: list[Candidate]) -> list[Source]:
    by_coll: dict[Collection, list[int]] = {}
    for h in chosen:
        by_coll.setdefault(h.collection, []).append(h.row)
    rows = {c: await reader.chunks_by_rows(c, r) for c, r in by_coll.items()}
    out = []
    for h in chosen:
        ch = rows[h.collection][h.row]
        out.append(
            Source(
                collection=h.collection, title=ch.title, url=ch.url, text=ch.text, score=h.score,
                path=ch.path, start_line=ch.start_line, end_line=ch.end_line, issue=ch.issue,
                symbol=ch.symbol, chunk_id=ch.id,
            )
        )  # fmt: skip
    return out
