"""``repo-expert worker``: take index/sync jobs from the shared queue and run them, until stopped.

Any number of workers on any number of machines point at the same PostgreSQL store. Each takes
the oldest queued job whose instance has none running (``store/postgres/jobs.py``: ``FOR UPDATE
SKIP LOCKED``), runs it as one ``sync`` (under the instance's advisory build lock), and records
the outcome on the job. Idle workers sleep until ``NOTIFY rx_jobs`` or ``poll`` seconds. Before
each claim a worker takes back the jobs of workers that died (their database session is gone):
the dead worker's build was one uncommitted transaction, so the previous build stayed live, and
the job runs again here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, Protocol

from core.errors import RepoExpertError
from core.index.sync import SyncReport
from core.ingest.gather import SyncRequest

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0


class Syncs(Protocol):
    async def sync(self, name: str, request: SyncRequest | None = None) -> SyncReport: ...


OnJob = Callable[[int, str, "SyncReport | BaseException"], None]


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def run_worker(
    app: Syncs,
    queue: Any,  # core.store.postgres.jobs.JobQueue
    *,
    stop: asyncio.Event | None = None,
    poll: float = 2.0,
    instances: list[str] | None = None,
    once: bool = False,
    name: str | None = None,
    on_job: OnJob | None = None,
) -> int:
    """Process jobs until ``stop`` is set (or, with ``once``, until none is queued): how many
    ran. ``instances``: only jobs of these."""
    stop = stop or asyncio.Event()
    name = name or worker_name()
    conn = await queue.session()
    wake = asyncio.Event()

    def notified(*_: object) -> None:
        wake.set()

    done = 0
    try:
        await conn.add_listener("rx_jobs", notified)
        log.info("worker %s: waiting for jobs", name)
        while not stop.is_set():
            wake.clear()
            for job_id in await queue.reclaim():
                log.warning("worker %s: took back job %d of a worker that stopped", name, job_id)
            job = await queue.claim(conn, name, instances)
            if job is None:
                if once:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first(wake, stop), poll)
                continue
            done += 1
            await _run(app, queue, conn, job, on_job)
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
    return done


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def _run(app: Syncs, queue: Any, conn: Any, job: Any, on_job: OnJob | None) -> None:
    log.info("job %d: sync of %s (attempt %d)", job.id, job.instance, job.attempts)

    async def beat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            await queue.heartbeat(conn, job.id)

    heart = asyncio.create_task(beat())
    outcome: SyncReport | BaseException
    try:
        try:
            rep = await app.sync(job.instance, job.request)
        finally:
            heart.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await heart
    except asyncio.CancelledError:  # stopping mid-job: someone else will do it
        with contextlib.suppress(Exception):
            await asyncio.shield(queue.release(job.id))
        raise
    except RepoExpertError as e:
        outcome = e
        await queue.finish(job.id, ok=False, error=str(e))
    except Exception as e:  # a bug in one job must not stop the worker
        log.exception("job %d: sync of %s failed", job.id, job.instance)
        outcome = e
        await queue.finish(job.id, ok=False, error=f"unexpected {type(e).__name__}: {e}")
    else:
        outcome = rep
        await queue.finish(
            job.id, ok=True, result=rep.to_json(), error="; ".join(rep.errors) or None
        )
        log.info("job %d: %s", job.id, rep.line())
    if on_job is not None:
        on_job(job.id, job.instance, outcome)
