"""The tuned reader's passage vectors shared through a PostgreSQL store (``rx_vectors``,
core/store/postgres/vectors.py): a build with the reader on keeps every chunk's vector there, so
a server whose data folder is not the builder's reads no passage; a builder whose embedding cache
already holds them copies them rather than reading again; the table failing costs a question
nothing but time, and fails a build. A real server (tests/pg.py), one fresh database per test."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import FakeApp

from core.embed import reading
from core.embed.reader import PASSAGE_TOKENS, shared
from core.embed.reading import Memo
from core.embed.service import text_hash
from core.errors import StoreError
from core.store.postgres.db import Database
from core.store.postgres.vectors import PgVectors

QUESTION = "which settings does parse_config return?"


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reading, "MEMO", Memo())


def app_on(tmp: Path, folder: str, store: str) -> FakeApp:
    """A process of the deployment: its own data folder and embedding cache, the reader on."""
    app = FakeApp(tmp / "instances", tmp / folder, cache=tmp / folder / "cache.sqlite",
                  store=store)  # fmt: skip
    app.instance("widget").retrieval.reader = True
    return app


async def shared_count(url: str) -> int:
    db = Database(url)
    try:
        return int(await (await db.pool()).fetchval("SELECT count(*) FROM rx_vectors"))
    finally:
        await db.close()


async def distinct_texts(app: FakeApp) -> set[str]:
    reader = await app.reader("widget")
    return {c.text for c in await reader.all_chunks()}


@pytest.mark.asyncio
async def test_shared_vectors_keep_the_first_and_replace_a_damaged_one(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(pg_url)
    v = PgVectors(db)
    try:
        a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
        assert await v.missing("m", [], 4) == set() and await v.get("m", [], 4) == {}
        await v.put("m", [("h1", a)])
        await v.put("m", [("h1", b), ("h2", b)])  # h1 is kept as it was
        assert await v.missing("m", ["h1", "h2", "h3"], 4) == {"h3"}
        assert await v.missing("other", ["h1"], 4) == {"h1"}  # by model
        got = await v.get("m", ["h1", "h2", "h3"], 4)
        assert set(got) == {"h1", "h2"} and np.array_equal(got["h1"], a)
        # A row of the wrong size (damaged by hand): missing, left out with a warning, and
        # replaced by the next writer.
        pool = await db.pool()
        await pool.execute("UPDATE rx_vectors SET vec = '\\x0102'::bytea WHERE hash = 'h2'")
        assert await v.missing("m", ["h1", "h2"], 4) == {"h2"}
        with caplog.at_level(logging.WARNING, logger="core.store.postgres.vectors"):
            assert set(await v.get("m", ["h1", "h2"], 4)) == {"h1"}
        assert any("h2" in m and "2 bytes, expected 16" in m for m in caplog.messages)
        await v.put("m", [("h2", a)])
        assert np.array_equal((await v.get("m", ["h2"], 4))["h2"], a)
    finally:
        await db.close()


@pytest.mark.asyncio
async def test_two_writers_of_the_same_vectors_at_once_both_finish(pg_url: str) -> None:
    """Two builds keeping overlapping vectors at the same moment (two instances sharing files),
    given in opposite orders: neither waits on the other in a cycle (no deadlock error)."""
    dbs = [Database(pg_url), Database(pg_url)]
    try:
        rng = np.random.default_rng(3)
        items = [(f"h{i:04d}", rng.normal(size=8).astype(np.float32)) for i in range(1500)]
        writers = [PgVectors(d) for d in dbs]
        for _ in range(5):
            await (await dbs[0].pool()).execute("DELETE FROM rx_vectors")
            await asyncio.gather(writers[0].put("m", items), writers[1].put("m", items[::-1]))
        assert await writers[0].missing("m", [h for h, _ in items], 8) == set()
    finally:
        for d in dbs:
            await d.close()


@pytest.mark.asyncio
async def test_a_server_on_another_data_folder_reads_no_passage(
    sample: dict[str, Any], pg_url: str
) -> None:
    """The builder keeps every chunk's reader vector in the database; another process, whose
    data folder and cache hold none of them, ranks with the same scores and reads only the
    question."""
    tmp = sample["tmp"]
    builder = app_on(tmp, "data-builder", pg_url)
    server = app_on(tmp, "data-server", pg_url)
    try:
        built = await builder.index("widget")
        texts = await distinct_texts(builder)
        assert built.chunks_read == len(texts) > 0
        assert await shared_count(pg_url) == len(texts)
        # what the database keeps is what the builder read, under each text's own hash
        reader = shared()
        hashes = [text_hash(t) for t in sorted(texts)]
        mine = await builder.svc.run(
            lambda _: builder.svc.cached_get(reader.name, hashes, reader.hidden))
        db = Database(pg_url)
        try:
            kept = await PgVectors(db).get(reader.name, hashes, reader.hidden)
        finally:
            await db.close()
        assert set(kept) == set(mine) == set(hashes)
        assert all(np.array_equal(kept[h], mine[h]) for h in hashes)
        fresh = reader.vectors([reader.ids(t, False, PASSAGE_TOKENS) for t in sorted(texts)[:3]])
        assert np.allclose(np.stack([kept[h] for h in hashes[:3]]), fresh, atol=1e-5)
        there = await builder.retrieve("widget", QUESTION)
        reading.MEMO.vectors.clear()  # the other process remembers nothing
        await server.preload()
        before = reading.MEMO.passages_read
        here = await server.retrieve("widget", QUESTION)
        assert here.route["ranker"] == "learned+reader"
        assert reading.MEMO.passages_read == before  # every passage came from the database
        assert [(s.path, s.start_line, round(s.score, 5)) for s in here.sources] == [
            (s.path, s.start_line, round(s.score, 5)) for s in there.sources]  # fmt: skip
        local = server.svc  # its own cache got none of them: they were only remembered
        got = await local.run(lambda _: local.cached_has(reader.name, hashes))
        assert got == set()
        assert (await builder.index("widget")).chunks_read == 0  # nothing new to read or keep
    finally:
        await builder.close()
        await server.close()


@pytest.mark.asyncio
async def test_a_builder_whose_cache_has_the_vectors_copies_them(
    sample: dict[str, Any], pg_url: str
) -> None:
    """A deployment moved from the local store to PostgreSQL: the builder's embedding cache
    already holds every passage's vector, so its first build reads none and copies them all."""
    tmp = sample["tmp"]
    local = app_on(tmp, "data", "local")
    try:
        assert (await local.index("widget")).chunks_read > 0
    finally:
        await local.close()
    moved = app_on(tmp, "data", pg_url)
    try:
        before = reading.MEMO.passages_read
        built = await moved.index("widget")
        assert built.chunks_read == 0 and reading.MEMO.passages_read == before
        assert await shared_count(pg_url) == len(await distinct_texts(moved))
    finally:
        await moved.close()


@pytest.mark.asyncio
async def test_without_the_table_a_question_goes_on_and_a_build_fails(
    sample: dict[str, Any], pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The shared vectors cannot be read (their table dropped by hand): a question is answered,
    its passages read here, with one warning; a build fails with the store's error and the live
    build keeps serving."""
    tmp = sample["tmp"]
    app = app_on(tmp, "data", pg_url)
    try:
        await app.index("widget")
        live = await app.store.live_id("widget")
        db = Database(pg_url)
        try:
            await (await db.pool()).execute("DROP TABLE rx_vectors")
        finally:
            await db.close()
        reading.MEMO.vectors.clear()
        with caplog.at_level(logging.WARNING, logger="core.embed.reading"):
            r = await app.retrieve("widget", QUESTION)
        assert r.route["ranker"] == "learned+reader" and r.sources
        assert any("without the shared vectors" in m and "rx_vectors" in m
                   for m in caplog.messages)  # fmt: skip
        with pytest.raises(StoreError, match="shared vectors"):
            await app.index("widget", full=True)
        assert await app.store.live_id("widget") == live
    finally:
        await app.close()
