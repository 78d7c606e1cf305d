"""Draws benchmarks/RESULTS-store.png from benchmarks/results/store.json
(``python benchmarks/bench_store.py --json benchmarks/results/store.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
SYSTEMS = [("local", "local", "local"), ("postgres", "pg_exact", "pg exact"),
           ("postgres", "pg_hnsw", "pg HNSW")]  # fmt: skip


def main() -> None:
    data = json.loads((HERE / "results" / "store.json").read_text())["sizes"]
    sizes = sorted(data, key=int)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    width = 0.8 / len(SYSTEMS)
    for ax, (key, title) in zip(axes[:2], [("p50", "p50"), ("p95", "p95")], strict=True):
        for i, (backend, part, label) in enumerate(SYSTEMS):
            vals = [
                data[s].get(backend, {}).get(part, {}).get("seq", {}).get(key, 0) for s in sizes
            ]
            xs = [j + (i - 1) * width for j in range(len(sizes))]
            ax.bar(xs, vals, width, label=label)
            for x, v in zip(xs, vals, strict=True):
                ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(sizes)), [f"{int(s) // 1000}k chunks" for s in sizes])
        ax.set_title(f"retrieve {title}, one question at a time (ms)")
        ax.legend()
    ax = axes[2]
    for i, (backend, part, label) in enumerate(SYSTEMS):
        seq = [data[s].get(backend, {}).get(part, {}).get("seq", {}).get("qps", 0) for s in sizes]
        c32 = [data[s].get(backend, {}).get(part, {}).get("conc32", {}).get("qps", 0)
               for s in sizes]  # fmt: skip
        xs = [j + (i - 1) * width for j in range(len(sizes))]
        ax.bar(xs, c32, width, label=f"{label} (32 at once)")
        ax.scatter(xs, seq, color="black", marker="_", s=200, zorder=3)
    ax.set_xticks(range(len(sizes)), [f"{int(s) // 1000}k chunks" for s in sizes])
    ax.set_title("questions/s: 32 at once (bars), one at a time (—)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "RESULTS-store.png", dpi=110)


if __name__ == "__main__":
    main()
