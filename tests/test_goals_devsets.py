"""benchmarks/goals_devsets.py: issue 12's goals read off an eval_devsets run — pooled, per set,
and the groups a baseline beats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "goals_devsets.py"


def _q(qid: str, lang: str, route: str, rank: int | None, facts: float = 1.0) -> dict[str, Any]:
    return {"id": qid, "lang": lang, "route": route, "rank": rank, "facts": facts}


def _set(full: list[dict[str, Any]], bm25: list[dict[str, Any]],
         loc: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    def level(systems: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        return {"cited": {s: {"questions": qs} for s, qs in systems.items()}}

    return {"report": {"qa": level({"full": full, "bm25": bm25}),
                       "localize": level({"full": loc, "bm25": loc})}}  # fmt: skip


def _run(tmp_path: Path, results: Any, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    return subprocess.run([sys.executable, str(SCRIPT), str(path), *args], capture_output=True,
                          text=True)  # fmt: skip


def _rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1][:1].isalpha():
            rows[cells[1]] = cells[2:-1]
    return rows


def test_goals_pooled_per_set_and_what_a_baseline_beats(tmp_path: Path) -> None:
    # "good": every question first (English and Spanish), a bug report's file cited.
    good = _set([_q("a-en", "en", "docs", 1), _q("a-es", "es", "docs", 1)],
                [_q("a-en", "en", "docs", 2), _q("a-es", "es", "docs", 2)],
                [_q("l1", "en", "code", 2)])  # fmt: skip
    # "weak": Spanish second, English first, one code question missed; BM25 wins the code route;
    # a bug report whose file is not cited; half the facts.
    weak = _set([_q("b-en", "en", "code", None, 0.5), _q("b-es", "es", "docs", 2, 0.5),
                 _q("c-en", "en", "docs", 1, 0.5)],
                [_q("b-en", "en", "code", 1), _q("b-es", "es", "docs", 3),
                 _q("c-en", "en", "docs", 1)],
                [_q("l2", "en", "code", None)])  # fmt: skip
    out_file = tmp_path / "goals.md"
    done = _run(tmp_path, {"good": good, "weak": weak}, "--out", str(out_file))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert out_file.read_text() == text
    rows = _rows(text)
    # Pooled: five questions, ranks 1, 1, None, 2, 1 → hit@1 0.6, hit 0.8, MRR 0.7; fact 0.7.
    n, hit1, hit, mrr, fact, best = rows["questions"]
    assert (n, hit1, hit, mrr, fact) == ("5", "0.600", "0.800", "0.700", "0.700")
    assert best == "bm25 0.667"  # ranks 2, 2, 1, 3, 1
    assert rows["questions · es"][:4] == ["2", "0.500", "1.000", "0.750"]
    assert rows["bug reports"][:4] == ["2", "0.000", "0.500", "0.250"]
    assert "bug reports · code" not in rows  # bug reports are not split by route
    # Per set: hit, hit@1 and MRR met by "good" only; Spanish − English: good 0, weak 0.5 − 0.5.
    assert "Met on: hit 1/2, hit@1 1/2, MRR 1/2, fact 1/2, Spanish 2/2, bug 1/2." in text
    assert rows["hit ≥ 0.96"] == ["1.000", "0.667 ✗"]
    assert rows["bug report → changed file cited ≥ 0.85"] == ["1.000", "0.000 ✗"]
    # BM25 beats "weak" on the code route and English (overall too: 0.778 vs 0.500).
    assert "- weak qa route:code (n 1): full 0.000, bm25 1.000" in text
    assert "- weak qa overall (n 3): full 0.500, bm25 0.778" in text
    assert "- good" not in text


def test_bad_input_says_which_file_and_why(tmp_path: Path) -> None:
    done = _run(tmp_path, [1, 2])
    assert done.returncode != 0 and "not an eval_devsets results.json" in done.stderr
    done = _run(tmp_path, {"x": {"tune": {}}})
    assert done.returncode != 0 and "no set has a 'report' split" in done.stderr
