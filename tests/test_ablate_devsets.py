"""benchmarks/ablate_devsets.py --collate: the per-set tables and the pooled, paired summary of
each variant against the full system, from runs already made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "ablate_devsets.py"


def _results(ranks: list[int | None], loc: list[int | None]) -> dict[str, Any]:
    def level(rs: list[int | None], route: str) -> dict[str, Any]:
        qs = [{"id": f"q{i}", "lang": "en" if i % 2 else "es", "route": route, "rank": r,
               "facts": 1.0} for i, r in enumerate(rs)]  # fmt: skip
        n = len(rs)
        overall = {"n": n, "hit@1": sum(r == 1 for r in rs) / n,
                   "hit@k": sum(r is not None for r in rs) / n,
                   "mrr": sum(1 / r for r in rs if r) / n, "fact": 1.0}  # fmt: skip
        return {"cited": {"full": {"questions": qs, "metrics": {"overall": overall}}}}

    report = {"qa": level(ranks, "code"), "localize": level(loc, "code")}
    return {"toy": {"fix_prs_left_out": {}, "report": report}}


def test_collate_pools_each_variant_paired_with_the_full_system(tmp_path: Path) -> None:
    for variant, ranks, loc in (("full", [1, 1, 2, 1], [1]), ("hybrid", [2, 1, None, 1], [2])):
        run = tmp_path / variant / "report"
        run.mkdir(parents=True)
        (run / "results.json").write_text(json.dumps(_results(ranks, loc)))
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--collate"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert (tmp_path / "ablations.md").read_text().strip() == out.strip()
    section = out.split("## Pooled over the sets (report halves)")[1].split("\n## ")[0]
    pooled = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if line.startswith("| ") and cells[1] != "variant":
            pooled[cells[1]] = cells[2:-1]
    # full: MRR (1 + 1 + 0.5 + 1) / 4 = 0.875; hybrid (0.5 + 1 + 0 + 1) / 4 = 0.625:
    # differences -0.5, 0, -0.5, 0 → mean -0.25, sd 0.289, SE 0.144.
    assert pooled["full"][0] == "0.875 (n 4)"
    assert pooled["hybrid"][0] == "0.625 (-0.250 ± 0.144)"
    assert pooled["hybrid"][-1] == "0.500 (-0.500 ± 0.000)"  # the one bug report: 1 → 1/2
    assert "(tune halves)" not in out  # no tuning runs: no tuning table
    assert "| toy | report | qa | 0.500 (-0.250) | 0.750 (-0.250) | 0.625 (-0.250) |" in out
    assert "| toy | report | qa | 0.875 | -0.250 |" in out  # per set: full, then each change
    assert "| toy | report | localize | 1.000 | -0.500 |" in out
