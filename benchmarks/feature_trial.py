"""A feature on trial beside the shipped ranker's: ``train_ranker.py --cv L2 --extra FILE``.

FILE is a Python file that defines

    NAMES = ["my_feature", ...]            # the new columns, after rank.FEATURES
    def feats(question) -> array           # one row per candidate, one column per name

``question`` is a collected ``train_ranker.Question``: its ``text``, ``instance``, ``cands``
(the candidates as the ranker sees them, chunks included) and ``context`` (the kind
probabilities already set, cross-fitted). The shipped features and the shipped features plus
these are fitted leave one set out on the same questions; both are printed, with the ceiling
(fitted and scored on all) and, per group, the paired difference: the mean and standard error
of the per-question change in reciprocal rank. That is the rule a feature passes before the
product computes it (benchmarks/results/devsets/RESULTS.md: pooled +0.005 and two standard
errors, no group down more than 0.010). Nothing is written: a ranker of other features than
``rank.FEATURES`` is refused when it is loaded (``rank.Ranker.from_json``).

Why a file and not a flag per feature: a feature on trial is code that reads the candidates,
and every trial so far needed its own (s37, s38 in results/devsets/variants/).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.retrieve.fusion import doc_of


class ExtraError(ValueError):
    """The feature file is not usable: which file, and what was expected."""


@dataclass(frozen=True)
class Extra:
    path: Path
    names: tuple[str, ...]
    feats: Callable[[Any], Any]

    @classmethod
    def load(cls, path: Path, taken: Sequence[str] = ()) -> Extra:
        """The file's ``NAMES`` and ``feats``; ``taken``: names already in use (the shipped
        features), which a new column may not reuse."""
        if not path.is_file():
            raise ExtraError(f"--extra {path}: no such file")
        spec = importlib.util.spec_from_file_location(f"feature_trial_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ExtraError(f"--extra {path}: not a Python file")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        names = getattr(mod, "NAMES", None)
        if (not isinstance(names, (list, tuple)) or not names
                or not all(isinstance(n, str) and n for n in names)):  # fmt: skip
            raise ExtraError(f"--extra {path}: NAMES must be a non-empty list of column names, "
                             f"got {names!r}")  # fmt: skip
        clash = sorted(set(names) & set(taken)) + sorted(n for n in set(names)
                                                         if list(names).count(n) > 1)  # fmt: skip
        if clash:
            raise ExtraError(f"--extra {path}: NAMES repeats names already in use: {clash}")
        feats = getattr(mod, "feats", None)
        if not callable(feats):
            raise ExtraError(f"--extra {path}: no function feats(question) -> array")
        return cls(path, tuple(names), feats)

    def columns(self, question: Any) -> np.ndarray:
        """The new columns for one question, checked: one finite row per candidate."""
        want = (len(question.cands), len(self.names))
        x = np.asarray(self.feats(question), dtype=np.float32)
        if x.shape != want:
            raise ExtraError(f"--extra {self.path}: feats() gave shape {x.shape} for a question "
                             f"with {want[0]} candidates; expected {want} (one row per "
                             f"candidate, one column per name in NAMES)")  # fmt: skip
        if not np.isfinite(x).all():
            raise ExtraError(f"--extra {self.path}: feats() gave a NaN or infinite value "
                             f"(question {question.text[:60]!r})")  # fmt: skip
        return x


def paired(base: Sequence[float], new: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of ``new - base``, question by question."""
    d = np.asarray(new, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    if len(d) < 2:
        return (float(d.mean()) if len(d) else 0.0), 0.0
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


def trial_lines(
    tags: Sequence[Sequence[str]], base: Sequence[float], new: Sequence[float],
    order: Sequence[str] = (),
) -> list[str]:  # fmt: skip
    """One line for all questions, then one per tag (a question's kind, its language; those in
    ``order`` first, in that order): MRR without and with the feature, the paired difference,
    and how many questions moved."""
    groups: dict[str, list[int]] = {"all": list(range(len(base)))}
    groups.update({t: [] for t in order})
    for i, ts in enumerate(tags):
        for t in ts:
            groups.setdefault(t, []).append(i)
    out = []
    for name, idx in groups.items():
        if not idx:
            continue
        a, b = [base[i] for i in idx], [new[i] for i in idx]
        mean, se = paired(a, b)
        up = sum(y > x for x, y in zip(a, b, strict=True))
        down = sum(y < x for x, y in zip(a, b, strict=True))
        out.append(f"{name:8} n={len(idx):4}  MRR {np.mean(a):.3f} -> {np.mean(b):.3f}  "
                   f"paired {mean:+.4f} ± {se:.4f}  up {up} down {down}")  # fmt: skip
    return out


def file_ids(cands: Sequence[Any]) -> np.ndarray:
    """Each candidate's file as an int, the same int for the same file or thread: the key
    ``ask`` cites each file once by (``fusion.first_of_each``)."""
    seen: dict[tuple[str, str], int] = {}
    return np.array([seen.setdefault((c.collection, doc_of(c)), len(seen)) for c in cands],
                    dtype=np.int64)  # fmt: skip


def file_reciprocal_ranks(
    scores: Sequence[np.ndarray],
    groups: Sequence[tuple[np.ndarray, np.ndarray]],
    files: Sequence[np.ndarray],
    k: int = 6,
) -> list[float]:
    """Reciprocal rank of the first gold *file* among the first ``k`` files of the order, each
    file at its best candidate (what ``ask`` cites: each file once before any file twice)."""
    out = []
    for s, (_, y), f in zip(scores, groups, files, strict=True):
        seen: set[int] = set()
        firsts = []
        for j in np.argsort(-s, kind="stable"):
            if int(f[j]) not in seen:
                seen.add(int(f[j]))
                firsts.append(int(j))
        firsts = firsts[:k]
        rank = next((i + 1 for i, j in enumerate(firsts) if y[j]), None)
        out.append(1.0 / rank if rank else 0.0)
    return out
