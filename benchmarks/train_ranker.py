"""Fit the second-stage ranker (core/retrieve/rank.py) on the tuning halves of the dev sets.

    python benchmarks/train_ranker.py [--sets NAME ...] [--split tune]   # default: every dev set
        [--workdir DIR] [--l2 0.1] [--out core/retrieve/ranker.json] [--check] [--cv L2 ...]
        [--extra FILE.py] [--objective chunks|files|mixed]   # default: the shipped ranker's

Uses the snapshots and instances ``eval_devsets.py`` made (run it first). For every question of
the split, the candidate stage runs exactly as at question time; each candidate is labelled gold
when its file or issue is in the question's gold (the pools: ``ranker_pools.py``).

``--cv L2 …`` fits on all sets but one and scores the held-out one (a repository the model never
saw), for each L2 — the way to choose features and L2 without the reporting halves — and
prints beside it the in-sample ceiling (fitted and scored on all the sets' questions), the
screen for a new feature: one that does not raise it cannot help held out. ``--extra FILE.py``
(with ``--cv``) puts a new feature on trial beside the shipped ones (feature_trial.py). ``--check``
prints, per set, the training loss and hit@1 of the candidates' order before (hybrid score) and
after (learned) — on the training questions, so a fit, not evidence: the reporting halves are
for that (eval_devsets.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import json  # noqa: E402

from eval_devsets import SETS, shipped_objective  # noqa: E402  (the dev sets, one list)
from feature_trial import Extra, ExtraError, file_reciprocal_ranks, trial_lines  # noqa: E402
from ranker_pools import (  # noqa: E402  (re-exported: train_ranker.Question, .fids, …)
    Group,
    Question,
    checked_retrieval,
    collect,
    fids,
    gold,
    groups_with_kinds,
    kind_of,
    kinds_fitted,
    real_fids,
)

from core.config import Settings  # noqa: E402
from core.retrieve.kinds import KINDS, classifier_json, kind_vectors  # noqa: E402
from core.retrieve.kinds import examples as kind_examples  # noqa: E402
from core.retrieve.rank import (  # noqa: E402
    FEATURES,
    OBJECTIVES,
    fit,
    loss,
)
from core.service import RepoExpert  # noqa: E402

__all__ = [
    "Group",
    "Question",
    "checked_retrieval",
    "collect",
    "fids",
    "gold",
    "groups_with_kinds",
    "kind_of",
    "kinds_fitted",
    "real_fids",
]


def hit1(scores: list[np.ndarray], groups: list[Group]) -> float:
    ok = [bool(y[int(np.argmax(s))]) for s, (_, y) in zip(scores, groups, strict=True) if len(y)]
    return sum(ok) / max(len(ok), 1)


def reciprocal_ranks(scores: list[np.ndarray], groups: list[Group], k: int = 6) -> list[float]:
    out = []
    for s, (_, y) in zip(scores, groups, strict=True):
        order = np.argsort(-s)[:k]
        rank = next((i + 1 for i, j in enumerate(order) if y[j]), None)
        out.append(1.0 / rank if rank else 0.0)
    return out


def mrr(scores: list[np.ndarray], groups: list[Group], k: int = 6) -> float:
    out = reciprocal_ranks(scores, groups, k)
    return sum(out) / max(len(out), 1)


def hitk(scores: list[np.ndarray], groups: list[Group], k: int = 6) -> float:
    ok = [bool(y[np.argsort(-s)[:k]].any()) for s, (_, y) in zip(scores, groups, strict=True)]
    return sum(ok) / max(len(ok), 1)


def held_out(
    per_set: dict[str, list[Group]], l2: float, names: tuple[str, ...] = FEATURES,
    files: dict[str, list[np.ndarray]] | None = None,
) -> dict[str, list[np.ndarray]]:  # fmt: skip
    """Leave one set out: per set, its groups' scores by the model fitted on the other sets'
    groups (a repository the model never saw, as a new user's would be). ``files``: the loss
    over these files (``rank.fit``'s ``files``; ``fids``)."""
    out = {}
    for held in per_set:
        others = [g for name, gs in per_set.items() if name != held for g in gs]
        fo = [f for n, fs in files.items() if n != held for f in fs] if files else None
        model = fit(others, l2=l2, names=names, files=fo)
        out[held] = [model.score(x) for x, _ in per_set[held]]
    return out


def all_files(files: dict[str, list[np.ndarray]] | None) -> list[np.ndarray] | None:
    return [f for fs in files.values() for f in fs] if files else None


def ceiling(
    per_set: dict[str, list[Group]], l2: float, held: dict[str, list[np.ndarray]] | None = None,
    names: tuple[str, ...] = FEATURES, files: dict[str, list[np.ndarray]] | None = None,
) -> tuple[float, float]:  # fmt: skip
    """MRR@6 of the candidate order, pooled over every set's groups: (fitted on all of them and
    scored on the same groups, leave one set out; ``held``: :func:`held_out`'s scores, when
    already fitted). The first is a ceiling, not evidence: what the features can separate at
    best. A feature that does not raise it cannot pass a held-out rule, so it screens a new
    feature in one fit (RESULTS.md, 2026-12-05)."""
    groups = [g for gs in per_set.values() for g in gs]
    model = fit(groups, l2=l2, names=names, files=all_files(files))
    inside = mrr([model.score(x) for x, _ in groups], groups)
    held = held_out(per_set, l2, names, files) if held is None else held
    return inside, mrr([s for name in per_set for s in held[name]], groups)


def cross_validate(
    per_set: dict[str, list[Group]], held: dict[str, list[np.ndarray]]
) -> dict[str, tuple[float, float, float]]:
    """Set -> (hit@1, MRR@6, hit@6) of the candidate order held out (:func:`held_out`)."""
    return {n: (hit1(held[n], gs), mrr(held[n], gs), hitk(held[n], gs))
            for n, gs in per_set.items()}  # fmt: skip


async def run(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    app = RepoExpert(Settings(work / "instances", work / "data"))
    per_set: dict[str, list[Question]] = {}
    try:
        for name in args.sets:
            t = time.perf_counter()
            per_set[name] = await collect(app, name, args.split, args.as_configured,
                                          args.translate)  # fmt: skip
            n = len(per_set[name])
            print(f"{name}: {n} questions in {time.perf_counter() - t:.1f}s", flush=True)
        svc = app.embedder(args.sets[0])
        ex = kind_examples()
        examples = (
            np.concatenate([await kind_vectors(svc, ex[k]) for k in KINDS]),
            np.concatenate([np.full(len(ex[k]), i) for i, k in enumerate(KINDS)]),
        )
        embedder_name = (await svc.info())[0]
    finally:
        await app.close()
    if args.held_out:
        await write_held_out(Path(args.held_out), examples, per_set, embedder_name, args)
        return 0
    grouped = groups_with_kinds(examples, per_set, args.kinds_l2)
    groups = [g for gs in grouped.values() for g in gs]
    info = ranker_info(list(per_set), groups, args)
    extra: Extra | None = args.extra
    if args.cv:
        # a feature on trial: its columns after the shipped ones (the questions' contexts hold
        # their cross-fitted kinds now)
        xgrouped = {n: [(np.concatenate([x, extra.columns(q)], axis=1), y)
                        for (x, y), q in zip(gs, per_set[n], strict=True)]
                    for n, gs in grouped.items()} if extra else {}  # fmt: skip
        for l2 in args.cv:
            held = held_out(grouped, l2)  # one fit per set, read by every line below
            cv = cross_validate(grouped, held)
            mean = np.mean([v for v in cv.values()], axis=0)
            print(f"leave-one-set-out l2={l2}: " + ", ".join(
                f"{n} hit@1 {h:.3f} MRR {m:.3f} hit@6 {k:.3f}" for n, (h, m, k) in cv.items()
            ) + f" | mean hit@1 {mean[0]:.3f} MRR {mean[1]:.3f} hit@6 {mean[2]:.3f}")  # fmt: skip
            inside, out = ceiling(grouped, l2, held)
            print(
                f"  ceiling: MRR@6 fitted on all and scored on them {inside:.3f}, "
                f"leave one set out {out:.3f}"
            )
            if extra is not None:
                trial(extra, per_set, grouped, held, xgrouped, l2)
            if args.objective != "chunks":
                objective_trial(per_set, grouped, held, l2, fids(per_set, args) or {},
                                real_fids(per_set), args.objective)  # fmt: skip
            for label, bug in (("localize", True), ("questions", False)):
                cells = []
                for n, gs in grouped.items():
                    keep = [i for i, q in enumerate(per_set[n]) if (KINDS[q.kind] == "bug") == bug]
                    g, sc = [gs[i] for i in keep], [held[n][i] for i in keep]
                    cells.append(f"{n} hit@1 {hit1(sc, g):.3f} MRR {mrr(sc, g):.3f} "
                                 f"hit@6 {hitk(sc, g):.3f}")  # fmt: skip
                print(f"  {label}: " + ", ".join(cells))
        for name, qs in per_set.items():
            hy = [q.hybrid for q in qs]
            gs = grouped[name]
            print(f"{name}: hybrid score order hit@1 {hit1(hy, gs):.3f} MRR {mrr(hy, gs):.3f}")
        return 0
    model = fit(groups, l2=args.l2, info=info, files=all_files(fids(per_set, args)))
    if args.check:
        for name, gs in grouped.items():
            hy = [q.hybrid for q in per_set[name]]
            learned = [model.score(x) for x, _ in gs]
            print(
                f"{name}: loss {loss(model, gs):.3f}  hit@1 of the candidate order: hybrid "
                f"{hit1(hy, gs):.3f} -> learned {hit1(learned, gs):.3f} (training questions)"
            )
    texts = {
        Path(args.out): json.dumps(model.to_json(), indent=1) + "\n",
        Path(args.kinds_out): kinds_text(examples, per_set, embedder_name, args),
    }
    for path, text in texts.items():
        await asyncio.to_thread(path.write_text, text)
    top = np.argsort(-np.abs(model.weights))[:12]
    print("largest weights:", ", ".join(f"{model.names[i]} {model.weights[i]:+.2f}" for i in top))
    print("written: " + ", ".join(str(p) for p in texts))
    return 0


def trial(
    extra: Extra, per_set: dict[str, list[Question]], grouped: dict[str, list[Group]],
    held: dict[str, list[np.ndarray]], xgrouped: dict[str, list[Group]], l2: float,
) -> None:  # fmt: skip
    """The shipped features against the shipped ones plus ``extra``'s, both held out (the
    same questions, candidate-level MRR@6): feature_trial.py."""
    names = FEATURES + extra.names
    xheld = held_out(xgrouped, l2, names)
    inside, out = ceiling(xgrouped, l2, xheld, names)
    print(f"  with {extra.path.name} ({', '.join(extra.names)}): ceiling {inside:.3f}, "
          f"leave one set out {out:.3f}")  # fmt: skip
    tags: list[tuple[str, str]] = []
    base: list[float] = []
    new: list[float] = []
    for n, qs in per_set.items():
        base += reciprocal_ranks(held[n], grouped[n])
        new += reciprocal_ranks(xheld[n], xgrouped[n])
        tags += [(KINDS[q.kind], "en" if q.context.english else "non-en") for q in qs]
    for line in trial_lines(tags, base, new, (*KINDS, "en", "non-en")):
        print("    " + line)


def objective_trial(
    per_set: dict[str, list[Question]], grouped: dict[str, list[Group]],
    held: dict[str, list[np.ndarray]], l2: float, files: dict[str, list[np.ndarray]],
    real: dict[str, list[np.ndarray]], objective: str,
) -> None:  # fmt: skip
    """The chunk objective (``held``) against ``objective`` (fitted with the loss
    over ``files``), both held out on the same questions: the candidates' order and the files'
    order (``real``: what ``ask`` cites), MRR@6."""
    fheld = held_out(grouped, l2, files=files)
    inside, out = ceiling(grouped, l2, fheld, files=files)
    print(f"  objective {objective}: ceiling {inside:.3f}, leave one set out {out:.3f} "
          "(candidates)")  # fmt: skip
    tags = [(KINDS[q.kind], "en" if q.context.english else "non-en")
            for qs in per_set.values() for q in qs]  # fmt: skip
    orders: dict[str, Callable[[list[np.ndarray], str], list[float]]] = {
        "candidates": lambda s, n: reciprocal_ranks(s, grouped[n]),
        "files": lambda s, n: file_reciprocal_ranks(s, grouped[n], real[n]),
    }
    for label, rr in orders.items():
        base = [r for n in per_set for r in rr(held[n], n)]
        new = [r for n in per_set for r in rr(fheld[n], n)]
        print(f"  chunks -> {objective} objective, order of the {label}:")
        for line in trial_lines(tags, base, new, (*KINDS, "en", "non-en")):
            print("    " + line)


def ranker_info(
    sets: list[str], groups: list[Group], args: argparse.Namespace
) -> dict[str, object]:
    """What a fitted ranker records about its fit (``ranker.json``'s ``info``)."""
    usable = sum(1 for _, y in groups if y.any())
    return {
        "fitted_on": {"sets": sets, "split": args.split, "questions": len(groups),
                      "with_gold_candidates": usable},
        "l2": args.l2, "objective": OBJECTIVES[args.objective],
        "optimiser": "rank.fit: Adam, its step decayed as a cosine to 0",
        "features": len(FEATURES), "written": time.strftime("%Y-%m-%d"),
    }  # fmt: skip


def kinds_text(
    examples: tuple[np.ndarray, np.ndarray], per_set: dict[str, list[Question]], embedder: str,
    args: argparse.Namespace,
) -> str:  # fmt: skip
    w, b = kinds_fitted(examples, per_set, args.kinds_l2)
    kinds_info = {"fitted_on": {"examples": len(examples[1]), "sets": list(per_set),
                                "split": args.split}, "embedder": embedder,
                  "l2": args.kinds_l2, "written": time.strftime("%Y-%m-%d")}  # fmt: skip
    return json.dumps(classifier_json(w, b, kinds_info)) + "\n"


async def write_held_out(
    out: Path, examples: tuple[np.ndarray, np.ndarray], per_set: dict[str, list[Question]],
    embedder: str, args: argparse.Namespace,
) -> None:  # fmt: skip
    """For every set, the ranker and kind classifier fitted exactly as a full fit would be, on
    the other sets only: ``{out}/ranker-without-{set}.json``, ``kinds-without-{set}.json``. The
    candidates are collected once for all of them (a fit per held-out set would collect them
    again each time)."""
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    for held in per_set:
        others = {n: qs for n, qs in per_set.items() if n != held}
        grouped = groups_with_kinds(examples, others, args.kinds_l2)
        groups = [g for gs in grouped.values() for g in gs]
        model = fit(groups, l2=args.l2, info=ranker_info(list(others), groups, args),
                    files=all_files(fids(others, args)))  # fmt: skip
        texts = {
            out / f"ranker-without-{held}.json": json.dumps(model.to_json(), indent=1) + "\n",
            out / f"kinds-without-{held}.json": kinds_text(examples, others, embedder, args),
        }
        for path, text in texts.items():
            await asyncio.to_thread(path.write_text, text)
        print(f"without {held}: {len(groups)} training questions", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--sets", nargs="+", default=SETS, choices=SETS
    )  # a held-out set (source.yaml `held_out:`) is never fitted on
    ap.add_argument("--split", default="tune", choices=["tune", "report", "all"])
    ap.add_argument("--workdir", default=str(ROOT / ".repo-expert" / "devsets"))
    ap.add_argument("--l2", type=float, default=0.1)
    ap.add_argument(
        "--as-configured",
        action="store_true",
        help="fit on the instances' retrieval settings as they are (ablations' "
        "held-out fits); by default settings other than the shipped ones are refused",
    )
    ap.add_argument(
        "--translate",
        action="store_true",
        help="collect the candidates with "
        "machine translation of non-English questions (the shipped ranker: without)",
    )
    ap.add_argument("--out", default=str(ROOT / "core" / "retrieve" / "ranker.json"))
    ap.add_argument("--kinds-out", default=str(ROOT / "core" / "retrieve" / "kinds.json"))
    ap.add_argument("--kinds-l2", type=float, default=1e-4)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--objective", choices=sorted(OBJECTIVES), default=shipped_objective(),
                    help="what the fit maximises: the gold candidates' softmax mass (chunks), or "
                    "the gold files' with a file scored by its best candidate (files), files "
                    "for the code and bug questions and chunks for the others (mixed); default: "
                    "the shipped ranker's; with --cv, one other than chunks is compared with "
                    "chunks")  # fmt: skip
    ap.add_argument("--held-out", metavar="DIR", help="write, for every set, the models fitted "
                    "on the other sets (ranker-without-SET.json, kinds-without-SET.json) instead "
                    "of one model on all")  # fmt: skip
    ap.add_argument("--cv", type=float, nargs="*", help="leave-one-set-out CV at these l2 values "
                    "(writes nothing)")  # fmt: skip
    ap.add_argument("--extra", metavar="FILE.py", help="with --cv: a feature on trial, fitted "
                    "beside the shipped ones, compared with them (feature_trial.py)")  # fmt: skip
    args = ap.parse_args()
    if args.extra is not None:
        if args.cv is None:
            ap.error("--extra is a trial: give --cv L2 as well (a ranker of other features than "
                     "rank.FEATURES is never written)")  # fmt: skip
        try:
            args.extra = Extra.load(Path(args.extra), FEATURES)
        except ExtraError as e:
            ap.error(str(e))
    try:
        return asyncio.run(run(args))
    except ExtraError as e:  # a feature file that loaded but gives the wrong columns
        print(f"train_ranker.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
