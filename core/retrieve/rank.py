"""The second-stage ranker: one learned score per candidate from more evidence than one cosine.

Features (:data:`FEATURES`) describe a candidate *for this question*: its cosine and its gap to
the question's best, BM25 over the collection's best and the ranks in both lists, exact hits,
code-graph hits, per-field matches (symbol name, heading or title, path), how many
candidates of the same file matched, how much of the question its whole document holds
(:func:`coverage`, crossed with the how-to, code and bug kinds), the chunk's kind (definition,
declaration, module code, test, example, changelog, README, pull request) and how much of it is
comments, and its collection crossed with the question's kind probabilities (``kinds.py``) and
exact signals (identifiers, issue numbers, errors, language). Declarations and comment share
are crossed with the kinds too: a type full of documented options answers "which options are
there", not "how does it decide".

The weights are *learned*, not set by hand: :func:`fit` maximises, per question, the softmax
probability of the candidates that are gold (listwise logistic regression with an L2 penalty,
features standardised), on the tuning halves of the external dev sets
(``benchmarks/train_ranker.py``, which writes ``ranker.json``). Written with numpy rather than
scikit-learn: the model is 60 lines of gradient descent over a few thousand rows, and the
dependency would be a 40 MB install for it.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from core.lexical import fold, parts, terms
from core.models import COLLECTIONS
from core.retrieve.analyse import Route
from core.retrieve.fusion import Candidate
from core.retrieve.kinds import KINDS
from core.store.doc_terms import DocTerms

MODEL = Path(__file__).with_name("ranker.json")
# The score range fusion measures relevance in: the best score less SPAN up to the best (a
# candidate SPAN/2 below the best is at the default relevance_floor, 0.5). Log-odds mean the same
# on every question, unlike cosines, so the range is fixed rather than the pool's own.
SPAN = 8.0

_CHANGELOG = re.compile(r"(^|/)(change(s|log)?|history|news|releases?)([-_. ]?notes)?(\.\w+)?$",
                        re.I)  # fmt: skip
_EXAMPLE = re.compile(r"(^|/)_?(examples?|demos?|samples?)(/|$)|(^|/)example[^/]*$", re.I)
_README = re.compile(r"(^|/)readme(\.\w+)?$", re.I)
# Declarations: TypeScript's .d.ts, files or folders named types/typings/interfaces (Python's
# private `_types.py`, `typing.py` too).
_DECL_PATH = re.compile(r"\.d\.ts$|(^|/)_?(types?|typings?|interfaces?)(/|\.)", re.I)
_COMMENT = re.compile(r"^\s*(//|#|\*|/\*|\"\"\"|\'\'\')")
_DEF_KINDS = frozenset(
    "function method class struct interface trait enum type impl record union namespace "
    "method_group".split()
)

# The kinds document coverage is crossed with (measured: variants/xfc.py.txt).
COVER_KINDS = ("howto", "code", "bug")
BASE = [
    "cos", "cos_gap", "cos_gap_coll", "coll_gap", "lex", "dense_rr", "lex_rr", "exact",
    "graph_call", "graph_issue", "sym_match", "title_match", "path_match", "ident_in_text",
    "file_share", "tokens", "is_def", "is_module", "is_test", "is_example", "is_changelog",
    "is_readme", "is_pr", "cover", *(f"cover_{k}" for k in COVER_KINDS),
    *(f"exact_{k}" for k in KINDS), *(f"graph_{k}" for k in KINDS),
    *(n for t in ("is_decl", "comment_share") for n in (t, *(f"{t}_{k}" for k in KINDS))),
]  # fmt: skip
CROSS = [f"{c}_{s}" for c in COLLECTIONS for s in ("bias", *KINDS, "ident", "issue_ref",
                                                    "error", "non_en", "cos", "lex")]  # fmt: skip
FEATURES: tuple[str, ...] = (*BASE, *CROSS)
# The reader's ranker (``reread.py``): the same features and four from the tuned reader.
READER = ("reader", "reader_top", "reader_code", "reader_bug")
READER_FEATURES: tuple[str, ...] = (*FEATURES, *READER)
READER_MODEL = Path(__file__).with_name("ranker-reader.json")


@dataclass
class Context:
    """What the features need to know about the question."""

    terms: set[str]
    idents: set[str]  # the question's identifiers, parts joined (parse_config → parseconfig)
    kinds: dict[str, float]
    route: Route
    english: bool
    # (collection, row) → the idf-weighted share of the question's terms its document holds
    cover: dict[tuple[str, int], float] = field(default_factory=dict)

    @classmethod
    def of(
        cls, question: str, extra: Sequence[str], route: Route, kinds: dict[str, float],
        lang: str | None, cover: dict[tuple[str, int], float] | None = None,
    ) -> Context:  # fmt: skip
        idents = {"".join(parts(i.split(".")[-1].rstrip("?!"))) for i in route.identifiers}
        return cls(set(terms(" ".join([question, *extra]))), idents - {""}, kinds, route,
                   lang in (None, "en"), dict(cover or {}))  # fmt: skip


def coverage(held: DocTerms) -> dict[tuple[str, int], float]:
    """Per candidate, the idf-weighted share of the question's lexical terms that its whole
    document holds (any of its chunks: what grep sees of a file), idf = ln(1 + documents /
    documents holding the term) over every collection; terms no document holds are left out."""
    idf = {t: math.log(1 + held.docs / n) for t, n in held.df.items() if n}
    total = sum(idf.values())
    if not total:
        return {}
    return {k: sum(idf.get(t, 0.0) for t in ts) / total for k, ts in held.held.items()}


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / math.sqrt(len(a) * len(b)) if a and b else 0.0


@cache
def _terms_of(text: str) -> frozenset[str]:
    return frozenset(terms(text))


_IDENT_TOKEN = re.compile(r"[^\W_]+")


@lru_cache(maxsize=1024)
def _ident_tokens(text: str) -> frozenset[str]:
    """A chunk's identifiers as :class:`Context` writes the question's (lower case, parts
    joined: ``parse_config``/``parseConfig`` → ``parseconfig``), whole tokens: ``get`` is not
    in ``target``, nor ``com`` in ``compile``."""
    return frozenset(_IDENT_TOKEN.findall(text.lower().replace("_", "")))


def comment_share(text: str) -> float:
    """The share of a code chunk's lines (after its context line) that are comments or
    docstrings: a declaration that carries its documentation reads like the docs to both
    retrievers, yet holds no behaviour."""
    lines = [line for line in text.split("\n")[1:] if line.strip()]
    n, block = 0, ""
    # A piece of a long block comment that the chunker cut starts inside it, without `/*`: its
    # lines up to the first `*/` (with no `/*` before it) are comment too.
    for i, line in enumerate(lines):
        if "/*" in line.split("*/")[0]:
            break
        if "*/" in line:
            n = i + 1
            break
    for line in lines[n:]:
        s = line.strip()
        if block:
            n += 1
            if block in s:
                block = ""
        elif s.startswith("/*") and "*/" not in s[2:]:
            n, block = n + 1, "*/"
        elif s[:3] in ('"""', "'''") and not (len(s) > 3 and s.endswith(s[:3])):
            n, block = n + 1, s[:3]
        elif _COMMENT.match(line):
            n += 1
    return n / len(lines) if lines else 0.0


