"""Fusion: share a question's result slots between the collections in proportion to how well
each fits *this* question.

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

:func:`rrf` is the baseline this replaces (``eval --compare``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from core.models import Chunk, Collection

# A group of candidates slots are shared between: a collection, or (collection, repository).
K = TypeVar("K", bound=Hashable)
# ``why`` of a file's further chunk that ``first_of_each`` put after the other files' first ones.
AFTER_FIRSTS = "a further chunk of its file: after every other file's first"


@dataclass
class Candidate:
    collection: Collection
    row: int
    score: float
    bonus: float = 0.0  # the exact-hit part of ``score``: ranks, but doesn't stretch the range
    # The evidence behind it (full mode; ``candidates.py``), for the ranker and for ``why``.
    chunk: Chunk | None = None
    cos: float = 0.0
    lex: float = 0.0  # BM25 over the collection's best for this question; 0: not a lexical hit
    dense_rank: int | None = None
    lex_rank: int | None = None
    exact: bool = False
    graph: str | None = None  # reached through the code graph: why
    test: bool = False
    why: list[str] = field(default_factory=list)
    # Further chunks of its file that fit the question too (``select``'s ``passages``).
    passages: list[Candidate] = field(default_factory=list)


def allocate(
    cands: dict[K, list[float]],
    k: int,
    floor: float = 0.5,
    weights: dict[K, float] | None = None,
    span: float | None = None,
) -> dict[K, int]:
    """Slots per collection for ``k`` results, given each collection's candidate scores.
    ``span``: the range is the best score less ``span`` up to the best (scores below count as
    its bottom) instead of the pool's own minimum — for scores whose differences mean the same
    on every question, like the ranker's log-odds."""
    pool = [s for ss in cands.values() for s in ss]
    slots: dict[K, int] = {c: 0 for c in cands}
    if not pool or k <= 0:
        return slots
    lo, hi = min(pool), max(pool)
    if span is not None:
        lo = hi - span
        cands = {c: [max(s, lo) for s in ss] for c, ss in cands.items()}
    span = hi - lo
    fit: dict[K, float] = {}
    cap: dict[K, int] = {}
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
    hits: dict[K, list[Candidate]],
    k: int,
    floor: float,
    weights: dict[K, float] | None = None,
    per_doc: dict[K, int] | None = None,
    span: float | None = None,
    file_first: bool = False,
    passages: int = 0,
    first_passages: int | None = None,
) -> tuple[list[Candidate], dict[K, int]]:
    """Pick the top candidates of each collection per :func:`allocate`, best first (with
    ``file_first``, each file's best first: :func:`first_of_each`).

    The allocation sees scores without the exact-hit bonus: one named definition must not
    squash the range so that nothing else looks relevant. An exact hit still ranks first in
    its collection, and a collection holding one gets at least one slot. ``per_doc``: at most
    that many chunks of one file or thread per collection, while others are left (a slot spent
    on a second piece of the same file is a slot another file could have used). ``file_first``:
    each file's (thread's) best chunk before any file's second one (:func:`first_of_each`).
    ``passages``: each chosen candidate carries up to that many further chunks of its file that
    are not chosen themselves and clear the bar a source must (``floor`` in the range);
    ``first_passages`` (default ``passages``): as many for the best chosen candidate, the
    source a person reads first."""
    slots = allocate(
        {c: [h.score - h.bonus for h in hs] for c, hs in hits.items()}, k, floor, weights, span
    )
    for c, hs in hits.items():
        if slots.get(c, 0) == 0 and any(h.bonus > 0 for h in hs):
            if sum(slots.values()) >= k:
                biggest = max(slots, key=lambda x: slots[x])
                slots[biggest] -= 1
            slots[c] = 1
    chosen: list[Candidate] = []
    for c, hs in hits.items():
        ranked = sorted(hs, key=lambda h: -h.score)
        limit = (per_doc or {}).get(c)
        chosen.extend(_diverse(ranked, slots.get(c, 0), limit) if limit else
                      ranked[: slots.get(c, 0)])  # fmt: skip
    chosen.sort(key=lambda h: -h.score)
    for h in chosen:
        h.passages = []
    if passages > 0:
        most = [passages] * len(chosen)
        if chosen and first_passages is not None:
            most[0] = max(passages, first_passages)
        chosen = _fold(chosen, most)
        _attach(chosen, hits, floor, span, most[: len(chosen)])
    return (first_of_each(chosen) if file_first else chosen), slots


