"""Candidates: per collection, dense ∪ lexical ∪ exact hits, each with one hybrid score.

``score = cosine + lexical_weight × BM25/best BM25 of the collection + exact_bonus (a named
issue, a named symbol's definition, a named file, a caller of a named function) − test_penalty
(test code, unless the question is about tests)``. BM25 is scaled by the collection's best BM25
for this question: BM25 magnitudes depend on each collection's own statistics, so one global scale
let the biggest collection (code) win every slot.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from core.lexical import parts, query_terms
from core.models import COLLECTIONS, Collection
from core.retrieve.analyse import Route
from core.retrieve.fusion import Candidate
from core.retrieve.options import Options
from core.store.base import BuildReader, Hit

_CALLERS = re.compile(
    r"\b(who\s+calls|callers?\s+of|call\s+sites?|used\s+by|usages?\s+of|qui[ée]n\s+llama|"
    r"d[óo]nde\s+se\s+(?:usa|llama))\b",
    re.IGNORECASE,
)


async def _callers(reader: BuildReader, ident: str, defs: set[int]) -> list[int]:
    """Code chunks that call ``ident`` (``name(`` in their text), its definition excluded."""
    name = ident.split(".")[-1]
    joined = "".join(parts(name))
    if not joined:
        return []
    rows = [r for r, _ in await reader.lexical("code", [joined], 60) if r not in defs]
    chunks = await reader.chunks("code", rows)
    call = re.compile(rf"(?<![\w.])(?:[\w.]+\.)?{re.escape(name)}\s*\(")
    return [r for r in rows if r in chunks and call.search(chunks[r].text.split("\n", 1)[-1])]


async def exact_rows(
    reader: BuildReader, route: Route, question: str
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
            for row in (await reader.path_rows(coll, path))[:3]:
                out[coll].setdefault(row, f"file {path}")
    if route.identifiers and _CALLERS.search(question):
        defs = set(out["code"])
        for ident in route.identifiers[:2]:
            for row in (await _callers(reader, ident, defs))[:8]:
                out["code"].setdefault(row, f"calls {ident}")
    return out


@dataclass
class Found:
    """What the candidate stage found: per collection, the candidates best first; why exact hits
    were taken (for ``route.exact``); and for the rrf baseline, the ranked lists it fuses."""

    hits: dict[Collection, list[Candidate]] = field(default_factory=dict)
    exact: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    ranked: list[list[tuple[Collection, int]]] = field(default_factory=list)


async def find(
    reader: BuildReader,
    q: np.ndarray,
    text: str,
    route: Route,
    opt: Options,
    extra_terms: Sequence[str] = (),
    collections: tuple[Collection, ...] = COLLECTIONS,
) -> Found:
    """Per collection: dense ∪ lexical ∪ exact candidates, each with one hybrid score (see the
    module docstring). ``extra_terms`` join the lexical query (the glossary's English terms)."""
    cfg = opt.config
    terms = query_terms(
        " ".join([text, *route.identifiers, *route.paths, *extra_terms]), max_terms=40
    )
    exact = await exact_rows(reader, route, text) if opt.mode == "full" else {}
    lex: dict[Collection, list[Hit]] = {}
    dense: dict[Collection, list[Candidate]] = {}
    for c in collections:
        if not reader.size(c):
            continue
        if opt.mode in ("full", "dense", "rrf"):
            dense[c] = [
                Candidate(c, h.row, h.score) for h in await reader.dense(c, q, cfg.candidates)
            ]
        if opt.mode in ("full", "bm25", "rrf") and terms:
            lex[c] = await reader.lexical(c, terms, cfg.candidates)
    if opt.mode == "dense":
        return Found(dense)
    if opt.mode == "bm25":
        return Found({c: [Candidate(c, r, s) for r, s in ls] for c, ls in lex.items()})
    if opt.mode == "rrf":
        ranked = [[(c, h.row) for h in hs] for c, hs in dense.items()]
        return Found({c: [] for c in dense}, ranked=ranked + [
            [(c, r) for r, _ in ls] for c, ls in lex.items()
        ])  # fmt: skip
    found = Found()
    for c in (c for c in COLLECTIONS if c in dense or c in lex):
        ls_c = lex.get(c, [])
        top = max((s for _, s in ls_c), default=1.0) or 1.0
        lexs = {r: s / top for r, s in ls_c}
        rows = {h.row for h in dense.get(c, [])} | set(lexs) | set(exact.get(c, {}))
        if not rows:
            continue
        order = sorted(rows)
        cos = await reader.similarity(c, q, order)
        tests = reader.tests(c, order) if cfg.test_penalty and not route.tests else set()
        cands = []
        for row, s in zip(order, cos, strict=True):
            bonus = cfg.exact_bonus if row in exact.get(c, {}) else 0.0
            base = float(s) + cfg.lexical_weight * lexs.get(row, 0.0)
            if row in tests:
                base -= cfg.test_penalty
            cands.append(Candidate(c, row, base + bonus, bonus))
        found.hits[c] = sorted(cands, key=lambda h: -h.score)[: cfg.candidates]
        for row, reason in exact.get(c, {}).items():
            found.exact.setdefault(c, []).append({"row": row, "why": reason})
    return found
