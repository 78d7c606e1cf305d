"""``repo-expert sync --watch``: keep instances fresh on their intervals, until stopped. With a
shared store (PostgreSQL) each tick queues a job for the workers instead of syncing here."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import RepoExpertError
from core.index.sync import SyncReport
from core.ingest.github import ClientOptions
from core.service import RepoExpert, SyncRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Queued:
    """A sync handed to the workers (a shared store): what ``sync --watch`` reports then."""

    instance: str
    job: int

    def line(self) -> str:
        return f"queued sync of {self.instance} (job {self.job})"

    def to_json(self) -> dict[str, Any]:
        return {"instance": self.instance, "queued": True, "job": self.job}


OnReport = Callable[[str, "SyncReport | Queued | BaseException"], None]


async def watch(
    app: RepoExpert,
    names: list[str],
    on_report: OnReport,
    *,
    interval: float | None = None,
    stop: asyncio.Event | None = None,
    options: ClientOptions | None = None,
) -> None:
    """Sync each instance every ``interval`` seconds (default: its ``sync_interval``) until
    ``stop`` is set. One instance failing never stops the others; a rate limit postpones that
    instance's next sync until the limit resets."""
    stop = stop or asyncio.Event()

    async def loop(name: str) -> None:
        while not stop.is_set():
            wait = interval or app.instance(name).sync_interval
            try:
                if app.backend.jobs is not None:  # shared store: a worker runs it
                    on_report(name, Queued(name, await app.enqueue(name, SyncRequest())))
                else:
                    rep = await app.sync(name, options=options)
                    on_report(name, rep)
                    if rep.retry_at:
                        wait = max(wait, rep.retry_at - time.time())
            except RepoExpertError as e:
                on_report(name, e)
            except Exception as e:  # a bug in one instance's sync must not stop the others
                log.exception("sync of %s failed", name)
                on_report(name, e)
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except TimeoutError:
                pass

    await asyncio.gather(*(loop(n) for n in names))
