"""The storage of a deployment, chosen by one setting: ``--store URL`` or ``REPO_EXPERT_STORE``.

    unset, "" or "local"      the embedded default: the index as SQLite + usearch files, the
                              state and conversations as SQLite files, all under the data
                              folder; builds serialised by a file lock; no job queue
    postgresql://…            one shared PostgreSQL database (pgvector): the index, every
                              instance's state, the bots' conversations, the build lock (an
                              advisory lock) and the job queue of ``repo-expert worker``

Every process of a deployment — CLI, bots, workers, the webhook receiver — points at the same
database the same way, so they share builds, state and threads. The URL's password is never
printed: :attr:`Backend.where` is the URL with it masked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.extras import need
from core.layout import Layout
from core.store.base import IndexStore
from core.store.conversations import ConversationStore
from core.store.local import LocalStore
from core.store.shared import Conversations, StateOpener


@dataclass
class Backend:
    """Where a deployment keeps everything. ``state``: None for the local state files (the
    default of ``index/sync.py`` and ``ingest/``), else the shared tables' opener; ``jobs``:
    the worker queue (PostgreSQL only)."""

    index: IndexStore
    state: StateOpener | None
    where: str  # "local" or the database URL with its password masked
    jobs: Any = None  # core.store.postgres.jobs.JobQueue when shared
    _db: Any = field(default=None, repr=False)

    @property
    def shared(self) -> bool:
        return self._db is not None

    async def conversations(self, path: Path) -> Conversations:
        """The bots' threads and feedback: the SQLite file at ``path``, or the shared tables."""
        if self._db is not None:
            from core.store.postgres.conversations import PgConversations

            return PgConversations(self._db)
        return await ConversationStore.open(path)

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()


def open_backend(url: str | None, layout: Layout) -> Backend:
    """The backend a store setting names (connections are opened on first use)."""
    if not url or url.strip() in ("", "local"):
        return Backend(LocalStore(layout), None, "local")
    from core.store.postgres.url import is_postgres_url, redact

    if not is_postgres_url(url):
        raise ConfigError(
            f"store {redact(url)!r}: use 'local' or a postgresql:// URL "
            "(--store or REPO_EXPERT_STORE)"
        )
    for module in ("asyncpg", "pgvector"):  # a missing one is one line naming the extra
        need(module, "postgres", "a postgresql:// store")
    from core.store.postgres.db import Database
    from core.store.postgres.index import PostgresStore
    from core.store.postgres.jobs import JobQueue
    from core.store.postgres.state import state_opener

    db = Database(url)
    return Backend(PostgresStore(db), state_opener(db), db.where, jobs=JobQueue(db), _db=db)
