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

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.embed.service import EmbedService
from core.lexical import fts_query, parts
from core.models import COLLECTIONS, Collection, Retrieval, Source
from core.retrieve.analyse import Route, analyse
from core.retrieve.glossary import english_terms
from core.store.local import IndexReader


@dataclass
class Candidate:
    collection: Collection
    row: int
    score: float
    bonus: float = 0.0  # the exact-hit part of ``score``: ranks, but doesn't stretch the range


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
    """Pick the top candidates of each collection per :func:`allocate`, best first.

    The allocation sees scores without the exact-hit bonus: one named definition must not
    squash the range so that nothing else looks relevant. An exact hit still ranks first in
    its collection, and a collection holding one gets at least one slot."""
    slots = allocate(
        {c: [h.score - h.bonus for h in hs] for c, hs in hits.items()}, k, floor, weights
    )
    for c, hs in hits.items():
        if slots.get(c, 0) == 0 and any(h.bonus > 0 for h in hs):
            if sum(slots.values()) >= k:
                biggest = max(slots, key=lambda x: slots[x])
                slots[biggest] -= 1
            slots[c] = 1
    chosen: list[Candidate] = []
    for c, hs in hits.items():
        chosen.extend(sorted(hs, key=lambda h: -h.score)[: slots.get(c, 0)])
    chosen.sort(key=lambda h: -h.score)
    return chosen, slots


# -- hybrid retrieval --------------------------------------------------------------------------

Mode = str  # "full" | "dense" | "bm25" | "rrf"


@dataclass
class Options:
    k: int = 6
    candidates: int = 20
    floor: float = 0.5
    # Weight of the lexical (BM25) score next to cosine similarity. BM25 is divided by the
    # collection's best BM25 for this question, so it lies in [0, 1]. Chosen on the self eval
    # (90 questions): 0.02 gave hit@6 0.878 / MRR 0.611 against 0.833 / 0.585 at 0.05, 0.822 /
    # 0.564 at 0.1 and 0.756 / 0.469 for dense alone; e5 cosines span only ~0.1 per question.
    alpha: float = 0.02
    # Bonus for an exact hit: the definition of a named symbol, a named issue, a named file.
    exact_bonus: float = 0.15
    # Test code is moved down by this much (cosine scale) unless the question is about tests:
    # tests quote the very phrases questions use ("¿cómo ejecuto las pruebas?" sits in a test
    # of the glossary) and crowd out the code and docs that answer them.
    test_penalty: float = 0.02
    # Expand Spanish software words with their English terms for the lexical side.
    glossary: bool = True
    # Also append them to the embedded question ("¿cómo ejecuto las pruebas? (run execute test
    # tests)"): on the self eval Spanish hit@6 went 0.911 → 0.933, on httpx 0.952 → 1.000, with
    # English unchanged.
    glossary_dense: bool = True
    weights: dict[Collection, float] | None = None
    mode: Mode = "full"
    collections: tuple[Collection, ...] = COLLECTIONS


_DISTINCT = re.compile(r"[_.]|::|[a-z0-9][A-Z]")
_CALLERS = re.compile(
    r"\b(who\s+calls|callers?\s+of|call\s+sites?|used\s+by|usages?\s+of|qui[ée]n\s+llama|"
    r"d[óo]nde\s+se\s+(?:usa|llama))\b",
    re.IGNORECASE,
)


async def _callers(reader: IndexReader, ident: str, defs: set[int]) -> list[int]:
    """Code chunks that call ``ident`` (``name(`` in their text), its definition excluded."""
    name = ident.split(".")[-1]
    joined = "".join(parts(name))
    if not joined:
        return []
    rows = [r for r, _ in await reader.lexical("code", f'"{joined}"', 60) if r not in defs]
    chunks = await reader.chunks_by_rows("code", rows)
    call = re.compile(rf"(?<![\w.])(?:[\w.]+\.)?{re.escape(name)}\s*\(")
    return [r for r in rows if r in chunks and call.search(chunks[r].text.split("\n", 1)[-1])]


