"""Two runs of ``eval_devsets.py`` compared question by question, with the noise beside the gain.

    python benchmarks/compare_devsets.py BEFORE/results.json AFTER/results.json
        [--split report] [--level cited] [--system full] [--per-set] [--metric mrr]

A change moves a few dozen of several hundred questions, each by a rank or two, so a difference
of means alone cannot tell a gain from noise: on 2026-12-04 a change passed the tuning halves at
+0.0085 Spanish MRR — one standard error — and lost 0.016 on the reporting halves
(``results/devsets/variants/prompts-2026-12-04/PLAN-s36.md``). This prints, per group (the
questions overall, per language and per route; the bug reports overall and per language; with
``--per-set``, each set's questions), the questions both runs scored, MRR before and after
(reciprocal rank of the first gold source, 0 when none is among the ``k``), the difference, its
*paired* standard error (the standard deviation of the per-question differences over √n), how
many questions went up and down, and ``clear`` where the difference is at least two standard
errors. Questions are paired by set, file and id; one that only one run scored is left out (and
counted in the last line). ``--metric`` compares another per-question measure instead of MRR:
``hit@1``, ``hit`` (a gold source among the ``k``), or — cited level — ``fact`` and ``quoted``
(the share of the question's answer facts shown, in the sources or in the answer's own text;
a question without answer facts is left out of those).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GROUPS = {"qa": "questions", "localize": "bug reports"}
METRICS = {
    "mrr": lambda q: 1.0 / q["rank"] if q["rank"] else 0.0,
    "hit@1": lambda q: 1.0 if q["rank"] == 1 else 0.0,
    "hit": lambda q: 1.0 if q["rank"] else 0.0,
    "fact": lambda q: q.get("facts"),
    "quoted": lambda q: q.get("quoted"),
}


@dataclass(frozen=True)
class Row:
    group: str
    n: int
    before: float
    after: float
    se: float
    up: int
    down: int

    @property
    def delta(self) -> float:
        return self.after - self.before

    @property
    def clear(self) -> bool:
        return self.n > 1 and abs(self.delta) >= 2 * self.se and self.delta != 0


def ranks(
    results: dict[str, Any], split: str, level: str, system: str, metric: str = "mrr"
) -> dict[tuple[str, str, str], tuple[dict[str, Any], float]]:
    """(set, file, id) → (the question's record, its reciprocal rank — or ``metric``'s value;
    a question without one is left out)."""
    value = METRICS[metric]
    out = {}
    for name, run in results.items():
        for group, levels in run.get(split, {}).items():
            try:
                questions = levels[level][system]["questions"]
            except KeyError:
                missing = f"no {level}/{system} results for {split}/{group}"
                raise SystemExit(f"{name}: {missing}") from None
            for q in questions:
                v = value(q)
                if v is not None:
                    out[(name, group, q["id"])] = (q, float(v))
    return out


def row(label: str, pairs: list[tuple[float, float]]) -> Row:
    """One group's row; ``pairs``: (before, after) reciprocal ranks, never empty."""
    diffs = [b - a for a, b in pairs]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return Row(label, len(pairs), statistics.fmean(a for a, _ in pairs),
               statistics.fmean(b for _, b in pairs), se,
               sum(d > 0 for d in diffs), sum(d < 0 for d in diffs))  # fmt: skip


def compare(
    before: dict[str, Any], after: dict[str, Any], split: str = "report", level: str = "cited",
    system: str = "full", per_set: bool = False, metric: str = "mrr",
) -> tuple[list[Row], int]:  # fmt: skip
    """The rows, and how many questions only one run scored."""
    a = ranks(before, split, level, system, metric)
    b = ranks(after, split, level, system, metric)
    both = sorted(a.keys() & b.keys())
    groups: dict[str, list[tuple[float, float]]] = {}
    for key in both:
        name, group, _ = key
        q = a[key][0]
        pair = (a[key][1], b[key][1])
        label = GROUPS.get(group, group)
        keys = [label, f"{label} · {q.get('lang')}"]
        if group == "qa":
            keys.append(f"{label} · {q.get('route')}")
            if per_set:
                keys.append(f"{label} · {name}")
        for k in keys:
            groups.setdefault(k, []).append(pair)
    order = sorted(groups, key=lambda k: (k.split(" · ")[0], " · " in k, k))
    return [row(k, groups[k]) for k in order], len(a.keys() ^ b.keys())


def table(rows: list[Row], unpaired: int, metric: str = "mrr") -> str:
    name = "MRR" if metric == "mrr" else metric
    lines = [f"| group | n | {name} before | {name} after | Δ | paired SE | up | down | clear |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r.group} | {r.n} | {r.before:.3f} | {r.after:.3f} | {r.delta:+.4f} | "
                     f"{r.se:.4f} | {r.up} | {r.down} | {'yes' if r.clear else ''} |")  # fmt: skip
    lines.append(f"\nQuestions only one run scored (left out): {unpaired}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--split", default="report", choices=["tune", "report", "all"])
    ap.add_argument("--level", default="cited", choices=["cited", "retrieval"])
    ap.add_argument("--system", default="full")
    ap.add_argument("--per-set", action="store_true")
    ap.add_argument("--metric", default="mrr", choices=list(METRICS))
    args = ap.parse_args(argv)
    if args.metric in ("fact", "quoted") and args.level != "cited":
        ap.error(f"--metric {args.metric} is scored at the cited level only (--level cited)")
    runs = []
    for p in (args.before, args.after):
        try:
            runs.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError) as e:
            raise SystemExit(f"{p}: not an eval_devsets results.json ({e})") from None
    rows, unpaired = compare(runs[0], runs[1], args.split, args.level, args.system, args.per_set,
                             args.metric)  # fmt: skip
    print(table(rows, unpaired, args.metric))
    return 0


if __name__ == "__main__":
    sys.exit(main())
