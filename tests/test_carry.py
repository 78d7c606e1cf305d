"""An update that changes only some collections carries the others as the live build holds them
(``base.Carry``): an issue event on a repository whose commit did not move writes the issues
again and copies docs and code. What a carried build holds must be what a build written whole
from the same inputs holds — rows, vectors, postings (BM25), FTS5 content, symbols, links — and
answers must not change; on both stores, with a real git repository and an issues file."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pg
import pytest
from helpers import SAMPLE_ISSUES, FakeApp, FakeEmbedder, commit_all, sample_world, write_files

from core.cli.render import format_summary
from core.errors import StoreError
from core.index.build import Summary
from core.lexical import query_terms
from core.models import COLLECTIONS, Chunk, Symbol
from core.store.base import BuildReader, Carry
from core.store.local import LocalReader
from core.store.local_schema import SCHEMA
from core.store.local_write import _tables

QUESTIONS = ["default timeout", "where is parse_config defined", "dark theme colours",
             "is there an issue about the timeout being ignored"]  # fmt: skip


async def _snapshot(r: BuildReader) -> dict[str, Any]:
    """What a build holds: per collection its rows in order (their ids apart: a carried
    collection keeps the live build's) with their vectors, what BM25 finds (by chunk), and the
    units, symbols and links."""
    units = await r.units()
    kept, symbols = await r.carried(set(units))
    ids = [c.id for c, _ in kept]
    assert len(set(ids)) == len(ids), "two chunks of the build share an id"
    out: dict[str, Any] = {"units": units, "symbols": sorted(symbols, key=repr)}
    for coll in COLLECTIONS:
        got = [c for c, _ in kept if c.collection == coll]
        assert r.size(coll) == len(got)
        out[coll] = [(json.dumps({**c.__dict__, "id": None}), v.tolist())
                     for c, v in kept if c.collection == coll]  # fmt: skip
        out[coll + " ids"] = [c.id for c in got]
        for q in QUESTIONS:
            out[f"{coll} bm25 {q}"] = [
                (got[h.row].doc_key, got[h.row].start_line, round(h.score, 9))
                for h in await r.lexical(coll, query_terms(q), 10)
            ]
    out["links"] = await r.links([42, 7, 8])
    out["callers"] = await r.callers("setdefault")
    return out


SUMMED = ("chunks", "files", "symbols", "largest_chunk_tokens", "over_window",
          "collection_tokens")  # fmt: skip


async def _as_if_written_whole(
    app: FakeApp, inst: Path, data: Path, backend: str, in_order: bool = True
) -> Summary:
    """The live build of ``app`` holds what the same inputs indexed whole into a store of their
    own hold (``in_order``: row for row; else as a set: an update appends a changed file's
    chunks), and answers as it does (locally the FTS5 tables too)."""
    whole = FakeApp(inst, data, store=pg.new_database() if backend == "postgres" else None)
    try:
        written = await whole.index("widget")
        assert written.carried == []
        a, b = await app.store.open_live("widget"), await whole.store.open_live("widget")
        assert a is not None and b is not None
        try:
            sa, sb = await _snapshot(a), await _snapshot(b)
            assert sa.keys() == sb.keys()
            for key in sa:
                if key.endswith(" ids"):
                    continue
                if in_order:
                    assert sa[key] == sb[key], key
                else:
                    assert sorted(sa[key], key=repr) == sorted(sb[key], key=repr), key
            if backend == "local":
                fa, fb = _fts(a), _fts(b)
                assert fa.keys() == fb.keys()
                for key in fa:  # by (collection, row) when in order, else by text
                    assert (fa[key] if in_order else sorted(x[1:] for x in fa[key])) == (
                        fb[key] if in_order else sorted(x[1:] for x in fb[key])
                    ), key
        finally:
            await a.close()
            await b.close()
        for q in QUESTIONS:
            x, y = await app.ask("widget", q), await whole.ask("widget", q)
            assert [(s.url, round(s.score, 6)) for s in x.sources] == [
                (s.url, round(s.score, 6)) for s in y.sources
            ], q
            assert x.text == y.text, q
        return written
    finally:
        await whole.close()


async def _live(app: FakeApp) -> dict[str, Any]:
    r = await app.store.open_live("widget")
    assert r is not None
    try:
        return await _snapshot(r)
    finally:
        await r.close()


def _fts(r: BuildReader) -> dict[str, Any]:
    """A local build's FTS5 tables: each row's text by (collection, row), and what a few
    tokens match."""
    assert isinstance(r, LocalReader)
    db = sqlite3.connect(f"file:{r.path / 'meta.sqlite'}?mode=ro", uri=True)
    try:
        out: dict[str, Any] = {}
        for c in COLLECTIONS:
            join = f"FROM fts_{c} f JOIN chunks c ON c.id = f.rowid AND c.collection = '{c}'"
            out[c] = db.execute(f"SELECT c.row, f.body {join} ORDER BY c.row").fetchall()
            for term in ("timeout", "theme", "parse"):
                out[f"{c} {term}"] = db.execute(
                    f"SELECT c.row, f.body, round(bm25(fts_{c}), 6) {join} "
                    f"WHERE fts_{c} MATCH ? ORDER BY c.row", (term,),
                ).fetchall()  # fmt: skip
        return out
    finally:
        db.close()


async def _edit_live_meta(
    app: FakeApp, key: str, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    """Rewrite one meta value of a local live build in place (standing in for a build an older
    version wrote)."""
    live = str(await app.store.live_id("widget"))
    db = sqlite3.connect(app.layout.builds("widget") / live / "meta.sqlite")
    try:
        (text,) = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        db.execute(
            "UPDATE meta SET value = ? WHERE key = ?", (json.dumps(change(json.loads(text))), key)
        )
        db.commit()
    finally:
        db.close()


def _edit_issue(issues: Path, number: int, text: str) -> None:
    got = json.loads(issues.read_text())
    for i in got:
        if i["number"] == number:
            i["body"] += text
    issues.write_text(json.dumps(got))


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["local", "postgres"])
async def test_an_issue_event_carries_docs_and_code_and_the_build_is_as_if_written_whole(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    repo, _, inst = sample_world(tmp_path)
    issues = tmp_path / "issues.json"
    store = request.getfixturevalue("pg_url") if backend == "postgres" else None
    app = FakeApp(inst, tmp_path / "data", store=store)
    try:
        first = await app.index("widget")
        assert first.carried == []  # nothing to carry from
        live = await app.store.live_id("widget")

        was = await _live(app)
        _edit_issue(issues, 7, "\n\nStill dim on the 2.1 release, the timeout page too.")
        one = await app.index("widget")
        now = await _live(app)
        for key in now:  # the carried collections are the live build's, ids and all
            if key.startswith(("code", "docs")):
                assert now[key] == was[key], key
        assert now["issues"] != was["issues"]
        assert (one.carried, one.units_changed, one.kept_live) == (["code", "docs"], 1, False)
        assert one.chunks == first.chunks and one.symbols == first.symbols
        assert "code and docs unchanged; carried from the live build" in format_summary(one)
        assert one.to_json()["carried"] == ["code", "docs"]  # index --json, status
        assert await app.store.live_id("widget") != live

        # A second issue event carries from a carried build; a thread that goes and one that
        # comes touch only the issues too.
        got = json.loads(issues.read_text())
        got = [i for i in got if i["number"] != 7] + [
            {**SAMPLE_ISSUES[1], "number": 8, "title": "Timeout docs unclear",
             "body": "The docs on the timeout in widget.toml do not say its unit.",
             "url": "https://github.com/acme/widget/issues/8"}
        ]  # fmt: skip
        issues.write_text(json.dumps(got))
        two = await app.index("widget")
        assert two.carried == ["code", "docs"] and two.units_deleted == 1
        if backend == "local":  # a carried build's tables are this version's: the next copies it
            built = app.layout.builds("widget") / str(await app.store.live_id("widget"))
            assert _tables(f"file:{built / 'meta.sqlite'}?mode=ro") == _tables(":memory:", SCHEMA)

        written = await _as_if_written_whole(app, inst, tmp_path / "data-whole", backend)
        for key in SUMMED:  # counts taken from the live build's summary, docs and code unread
            assert getattr(two, key) == getattr(written, key), key

        # A commit moves the pins: nothing is carried, every permalink re-pinned.
        (repo / "README.md").write_text((repo / "README.md").read_text() + "\nMore words.\n")
        sha = commit_all(repo)
        three = await app.index("widget")
        assert three.carried == [] and three.units_changed == 1
        r = await app.store.open_live("widget")
        assert r is not None
        try:
            assert all(sha in c.url for c in await r.all_chunks("code"))
        finally:
            await r.close()

        # A dirty tree moves the pins once (not clean); edited again, the docs are written and
        # code and issues carried (their ids now below the docs').
        (repo / "README.md").write_text((repo / "README.md").read_text() + "\nDirty words.\n")
        assert (await app.index("widget")).carried == []
        (repo / "README.md").write_text((repo / "README.md").read_text() + "\nDirtier.\n")
        was = await _live(app)
        four = await app.index("widget")
        assert (four.carried, four.units_changed) == (["code", "issues"], 1)
        now = await _live(app)
        for key in now:  # the carried collections are the live build's, ids and all
            if key.startswith(("code", "issues")):
                assert now[key] == was[key], key
        assert now["docs"] != was["docs"]
        await _as_if_written_whole(app, inst, tmp_path / "data-whole-2", backend, in_order=False)
    finally:
        await app.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["local", "postgres"])
async def test_carrying_from_a_build_that_is_not_live_fails_and_the_live_build_serves(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    _, _, inst = sample_world(tmp_path)
    store = request.getfixturevalue("pg_url") if backend == "postgres" else None
    app = FakeApp(inst, tmp_path / "data", store=store)
    try:
        await app.index("widget")
        live = await app.store.live_id("widget")
        gone = Carry("20200101t000000_0000abcd", frozenset({"docs"}))
        with pytest.raises(StoreError, match="20200101t000000_0000abcd"):
            async with app.store.writer("widget", gone) as w:
                await w.commit()
        assert await app.store.live_id("widget") == live
        assert (await app.ask("widget", "default timeout")).sources
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_live_build_with_other_tables_is_carried_row_by_row(tmp_path: Path) -> None:
    """A live build whose SQLite tables are not this version's (the same stamp let it through:
    an index added since) is not copied as a file: the carried rows are read into this
    version's tables, FTS5 made again; what the build holds is the same. A build that is not
    the live one (the previous, still kept) is refused."""
    _, _, inst = sample_world(tmp_path)
    app = FakeApp(inst, tmp_path / "data")
    try:
        await app.index("widget")
        _edit_issue(tmp_path / "issues.json", 42, "\n\nSeen on 2.0.")
        await app.index("widget")
        live = await app.store.live_id("widget")
        db = sqlite3.connect(tmp_path / "data/widget/builds" / str(live) / "meta.sqlite")
        db.execute("DROP INDEX chunks_path")
        db.commit()
        db.close()
        _edit_issue(tmp_path / "issues.json", 7, "\n\nAnd on 2.1.")
        assert (await app.index("widget")).carried == ["code", "docs"]
        new = tmp_path / "data/widget/builds" / str(await app.store.live_id("widget"))
        db = sqlite3.connect(new / "meta.sqlite")
        assert db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_path'").fetchone()
        db.close()
        await _as_if_written_whole(app, inst, tmp_path / "data-whole", "local")

        older = str(live)  # replaced, still kept for readers on it
        assert (tmp_path / "data/widget/builds" / older / "meta.sqlite").is_file()
        with pytest.raises(StoreError, match="not the live build"):
            async with app.store.writer("widget", Carry(older, frozenset({"docs"}))) as w:
                await w.commit()
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_live_build_without_per_collection_counts_has_its_carried_chunks_read(
    tmp_path: Path,
) -> None:
    """A live build whose summary does not give per-collection counts (written before they
    were recorded) is still carried from; its carried chunks are read for the counts, which
    come out as a build written whole has them."""
    _, _, inst = sample_world(tmp_path)
    app = FakeApp(inst, tmp_path / "data")
    try:
        await app.index("widget")
        await _edit_live_meta(
            app, "summary", lambda v: {k: x for k, x in v.items() if k != "collection_tokens"}
        )
        _edit_issue(
            tmp_path / "issues.json",
            42,
            "\n\nSeen again on 2.0 with a much longer "
            "report of what happened, to make this thread the largest chunk of all.",
        )
        event = await app.index("widget")
        assert event.carried == ["code", "docs"]
        written = await _as_if_written_whole(
            app, inst, tmp_path / "data-whole", "local", in_order=False
        )  # the changed thread's chunks come after the kept one's
        for key in SUMMED:
            assert getattr(event, key) == getattr(written, key), key
    finally:
        await app.close()


class Choking(FakeEmbedder):
    """An embedder whose tokenizer fails on one text: the unit holding it cannot be chunked."""

    def count_tokens(self, text: str) -> int:
        if "CHOKE" in text:
            raise ValueError("the tokenizer cannot read this")
        return super().count_tokens(text)


@pytest.mark.asyncio
async def test_a_unit_that_cannot_be_chunked_fails_once_not_every_update(tmp_path: Path) -> None:
    """A unit no chunker gets through is left out, "excluded" with its reason; unchanged, it
    is not chunked again and is no reason to write a build: the next update keeps the live
    build, an issue event still carries its collection. Changed, it is tried again."""
    repo, _, inst = sample_world(tmp_path)
    write_files(repo, {"docs/broken.md": "# Broken\n\nThis page makes the tokenizer CHOKE.\n"})
    commit_all(repo)
    app = FakeApp(inst, tmp_path / "data", Choking)
    why = "could not be chunked (ValueError)"
    try:
        first = await app.index("widget")
        assert first.excluded[why] == 1 and first.files["docs"] == 2
        again = await app.index("widget")
        assert again.kept_live and again.units_changed == 0 and again.excluded[why] == 1
        _edit_issue(tmp_path / "issues.json", 7, "\n\nStill dim.")
        event = await app.index("widget")
        assert (event.carried, event.units_changed, event.excluded[why]) == (["code", "docs"], 1, 1)

        write_files(repo, {"docs/broken.md": "# Broken\n\nThis page reads fine now.\n"})
        commit_all(repo)
        fixed = await app.index("widget")
        assert fixed.units_changed == 1 and why not in fixed.excluded
        assert fixed.files["docs"] == 3
        assert any(
            s.path == "docs/broken.md" for s in (await app.ask("widget", "broken page")).sources
        )
    finally:
        await app.close()


def _rows(coll: str, n: int, tag: str) -> list[Chunk]:
    return [Chunk(coll, f"{coll}/{tag}{i}.md", f"{coll} {tag} row {i} about timeouts", f"{tag}{i}",
                  5, path=f"{coll}/{tag}{i}.md", start_line=1, end_line=2, kind="section")
            for i in range(n)]  # fmt: skip


def _vectors(rows: list[Chunk]) -> np.ndarray:
    rng = np.random.default_rng(len(rows) * 7 + len(rows[0].doc_key))
    v = rng.normal(size=(len(rows), 8)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def _pg_build(store: Any, carry: Carry | None, tag: str) -> str:
    """A build of instance ``org``: docs and code (unless carried) and issues of its own."""
    carried = carry.collections if carry else frozenset()
    async with store.writer("org", carry) as w:
        for coll in ("docs", "code", "issues"):
            if coll not in carried:
                rows = _rows(coll, 6, tag if coll == "issues" else "base")
                await w.add_chunks(coll, rows, _vectors(rows))
        if "code" not in carried:
            await w.add_symbols([Symbol("load", "load", "function", "code/base0.md", 1, 2,
                                        ("parse",))])  # fmt: skip
        await w.add_units([])
        await w.set_meta("stamp", {"schema": store.schema})
        return await w.commit()


@pytest.mark.asyncio
async def test_postgres_shares_a_carried_collections_tables_and_drops_them_when_unread() -> None:
    """On PostgreSQL a carried collection is the live build's table itself (its HNSW index
    too): nothing is copied or indexed again. A shared table outlives the build that made it
    while the live or the previous build reads it, and goes with the last build that does."""
    from core.store.postgres.db import Database
    from core.store.postgres.index import PostgresStore

    store = PostgresStore(Database(pg.new_database()), hnsw_min_rows=1)
    pool = await store.db.pool()

    async def tables() -> set[str]:
        got = await pool.fetch("SELECT tablename FROM pg_tables WHERE tablename LIKE 'rx\\_b%'")
        return {str(r[0]) for r in got} - {"rx_builds"}  # a build's tables: rx_b{id}_{what}

    async def builds() -> set[str]:
        return {str(r[0]) for r in await pool.fetch("SELECT id FROM rx_builds")}

    try:
        a = await _pg_build(store, None, "a")
        both = frozenset({"docs", "code"})
        b = await _pg_build(store, Carry(a, both), "b")
        c = await _pg_build(store, Carry(b, both), "c")  # shares a's tables, not b's
        r = await store.open_live("org")
        assert r is not None and r.build_id == c
        try:
            assert r.meta["shared_tables"] == {w: a for w in (
                "docs", "docs_post", "code", "code_post", "symbols", "calls")}  # fmt: skip
            assert {"docs", "code", "issues"} <= r._hnsw  # a's HNSW indexes read as they are
            hits = await r.dense("code", _vectors(_rows("code", 6, "base"))[2], 1)
            assert [h.row for h in hits] == [2]
            assert [h.row for h in await r.lexical("issues", ["row"], 3)] and (
                await r.chunks("issues", [0])
            )[0].doc_key == "issues/c0.md"
            assert [s.name for s in await r.callers("parse")] == ["load"]
        finally:
            await r.close()
        made = await tables()
        assert f"rx_b{b}_code" not in made and f"rx_b{c}_docs" not in made
        assert {f"rx_b{a}_code", f"rx_b{a}_docs_post", f"rx_b{a}_symbols"} <= made
        assert f"rx_b{a}_issues" not in made  # a's own issues went with it
        assert await builds() == {a, b, c}  # a's row stays while its tables are read
        d = await _pg_build(store, None, "d")  # written whole; c, the previous, still reads a's
        assert {f"rx_b{a}_code", f"rx_b{a}_symbols"} <= await tables()
        assert await builds() == {a, c, d}
        e = await _pg_build(store, None, "e")  # nothing reads a's tables any more
        assert await builds() == {d, e}
        left = {t for t in await tables() if not t.startswith((f"rx_b{d}_", f"rx_b{e}_"))}
        assert left == set()
    finally:
        await store.close()


@pytest.mark.asyncio
async def test_a_build_of_other_lexical_forms_is_written_afresh(tmp_path: Path) -> None:
    """A write reuses the lexical forms the live build holds for the chunks it keeps, so a
    build whose forms are another version's (its stamp) is not read at all: rebuilt."""
    _, _, inst = sample_world(tmp_path)
    app = FakeApp(inst, tmp_path / "data")
    try:
        await app.index("widget")
        await _edit_live_meta(app, "stamp", lambda v: {**v, "lexical": 0})
        _edit_issue(tmp_path / "issues.json", 7, "\n\nStill dim.")
        again = await app.index("widget")
        assert again.rebuilt_reason and "'lexical': 0" in again.rebuilt_reason
        assert again.carried == [] and again.units_reused == 0
    finally:
        await app.close()