def matrix(cands: Sequence[Candidate], ctx: Context) -> np.ndarray:
    """One row of :data:`FEATURES` per candidate (all of a question's candidates at once: some
    features compare a candidate with the others)."""
    x = np.zeros((len(cands), len(FEATURES)), np.float32)
    if not cands:
        return x
    col = {f: i for i, f in enumerate(FEATURES)}
    best = max(c.cos for c in cands)
    best_in = {k: max(c.cos for c in cands if c.collection == k)
               for k in {c.collection for c in cands}}  # fmt: skip
    per_file = Counter((c.collection, c.chunk.doc_key) for c in cands if c.chunk is not None)
    r = ctx.route
    for i, c in enumerate(cands):
        ch = c.chunk
        path = (ch.path or "") if ch is not None else ""
        sym = (ch.symbol or "").split(".")[-1].rstrip("?!") if ch is not None else ""
        v: dict[str, float] = {
            "cos": c.cos,
            "cos_gap": c.cos - best,
            "cos_gap_coll": c.cos - best_in[c.collection],
            "coll_gap": best_in[c.collection] - best,
            "lex": c.lex,
            "dense_rr": 1.0 / (1 + c.dense_rank) if c.dense_rank is not None else 0.0,
            "lex_rr": 1.0 / (1 + c.lex_rank) if c.lex_rank is not None else 0.0,
            "exact": float(c.exact),
            "graph_call": float(bool(c.graph) and not str(c.graph).startswith("#")),
            "graph_issue": float(bool(c.graph) and str(c.graph).startswith("#")),
            "is_test": float(c.test),
            "cover": ctx.cover.get((c.collection, c.row), 0.0),
        }
        for kind in COVER_KINDS:
            v[f"cover_{kind}"] = v["cover"] * ctx.kinds.get(kind, 0.0)
        for kind in KINDS:
            v[f"exact_{kind}"] = v["exact"] * ctx.kinds.get(kind, 0.0)
            v[f"graph_{kind}"] = float(bool(c.graph)) * ctx.kinds.get(kind, 0.0)
        if ch is not None:
            sparts = {fold(p) for p in parts(sym)}  # folded as the question's terms are
            joined = "".join(parts(sym))
            if joined and joined in ctx.idents:
                v["sym_match"] = 1.0
            elif sparts:
                v["sym_match"] = len(sparts & ctx.terms) / len(sparts)
            v["title_match"] = _overlap(set(_terms_of(ch.title)), ctx.terms)
            v["path_match"] = _overlap(set(_terms_of(path.replace("/", " "))), ctx.terms)
            v["file_share"] = min(per_file[(c.collection, ch.doc_key)] - 1, 4) / 4.0
            v["tokens"] = math.log1p(ch.tokens) / 6.0
            if ctx.idents:
                held = _ident_tokens(ch.text)
                v["ident_in_text"] = len(ctx.idents & held) / len(ctx.idents)
            v["is_def"] = float(ch.kind in _DEF_KINDS)
            v["is_module"] = float(ch.kind in ("module", "window"))
            v["is_example"] = float(bool(_EXAMPLE.search(path)))
            v["is_changelog"] = float(bool(_CHANGELOG.search(path)))
            v["is_readme"] = float(bool(_README.search(path)))
            v["is_pr"] = float(c.collection == "issues" and "\nPR · " in ch.text[:300])
            if c.collection == "code":
                v["is_decl"] = float(ch.kind in ("type", "interface")
                                     or bool(_DECL_PATH.search(path)))  # fmt: skip
                v["comment_share"] = comment_share(ch.text)
            for kind in KINDS:
                for t in ("is_decl", "comment_share"):
                    v[f"{t}_{kind}"] = v.get(t, 0.0) * ctx.kinds.get(kind, 0.0)
        k = c.collection
        v[f"{k}_bias"] = 1.0
        for kind in KINDS:
            v[f"{k}_{kind}"] = ctx.kinds.get(kind, 0.0)
        v[f"{k}_ident"] = float(bool(r.identifiers))
        v[f"{k}_issue_ref"] = float(bool(r.issues))
        v[f"{k}_error"] = float(bool(r.errors or r.frames))
        v[f"{k}_non_en"] = float(not ctx.english)
        v[f"{k}_cos"] = c.cos - best
        v[f"{k}_lex"] = c.lex
        for name, val in v.items():
            x[i, col[name]] = val
    return x


