from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers import FakeApp, FakeEmbedder, commit_all, live_build, open_live, write_files

from core.config import Settings
from core.errors import EmbeddingError
from core.service import RepoExpert


@pytest.mark.asyncio
async def test_full_index_summary_and_contents(sample) -> None:
    app = sample["app"]
    s = await app.index("widget")
    assert s.commit == sample["sha"]
    assert s.files == {"docs": 2, "code": 1, "issues": 2}
    assert s.chunks["docs"] == 4 and s.chunks["issues"] == 2 and s.chunks["code"] >= 2
    assert s.over_window == 0 and 0 < s.largest_chunk_tokens <= s.window
    assert s.excluded["exclude patterns"] == 1  # tasks/internal.md at the root
    assert s.excluded["built-in excludes (vendored, lock, minified, binary types)"] == 1
    r = await open_live(sample["tmp"] / "data", "widget")
    try:
        paths = {c.path for c in await r.all_chunks()}
        assert "tasks/internal.md" not in paths and "vendor/lib.py" not in paths
        syms = await r.symbols("parse_config")
        assert [(x.path, x.start_line, x.kind) for x in syms] == [
            ("src/widget/config.py", 6, "function")
        ]
        for c in await r.all_chunks("code"):
            assert c.url.startswith(f"https://github.com/acme/widget/blob/{sample['sha']}/")
            assert c.url.endswith(f"#L{c.start_line}-L{c.end_line}") or c.start_line == c.end_line
        issue = (await r.all_chunks("issues"))[0]
        assert issue.url.startswith("https://github.com/acme/widget/issues/")
    finally:
        await r.close()
    await app.close()


@pytest.mark.asyncio
async def test_one_file_change_reembeds_only_that_files_chunks(sample) -> None:
    app, emb, repo = sample["app"], sample["embedder"], sample["repo"]
    first = await app.index("widget")
    assert first.chunks_embedded == sum(first.chunks.values())
    # Change one section of one doc; leave everything else alone.
    readme = (repo / "README.md").read_text().replace("thirty", "sixty")
    (repo / "README.md").write_text(readme)
    sha2 = commit_all(repo)
    emb.calls.clear()
    second = await app.index("widget")
    assert second.units_changed == 1 and second.units_reused == 4
    # README has 3 sections; only the Configuration section's text changed.
    assert second.chunks_embedded == 1
    assert sum(n for n, q in emb.calls if not q) == 1
    assert second.chunks == first.chunks
    r = await open_live(sample["tmp"] / "data", "widget")
    try:
        docs = await r.all_chunks("docs")
        assert any("sixty" in c.text for c in docs)
        assert not any("thirty" in c.text for c in docs)
        # Reused chunks are re-pinned to the new commit.
        assert all(sha2 in c.url for c in docs)
    finally:
        await r.close()
    # Nothing changed: nothing is embedded.
    third = await app.index("widget")
    assert third.chunks_embedded == 0 and third.units_changed == 0
    await app.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["local", "postgres"])
