"""The service every face calls (CLI, Slack, Discord, eval): ``RepoExpert.ask``.

It owns the loaded instances, one embedding service per embedding config, and an open reader
per instance that follows the ``current`` build link, so a re-index swapped in by another
process is picked up on the next question without a restart.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from collections.abc import Callable

from .answer import Answerer, ExtractiveAnswerer
from .config import Instance, Settings, find_instance, load_all
from .embed import EmbedService, embed_service
from .index import Progress, Summary, build_index
from .models import Answer, Collection, Retrieval, Turn
from .retrieve import retrieve
from .store import IndexReader, current_build, instance_dir

log = logging.getLogger(__name__)

EmbedderFor = Callable[[Instance], EmbedService]


class RepoExpert:
    def __init__(
        self,
        settings: Settings,
        embedder_for: EmbedderFor | None = None,
        answerer: Answerer | None = None,
    ) -> None:
        self.settings = settings
        self._embedder_for = embedder_for or (
            lambda inst: embed_service(inst.embedding, settings.data_dir)
        )
        self.answerer = answerer or ExtractiveAnswerer()
        self._instances: dict[str, Instance] = {}
        self._readers: dict[str, IndexReader] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # -- instances ---------------------------------------------------------------------------
    def load_instances(self) -> dict[str, Instance]:
        """Load and validate every instance file (fails on the first bad one)."""
        self._instances = load_all(self.settings.instances_dir)
        return dict(self._instances)

    def instance(self, name: str) -> Instance:
        inst = self._instances.get(name)
        if inst is None:
            inst = find_instance(self.settings.instances_dir, name)
            self._instances[name] = inst
        return inst

    def embedder(self, name: str) -> EmbedService:
        return self._embedder_for(self.instance(name))

    # -- indexing ----------------------------------------------------------------------------
    async def index(
        self, name: str, progress: Progress | None = None, full: bool = False
    ) -> Summary:
        inst = self.instance(name)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            d = instance_dir(self.settings.data_dir, name)
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(d / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                # One build per instance at a time, across processes too.
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
                return await build_index(
                    inst, self.settings.data_dir, self.embedder(name), progress, full=full
                )
            finally:
                os.close(fd)

    def has_index(self, name: str) -> bool:
        return current_build(self.settings.data_dir, name) is not None

    async def reader(self, name: str) -> IndexReader:
        """The open reader of the live build, reopened when a new build has been swapped in."""
        path = current_build(self.settings.data_dir, name)
        r = self._readers.get(name)
        if r is not None and r.path == path:
            return r
        if path is None:
            await self.index(name)
            path = current_build(self.settings.data_dir, name)
            assert path is not None
        new = await IndexReader.open(path)
        self._readers[name] = new
        if r is not None:
            await r.close()
        return new

    # -- asking ------------------------------------------------------------------------------
    async def retrieve(
        self,
        name: str,
        question: str,
        k: int | None = None,
        weights: dict[Collection, float] | None = None,
    ) -> Retrieval:
        inst = self.instance(name)
        reader = await self.reader(name)
        cfg = inst.retrieval
        w = {**cfg.weights, **(weights or {})}
        return await retrieve(
            reader, self.embedder(name), question, k or cfg.k, cfg.candidates,
            cfg.relevance_floor, w,
        )  # fmt: skip

    async def ask(self, name: str, question: str, conversation: list[Turn] | None = None) -> Answer:
        """Answer a question about one instance, with numbered, permalinked sources."""
        t = time.perf_counter()
        retrieval = await self.retrieve(name, question)
        ta = time.perf_counter()
        answer = await self.answerer.answer(question, retrieval, conversation)
        answer.timings_ms["answer"] = (time.perf_counter() - ta) * 1000
        answer.timings_ms["total"] = (time.perf_counter() - t) * 1000
        return answer

    async def close(self) -> None:
        for r in self._readers.values():
            await r.close()
        self._readers.clear()
