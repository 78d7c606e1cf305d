"""Issue 12's goals read off one run of ``eval_devsets.py``: pooled and per set, at the cited level
(the sources ``ask --json`` cites), with every group a baseline beats.

    python benchmarks/goals_devsets.py RUN/results.json [--split report] [--out RUN/goals.md]

The goals (issue 12, measured on the questions of ``questions.yaml`` unless said otherwise): hit
≥ 0.96 (a cited source is gold), hit@1 ≥ 0.75 (the first one is), MRR ≥ 0.85, fact ≥ 0.85 (the
share of a question's ``answer_facts`` found in the answer or its cited sources), Spanish MRR
within 0.03 of English, and for ``localize.yaml`` (bug reports → the files their fix changed) a
changed file cited for ≥ 0.85; the full system ahead of every baseline (grep, BM25, dense, RRF)
on every set, route and language. Pooled numbers weigh every question once (the per-set means of
the tables weigh every set once). Writes markdown (stdout, and ``--out`` when given).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.eval.metrics import Metrics, QuestionResult, Report


def _results(questions: list[dict[str, Any]]) -> list[QuestionResult]:
    """A run's per-question records (``Report.to_json``'s ``questions``) read back."""
    return [QuestionResult(id=q["id"], lang=q["lang"], route=q["route"], rank=q["rank"],
                           collections=q.get("collections", []), ms=q.get("ms", 0.0),
                           kind=q.get("kind"), facts=q.get("facts"), quoted=q.get("quoted"))
            for q in questions]  # fmt: skip


def groups(results: list[QuestionResult]) -> dict[str, Metrics]:
    """overall, per route and per language, as ``eval`` reports them (not per kind)."""
    out = Report(k=0, system="", results=results).groups()
    return {g: m for g, m in out.items() if not g.startswith("kind:")}


# (label, key, test): one row of the goal table; the key names a value per set.
GOALS: list[tuple[str, str, Callable[[float], bool]]] = [
    ("hit ≥ 0.96", "hit", lambda v: v >= 0.96),
    ("hit@1 ≥ 0.75", "hit1", lambda v: v >= 0.75),
    ("MRR ≥ 0.85", "mrr", lambda v: v >= 0.85),
    ("fact ≥ 0.85", "fact", lambda v: v >= 0.85),
    ("Spanish within 0.03 of English (MRR, es − en)", "es", lambda v: v >= -0.03),
    ("bug report → changed file cited ≥ 0.85", "bug", lambda v: v >= 0.85),
]


def cited(
    results: dict[str, Any], name: str, split: str, file: str
) -> dict[str, list[QuestionResult]]:
    """system → its questions at the cited level; {} when the set has no such file."""
    try:
        level = results[name][split][file]["cited"]
    except KeyError:
        return {}
    return {system: _results(run["questions"]) for system, run in level.items()}


def _fmt(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.3f}" if signed else f"{v:.3f}"


def pooled(results: dict[str, Any], split: str, sets: list[str]) -> list[str]:
    """Every set's questions (and bug reports) as one group, full system and baselines."""
    pool: dict[tuple[str, str], list[QuestionResult]] = {}  # (file, system) -> every set's
    for name in sets:
        for file in ("qa", "localize"):
            for system, qs in cited(results, name, split, file).items():
                pool.setdefault((file, system), []).extend(qs)
    rows: dict[str, dict[str, Metrics]] = {}
    for (file, system), qs in pool.items():
        label = "questions" if file == "qa" else "bug reports"
        for g, m in groups(qs).items():
            if file == "localize" and g.startswith("route:"):
                continue
            key = label if g == "overall" else f"{label} · {g.split(':', 1)[1]}"
            rows.setdefault(key, {})[system] = m
    lines = ["| group | n | hit@1 | hit | MRR | fact | best baseline MRR |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for key in sorted(rows, key=lambda k: (k.split(" · ")[0] != "questions", " · " in k, k)):
        full = rows[key].get("full")
        if full is None:
            continue
        base = [(s, m) for s, m in rows[key].items() if s != "full"]
        best = max(base, key=lambda t: t[1].mrr, default=None)
        b = f"{best[0]} {best[1].mrr:.3f}" if best else "-"
        lines.append(f"| {key} | {full.n} | {full.hit1:.3f} | {full.hitk:.3f} | {full.mrr:.3f} | "
                     f"{_fmt(full.fact)} | {b} |")  # fmt: skip
    return lines


def report(results: dict[str, Any], split: str) -> str:
    sets = sorted(s for s in results if split in results[s])
    value: dict[str, dict[str, float]] = {key: {} for _, key, _ in GOALS}
    beaten: list[str] = []
    for name in sets:
        for file in ("qa", "localize"):
            systems = cited(results, name, split, file)
            if not systems.get("full"):
                continue
            mine = groups(systems["full"])
            m = mine["overall"]
            if file == "qa":
                value["hit"][name], value["hit1"][name], value["mrr"][name] = m.hitk, m.hit1, m.mrr
                if m.fact is not None:
                    value["fact"][name] = m.fact
                if "lang:en" in mine and "lang:es" in mine:
                    value["es"][name] = mine["lang:es"].mrr - mine["lang:en"].mrr
            else:
                value["bug"][name] = m.hitk
            for system, qs in systems.items():
                if system == "full":
                    continue
                for g, theirs in groups(qs).items():
                    ours = mine.get(g)
                    if ours and theirs.n and theirs.mrr > ours.mrr + 1e-9:
                        beaten.append(f"- {name} {file} {g} (n {ours.n}): full {ours.mrr:.3f}, "
                                      f"{system} {theirs.mrr:.3f}")  # fmt: skip
    met = ", ".join(
        f"{label.split(' ')[0] if key != 'es' else 'Spanish'} "
        f"{sum(ok(v) for v in value[key].values())}/{len(value[key])}"
        for label, key, ok in GOALS
    )
    lines = [f"# Issue 12's goals, {split} halves, cited level", "",
             "## Pooled (every question once)", "", *pooled(results, split, sets), "",
             "## Per set", "", f"Met on: {met}.", "",
             "| goal | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]  # fmt: skip
    for label, key, ok in GOALS:
        cells = []
        for s in sets:
            v = value[key].get(s)
            cells.append("-" if v is None else _fmt(v, key == "es") + ("" if ok(v) else " ✗"))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", f"## Groups a baseline beats ({len(beaten)})", "", *beaten]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--split", default="report", choices=["tune", "report"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        results = json.loads(args.results.read_text(encoding="utf-8"))
        if not isinstance(results, dict):
            raise ValueError("expected an object of sets")
    except (OSError, ValueError) as e:
        raise SystemExit(f"{args.results}: not an eval_devsets results.json ({e})") from None
    if not any(args.split in run for run in results.values() if isinstance(run, dict)):
        raise SystemExit(f"{args.results}: no set has a {args.split!r} split")
    text = report(results, args.split)
    if args.out:
        args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