async def test_an_update_that_finds_nothing_changed_keeps_the_live_build(
    sample, backend: str, request: pytest.FixtureRequest
) -> None:
    """Nothing the build holds would differ: the live build stays (no copy of every chunk,
    vector and index) and the summary says so with its counts. A new commit that touches no
    indexed file, a new web address and a work tree turning dirty each re-pin the permalinks:
    a new build."""
    tmp, repo = sample["tmp"], sample["repo"]
    store = request.getfixturevalue("pg_url") if backend == "postgres" else None
    app = FakeApp(tmp / "instances", tmp / f"data-{backend}", store=store)
    try:
        first = await app.index("widget")
        live = await app.store.live_id("widget")
        same = await app.index("widget")
        assert same.kept_live and not first.kept_live
        assert await app.store.live_id("widget") == live
        assert (same.files, same.chunks, same.symbols) == (first.files, first.chunks, first.symbols)
        assert same.chunks_embedded == 0 and same.units_changed == 0
        assert (await app.ask("widget", "default timeout")).sources

        write_files(repo, {"tasks/todo.md": "# Todo\n\nExcluded from the index.\n"})
        sha2 = commit_all(repo)
        moved = await app.index("widget")
        assert not moved.kept_live and moved.units_changed == 0 and moved.commit == sha2
        assert await app.store.live_id("widget") != live
        r = await app.store.open_live("widget")
        assert r is not None
        try:
            assert all(sha2 in c.url for c in await r.all_chunks("docs"))
        finally:
            await r.close()

        yaml = tmp / "instances" / "widget.yaml"
        yaml.write_text(yaml.read_text().replace("acme/widget", "acme/gadget"))
        await app.close()  # the instance file is read when the process starts
        app = FakeApp(tmp / "instances", tmp / f"data-{backend}", store=store)
        relinked = await app.index("widget")
        assert not relinked.kept_live
        r = await app.store.open_live("widget")
        assert r is not None
        try:
            code = await r.all_chunks("code")
            assert code and all(c.url.startswith("https://github.com/acme/gadget/") for c in code)
        finally:
            await r.close()

        (repo / "tasks" / "todo.md").write_text("# Todo\n\nEdited, not committed.\n")
        assert not (await app.index("widget")).kept_live  # dirty: git diff can't stand in
        assert (await app.index("widget")).kept_live
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_deleted_file_leaves_the_index(sample) -> None:
    app, repo = sample["app"], sample["repo"]
    await app.index("widget")
    (repo / "docs" / "guide.md").unlink()
    commit_all(repo)
    s = await app.index("widget")
    assert s.units_deleted == 1 and s.files["docs"] == 1
    r = await open_live(sample["tmp"] / "data", "widget")
    try:
        assert "docs/guide.md" not in {c.path for c in await r.all_chunks()}
    finally:
        await r.close()
    await app.close()


class CrashingEmbedder(FakeEmbedder):
    def embed_batch(self, texts, as_query):  # type: ignore[no-untyped-def]
        if not as_query:
            raise RuntimeError("simulated crash during embedding")
        return super().embed_batch(texts, as_query)


@pytest.mark.asyncio
async def test_crash_mid_build_leaves_previous_index_serving(sample) -> None:
    app, repo, tmp = sample["app"], sample["repo"], sample["tmp"]
    await app.index("widget")
    live = live_build(tmp / "data", "widget")
    before = await app.ask("widget", "default timeout")
    write_files(repo, {"docs/new.md": "# New\n\nA brand new page about caching.\n"})
    commit_all(repo)
    crashing = FakeApp(tmp / "instances", tmp / "data", CrashingEmbedder,
                       cache=tmp / "data" / "cache2.sqlite")  # fmt: skip
    with pytest.raises(EmbeddingError, match="simulated crash"):
        await crashing.index("widget")
    assert live_build(tmp / "data", "widget") == live
    assert not list((tmp / "data" / "widget" / "builds").glob(".tmp-*"))
    after = await app.ask("widget", "default timeout")
    assert [s.url for s in after.sources] == [s.url for s in before.sources]
    await crashing.close()
    await app.close()


@pytest.mark.asyncio
async def test_killed_writer_temp_folder_is_ignored_and_pruned(sample) -> None:
    app, tmp = sample["app"], sample["tmp"]
    await app.index("widget")
    live = live_build(tmp / "data", "widget")
    builds = tmp / "data" / "widget" / "builds"
    stale = builds / ".tmp-20240101T000000-999999999-1"  # a dead writer's half-written build
    stale.mkdir()
    (stale / "meta.sqlite").write_bytes(b"garbage")
    assert live_build(tmp / "data", "widget") == live  # readers never look at temp folders
    await app.index("widget")
    assert not stale.exists()
    await app.close()


