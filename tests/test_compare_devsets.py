"""benchmarks/compare_devsets.py: two dev-set runs paired question by question, with the paired
standard error beside each difference."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "compare_devsets.py"


def _q(qid: str, lang: str, route: str, rank: int | None) -> dict[str, Any]:
    return {"id": qid, "lang": lang, "route": route, "rank": rank, "collections": [], "ms": 1.0,
            "kind": route, "facts": None}  # fmt: skip


def _run(qa: list[dict[str, Any]], loc: list[dict[str, Any]]) -> dict[str, Any]:
    def level(qs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"cited": {"full": {"questions": qs}}, "retrieval": {"full": {"questions": qs}}}

    return {"toy": {"fix_prs_left_out": {}, "report": {"qa": level(qa), "localize": level(loc)}}}


def test_paired_differences_their_standard_error_and_what_is_clear(tmp_path: Path) -> None:
    # Spanish: four questions, three move up one rank each (2 → 1); English: one unchanged, one
    # found only after; a bug report moves down; a question only the second run has is left out.
    before = _run([_q("a-es", "es", "code", 2), _q("b-es", "es", "code", 2),
                   _q("c-es", "es", "docs", 2), _q("d-es", "es", "docs", 1),
                   _q("a-en", "en", "code", 1), _q("b-en", "en", "docs", None)],
                  [_q("loc-1", "en", "code", 1)])  # fmt: skip
    after = _run([_q("a-es", "es", "code", 1), _q("b-es", "es", "code", 1),
                  _q("c-es", "es", "docs", 1), _q("d-es", "es", "docs", 1),
                  _q("a-en", "en", "code", 1), _q("b-en", "en", "docs", 1),
                  _q("new-en", "en", "code", 1)],
                 [_q("loc-1", "en", "code", 3)])  # fmt: skip
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(before))
    b.write_text(json.dumps(after))
    out = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    rows = {cells[1]: cells[2:-1] for line in out.splitlines()
            if (cells := [c.strip() for c in line.split("|")])[1:2] and cells[1][:1].isalpha()
            and cells[1] != "group"}  # fmt: skip
    # Spanish: differences 0.5, 0.5, 0.5, 0 → mean 0.375, sd 0.25, SE 0.125: three SEs, clear.
    n, mrr_a, mrr_b, delta, se, up, down, clear = rows["questions · es"]
    assert (n, up, down) == ("4", "3", "0")
    assert float(mrr_a) == 0.625 and float(mrr_b) == 1.0 and float(delta) == 0.375
    assert math.isclose(float(se), 0.125) and clear == "yes"
    # English: one question 0 → 1, one unchanged: mean 0.5, SE 0.5 — not clear.
    assert rows["questions · en"][0] == "2" and rows["questions · en"][-1] == ""
    assert rows["questions · code"][0] == "3" and rows["questions"][0] == "6"
    assert rows["bug reports"][5:7] == ["0", "1"] and float(rows["bug reports"][3]) < 0
    assert "left out): 1" in out
    bad = subprocess.run([sys.executable, str(SCRIPT), str(a), str(tmp_path / "none.json")],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode != 0 and "none.json: not an eval_devsets results.json" in bad.stderr


def test_fact_and_hit_are_compared_like_mrr(tmp_path: Path) -> None:
    """``--metric fact``: the share of answer facts shown, paired the same way; a question
    without answer facts is left out of it (not counted as 0); ``hit``: a gold source cited."""
    def q(qid: str, rank: int | None, facts: float | None) -> dict[str, Any]:
        return {**_q(qid, "en", "code", rank), "facts": facts, "quoted": facts}

    before = _run([q("a", 2, 0.5), q("b", 1, 1.0), q("c", None, None)], [])
    after = _run([q("a", 3, 1.0), q("b", 1, 1.0), q("c", 1, None)], [])
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(before))
    b.write_text(json.dumps(after))

    def rows(*extra: str) -> dict[str, list[str]]:
        out = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), *extra],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert out.splitlines()[0].startswith(f"| group | n | {extra[-1]} before |")
        return {cells[1]: cells[2:-1] for line in out.splitlines()
                if (cells := [c.strip() for c in line.split("|")])[1:2]
                and cells[1][:1].isalpha() and cells[1] != "group"}  # fmt: skip

    n, fa, fb, delta, _, up, down, _ = rows("--metric", "fact")["questions"]
    assert (n, up, down) == ("2", "1", "0") and float(fa) == 0.75 and float(fb) == 1.0
    assert float(delta) == 0.25
    n, ha, hb, _, _, up, down, _ = rows("--metric", "hit")["questions"]
    assert (n, up, down) == ("3", "1", "0") and math.isclose(float(ha), 2 / 3, abs_tol=1e-3)
    assert float(hb) == 1.0
    bad = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), "--metric", "fact",
                          "--level", "retrieval"], capture_output=True, text=True)  # fmt: skip
    assert bad.returncode != 0 and "cited level only" in bad.stderr