@dataclass(frozen=True)
class Ranker:
    names: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def score(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(((x - self.mean) / self.scale) @ self.weights, dtype=np.float64)

    def slope(self, names: Sequence[str]) -> float:
        """How much the score rises when these features all rise by 1 (their weights over
        their standard deviations)."""
        idx = [self.names.index(n) for n in names]
        return float(sum(self.weights[i] / self.scale[i] for i in idx))

    def contributions(self, row: np.ndarray, top: int = 5) -> dict[str, float]:
        """The features that moved this candidate most (signed, in score units)."""
        c = (row - self.mean) / self.scale * self.weights
        idx = np.argsort(-np.abs(c))[:top]
        return {self.names[i]: round(float(c[i]), 3) for i in idx if abs(c[i]) > 1e-3}

    def to_json(self) -> dict[str, Any]:
        return {
            "features": list(self.names),
            "mean": [round(float(v), 6) for v in self.mean],
            "scale": [round(float(v), 6) for v in self.scale],
            "weights": [round(float(v), 6) for v in self.weights],
            "info": self.info,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], expect: tuple[str, ...] = FEATURES) -> Ranker:
        names = tuple(data["features"])
        if names != expect:  # a model of other features: refuse it, don't misread it
            raise ValueError("the ranker was fitted on other features; refit it")
        return cls(names, np.array(data["mean"], np.float32), np.array(data["scale"], np.float32),
                   np.array(data["weights"], np.float32), dict(data.get("info") or {}))  # fmt: skip


