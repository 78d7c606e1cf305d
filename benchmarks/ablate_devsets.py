"""What each retrieval capability changes on the external dev sets: the full system against the
same system with one capability off, at the cited level (what ``ask --json`` cites).

    python benchmarks/ablate_devsets.py [--workdir DIR] [--out DIR] [--only NAME ...] [--sets ...]
        [--collate]   # only rebuild the table from runs already made

Runs ``eval_devsets.py`` once per variant and split: the tuning halves scored by models fitted on
the other sets (``--loso``, so a tuning half is never scored by a model that saw it), the
reporting halves by the shipped models. Writes ``{out}/{variant}/`` (each run's results) and
``{out}/ablations.md`` (hit@1 / hit / MRR / fact per set, split and question file, with the
change against the full system).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_devsets import compare  # noqa: E402

# A kind classifier file the loader refuses (no kinds), so the kinds come from the example
# questions' centroids alone.
NO_CLASSIFIER = '{"kinds": [], "weights": [], "bias": []}\n'

VARIANTS: dict[str, tuple[str, list[str]]] = {
    "full": ("the shipped system", []),
    "hybrid": ("no learned ranker (cosine + BM25 + exact bonus)", ["--set", "ranker=hybrid"]),
    "no-graph": ("no code-graph candidates", ["--set", "graph=false"]),
    "no-pr-files": ("no pull requests' changed files or links", ["--no-pr-files"]),
    "no-bug-files": ("bug reports without one chunk per file", ["--set", "per_file_bug=0"]),
    "no-passages": (
        "sources without their files' further passages (one chunk per file -> two, as before)",
        ["--set", "passages=0"],
    ),
    "no-thin-follow": (
        "a thin piece, and the first source, without the chunk after it (retrieval.thin_lines 0)",
        ["--set", "thin_lines=0"],
    ),
    "no-read-on-first": (
        "the first source's own chunk reads on only when thin (retrieval.read_on_first false)",
        ["--set", "read_on_first=false"],
    ),
    "no-first-passage": (
        "the first source no more passages than the others (one)",
        ["--set", "passages_first=1"],
    ),
    "no-file-first": (
        "sources by score alone (a file's second chunk not after the others' first)",
        ["--set", "file_first=false"],
    ),
    "no-glossary": ("no Spanish glossary", ["--set", "glossary=false"]),
    "no-translate": (
        "no machine translation of non-English questions (glossary alone)",
        ["--set", "translate=false"],
    ),
    "no-align": (
        "non-English questions searched as asked (no language offset)",
        ["--set", "align_to=null"],
    ),
    "centroid-kinds": (
        "kinds by example centroids, not the classifier",
        ["--set", "kinds_file={nc}"],
    ),
}


def run(variant: str, split: str, work: Path, out: Path, sets: list[str] | None = None) -> Path:
    dest = out / variant / split
    extra = [a.replace("{nc}", str(out / "no-classifier.json")) for a in VARIANTS[variant][1]]
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "eval_devsets.py"),
        "--workdir",
        str(work),
        "--out",
        str(dest),
        "--split",
        split,
        *(["--loso"] if split == "tune" else []),
        *(["--sets", *sets] if sets else []),
        *extra,
    ]
    print(f"{variant} {split}: {' '.join(extra) or '(as shipped)'}", flush=True)
    with open(out / variant / f"{split}.log", "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    return dest


def scores(path: Path) -> dict[tuple[str, str, str], dict[str, float]]:
    """(set, split, file) -> the full system's cited overall metrics."""
    data: dict[str, Any] = json.loads((path / "results.json").read_text())
    out = {}
    for name, by_split in data.items():
        for split, groups in by_split.items():
            if split == "fix_prs_left_out":
                continue
            for group, levels in groups.items():
                m = levels["cited"]["full"]["metrics"]["overall"]
                out[(name, split, group)] = {"hit@1": m["hit@1"], "hit": m["hit@k"],
                                             "mrr": m["mrr"], "fact": m.get("fact")}  # fmt: skip
    return out


POOLED = ["questions", "questions · en", "questions · es", "questions · docs",
          "questions · code", "questions · issues", "bug reports"]  # fmt: skip


