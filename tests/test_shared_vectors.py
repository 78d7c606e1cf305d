"""The tuned reader's passage vectors shared through a PostgreSQL store (``rx_vectors``,
core/store/postgres/vectors.py): a build with the reader on keeps every chunk's vector there, so
a server whose data folder is not the builder's reads no passage; a builder whose embedding cache
already holds them copies them rather than reading again; the table failing costs a question
nothing but time, and fails a build. A real server (tests/pg.py), one fresh database per test."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import FakeApp

from core.embed import reading
from core.embed.reader import shared
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
async def test_shared_vectors_keep_the_first_and_check_their_size(pg_url: str) -> None:
    db = Database(pg_url)
    v = PgVectors(db)
    try:
        a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
        assert await v.missing("m", []) == set() and await v.get("m", [], 4) == {}
        await v.put("m", [("h1", a)])
        await v.put("m", [("h1", b), ("h2", b)])  # h1 is kept as it was
        assert await v.missing("m", ["h1", "h2", "h3"]) == {"h3"}
        assert await v.missing("other", ["h1"]) == {"h1"}  # by model
        got = await v.get("m", ["h1", "h2", "h3"], 4)
        assert set(got) == {"h1", "h2"} and np.array_equal(got["h1"], a)
        with pytest.raises(StoreError, match=r"vector of 4 floats for model 'm', expected 8"):
            await v.get("m", ["h1"], 8)
    finally:
        await db.close()


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
        there = await builder.retrieve("widget", QUESTION)
        reading.MEMO.vectors.clear()  # the other process remembers nothing
        await server.preload()
        before = reading.MEMO.passages_read
        here = await server.retrieve("widget", QUESTION)
        assert here.route["ranker"] == "learned+reader"
        assert reading.MEMO.passages_read == before  # every passage came from the database
        assert [(s.path, s.start_line, round(s.score, 5)) for s in here.sources] == [
            (s.path, s.start_line, round(s.score, 5)) for s in there.sources]  # fmt: skip
        reader = shared()
        local = server.svc  # its own cache got none of them: they were only remembered
        hashes = [text_hash(t) for t in texts]
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