@cache
def load(path: Path = MODEL, expect: tuple[str, ...] = FEATURES) -> Ranker | None:
    """The shipped model (None when there is none: the hybrid score ranks); ``expect``: the
    features it must have been fitted on (:data:`READER_FEATURES` for the reader's)."""
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    try:
        return Ranker.from_json(data, expect)
    except ValueError as e:  # which file, and what it should have been fitted on
        got = data.get("features", [])
        raise ValueError(f"{path}: {e} ({len(got)} features, this code ranks with "
                         f"{len(expect)}; benchmarks/train_ranker.py or, for the reader's, "
                         "train_reader.py ranker)") from e  # fmt: skip


# What :func:`fit` maximises, as ``ranker.json``'s info records it (``train_ranker.py
# --objective``; ``eval_devsets.py --loso`` fits its held-out models the same way).
OBJECTIVES = {
    "chunks": "listwise softmax, log probability of the gold candidates",
    "files": "listwise softmax over files (a file scores its best candidate), log probability "
    "of the gold files",
    "mixed": "listwise softmax over files for the code and bug questions, over candidates for "
    "the how-to and issue questions, log probability of the gold",
}
# The kinds of question whose loss ``mixed`` takes over files: their answers are files of many
# chunks, ranked by their best one; a how-to section or an issue thread is one chunk or nearly.
FILE_KINDS = frozenset({"code", "bug"})


