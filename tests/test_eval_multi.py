"""benchmarks/eval_multi.py: the instances it writes (each set's own, one over all of them, and
the bug-report twins whose trackers leave the fix pull requests out) and its pooled single → org
table."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_multi  # noqa: E402

from core.config.load import load_instance  # noqa: E402


def test_instances_one_per_set_one_over_all_and_bug_report_twins(tmp_path: Path) -> None:
    repos, inst_dir = tmp_path / "repos", tmp_path / "instances"
    for name in ("ky", "chi"):
        (repos / name).mkdir(parents=True)
    eval_multi.write_instances(["ky", "chi"], repos, inst_dir, {"ky": frozenset({867}),
                                                                "chi": frozenset()})  # fmt: skip
    org = load_instance(inst_dir / "devsets.yaml")
    assert [e.name for e in org.repos] == ["ky", "chi"]
    assert org.repos[0].issues is not None
    assert org.repos[0].issues.file == str(eval_multi.DEVSETS / "ky" / "issues.json")
    # The set's own instance is eval_devsets's, and the org entry has the same sources.
    own = yaml.safe_load((inst_dir / "ky.yaml").read_text())
    entry = yaml.safe_load((inst_dir / "devsets.yaml").read_text())["repos"][0]
    assert own["docs"] == entry["docs"] and own["code"] == entry["code"]
    assert own["exclude"] == entry["exclude"] and own["repo"]["path"] == entry["path"]
    # Bug reports: the org twin reads each set's tracker without its fix pull requests.
    loc = load_instance(inst_dir / "devsets-loc.yaml")
    assert loc.repos[0].issues is not None and loc.repos[0].issues.file is not None
    kept = {i["number"] for i in json.loads(Path(loc.repos[0].issues.file).read_text())}
    tracker = eval_multi.DEVSETS / "ky" / "issues.json"
    every = {i["number"] for i in json.loads(tracker.read_text())}
    assert every - kept == {867}
    own_loc = yaml.safe_load((inst_dir / "ky-loc.yaml").read_text())
    assert own_loc["issues"]["file"] == loc.repos[0].issues.file


def test_without_drops_no_bug_report_instances(tmp_path: Path) -> None:
    eval_multi.write_instances(["ky"], tmp_path / "repos", tmp_path / "i")
    assert sorted(p.name for p in (tmp_path / "i").iterdir()) == ["devsets.yaml", "ky.yaml"]


def test_settings_reach_every_instance(tmp_path: Path) -> None:
    """``--set reader=true``: every instance written (own, bug-report twin, org) has it."""
    repos, inst_dir = tmp_path / "repos", tmp_path / "i"
    (repos / "ky").mkdir(parents=True)
    eval_multi.write_instances(["ky"], repos, inst_dir, {"ky": frozenset()}, {"reader": True})
    for name in ("ky", "ky-loc", "devsets", "devsets-loc"):
        assert load_instance(inst_dir / f"{name}.yaml").retrieval.reader is True, name
    eval_multi.write_instances(["ky"], repos, tmp_path / "j")
    assert load_instance(tmp_path / "j" / "devsets.yaml").retrieval.reader is False


def test_a_setting_without_a_value_is_one_line_naming_it() -> None:
    import argparse

    assert eval_multi.setting("reader=true") == ("reader", True)
    assert eval_multi.setting("ranker=hybrid") == ("ranker", "hybrid")
    with pytest.raises(argparse.ArgumentTypeError, match=r"KEY=VALUE .*got 'reader'"):
        eval_multi.setting("reader")


def test_gold_pinned_to_its_repository() -> None:
    q = eval_multi.load_questions(eval_multi.DEVSETS / "ky" / "questions.yaml")[0]
    pinned = eval_multi.in_repo(q, "ky")
    assert pinned.gold.paths == [f"ky:{p}" for p in q.gold.paths]
    assert pinned.gold.issues == [f"ky#{n}" for n in q.gold.issues]


def _rep(ranks: list[int | None], repos: list[str], facts: float | None = None) -> dict[str, Any]:
    qs = [{"id": f"q{i}", "lang": "en", "route": "code", "rank": r, "collections": ["code"],
           "ms": 1.0, "kind": None, "facts": facts, "quoted": None, "first_repo": repo}
          for i, (r, repo) in enumerate(zip(ranks, repos, strict=True))]  # fmt: skip
    return {"full": {"questions": qs}}


def test_pooled_table_single_to_org_and_own_repository_first() -> None:
    single = {"a": {"tune": {"qa": {"cited": _rep([1, 1], ["a", "a"], 1.0)}}},
              "b": {"tune": {"qa": {"cited": _rep([2, None], ["b", "b"], 0.5)}}}}  # fmt: skip
    # On the org instance a's second question is answered from b first (its gold second).
    org = {"a": {"tune": {"qa": {"cited": _rep([1, 2], ["a", "b"], 1.0)}}},
           "b": {"tune": {"qa": {"cited": _rep([1, None], ["b", "b"], 0.5)}}}}  # fmt: skip
    m, rows = eval_multi.pooled(org, "tune", "qa", "cited")
    assert m.n == 4 and m.mrr == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    assert eval_multi.own_first(rows) == pytest.approx(0.75)
    text = eval_multi.markdown(single, org, {}, "tune", 6)
    pooled = next(ln for ln in text.splitlines() if ln.startswith("| **pooled** | qa | cited"))
    cells = [c.strip() for c in pooled.split("|")[1:-1]]
    assert cells[3] == "4"
    assert cells[4] == "0.500 → 0.500"  # hit@1
    assert cells[6] == f"{(1 + 1 + 0.5) / 4:.3f} → {2.5 / 4:.3f}"  # MRR
    assert cells[8] == "0.750"
    row_a = next(ln for ln in text.splitlines() if ln.startswith("| a | qa | cited"))
    assert row_a.rstrip(" |").endswith("0.500")
    assert "retrieval" not in text.split("| instance |")[0].split("own first |")[1]


def test_teams_are_scopes_of_the_org_instance_and_channels_filter_by_them(tmp_path: Path) -> None:
    teams = {s for members in eval_multi.TEAMS.values() for s in members}
    assert teams == set(eval_multi.SETS)  # every set in exactly one team
    assert sum(len(m) for m in eval_multi.TEAMS.values()) == len(eval_multi.SETS)
    eval_multi.write_instances(["ky", "axios", "chi"], tmp_path / "repos", tmp_path / "i")
    org = load_instance(tmp_path / "i" / "devsets.yaml")
    assert org.scopes == {"js": ["axios", "ky"], "go": ["chi"]}  # teams of the sets given
    assert eval_multi.channel_repo("ky", "team") == "js"
    assert eval_multi.channel_repo("ky", "own") == "ky"
    assert eval_multi.channel_repo("ky", "none") is None


def test_held_out_sets_only_when_named_and_in_no_team(capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_multi.HELD and not set(eval_multi.HELD) & set(eval_multi.SETS)
    held = eval_multi.HELD[0]
    with pytest.raises(SystemExit):
        eval_multi.main(["--repos", "r", "--workdir", "w", "--sets", held, "--channel", "team"])
    assert f"--channel team: {held} belong to no team" in capsys.readouterr().err
