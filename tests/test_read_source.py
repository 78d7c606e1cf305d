"""``RepoExpert.read_source``, ``search`` and ``describe``: what the MCP server and the API hand to
an agent. A file is read as the live build indexed it, at its commit, and only if it is an
indexed docs or code file of the repository — never a path outside it, a symbolic link or an
excluded file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from face_rig import with_links
from helpers import FakeApp, make_repo

from core.errors import IndexError_, PathNotAllowed
from core.ingest.files import MAX_LINES, public_address, safe_path
from core.service import RepoExpert


def test_safe_path_refuses_what_could_leave_the_repository() -> None:
    assert safe_path("README.md") == "README.md"
    assert safe_path("./docs//guide.md") == "docs/guide.md"
    for bad, why in [
        ("../secret", "would leave"), ("docs/../../x", "would leave"), ("/etc/passwd", "absolute"),
        ("~/.ssh/id_rsa", "absolute"), ("C:/Windows", "absolute"), ("a\\..\\b", "backslash"),
        ("a\0b", "NUL"), ("", "relative to the repository root"), (".", "not a file path"),
    ]:  # fmt: skip
        with pytest.raises(PathNotAllowed, match=why):
            safe_path(bad)


@pytest.mark.asyncio
async def test_read_source_gives_indexed_lines_at_the_commit_with_a_permalink(
    sample: dict[str, Any],
) -> None:
    app: RepoExpert = sample["app"]
    await app.index("widget")
    sha = sample["sha"]
    whole = await app.read_source("widget", "README.md")
    assert whole.commit == sha and whole.start_line == 1 and whole.end_line == whole.total_lines
    assert whole.text.startswith("# Widget") and "thirty" in whole.text
    part = await app.read_source("widget", "./src/widget/config.py", 6, 7)
    assert part.text.splitlines() == [
        "def parse_config(path):",
        '    """Read widget.toml and return a dict of settings with the timeout applied."""',
    ]
    assert part.url == f"https://github.com/acme/widget/blob/{sha}/src/widget/config.py#L6-L7"
    assert part.to_json()["next_start_line"] == 8 and part.collection == "code"
    assert (await app.read_source("widget", "README.md", 3, 10_000)).end_line == whole.total_lines
    with pytest.raises(PathNotAllowed, match="has 12 lines"):
        await app.read_source("widget", "README.md", 99)
    with pytest.raises(PathNotAllowed, match="not a range"):
        await app.read_source("widget", "README.md", 5, 2)


@pytest.mark.asyncio
async def test_read_source_refuses_excluded_files_links_and_paths_outside(
    sample: dict[str, Any],
) -> None:
    with_links(sample)
    app: RepoExpert = sample["app"]
    await app.index("widget")
    for path in ["tasks/internal.md", "vendor/lib.py", "leak.md", "linked/secret.md",
                 "again.md", "nothere.md", "issue:42", ".git/config"]:  # fmt: skip
        with pytest.raises(PathNotAllowed, match="is not an indexed file of 'widget'"):
            await app.read_source("widget", path)
    for path in ["../outside/secret.md", str(sample["tmp"] / "outside" / "secret.md"),
                 "docs/../../outside/secret.md"]:  # fmt: skip
        with pytest.raises(PathNotAllowed):
            await app.read_source("widget", path)


@pytest.mark.asyncio
async def test_read_source_reads_the_indexed_version_whatever_the_work_tree_now_holds(
    sample: dict[str, Any],
) -> None:
    app: RepoExpert = sample["app"]
    repo: Path = sample["repo"]
    await app.index("widget")
    indexed = (await app.read_source("widget", "docs/guide.md")).text
    (repo / "docs" / "guide.md").write_text("# Guide\n\nRewritten, not indexed.\n")
    assert (await app.read_source("widget", "docs/guide.md")).text == indexed  # the commit's blob
    # A file swapped for a link to something outside after indexing: the link is not followed.
    outside = sample["tmp"] / "elsewhere.md"
    outside.write_text("# Elsewhere\n\nnot for you\n")
    (repo / "docs" / "guide.md").unlink()
    os.symlink(outside, repo / "docs" / "guide.md")
    assert (await app.read_source("widget", "docs/guide.md")).text == indexed


@pytest.mark.asyncio
async def test_a_changed_file_without_a_commit_to_read_it_at_is_refused(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "notes.md").write_text("# Notes\n\nFirst version.\n")
    (tmp_path / "instances").mkdir()
    (tmp_path / "instances" / "plain.yaml").write_text(f"repo: {{path: {files}}}\n")
    app = FakeApp(tmp_path / "instances", tmp_path / "data")
    try:
        await app.index("plain")
        got = await app.read_source("plain", "notes.md")
        assert got.commit is None and "First version." in got.text
        assert got.url == "notes.md:1-3"  # no web_url and no git: where it is, not a link
        (files / "notes.md").write_text("# Notes\n\nSecond version.\n")
        with pytest.raises(IndexError_, match="changed since instance 'plain' was indexed"):
            await app.read_source("plain", "notes.md")
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_long_file_is_read_in_pages(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    sha = make_repo(repo, {"long.md": "# Long\n\n" + "".join(f"line {i}\n" for i in range(1000))})
    (tmp_path / "instances").mkdir()
    (tmp_path / "instances" / "r.yaml").write_text(f"repo: {{path: {repo}}}\n")
    app = FakeApp(tmp_path / "instances", tmp_path / "data")
    try:
        await app.index("r")
        first = (await app.read_source("r", "long.md")).to_json()
        assert (first["start_line"], first["end_line"], first["commit"]) == (1, MAX_LINES, sha)
        nxt = await app.read_source("r", "long.md", first["next_start_line"])
        assert nxt.start_line == MAX_LINES + 1 and nxt.text.startswith(f"line {MAX_LINES - 2}")
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_search_numbers_sources_filters_a_collection_and_names_the_commit(
    sample: dict[str, Any],
) -> None:
    app: RepoExpert = sample["app"]
    found = await app.search("widget", "timeout widget.toml", k=4)
    assert found.commit == sample["sha"] and found.sources
    assert [s.n for s in found.sources] == list(range(1, len(found.sources) + 1))
    assert all(sample["sha"] in s.url for s in found.sources if s.collection != "issues")
    only = await app.search("widget", "timeout widget.toml", k=3, collection="issues")
    assert only.sources and {s.collection for s in only.sources} == {"issues"}
    answer = await app.ask("widget", "What is the default timeout?")
    assert answer.commit == sample["sha"] and answer.to_json()["commit"] == sample["sha"]


@pytest.mark.asyncio
async def test_describe_shows_the_public_address_never_a_path_or_a_token(
    sample: dict[str, Any], tmp_path: Path
) -> None:
    app: RepoExpert = sample["app"]
    d = await app.describe("widget")
    assert d == {"name": "widget", "description": "", "indexed": False, "commit": None,
                 "built_at": None, "repository": "https://github.com/acme/widget"}  # fmt: skip
    await app.index("widget")
    assert (await app.describe("widget"))["commit"] == sample["sha"]
    inst = app.instance("widget").model_copy(update={"web_url": None})
    assert public_address(inst) is None  # a local path is never shown
    url = inst.repo.model_copy(update={"path": None, "url": "https://x:tok@git.example.com/o/r"})
    assert public_address(inst.model_copy(update={"repo": url})) == "https://git.example.com/o/r"
