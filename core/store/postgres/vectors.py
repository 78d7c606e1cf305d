"""Vectors shared by every process of a PostgreSQL deployment (``rx_vectors``): the tuned
reader's passage vectors, by (model name, text hash).

A build with ``retrieval.reader`` on reads every chunk's passage ahead (``core/embed/reading.py``)
and keeps the vectors here as well as in its own data folder's embedding cache; a server on
another machine, whose data folder holds none of them, finds them here at question time instead
of reading each passage (about 75 ms a passage on two cores). A vector depends only on its text
and the model (whose name carries the weights' digest), so a kept row is never updated — a second
writer of the same vector changes nothing, a new model's vectors are new rows — unless its size
is wrong for the model (a damaged row: read as missing, and replaced by the next build).
Nothing is pruned: an old model's rows stay until deleted by hand (``DELETE FROM rx_vectors
WHERE model <> '…'``, the current reader's name), as the local embedding cache keeps its own.

Vectors are float32 bytes, not a pgvector column: they are only ever fetched by key, never
searched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import asyncpg
import numpy as np

from core.errors import StoreError
from core.store.postgres.db import Database, why

log = logging.getLogger(__name__)

PUT_BATCH = 500  # rows per INSERT (about 0.8 MB of 384-float vectors)


class PgVectors:
    """``rx_vectors`` of one database (implements ``core.store.base.SharedVectors``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def missing(self, model: str, hashes: Sequence[str], dim: int) -> set[str]:
        if not hashes:
            return set()
        got = await self._query(
            "SELECT hash FROM rx_vectors WHERE model = $1 AND hash = ANY($2::text[]) "
            "AND octet_length(vec) = $3",
            model, list(hashes), 4 * dim,
        )  # fmt: skip
        return set(hashes) - {str(r[0]) for r in got}

    async def get(self, model: str, hashes: Sequence[str], dim: int) -> dict[str, np.ndarray]:
        if not hashes:
            return {}
        got = await self._query(
            "SELECT hash, vec FROM rx_vectors WHERE model = $1 AND hash = ANY($2::text[])",
            model, list(hashes),
        )  # fmt: skip
        out: dict[str, np.ndarray] = {}
        for h, blob in got:
            if len(blob) != 4 * dim:  # not this model's size: missing (the next build replaces it)
                log.warning("rx_vectors: the vector of %s for %s has %d bytes, expected %d: "
                            "ignored", h, model, len(blob), 4 * dim)  # fmt: skip
                continue
            out[str(h)] = np.frombuffer(bytes(blob), np.float32).copy()
        return out

    async def put(self, model: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        # In hash order: two builders keeping the same vectors at once (two instances sharing a
        # file) then wait for each other's rows in one order, never in a cycle (a deadlock).
        rows = sorted(dict(items).items())
        for i in range(0, len(rows), PUT_BATCH):
            part = rows[i : i + PUT_BATCH]
            await self._query(
                "INSERT INTO rx_vectors AS t (model, hash, vec) "
                "SELECT $1, h, v FROM unnest($2::text[], $3::bytea[]) AS n(h, v) "
                "ON CONFLICT (model, hash) DO UPDATE SET vec = EXCLUDED.vec "
                "WHERE octet_length(t.vec) <> octet_length(EXCLUDED.vec)",
                model, [h for h, _ in part],
                [np.ascontiguousarray(v, np.float32).tobytes() for _, v in part],
            )  # fmt: skip

    async def _query(self, sql: str, *args: object) -> list[asyncpg.Record]:
        """One statement's rows (none for an INSERT); a failure is the store's, URL masked."""
        pool = await self.db.pool()
        try:
            return list(await pool.fetch(sql, *args))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            raise StoreError(f"{self.db.where}: shared vectors: {why(e)}") from None