def _fold(chosen: list[Candidate], most: list[int]) -> list[Candidate]:
    """With passages every source is another file: a further chunk of a file already chosen
    (``_diverse`` fills spare slots with them when no other file is left) becomes a passage of
    its file's best chunk (up to ``most[i]`` for the i-th source; beyond, it is left out)."""
    first: dict[tuple[str, str], int] = {}
    out: list[Candidate] = []
    for h in chosen:  # best first
        key = (h.collection, doc_of(h))
        if key not in first:
            first[key] = len(out)
            out.append(h)
        elif len(out[first[key]].passages) < most[first[key]]:
            out[first[key]].passages.append(h)
    return out


def _attach(
    chosen: list[Candidate],
    hits: dict[K, list[Candidate]],
    floor: float,
    span: float | None,
    most: list[int],
) -> None:
    """Give the i-th chosen candidate up to ``most[i]`` further chunks of its file (best first)
    that are relevant by :func:`allocate`'s measure: in the upper ``1 - floor`` of this
    question's range."""
    pool = [h.score - h.bonus for hs in hits.values() for h in hs]
    if not pool:
        return
    hi = max(pool)
    lo = hi - span if span is not None else min(pool)
    width = hi - lo
    taken = {id(h) for h in chosen} | {id(p) for h in chosen for p in h.passages}
    every = sorted((c for hs in hits.values() for c in hs), key=lambda c: -c.score)
    for h, cap in zip(chosen, most, strict=True):
        for c in every:
            if len(h.passages) >= cap:
                break
            if id(c) in taken or c.collection != h.collection or doc_of(c) != doc_of(h):
                continue
            if width > 1e-9 and (max(c.score - c.bonus, lo) - lo) / width < floor:
                continue
            h.passages.append(c)
            taken.add(id(c))
        h.passages.sort(key=lambda c: -c.score)


def doc_of(h: Candidate) -> str:
    """The file or thread a candidate is a chunk of: its ``doc_key`` (``path``, ``issue:N``;
    ``{repo}:…`` in an instance over several repositories, so two READMEs never collide)."""
    return h.chunk.doc_key if h.chunk is not None else f"row:{h.row}"


def first_of_each(ranked: list[Candidate]) -> list[Candidate]:
    """``ranked`` with each file's (thread's) best chunk first, in order, then the further
    chunks of files already listed, in order: the first slots a person reads are all different
    places, not one place twice (a file's later chunk can answer only where its best one is from
    the right file). A thread the question names by number (an exact issue hit) keeps its
    chunks together: it is what the question asks about."""
    seen: set[tuple[str, str]] = set()
    first: list[Candidate] = []
    again: list[Candidate] = []
    for h in ranked:
        key = (h.collection, doc_of(h))
        if key in seen and not (h.exact and h.collection == "issues"):
            h.why = [*h.why, AFTER_FIRSTS]  # ``route.sources``: why it is below lower scores
            again.append(h)
        else:
            first.append(h)
        seen.add(key)
    return first + again


def _diverse(ranked: list[Candidate], n: int, limit: int) -> list[Candidate]:
    """The best ``n``, at most ``limit`` per document while other documents have candidates."""
    if n <= 0:
        return []
    out: list[Candidate] = []
    later: list[Candidate] = []
    seen: dict[str, int] = {}
    for h in ranked:
        key = doc_of(h)
        if seen.get(key, 0) >= limit:
            later.append(h)
            continue
        seen[key] = seen.get(key, 0) + 1
        out.append(h)
        if len(out) >= n:
            return out
    return out + later[: n - len(out)]


def rrf(lists: list[list[tuple[Collection, int]]], k: int, c: int = 60) -> list[Candidate]:
    scores: dict[tuple[Collection, int], float] = {}
    for lst in lists:
        for rank, key in enumerate(lst):
            scores[key] = scores.get(key, 0.0) + 1.0 / (c + rank + 1)
    best = sorted(scores.items(), key=lambda kv: -kv[1])[:k]
    return [Candidate(coll, row, sc) for (coll, row), sc in best]
