"""The ranker's training pools: every dev-set question of a split with its candidates, as the
candidate stage finds them at question time, each candidate labelled gold or not
(``train_ranker.py`` fits on them; the screens in ``benchmarks/results/devsets/variants/`` read
them too). Split out of ``train_ranker.py``: what a pool is, apart from how it is fitted."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eval_devsets import DEVSETS  # noqa: E402
from feature_trial import file_ids  # noqa: E402

from core.config import RetrievalConfig  # noqa: E402
from core.eval.metrics import EvalQuestion, Gold, load_questions  # noqa: E402
from core.retrieve import Candidate, Options  # noqa: E402
from core.retrieve.kinds import KINDS, fit_classifier, kind_vector  # noqa: E402
from core.retrieve.rank import FILE_KINDS, Context, matrix  # noqa: E402
from core.retrieve.search import candidates  # noqa: E402
from core.service import RepoExpert  # noqa: E402

Group = tuple[np.ndarray, np.ndarray]


def fids(
    per_set: dict[str, list[Question]], args: argparse.Namespace
) -> dict[str, list[np.ndarray]] | None:
    """Each set's questions' file ids for the fit's loss: every question's (``--objective
    files``), only the code and bug questions' (``mixed``: a how-to or issue question's
    candidates are each their own file, which makes its loss the chunk loss), none (``chunks``)."""
    if args.objective == "chunks":
        return None
    real = real_fids(per_set)
    return {n: [f if args.objective == "files" or KINDS[q.kind] in FILE_KINDS
                else np.arange(len(f)) for q, f in zip(qs, real[n], strict=True)]
            for n, qs in per_set.items()}  # fmt: skip


def real_fids(per_set: dict[str, list[Question]]) -> dict[str, list[np.ndarray]]:
    """Each set's questions' file ids as ``ask`` cites them (the files' order is scored on
    these, whatever the fit's loss was taken over)."""
    return {n: [q.files if q.files is not None else np.arange(len(q.cands)) for q in qs]
            for n, qs in per_set.items()}  # fmt: skip


def gold(c: object, g: Gold) -> bool:
    ch = getattr(c, "chunk", None)
    if ch is None:
        return False
    return (ch.issue is not None and ch.issue in g.issues) or (
        ch.path is not None and ch.path in g.paths
    )


@dataclass
class Question:
    vector: np.ndarray  # what the kind classifier reads (kinds.kind_vector)
    kind: int  # its kind's index in KINDS (from its route; bug for a localize pair)
    cands: list[Candidate]
    context: Context
    labels: np.ndarray
    hybrid: np.ndarray
    text: str = ""  # the question as asked (for a feature on trial: --extra)
    instance: str = ""  # the instance it was asked of
    files: np.ndarray | None = None  # each candidate's file as an int (file_ids)


def kind_of(q: EvalQuestion) -> int:
    if q.kind == "bug":
        return KINDS.index("bug")
    return KINDS.index({"docs": "howto", "code": "code", "issues": "issues"}[q.route])


# Settings a held-out run writes into a set's instance (eval_devsets.py --loso) that the pools
# do not depend on: the pools are retrieved with the bundled kinds and ranked by nobody yet.
_POOL_NEUTRAL = frozenset({"ranker_file", "kinds_file", "reader"})


def checked_retrieval(app: RepoExpert, inst: str) -> RetrievalConfig:
    """The instance's retrieval settings, refused when an ablation left it other than shipped
    (``eval_devsets.py --set glossary=false`` rewrites the instances of the workdir it ran in):
    a ranker fitted on those pools would be fitted on another system."""
    cfg = app.instance(inst).retrieval
    shipped = RetrievalConfig()
    fields = [k for k in type(cfg).model_fields if k not in _POOL_NEUTRAL]
    changed = sorted(k for k in fields if getattr(cfg, k) != getattr(shipped, k))
    if changed:
        raise SystemExit(
            f"{inst}: retrieval settings {', '.join(changed)} differ from the shipped ones "
            "(left by an ablation run?); run eval_devsets.py on this workdir without --set first"
        )
    return cfg


async def collect(
    app: RepoExpert, name: str, split: str, as_configured: bool = False, translate: bool = False
) -> list[Question]:
    """Every question of the split with its candidates. The localization pairs are asked of
    ``{set}-loc``, the tracker without the pull requests that fixed them (eval_devsets.py).
    ``as_configured``: take the instances' retrieval settings whatever they are (an ablation's
    held-out fits), not only the shipped ones. ``translate``: with machine translation of
    non-English questions (``retrieve/translate.py``); without it by default, as the shipped
    ranker was fitted: a refit on translated pools scored lower on the seven sets it never saw
    (benchmarks/results/devsets/variants/prompts-2026-12-04/PLAN-s33.md)."""
    setdir = DEVSETS / name
    out = []
    for file, inst in (("questions.yaml", name), ("localize.yaml", f"{name}-loc")):
        qs = [q for q in load_questions(setdir / file) if split == "all" or q.split == split]
        await app.index(inst)  # current with this code (the embedding cache makes it cheap)
        reader = await app.reader(inst)
        embedder = app.embedder(inst)
        kinds = await app.kinds(embedder)
        cfg = app.instance(inst).retrieval if as_configured else checked_retrieval(app, inst)
        opt = Options.of(cfg)
        for q in qs:
            pool = await candidates(reader, embedder, q.question, opt, kinds,
                                    translator=app.translator if translate else None)  # fmt: skip
            assert pool.context is not None
            cands = pool.all()
            out.append(Question(
                await kind_vector(embedder, q.question), kind_of(q), cands, pool.context,
                np.array([gold(c, q.gold) for c in cands], dtype=np.float32),
                np.array([c.score for c in cands]), q.question, inst, file_ids(cands),
            ))  # fmt: skip
    return out


def kinds_fitted(
    examples: tuple[np.ndarray, np.ndarray], per_set: dict[str, list[Question]], l2: float
) -> tuple[np.ndarray, np.ndarray]:
    ex, ey = examples
    x = np.concatenate([ex, *(np.stack([q.vector for q in qs]) for qs in per_set.values())])
    y = np.concatenate([ey, *(np.array([q.kind for q in qs]) for qs in per_set.values())])
    return fit_classifier(x, y, l2)


def groups_with_kinds(
    examples: tuple[np.ndarray, np.ndarray], per_set: dict[str, list[Question]], l2: float
) -> dict[str, list[Group]]:
    """Every set's feature groups with kind probabilities from a classifier that never saw that
    set's questions (cross-fitted): the ranker learns to trust them as much as they deserve on
    questions they were not fitted on."""
    out = {}
    for name, qs in per_set.items():
        w, b = kinds_fitted(examples, {n: v for n, v in per_set.items() if n != name}, l2)
        groups = []
        for q in qs:
            z = q.vector @ w + b
            p = np.exp(z - z.max())
            p /= p.sum()
            q.context.kinds = {k: float(v) for k, v in zip(KINDS, p, strict=True)}
            groups.append((matrix(q.cands, q.context), q.labels))
        out[name] = groups
    return out
