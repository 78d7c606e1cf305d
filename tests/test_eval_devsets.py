"""benchmarks/eval_devsets.py: the pinned snapshot a dev set is indexed from, and which sets the
default lists hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import git, make_repo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_devsets  # noqa: E402


def test_the_snapshot_keeps_files_the_repository_marks_export_ignore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """guzzle's .gitattributes marks /docs/ and /tests/ export-ignore: `git archive` of its mirror
    left the docs out, and every docs question of the set scored zero. The mirror is laid out as
    the fetch tool leaves it (no config: not known to be bare), and the caller's own folder has
    a .gitattributes of its own, which must not be read either; and it lacks one blob (the fetch
    tool may leave the largest out), which is left out of the snapshot."""
    sha = make_repo(tmp_path / "src", {
        ".gitattributes": "/docs/ export-ignore\n/tests/ export-ignore\n",
        "docs/guide.rst": "Guide\n=====\n\nSend JSON with the json option.\n",
        "src/Client.php": "<?php\nfinal class Client {}\n",
        "vendor-dists/gradle-bin.zip": "a blob the mirror will lack\n",
    })  # fmt: skip
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(tmp_path / "src"),
                    str(mirrors / "acme+guzzle")], check=True)  # fmt: skip
    (mirrors / "acme+guzzle" / "config").unlink()
    blob = git(tmp_path / "src", "rev-parse", "HEAD:vendor-dists/gradle-bin.zip").strip()
    (mirrors / "acme+guzzle" / "objects" / blob[:2] / blob[2:]).unlink()  # fetched without it
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / ".gitattributes").write_text("/src/ export-ignore\n")
    monkeypatch.chdir(caller)
    dest = eval_devsets.snapshot({"repo": "acme/guzzle", "commit": sha}, tmp_path / "snap", mirrors)
    assert (dest / "docs" / "guide.rst").read_text().endswith("the json option.\n")
    assert (dest / "src" / "Client.php").exists()
    assert not (dest / "vendor-dists").exists()  # left out, not a failed snapshot
    assert git(dest, "log", "--format=%s").strip() == f"acme/guzzle at {sha[:12]}"  # no history


def test_held_out_sets_are_left_out_of_the_default_lists() -> None:
    """A set marked `held_out` (the languages none of the tuned sets is in) is never in a default
    list — eval, train_ranker, the goal tables — and is scored when named."""
    assert {"guzzle", "polly", "clikt"} <= set(eval_devsets.HELD_OUT)
    assert not set(eval_devsets.HELD_OUT) & set(eval_devsets.SETS)
    assert {"gson", "ky", "fd"} <= set(eval_devsets.SETS)
    assert sorted(eval_devsets.SETS + eval_devsets.HELD_OUT) == eval_devsets.ALL_SETS


def test_the_ranker_refuses_to_fit_on_a_held_out_set() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_ranker.py"), "--sets",
                        "guzzle", "--check"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and "invalid choice: 'guzzle'" in r.stderr


def test_a_snapshot_an_interrupted_run_left_is_made_again(tmp_path: Path) -> None:
    sha = make_repo(tmp_path / "src", {"README.md": "# A\n"})
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(tmp_path / "src"),
                    str(mirrors / "acme+a")], check=True)  # fmt: skip
    dest = tmp_path / "snap"
    dest.mkdir()
    (dest / "stray.txt").write_text("half extracted")
    subprocess.run(["git", "init", "-q", str(dest)], check=True)  # killed before its commit
    eval_devsets.snapshot({"repo": "acme/a", "commit": sha}, dest, mirrors)
    assert not (dest / "stray.txt").exists() and (dest / "README.md").exists()
    assert git(dest, "log", "--format=%s").strip() == f"acme/a at {sha[:12]}"


def test_init_globs_index_what_init_writes_tests_included(tmp_path: Path) -> None:
    """``--globs init``: the set's instance as ``repo-expert init`` configures the snapshot — the
    default include globs that match (the tests among them), the exclude suggestions that apply
    — in place of the set's own globs, which leave the tests out; the tracker stays the set's."""
    import yaml

    repo = tmp_path / "snap"
    make_repo(repo, {
        "README.md": "# Widget\n", "src/widget.py": "def run():\n    pass\n",
        "tests/test_widget.py": "def test_run():\n    pass\n",
        "tests/fixtures/data.py": "X = 1\n", "web/app.ts": "export const a = 1;\n",
    })  # fmt: skip
    globs = eval_devsets.init_globs(repo)
    assert globs == {"docs": ["**/*.md"], "code": ["**/*.py", "**/*.ts"],
                     "exclude": ["**/fixtures/**"]}  # fmt: skip
    setdir = tmp_path / "set"
    setdir.mkdir()
    (setdir / "source.yaml").write_text(yaml.safe_dump({
        "repo": "acme/widget", "commit": "0" * 40, "docs": ["README.md"],
        "code": ["src/**/*.py"], "exclude": ["tests/**"],
    }))  # fmt: skip
    (setdir / "issues.json").write_text("[]")
    inst = tmp_path / "instances"
    eval_devsets.instance_file("widget", setdir, repo, inst)
    text = eval_devsets.instance_file("widget-init", setdir, repo, inst, globs=globs)
    assert (inst / "widget-init.yaml").read_text() == text  # what the race check compares
    own = yaml.safe_load((inst / "widget.yaml").read_text())
    init = yaml.safe_load((inst / "widget-init.yaml").read_text())
    assert own["code"]["include"] == ["src/**/*.py"] and own["exclude"] == ["tests/**"]
    assert init["code"]["include"] == globs["code"] and init["exclude"] == ["**/fixtures/**"]
    assert init["docs"]["include"] == ["**/*.md"] and init["issues"] == own["issues"]
