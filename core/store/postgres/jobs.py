"""The queue of index/sync jobs (``rx_jobs``) that ``repo-expert worker`` processes take from.

- ``enqueue``: one *queued* job per instance (a unique partial index): a request for an instance
  that already has one merges into it (``SyncRequest.merge``), so a burst of webhook deliveries
  or watch ticks costs one sync; ``NOTIFY rx_jobs`` wakes idle workers.
- ``claim``: ``FOR UPDATE SKIP LOCKED`` — workers never wait on each other's rows — and never a
  job of an instance that has one *running*: one job per instance at a time across all workers
  (the build lock, an advisory lock, holds it too, against a CLI ``index`` as well).
- A running job records its worker's database session (``pg_backend_pid`` and its start time)
  and a heartbeat. ``reclaim`` puts back in the queue a running job whose session is gone (the
  worker was killed: the server closed its session) or whose heartbeat is older than the lease
  (a hung worker); after ``MAX_ATTEMPTS`` starts it fails instead. The killed worker's build was
  one uncommitted transaction: the previous build stayed live.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

from core.models import SyncRequest
from core.store.postgres.db import Database, json_value

CHANNEL = "rx_jobs"
MAX_ATTEMPTS = 3
LEASE_S = 120.0  # a running job whose heartbeat is older than this is taken back


def request_json(req: SyncRequest) -> str:
    return json.dumps(req.to_json())


def request_of(data: Any) -> SyncRequest:
    return SyncRequest.from_json(dict(json_value(data)))


@dataclass(frozen=True)
class Job:
    id: int
    instance: str
    request: SyncRequest
    attempts: int  # starts so far, this one included


class JobQueue:
    def __init__(self, db: Database, *, lease_s: float = LEASE_S) -> None:
        self.db = db
        self.lease_s = lease_s

    async def enqueue(self, instance: str, request: SyncRequest) -> int:
        """Queue a sync of ``instance`` (merged into its queued job if it has one): the job id."""
        pool = await self.db.pool()
        async with pool.acquire() as conn, conn.transaction():
            got = await conn.fetchval(
                "INSERT INTO rx_jobs (instance, request) VALUES ($1, $2) "
                "ON CONFLICT (instance) WHERE state = 'queued' DO NOTHING RETURNING id",
                instance, request_json(request),
            )  # fmt: skip
            if got is None:
                row = await conn.fetchrow(
                    "SELECT id, request FROM rx_jobs WHERE instance = $1 AND state = 'queued' "
                    "FOR UPDATE",
                    instance,
                )
                if row is None:  # taken by a worker in between: queue anew
                    return await self.enqueue(instance, request)
                got = row[0]
                merged = request_of(row[1]).merge(request)
                await conn.execute(
                    "UPDATE rx_jobs SET request = $2 WHERE id = $1", got, request_json(merged)
                )
            await conn.execute(f"NOTIFY {CHANNEL}")
        return int(got)

    async def session(self) -> asyncpg.Connection:
        """A worker's own connection: it claims and heartbeats on it, and its death (the server
        closes the session) is how a killed worker is noticed."""
        await self.db.pool()  # migrated first
        return await self.db.connect()

    async def claim(
        self, conn: asyncpg.Connection, worker: str, instances: list[str] | None = None
    ) -> Job | None:
        async with conn.transaction():
            row = await conn.fetchrow(
                "SELECT id, instance, request, attempts FROM rx_jobs j "
                "WHERE state = 'queued' AND not_before <= now() "
                "AND ($1::text[] IS NULL OR instance = ANY($1::text[])) "
                "AND NOT EXISTS (SELECT 1 FROM rx_jobs r WHERE r.instance = j.instance "
                "AND r.state = 'running') ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
                instances,
            )
            if row is None:
                return None
            await conn.execute(
                "UPDATE rx_jobs SET state = 'running', attempts = attempts + 1, "
                "started_at = now(), heartbeat = now(), worker = $2, "
                "backend_pid = pg_backend_pid(), backend_start = (SELECT backend_start FROM "
                "pg_stat_activity WHERE pid = pg_backend_pid()) WHERE id = $1",
                row[0], worker,
            )  # fmt: skip
        return Job(int(row[0]), str(row[1]), request_of(row[2]), int(row[3]) + 1)

    async def heartbeat(self, conn: asyncpg.Connection, job_id: int) -> None:
        await conn.execute("UPDATE rx_jobs SET heartbeat = now() WHERE id = $1", job_id)

    async def finish(
        self, job_id: int, *, ok: bool, result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:  # fmt: skip
        pool = await self.db.pool()
        await pool.execute(
            "UPDATE rx_jobs SET state = $2, finished_at = now(), result = $3, error = $4 "
            "WHERE id = $1 AND state = 'running'",
            job_id, "done" if ok else "failed", json.dumps(result) if result else None, error,
        )  # fmt: skip

    async def release(self, job_id: int) -> None:
        """Put a job this worker stopped on (cancelled, shutting down) back in the queue."""
        await self._requeue(job_id, charge=False)

    async def reclaim(self) -> list[int]:
        """Requeue (or fail) running jobs whose worker is gone: their ids."""
        pool = await self.db.pool()
        dead = await pool.fetch(
            "SELECT id FROM rx_jobs j WHERE state = 'running' AND (heartbeat < now() - "
            "make_interval(secs => $1) OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a "
            "WHERE a.pid = j.backend_pid AND a.backend_start = j.backend_start))",
            self.lease_s,
        )
        for (job_id,) in dead:
            await self._requeue(int(job_id), charge=True)
        return [int(r[0]) for r in dead]

    async def _requeue(self, job_id: int, *, charge: bool) -> None:
        pool = await self.db.pool()
        async with pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT instance, request, attempts FROM rx_jobs WHERE id = $1 "
                "AND state = 'running' FOR UPDATE SKIP LOCKED",
                job_id,
            )
            if row is None:
                return  # finished, or another worker is taking it back
            instance, request, attempts = str(row[0]), request_of(row[1]), int(row[2])
            if not charge:
                attempts -= 1
            if attempts >= MAX_ATTEMPTS:
                await conn.execute(
                    "UPDATE rx_jobs SET state = 'failed', finished_at = now(), error = $2 "
                    "WHERE id = $1",
                    job_id, f"the worker stopped during this job {attempts} times",
                )  # fmt: skip
                return
            queued = await conn.fetchrow(
                "SELECT id, request FROM rx_jobs WHERE instance = $1 AND state = 'queued' "
                "FOR UPDATE",
                instance,
            )
            if queued is None:
                await conn.execute(
                    "UPDATE rx_jobs SET state = 'queued', attempts = $2, worker = NULL, "
                    "backend_pid = NULL, backend_start = NULL, heartbeat = NULL WHERE id = $1",
                    job_id, attempts,
                )  # fmt: skip
            else:  # a newer request is queued: it does this one's work too
                merged = request_of(queued[1]).merge(request)
                await conn.execute(
                    "UPDATE rx_jobs SET request = $2 WHERE id = $1", queued[0], request_json(merged)
                )
                await conn.execute(
                    "UPDATE rx_jobs SET state = 'failed', finished_at = now(), error = $2 "
                    "WHERE id = $1",
                    job_id, f"the worker stopped; merged into job {queued[0]}",
                )  # fmt: skip
            await conn.execute(f"NOTIFY {CHANNEL}")

    async def jobs(self, instance: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Recent jobs, newest first (for ``status`` and tests)."""
        pool = await self.db.pool()
        rows = await pool.fetch(
            "SELECT id, instance, state, attempts, worker, error, request FROM rx_jobs "
            "WHERE $1::text IS NULL OR instance = $1 ORDER BY id DESC LIMIT $2",
            instance, limit,
        )  # fmt: skip
        return [
            {"id": int(r[0]), "instance": r[1], "state": r[2], "attempts": int(r[3]),
             "worker": r[4], "error": r[5], "request": json_value(r[6])}
            for r in rows
        ]  # fmt: skip
