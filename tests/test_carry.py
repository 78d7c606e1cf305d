"""An update that changes only some collections carries the others as the live build holds them
(``base.Carry``): an issue event on a repository whose commit did not move writes the issues
again and copies docs and code. What a carried build holds must be what a build written whole
from the same inputs holds — rows, vectors, postings (BM25), FTS5 content, symbols, links — and
answers must not change; on both stores, with a real git repository and an issues file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pg
import pytest
from helpers import SAMPLE_ISSUES, FakeApp, commit_all, sample_world

from core.cli.render import format_summary
from core.errors import StoreError
from core.lexical import query_terms
from core.models import COLLECTIONS
from core.store.base import BuildReader, Carry

QUESTIONS = ["default timeout", "where is parse_config defined", "dark theme colours",
             "is there an issue about the timeout being ignored"]  # fmt: skip


async def _snapshot(r: BuildReader) -> dict[str, Any]:
    """What a build holds, but its chunks' ids (a carried collection keeps the live build's)."""
    units = await r.units()
    kept, symbols = await r.carried(set(units))
    out: dict[str, Any] = {"units": units, "symbols": sorted(symbols, key=repr)}
    for coll in COLLECTIONS:
        rows = [(c, v) for c, v in kept if c.collection == coll]
        out[coll] = [{**c.__dict__, "id": None} for c, _ in rows]
        out[coll + " vectors"] = np.stack([v for _, v in rows]).tolist() if rows else []
        assert r.size(coll) == len(rows)
        for q in QUESTIONS:
            out[f"{coll} bm25 {q}"] = await r.lexical(coll, query_terms(q), 10)
    out["links"] = await r.links([42, 7, 8])
    out["callers"] = await r.callers("setdefault")
    return out


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
    whole: FakeApp | None = None
    try:
        first = await app.index("widget")
        assert first.carried == []  # nothing to carry from
        live = await app.store.live_id("widget")

        _edit_issue(issues, 7, "\n\nStill dim on the 2.1 release, the timeout page too.")
        one = await app.index("widget")
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

        # The same inputs indexed whole, into a store of its own.
        other = pg.new_database() if backend == "postgres" else None
        whole = FakeApp(inst, tmp_path / "data-whole", store=other)
        assert (await whole.index("widget")).carried == []
        a, b = await app.store.open_live("widget"), await whole.store.open_live("widget")
        assert a is not None and b is not None
        try:
            sa, sb = await _snapshot(a), await _snapshot(b)
            assert sa.keys() == sb.keys()
            for key in sa:
                assert sa[key] == sb[key], key
            assert sa["issues"] and any(c["issue"] == 8 for c in sa["issues"])
        finally:
            await a.close()
            await b.close()
        for q in QUESTIONS:
            x, y = await app.ask("widget", q), await whole.ask("widget", q)
            assert [(s.url, round(s.score, 6)) for s in x.sources] == [
                (s.url, round(s.score, 6)) for s in y.sources
            ], q
            assert x.text == y.text, q

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

        # A changed doc with the commit unmoved (a dirty tree moves the pins too): an issue
        # event after it carries again, from a build whose first carried files are long gone.
        _edit_issue(issues, 42, "\n\nSeen again on 2.2.")
        four = await app.index("widget")
        assert four.carried == ["code", "docs"]
        assert (await app.ask("widget", "default timeout")).sources
    finally:
        await app.close()
        if whole is not None:
            await whole.close()


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
