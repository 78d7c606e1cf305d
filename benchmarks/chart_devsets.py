"""The dev sets' chart: cited-level hit@1, hit and MRR of the full system beside the baselines,
per set and question file, on the reporting halves (and the tuning halves, by models that never
saw them).

    python benchmarks/chart_devsets.py [--runs DIR] [--out FILE]

Reads ``{runs}/{tune,report}/results.json`` (the final runs of ``eval_devsets.py``, by default)
and writes a PNG (default ``benchmarks/results/devsets/devsets.png``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ["grep", "bm25", "dense", "rrf", "full"]
COLORS = {"grep": "#bbbbbb", "bm25": "#8fb3d9", "dense": "#9fd39f", "rrf": "#e6c07b",
          "full": "#c0392b"}  # fmt: skip
METRICS = [("hit@1", "hit@1"), ("hit@k", "hit (any cited)"), ("mrr", "MRR")]


def load(runs: Path) -> dict[str, Any]:
    out = {}
    for split in ("report", "tune"):
        p = runs / split / "results.json"
        if p.exists():
            out[split] = json.loads(p.read_text())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    res = ROOT / "benchmarks" / "results" / "devsets"
    ap.add_argument("--runs", default=str(res / "final"))
    ap.add_argument("--out", default=str(res / "devsets.png"))
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("the chart needs matplotlib: pip install '.[eval]'") from None
    data = load(Path(args.runs))
    if not data:
        raise SystemExit(f"no results under {args.runs}: run benchmarks/eval_devsets.py first")
    panels = [(split, group) for split in data for group in ("qa", "localize")]
    sets = sorted({s for d in data.values() for s in d})
    fig, axes = plt.subplots(len(panels), len(METRICS), figsize=(4.2 * len(METRICS),
                             2.9 * len(panels)), squeeze=False)  # fmt: skip
    width = 0.8 / len(SYSTEMS)
    for row, (split, group) in enumerate(panels):
        for col, (key, label) in enumerate(METRICS):
            ax = axes[row][col]
            for i, system in enumerate(SYSTEMS):
                vals = []
                for s in sets:
                    cited = data[split].get(s, {}).get(split, {}).get(group, {}).get("cited", {})
                    m = cited.get(system, {}).get("metrics", {}).get("overall", {})
                    vals.append(m.get(key, 0.0))
                xs = [j + (i - (len(SYSTEMS) - 1) / 2) * width for j in range(len(sets))]
                ax.bar(xs, vals, width, label=system, color=COLORS[system])
            ax.set_xticks(range(len(sets)), sets, fontsize=7, rotation=30, ha="right")
            ax.set_ylim(0, 1.05)
            ax.grid(axis="y", alpha=0.3)
            half = "reporting half" if split == "report" else "tuning half, unseen models"
            ax.set_title(f"{group} · {half}\n{label}", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(SYSTEMS), fontsize=8,
               bbox_to_anchor=(0.5, 0.96))  # fmt: skip
    fig.suptitle("External dev sets, cited sources of `ask --json` (k = 6)", fontsize=11, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(args.out, dpi=110)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
