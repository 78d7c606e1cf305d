"""Fit the second-stage ranker (core/retrieve/rank.py) on the tuning halves of the dev sets.

    python benchmarks/train_ranker.py [--sets marshmallow urfave-cli yargs] [--split tune]
        [--workdir DIR] [--l2 0.05] [--out core/retrieve/ranker.json] [--check] [--cv L2 ...]

Uses the snapshots and instances ``eval_devsets.py`` made (run it first). For every question of
the split, the candidate stage runs exactly as at question time; each candidate is labelled gold
when its file or issue is in the question's gold.

``--cv L2 …`` fits on all sets but one and scores the held-out one (a repository the model never
saw), for each L2 — the way to choose features and L2 without the reporting halves. ``--check``
prints, per set, the training loss and hit@1 of the candidates' order before (hybrid score) and
after (learned) — on the training questions, so a fit, not evidence: the reporting halves are
for that (eval_devsets.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import json  # noqa: E402

from core.config import Settings  # noqa: E402
from core.eval.metrics import Gold, load_questions  # noqa: E402
from core.retrieve import Options  # noqa: E402
from core.retrieve.rank import FEATURES, fit, loss, matrix  # noqa: E402
from core.retrieve.search import candidates  # noqa: E402
from core.service import RepoExpert  # noqa: E402

Group = tuple[np.ndarray, np.ndarray]


def gold(c: object, g: Gold) -> bool:
    ch = getattr(c, "chunk", None)
    if ch is None:
        return False
    return (ch.issue is not None and ch.issue in g.issues) or (
        ch.path is not None and ch.path in g.paths
    )


async def collect(app: RepoExpert, name: str, split: str) -> tuple[list[Group], list[np.ndarray]]:
    setdir = ROOT / "benchmarks" / "devsets" / name
    qs = [q for f in ("questions.yaml", "localize.yaml") for q in load_questions(setdir / f)
          if split == "all" or q.split == split]  # fmt: skip
    await app.index(name)  # current with this code (the embedding cache makes it cheap)
    reader = await app.reader(name)
    embedder = app.embedder(name)
    kinds = await app.kinds(embedder)
    opt = Options.of(app.instance(name).retrieval)
    groups: list[Group] = []
    hybrid: list[np.ndarray] = []
    for q in qs:
        pool = await candidates(reader, embedder, q.question, opt, kinds)
        cands = pool.all()
        assert pool.context is not None
        x = matrix(cands, pool.context)
        y = np.array([gold(c, q.gold) for c in cands], dtype=np.float32)
        groups.append((x, y))
        hybrid.append(np.array([c.score for c in cands]))
    return groups, hybrid


def hit1(scores: list[np.ndarray], groups: list[Group]) -> float:
    ok = [bool(y[int(np.argmax(s))]) for s, (_, y) in zip(scores, groups, strict=True) if len(y)]
    return sum(ok) / max(len(ok), 1)


def mrr(scores: list[np.ndarray], groups: list[Group], k: int = 6) -> float:
    out = []
    for s, (_, y) in zip(scores, groups, strict=True):
        order = np.argsort(-s)[:k]
        rank = next((i + 1 for i, j in enumerate(order) if y[j]), None)
        out.append(1.0 / rank if rank else 0.0)
    return sum(out) / max(len(out), 1)


def cross_validate(per_set: dict[str, list[Group]], l2: float) -> dict[str, tuple[float, float]]:
    """Leave one set out: fit on the others' groups, score the held-out set's (a repository the
    model never saw, as a new user's would be). Set -> (hit@1, MRR@6) of the candidate order."""
    out = {}
    for held in per_set:
        train = [g for name, gs in per_set.items() if name != held for g in gs]
        model = fit(train, l2=l2)
        scores = [model.score(x) for x, _ in per_set[held]]
        out[held] = (hit1(scores, per_set[held]), mrr(scores, per_set[held]))
    return out


async def run(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    app = RepoExpert(Settings(work / "instances", work / "data"))
    per_set: dict[str, tuple[list[Group], list[np.ndarray]]] = {}
    try:
        for name in args.sets:
            t = time.perf_counter()
            per_set[name] = await collect(app, name, args.split)
            n = len(per_set[name][0])
            print(f"{name}: {n} questions in {time.perf_counter() - t:.1f}s", flush=True)
    finally:
        await app.close()
    groups = [g for gs, _ in per_set.values() for g in gs]
    usable = sum(1 for _, y in groups if y.any())
    info = {
        "fitted_on": {"sets": args.sets, "split": args.split, "questions": len(groups),
                      "with_gold_candidates": usable},
        "l2": args.l2, "objective": "listwise softmax, log probability of the gold candidates",
        "features": len(FEATURES), "written": time.strftime("%Y-%m-%d"),
    }  # fmt: skip
    if args.cv:
        for l2 in args.cv:
            cv = cross_validate({n: gs for n, (gs, _) in per_set.items()}, l2)
            mean = np.mean([v for v in cv.values()], axis=0)
            print(f"leave-one-set-out l2={l2}: " + ", ".join(
                f"{n} hit@1 {h:.3f} MRR {m:.3f}" for n, (h, m) in cv.items()
            ) + f" | mean hit@1 {mean[0]:.3f} MRR {mean[1]:.3f}")  # fmt: skip
        for name, (gs, hy) in per_set.items():
            print(f"{name}: hybrid score order hit@1 {hit1(hy, gs):.3f} MRR {mrr(hy, gs):.3f}")
        return 0
    model = fit(groups, l2=args.l2, info=info)
    if args.check:
        for name, (gs, hy) in per_set.items():
            learned = [model.score(x) for x, _ in gs]
            print(
                f"{name}: loss {loss(model, gs):.3f}  hit@1 of the candidate order: hybrid "
                f"{hit1(hy, gs):.3f} -> learned {hit1(learned, gs):.3f} (training questions)"
            )
    text = json.dumps(model.to_json(), indent=1) + "\n"
    await asyncio.to_thread(Path(args.out).write_text, text)
    top = np.argsort(-np.abs(model.weights))[:12]
    print("largest weights:", ", ".join(f"{model.names[i]} {model.weights[i]:+.2f}" for i in top))
    print(f"written: {args.out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=["marshmallow", "urfave-cli", "yargs"])
    ap.add_argument("--split", default="tune", choices=["tune", "report", "all"])
    ap.add_argument("--workdir", default=str(ROOT / ".repo-expert" / "devsets"))
    ap.add_argument("--l2", type=float, default=0.05)
    ap.add_argument("--out", default=str(ROOT / "core" / "retrieve" / "ranker.json"))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--cv", type=float, nargs="*", help="leave-one-set-out CV at these l2 values "
                    "(writes nothing)")  # fmt: skip
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
