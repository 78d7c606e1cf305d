"""Issue 17, items 14 and 16: a damaged live build or embedding cache heals — one line names the
file, ``index``/``ask`` rebuild from scratch re-using the sound cache — a full disk is one line
with the previous build still serving, and a kill during the swap leaves nothing behind for
long (the CLI in a subprocess on the fake embedder)."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import commit_all, live_build, sample_world, write_files
from rigs import FAKE_CLI, ROOT, cli, one_line

Damage = Callable[[Path, Path], Path]  # (live build, data folder) -> the file damaged


def truncate_code(build: Path, data: Path) -> Path:
    f = build / "code.fbin"
    os.truncate(f, 20)
    return f


def garble_meta(build: Path, data: Path) -> Path:
    f = build / "meta.sqlite"
    raw = bytearray(f.read_bytes())
    raw[100:4000] = b"\x42" * 3900
    f.write_bytes(bytes(raw))
    return f


def remove_docs(build: Path, data: Path) -> Path:
    f = build / "docs.fbin"
    f.unlink()
    return f


def shrink_docs(build: Path, data: Path) -> Path:  # a valid matrix of the wrong number of rows
    from usearch.io import load_matrix, save_matrix

    f = build / "docs.fbin"
    mat = load_matrix(str(f))
    assert mat is not None
    save_matrix(mat[:1].copy(), str(f))
    return f


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, Path]:
    _, _, inst = sample_world(tmp_path)
    data = tmp_path / "data"
    assert cli(inst, data, "index", "widget", "-q").returncode == 0
    return inst, data


@pytest.mark.parametrize("damage", [truncate_code, garble_meta, remove_docs, shrink_docs])
@pytest.mark.parametrize("command", ["ask", "index", "sync"])
def test_a_damaged_live_build_is_named_and_rebuilt(
    indexed: tuple[Path, Path], damage: Damage, command: str
) -> None:
    inst, data = indexed
    build = live_build(data, "widget")
    assert build is not None
    damaged = damage(build, data)
    args = {"ask": ["ask", "widget", "what is the default timeout?", "--json"],
            "index": ["index", "widget", "-q", "--json"],
            "sync": ["sync", "widget", "-q", "--json"]}[command]  # fmt: skip
    r = cli(inst, data, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    if command == "ask":
        assert str(damaged) in r.stderr.splitlines()[0] and "rebuilding" in r.stderr
        assert any(s["path"] == "README.md" for s in out["sources"])  # docs vectors are back
    else:
        summary = out if command == "index" else out["index"]
        assert str(damaged) in summary["rebuilt_reason"]
        assert summary["chunks_embedded"] == 0  # the embedding cache was sound: re-used
    new = live_build(data, "widget")
    assert new is not None and new != build
    r = cli(inst, data, "ask", "widget", "what is the default timeout?", "--json")
    assert r.returncode == 0 and not r.stderr and json.loads(r.stdout)["sources"]


def test_a_damaged_embedding_cache_is_set_aside_and_rebuilt(indexed: tuple[Path, Path]) -> None:
    inst, data = indexed
    cache = data / "cache" / "embeddings.sqlite"
    raw = bytearray(cache.read_bytes())
    raw[:100] = b"\x42" * 100
    cache.write_bytes(bytes(raw))
    r = cli(inst, data, "index", "widget", "--full", "-q", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["chunks_embedded"] > 0  # computed again, into a new cache
    (aside,) = cache.parent.glob("embeddings.sqlite.corrupt-*")
    assert aside.read_bytes()[:100] == b"\x42" * 100  # kept for a post-mortem
    assert "set aside" in r.stderr and "Traceback" not in r.stderr
    with sqlite3.connect(cache) as db:
        assert db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] > 0
    r = cli(inst, data, "index", "widget", "--full", "-q", "--json")
    assert json.loads(r.stdout)["chunks_embedded"] == 0 and not r.stderr


@pytest.mark.parametrize("full", [True, False], ids=["the-build", "the-cache"])
def test_a_full_disk_is_one_line_and_the_previous_build_serves(tmp_path: Path, full: bool) -> None:
    repo, _, inst = sample_world(tmp_path)
    data = tmp_path / "data"
    pages = {f"docs/p{i}.md": f"# Page {i}\n\n" + f"Words about topic {i}. " * 400
             for i in range(40)}  # fmt: skip
    if full:  # every vector is cached: only the new build's files grow
        write_files(repo, pages)
        commit_all(repo)
    assert cli(inst, data, "index", "widget", "-q").returncode == 0
    before = live_build(data, "widget")
    assert before is not None
    if not full:  # new pages: the embedding cache grows first
        write_files(repo, pages)
        commit_all(repo)
    limit = 64 * 1024 if full else (data / "cache" / "embeddings.sqlite").stat().st_size + 8192

    def small_disk() -> None:  # files may not grow past the limit: a full disk to a writer
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = ["index", "widget", "-q", *(["--full"] if full else [])]
    r = subprocess.run(
        [sys.executable, str(FAKE_CLI), "--instances", str(inst), "--data", str(data), *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
        preexec_fn=small_disk,
    )  # fmt: skip
    if full:
        one_line(r, str(data / "widget" / "builds" / ".tmp-"), "cannot write the new build",
                 "the previous build still serves")  # fmt: skip
    else:
        one_line(r, str(data / "cache" / "embeddings.sqlite"), "cannot write the embedding cache")
    assert live_build(data, "widget") == before
    assert not list((data / "widget" / "builds").glob(".tmp-*"))
    r = cli(inst, data, "ask", "widget", "what is the default timeout?")
    assert r.returncode == 0 and "thirty" in r.stdout


def test_a_kill_during_the_swap_leaves_nothing_behind_after_the_next_build(
    tmp_path: Path,
) -> None:
    repo, _, inst = sample_world(tmp_path)
    data = tmp_path / "data"
    root, builds = data / "widget", data / "widget" / "builds"
    assert cli(inst, data, "index", "widget", "-q").returncode == 0
    first = live_build(data, "widget")
    write_files(repo, {"docs/new.md": "# New\n\nA new page.\n"})
    commit_all(repo)
    r = cli(inst, data, "index", "widget", "-q", env={**os.environ, "FAKE_KILL_AT_SWAP": "1"})
    assert r.returncode == -signal.SIGKILL
    assert live_build(data, "widget") == first  # the old build still serves
    (stray,) = root.glob(".current-*")
    orphan = {p.name for p in builds.iterdir()} - {first.name if first else ""}
    assert len(orphan) == 1  # renamed into place, never linked
    write_files(repo, {"docs/newer.md": "# Newer\n\nAnother page.\n"})
    commit_all(repo)
    assert cli(inst, data, "index", "widget", "-q").returncode == 0
    live = live_build(data, "widget")
    assert live is not None and first is not None
    assert not stray.exists() and not list(root.glob(".current-*"))
    # Kept: the live build and the one it replaced (the last live one), not the orphan.
    assert {p.name for p in builds.iterdir()} == {live.name, first.name}