async def _exact_rows(
    reader: IndexReader, route: Route, question: str
) -> dict[Collection, dict[int, str]]:
    """Chunks the question names outright, with why: issue, symbol definition, file path, and
    for "who calls X?" the chunks that call X."""
    out: dict[Collection, dict[int, str]] = {c: {} for c in COLLECTIONS}
    for n in route.issues:
        for row in (await reader.issue_rows(n))[:3]:
            out["issues"][row] = f"issue #{n}"
    for ident in route.identifiers[:8]:
        name = ident.split(".")[-1] if "." in ident else ident
        for row, sym in await reader.definition_rows(ident) or await reader.definition_rows(name):
            out["code"].setdefault(row, f"defines {sym.qualname}")
    for path in route.paths[:4]:
        for coll in ("code", "docs"):
            rows = await reader.rows_where(coll, "path=? OR path LIKE ?", [path, f"%/{path}"])
            for row in rows[:3]:
                out[coll].setdefault(row, f"file {path}")
    if route.identifiers and _CALLERS.search(question):
        defs = set(out["code"])
        for ident in route.identifiers[:2]:
            for row in (await _callers(reader, ident, defs))[:8]:
                out["code"].setdefault(row, f"calls {ident}")
    return out


def _rrf(lists: list[list[tuple[Collection, int]]], k: int, c: int = 60) -> list[Candidate]:
    scores: dict[tuple[Collection, int], float] = {}
    for lst in lists:
        for rank, key in enumerate(lst):
            scores[key] = scores.get(key, 0.0) + 1.0 / (c + rank + 1)
    best = sorted(scores.items(), key=lambda kv: -kv[1])[:k]
    return [Candidate(coll, row, sc) for (coll, row), sc in best]


async def _candidates(
    reader: IndexReader,
    q: np.ndarray,
    text: str,
    route: Route,
    opt: Options,
    collections: tuple[Collection, ...],
) -> tuple[dict[Collection, list[Candidate]], dict[str, Any]]:
    """Per collection: dense ∪ lexical ∪ exact candidates, each with one hybrid score."""
    extra = english_terms(text) if opt.glossary and opt.mode == "full" else []
    match = fts_query(" ".join([text, *route.identifiers, *route.paths, *extra]), max_terms=40)
    exact = await _exact_rows(reader, route, text) if opt.mode == "full" else {}
    lex: dict[Collection, list[tuple[int, float]]] = {}
    dense: dict[Collection, list[Candidate]] = {}
    for c in collections:
        if not reader.size(c):
            continue
        if opt.mode in ("full", "dense", "rrf"):
            dense[c] = [
                Candidate(c, h.row, h.score) for h in await reader.search(c, q, opt.candidates)
            ]
        if opt.mode in ("full", "bm25", "rrf") and match:
            lex[c] = await reader.lexical(c, match, opt.candidates)
    why: dict[str, Any] = {}
    if opt.mode == "dense":
        return dense, why
    if opt.mode == "bm25":
        return {c: [Candidate(c, r, s) for r, s in ls] for c, ls in lex.items()}, why
    if opt.mode == "rrf":
        return {c: [] for c in dense}, {"rrf": [
            [(c, h.row) for h in hs] for c, hs in dense.items()
        ] + [[(c, r) for r, _ in ls] for c, ls in lex.items()]}  # fmt: skip
    out: dict[Collection, list[Candidate]] = {}
    for c in set(dense) | set(lex):
        # BM25 is scaled by the collection's best BM25 for this question: BM25 magnitudes depend
        # on each collection's own statistics, so one global scale let the biggest collection
        # (code) win every slot (see the note of the retrieval issue for the sweep).
        ls_c = lex.get(c, [])
        top = max((s for _, s in ls_c), default=1.0) or 1.0
        lexs = {r: s / top for r, s in ls_c}
        rows = {h.row for h in dense.get(c, [])} | set(lexs) | set(exact.get(c, {}))
        if not rows:
            continue
        order = sorted(rows)
        cos = reader.vectors[c][order] @ q
        tests = reader.test_rows.get(c)
        if not opt.test_penalty or route.tests or tests is None or not tests.any():
            tests = None
        cands = []
        for row, s in zip(order, cos, strict=True):
            bonus = opt.exact_bonus if row in exact.get(c, {}) else 0.0
            base = float(s) + opt.alpha * lexs.get(row, 0.0)
            if tests is not None and tests[row]:
                base -= opt.test_penalty
            cands.append(Candidate(c, row, base + bonus, bonus))
        out[c] = sorted(cands, key=lambda h: -h.score)[: opt.candidates]
        for row, reason in exact.get(c, {}).items():
            why.setdefault(c, []).append({"row": row, "why": reason})
    return out, why