def fit(
    groups: Sequence[tuple[np.ndarray, np.ndarray]],
    l2: float = 0.1,
    steps: int = 3000,
    lr: float = 0.05,
    info: dict[str, Any] | None = None,
    names: tuple[str, ...] = FEATURES,
    files: Sequence[np.ndarray] | None = None,
) -> Ranker:
    """Listwise logistic regression: per group (one question: features, 0/1 gold labels), the
    log of the softmax probability mass on its gold candidates, maximised with an L2 penalty
    (Adam). Groups without a gold candidate teach nothing and are skipped.

    The step decays as a cosine from ``lr`` to 0 over the ``steps``: at a constant step Adam
    ends *near* the optimum, where the float order of the sums (BLAS threads, the order of the
    groups) decides where, and the same data fitted twice gave different weights and ranks.
    Decayed, it settles: the fit is reproducible.

    ``names``: the matrices' columns (:data:`FEATURES`; more while a new feature is on trial,
    ``benchmarks/train_ranker.py --extra``).

    ``files`` (one array per group, each candidate's file as an int): the loss is taken over
    *files*, as the user sees them — a file scores its best candidate's score, and the softmax
    mass is over files, on the gold ones (the gradient reaches each file's best candidate).
    Without it every candidate counts apart (``chunks``). The shipped ranker is fitted
    ``mixed``: files for the code and bug questions (``FILE_KINDS``), each candidate its own
    file for the others."""
    fids = list(files) if files is not None else None
    if fids is not None and len(fids) != len(groups):
        raise ValueError(f"rank.fit: {len(fids)} file arrays for {len(groups)} groups")
    if fids is not None and any(len(f) != len(y) for f, (_, y) in zip(fids, groups, strict=True)):
        raise ValueError("rank.fit: a file array's length differs from its group's candidates")
    keep = [i for i, (_, y) in enumerate(groups) if y.any() and len(y) > 1]
    fids = [fids[i] for i in keep] if fids is not None else None
    groups = [groups[i] for i in keep]
    allx = np.concatenate([x for x, _ in groups])
    if allx.shape[1] != len(names):
        raise ValueError(
            f"rank.fit: the groups have {allx.shape[1]} feature columns, names {len(names)}"
        )
    mean = allx.mean(axis=0)
    scale = allx.std(axis=0)
    scale[scale < 1e-6] = 1.0
    # Every group padded to the longest (a mask marks the real candidates): one step is a few
    # array products over all groups at once instead of a Python loop over them.
    n, width = len(groups), max(len(y) for _, y in groups)
    z = np.zeros((n, width, allx.shape[1]))
    real = np.zeros((n, width), bool)
    gold = np.zeros((n, width), bool)
    for i, (x, y) in enumerate(groups):
        z[i, : len(y)] = (x - mean) / scale
        real[i, : len(y)] = True
        gold[i, : len(y)] = y.astype(bool)
    flat = z.reshape(n * width, -1)
    best_of = None
    if fids is not None:  # one id per (group, file), padding on an id of its own
        fid = np.full((n, width), -1, dtype=np.int64)
        base = 0
        for i, f in enumerate(fids):
            _, local = np.unique(f, return_inverse=True)
            fid[i, : len(f)] = base + local
            base += int(local.max()) + 1
        fid[~real] = base
        # a file is gold when any of its candidates is (so its best one carries the label)
        file_gold = np.zeros(base + 1, bool)
        np.logical_or.at(file_gold, fid[real], gold[real])
        gold = file_gold[fid] & real
        best_of = _FileBest(fid)
    w = np.zeros(allx.shape[1])
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t in range(1, steps + 1):
        s = np.where(real, (flat @ w).reshape(n, width), -np.inf)
        if best_of is not None:
            s = np.where(best_of(s), s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        pg = p * gold
        d = p - pg / pg.sum(axis=1, keepdims=True)
        g = l2 * w + flat.T @ d.ravel() / n
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        step = lr * 0.5 * (1.0 + math.cos(math.pi * t / steps))
        w -= step * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return Ranker(names, mean.astype(np.float32), scale.astype(np.float32),
                  w.astype(np.float32), dict(info or {}))  # fmt: skip


class _FileBest:
    """Mask of each file's best candidate (the first of a tie) in scores (groups × candidates),
    by file ids unique across groups: the files' segments sorted once, a max per segment."""

    def __init__(self, fid: np.ndarray) -> None:
        flat = fid.ravel()
        self.shape = fid.shape
        self.order = np.argsort(flat, kind="stable")  # a file's candidates in their order
        f = flat[self.order]
        new = np.r_[True, f[1:] != f[:-1]]  # where a file's segment starts
        self.starts = np.flatnonzero(new)
        self.segment = np.cumsum(new) - 1
        self.counts = np.diff(np.r_[self.starts, len(f)])

    def __call__(self, s: np.ndarray) -> np.ndarray:
        ss = s.ravel()[self.order]
        best = np.maximum.reduceat(ss, self.starts)
        idx = np.flatnonzero(ss == np.repeat(best, self.counts))
        seg = self.segment[idx]
        first = idx[np.r_[True, seg[1:] != seg[:-1]]]
        out = np.zeros(ss.shape, dtype=bool)
        out[self.order[first]] = True
        return out.reshape(self.shape)


def loss(ranker: Ranker, groups: Sequence[tuple[np.ndarray, np.ndarray]]) -> float:
    """Mean negative log probability of the gold candidates (lower is better)."""
    out = []
    for x, y in groups:
        if not y.any():
            continue
        s = ranker.score(x)
        p = np.exp(s - s.max())
        p /= p.sum()
        out.append(-math.log(max(float((p * y).sum()), 1e-12)))
    return sum(out) / max(len(out), 1)
