"""Issue 17, items 6-9: one bad file or a failing embedder never takes an instance down — a FIFO
is skipped, a 1 MB token is cut in linear time, 1,000 nested classes are chunked by line windows,
a file no chunker gets through is "excluded" — and every error path exits (the CLI in a
subprocess on the fake embedder)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from fake_cli import POISON_PILL
from helpers import commit_all, sample_world, write_files
from rigs import cli, one_line

from core.chunk import chunk
from core.models import Collection, Document


def plain_folder(tmp: Path, files: dict[str, str]) -> Path:
    """An instance over a folder that is not a git work tree; returns the instances folder."""
    root = tmp / "plain"
    write_files(root, files)
    inst = tmp / "instances"
    inst.mkdir()
    (inst / "p.yaml").write_text(f"repo: {{path: {root}}}\n")
    return inst


# -- 6: every error path exits -------------------------------------------------------------------
def test_ask_exits_with_one_line_when_the_embedder_cannot_load(tmp_path: Path) -> None:
    _, _, inst = sample_world(tmp_path)
    data = tmp_path / "data"
    assert cli(inst, data, "index", "widget", "-q").returncode == 0
    env = {**os.environ, "FAKE_EMBED_FAIL": "1"}
    for args in (["ask", "widget", "where is the timeout set?"], ["index", "widget", "-q"]):
        one_line(cli(inst, data, *args, env=env, timeout=30), "cannot load the fake model")


def test_ask_exits_with_one_line_on_a_cache_it_cannot_use(tmp_path: Path) -> None:
    _, _, inst = sample_world(tmp_path)
    data = tmp_path / "data"
    assert cli(inst, data, "index", "widget", "-q").returncode == 0
    cache = data / "cache" / "embeddings.sqlite"
    cache.unlink()
    cache.mkdir()  # not a file at all: nothing to set aside
    one_line(cli(inst, data, "ask", "widget", "timeout?", timeout=30), "embeddings.sqlite")


# -- 7: a FIFO ------------------------------------------------------------------------------------
@pytest.mark.parametrize("git_repo", [False, True], ids=["plain-folder", "git-work-tree"])
def test_a_fifo_is_skipped_and_reported(tmp_path: Path, git_repo: bool) -> None:
    if git_repo:  # a tracked file replaced by a FIFO (git lists untracked regular files only)
        repo, _, inst = sample_world(tmp_path)
        name = "widget"
        write_files(repo, {"x.md": "# X\n\nSoon a FIFO.\n"})
        commit_all(repo)
        (repo / "x.md").unlink()
    else:
        inst = plain_folder(tmp_path, {"README.md": "# Hi\n\nThe timeout is thirty seconds.\n"})
        repo, name = tmp_path / "plain", "p"
    os.mkfifo(repo / "x.md")
    r = cli(inst, tmp_path / "data", "index", name, "-q", "--json", timeout=30)
    assert r.returncode == 0, r.stderr
    excluded = json.loads(r.stdout)["excluded"]
    assert excluded.get("not a regular file (a FIFO, socket or device)") == 1, excluded
    r = cli(inst, tmp_path / "data", "ask", name, "what is the timeout?", timeout=30)
    assert r.returncode == 0 and "thirty" in r.stdout, r.stderr


# -- 8: a 1 MB token -----------------------------------------------------------------------------
class CharCounter:
    """A linear token counter (about four characters a token, like base64 in a real tokenizer)
    that meters how many characters it was given: the work a chunker asked of the tokenizer."""

    def __init__(self) -> None:
        self.work = 0

    def __call__(self, text: str) -> int:
        self.work += len(text)
        return len(text) // 4 + len(text.split()) + 2


def long_token_document(collection: Collection, n: int) -> Document:
    token = "QUJD" * (n // 4)
    if collection == "code":
        text, path = f"x = 1\nDATA = '{token}'\n", "big.py"
    else:
        text, path = f"# Guide\n\nIntro.\n\n![img](data:image/png;base64,{token})\n\nEnd.\n", "a.md"
    h = hashlib.sha256(text.encode()).hexdigest()
    if collection == "issues":
        return Document("issues", "issue:1", text, h, issue=1, title="#1 big")
    return Document(collection, path, text, h, path=path, title=path)


@pytest.mark.parametrize("collection", ["docs", "code", "issues"])
def test_a_long_token_is_chunked_in_linear_time(collection: Collection) -> None:
    work = {}
    for n in (250_000, 1_000_000):
        counter = CharCounter()
        chunks, _ = chunk(long_token_document(collection, n), counter, 512)
        assert all(counter(c.text) <= 512 for c in chunks)
        assert sum(len(c.text) for c in chunks) >= n  # nothing dropped
        work[n] = counter.work
    ratio = work[1_000_000] / work[250_000]
    assert ratio < 6, ratio  # linear: 4; the old cut re-counted the rest each time: ~16


# -- 9: deep nesting, and a file no chunker gets through ------------------------------------------
def deep_classes(n: int) -> str:
    return "\n".join(" " * i + f"class C{i}:" for i in range(n)) + "\n" + " " * n + "x = 1\n"


def test_one_bad_file_is_excluded_and_the_build_goes_on(tmp_path: Path) -> None:
    repo, _, inst = sample_world(tmp_path)
    deep = deep_classes(1000)
    assert 500_000 < len(deep) < 1_000_000  # under max_file_bytes
    write_files(repo, {"src/deep.py": deep,
                       "docs/poison.md": f"# Poison\n\nThis text is {POISON_PILL}.\n"})  # fmt: skip
    commit_all(repo)
    r = cli(inst, tmp_path / "data", "index", "widget", "-q", "--json", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["excluded"].get("could not be chunked (RuntimeError)") == 1, summary
    assert summary["files"]["code"] == 2  # config.py and deep.py (as line windows)
    r = cli(inst, tmp_path / "data", "ask", "widget", "class C999", "--json", timeout=60)
    assert r.returncode == 0, r.stderr
    assert any(s["path"] == "src/deep.py" for s in json.loads(r.stdout)["sources"])
    # The next build tries the excluded file again (it is not a unit of the build).
    r = cli(inst, tmp_path / "data", "index", "widget", "-q", "--json", timeout=120)
    assert json.loads(r.stdout)["excluded"].get("could not be chunked (RuntimeError)") == 1