@pytest.mark.asyncio
async def test_changed_embedder_stamp_forces_rebuild(sample) -> None:
    app, tmp = sample["app"], sample["tmp"]
    await app.index("widget")

    class Other(FakeEmbedder):
        name = "other-model"

    other = FakeApp(tmp / "instances", tmp / "data", Other, cache=tmp / "data" / "cache.sqlite")
    s = await other.index("widget")
    assert s.rebuilt_reason and "other-model" in s.rebuilt_reason
    assert s.units_reused == 0 and s.chunks_embedded == sum(s.chunks.values())
    await other.close()
    await app.close()


@pytest.mark.asyncio
async def test_reader_follows_new_build(sample) -> None:
    app, repo = sample["app"], sample["repo"]
    await app.index("widget")
    r1 = await app.reader("widget")
    write_files(repo, {"docs/cache.md": "# Caching\n\nThe cache keeps rendered charts.\n"})
    commit_all(repo)
    await app.index("widget")
    r2 = await app.reader("widget")
    assert r2 is not r1 and r2.size("docs") == r1.size("docs") + 1
    # A question still running on the old build finishes there: the old reader is retired,
    # not closed under it.
    assert len(await r1.all_chunks("docs")) == r1.size("docs")
    await app.close()


@pytest.mark.asyncio
async def test_concurrent_asks_share_one_model_thread(sample) -> None:
    app = sample["app"]
    await app.index("widget")
    answers = await asyncio.gather(*(app.ask("widget", f"timeout {i}") for i in range(10)))
    assert all(a.sources for a in answers)
    await app.close()


def test_index_requires_existing_repo_path(tmp_path: Path) -> None:
    from core.errors import SourceError

    (tmp_path / "i").mkdir()
    (tmp_path / "i" / "x.yaml").write_text("repo: {path: /nonexistent/repo}\n")
    app = FakeApp(tmp_path / "i", tmp_path / "d")
    with pytest.raises(SourceError, match=r"repo\.path: folder /nonexistent/repo does not exist"):
        asyncio.run(app.index("x"))


@pytest.mark.asyncio
async def test_asking_with_another_embedder_than_the_index_was_built_with_fails_clearly(
    sample,
) -> None:
    from core.errors import IndexError_

    app, tmp = sample["app"], sample["tmp"]
    await app.index("widget")

    class Other(FakeEmbedder):
        name = "other-model"

    other = FakeApp(tmp / "instances", tmp / "data", Other)
    with pytest.raises(IndexError_, match=r"built with fake-bow .* now embeds with other-model"):
        await other.ask("widget", "default timeout")
    await other.close()  # closes its embedding service
    other.svc.close()  # idempotent


@pytest.mark.asyncio
async def test_symlinks_and_collection_moves(sample) -> None:
    import os

    app, repo, tmp = sample["app"], sample["repo"], sample["tmp"]
    secret = tmp / "outside-secret.txt"
    secret.write_text("AWS_SECRET=hunter2")
    os.symlink(secret, repo / "leak.md")
    commit_all(repo)
    s = await app.index("widget")
    assert s.excluded["symbolic links"] == 1
    r = await open_live(tmp / "data", "widget")
    try:
        assert not any("hunter2" in c.text for c in await r.all_chunks())
    finally:
        await r.close()
    # Moving a file from docs to code by config re-chunks it in its new collection.
    inst = tmp / "instances" / "widget.yaml"
    inst.write_text(
        inst.read_text() + "docs: {include: ['docs/**']}\ncode: {include: ['**/*.py', '*.md']}\n"
    )
    svc = sample["svc"]
    app2 = RepoExpert(Settings(tmp / "instances", tmp / "data"), embedder_for=lambda i: svc)
    s2 = await app2.index("widget")
    r = await open_live(tmp / "data", "widget")
    try:
        colls = {c.path: c.collection for c in await r.all_chunks() if c.path == "README.md"}
        assert colls == {"README.md": "code"} and s2.units_changed >= 1
    finally:
        await r.close()
    await app2.close()