def pooled(out: Path, split: str) -> list[str]:
    """Every set's questions pooled, each variant paired question by question with the full
    system: cited MRR, the change and its paired standard error (compare_devsets)."""
    runs = {v: out / v / split / "results.json" for v in VARIANTS}
    if not runs["full"].exists():
        return []
    full = json.loads(runs["full"].read_text())
    head = "| variant | " + " | ".join(POOLED) + " |"
    lines = [f"## Pooled over the sets ({split} halves): cited MRR, change ± paired SE", "",
             head, "|---|" + "---|" * len(POOLED)]  # fmt: skip
    for variant, path in runs.items():
        if not path.exists():
            continue
        rows, _ = compare(full, json.loads(path.read_text()), split=split)
        by = {r.group: r for r in rows}
        cells = []
        for g in POOLED:
            r = by.get(g)
            if r is None:
                cells.append("-")
            elif variant == "full":
                cells.append(f"{r.after:.3f} (n {r.n})")
            else:
                cells.append(f"{r.after:.3f} ({r.delta:+.3f} ± {r.se:.3f})")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def per_set(table: dict[str, dict[tuple[str, str, str], dict[str, float]]]) -> list[str]:
    """One row per set, split and question file: the full system's cited MRR and each
    variant's change against it (the capability's contribution is its negative)."""
    full = table.get("full", {})
    variants = [v for v in VARIANTS if v != "full" and v in table]
    if not full or not variants:
        return []
    lines = ["## Per set: cited MRR of the full system, and each variant's change", "",
             "| set | split | file | full | " + " | ".join(variants) + " |",
             "|---|---|---|---|" + "---|" * len(variants)]  # fmt: skip
    for key in sorted(full):
        cells = []
        for v in variants:
            m = table[v].get(key)
            cells.append("-" if m is None else f"{m['mrr'] - full[key]['mrr']:+.3f}")
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {full[key]['mrr']:.3f} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return [*lines, ""]


def collate(out: Path) -> str:
    table: dict[str, dict[tuple[str, str, str], dict[str, float]]] = {}
    for variant in VARIANTS:
        for split in ("tune", "report"):
            p = out / variant / split
            if (p / "results.json").exists():
                table.setdefault(variant, {}).update(scores(p))
    full = table.get("full", {})
    lines = [
        "# Ablations on the external dev sets (cited level)",
        "",
        "Tuning halves: scored by a ranker and kind classifier fitted on the *other* sets' tuning "
        "halves (leave one set out). Reporting halves: the shipped models (fitted on all tuning "
        "halves). Each cell: the variant's value and, in brackets, its change against the full "
        "system. `qa`: questions.yaml (docs, code, issues routes, English and Spanish); "
        "`localize`: bug reports and fix subjects → the files the fix changed.",
        "",
        *pooled(out, "report"),
        *pooled(out, "tune"),
        *per_set(table),
    ]
    for variant, (what, _) in VARIANTS.items():
        rows = table.get(variant)
        if not rows:
            continue
        head = "| set | split | file | hit@1 | hit | MRR | fact |"
        lines += [f"## {variant}: {what}", "", head, "|---|---|---|---|---|---|---|"]
        for key in sorted(rows):
            m, f = rows[key], full.get(key, {})
            cells = []
            for k in ("hit@1", "hit", "mrr", "fact"):
                v = m.get(k)
                if v is None:
                    cells.append("-")
                elif variant == "full" or f.get(k) is None:
                    cells.append(f"{v:.3f}")
                else:
                    cells.append(f"{v:.3f} ({v - f[k]:+.3f})")
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workdir", default=str(ROOT / ".repo-expert" / "devsets"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "devsets" / "ablations"))
    ap.add_argument("--only", nargs="*", choices=list(VARIANTS))
    ap.add_argument("--split", nargs="+", default=["tune", "report"], choices=["tune", "report"])
    ap.add_argument("--sets", nargs="+", help="these dev sets only (default: every one)")
    ap.add_argument("--collate", action="store_true")
    args = ap.parse_args()
    out = Path(args.out).resolve()  # kinds_file={nc} is read relative to the instance files
    out.mkdir(parents=True, exist_ok=True)
    (out / "no-classifier.json").write_text(NO_CLASSIFIER)
    if not args.collate:
        for variant in args.only or list(VARIANTS):
            (out / variant).mkdir(exist_ok=True)
            for split in args.split:
                run(variant, split, Path(args.workdir), out, args.sets)
    text = collate(out)
    (out / "ablations.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