async def retrieve(
    reader: IndexReader,
    embedder: EmbedService,
    question: str,
    opt: Options,
    route: Route | None = None,
) -> Retrieval:
    """Analyse, search each collection (hybrid), share the slots, and resolve the sources."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    route = route or analyse(question)
    static = opt.weights or {}
    if opt.mode == "full":  # the configured weights multiply the route's
        weights = {c: route.weights.get(c, 1.0) * static.get(c, 1.0) for c in COLLECTIONS}
    else:
        weights = {c: static.get(c, 1.0) for c in COLLECTIONS}
    qtext = question
    # Baselines (dense, bm25, rrf) see the question as asked: the glossary is ours.
    if opt.mode == "full" and opt.glossary_dense and (extra := english_terms(question)):
        qtext = f"{question} ({' '.join(extra)})"
    q = await embedder.embed_query(qtext)
    timings["embed_query"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    hits, why = await _candidates(reader, q, question, route, opt, opt.collections)
    if opt.mode == "rrf":
        chosen = _rrf(why.pop("rrf"), opt.k)
        slots: dict[Collection, int] = {}
        for h in chosen:
            slots[h.collection] = slots.get(h.collection, 0) + 1
    elif opt.mode == "full" and route.hop and route.issues:
        chosen, slots = await _issue_hop(reader, embedder, route, hits, opt, timings)
    else:
        chosen, slots = select(hits, opt.k, opt.floor, weights)
    timings["search"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    sources = await to_sources(reader, chosen)
    timings["fetch"] = (time.perf_counter() - t) * 1000
    rj = route.to_json()
    rj["weights"] = {c: weights.get(c, 1.0) for c in COLLECTIONS}
    if why:
        rj["exact"] = why
    rj["mode"] = opt.mode
    return Retrieval(
        sources=sources, route=rj, slots={str(c): n for c, n in slots.items()}, timings_ms=timings
    )


async def _issue_hop(
    reader: IndexReader,
    embedder: EmbedService,
    route: Route,
    hits: dict[Collection, list[Candidate]],
    opt: Options,
    timings: dict[str, float],
) -> tuple[list[Candidate], dict[Collection, int]]:
    """ "Where is the bug from issue #42?": the issue itself first, then the code it points at,
    found with the issue's own title, body, stack-trace frames and identifiers."""
    issue_rows: list[int] = []
    for n in route.issues[:2]:
        issue_rows.extend((await reader.issue_rows(n))[:2])
    if not issue_rows:  # no such issue indexed: answer the question as asked
        static = opt.weights or {}
        w = {c: route.weights.get(c, 1.0) * static.get(c, 1.0) for c in COLLECTIONS}
        return select(hits, opt.k, opt.floor, w)
    chunks = await reader.chunks_by_rows("issues", issue_rows)
    issue_text = "\n".join(chunks[r].text for r in issue_rows if r in chunks)[:4000]
    sub = analyse(issue_text)
    sub.issues, sub.hop = [], False
    # Only distinctive names from a long issue text (snake_case, camelCase, dotted, calls): a
    # plain word in backticks ("`ask`") would pull in every definition of that word.
    sub.identifiers = [i for i in sub.identifiers if _DISTINCT.search(i)]
    t = time.perf_counter()
    # The title and the opening of the body say what the issue is about; a query of ~150
    # tokens embeds in a fraction of the time of the whole thread.
    q2 = await embedder.embed_query(issue_text[:600])
    timings["embed_hop_query"] = (time.perf_counter() - t) * 1000
    code_hits, _ = await _candidates(
        reader, q2, issue_text[:600], sub, Options(**{**opt.__dict__, "mode": "full"}),
        ("code",),
    )  # fmt: skip
    # The question asks for code: the rest of the slots go to the code the issue points at
    # (the docs that merely discuss the same topic would crowd it out).
    first = [Candidate("issues", r, 1.0) for r in issue_rows[:1]]
    rest, slots = select(code_hits, opt.k - len(first), opt.floor)
    slots = {**slots, "issues": len(first)}
    return first + rest, slots


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
