"""The service every face calls (CLI, Slack, Discord, eval): ``RepoExpert.ask``.

It owns the loaded instances, one embedding service per embedding config, and an open reader
per instance that follows the ``current`` build link, so a re-index swapped in by another
process is picked up on the next question without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any

from core.answer.extractive import Answerer
from core.answer.llm import OnText, make_answerer
from core.answer.prompt import resolve_followup
from core.answer.support import embedding_similarity
from core.config import Instance, Settings, find_instance, load_all
from core.embed.service import EmbedService, embed_service
from core.errors import IndexError_
from core.index.build import Progress, Summary, build_index
from core.models import Answer, Collection, Retrieval, Turn
from core.retrieve.search import Options, retrieve
from core.store.local import IndexReader, current_build, instance_dir

if TYPE_CHECKING:
    from core.index.sync import SyncReport
    from core.ingest.github import ClientOptions

log = logging.getLogger(__name__)

EmbedderFor = Callable[[Instance], EmbedService]

# How long a replaced index reader stays open for the questions still running on it.
RETIRE_GRACE_S = 300.0


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
        # One answerer for every instance when given (tests); else each instance's `llm` config.
        self._owns_embedders = embedder_for is None
        self._owned: set[EmbedService] = set()
        self.answerer = answerer
        self._answerers: dict[str, Answerer] = {}
        self._instances: dict[str, Instance] = {}
        self._readers: dict[str, IndexReader] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._open_locks: dict[str, asyncio.Lock] = {}
        self._retired: list[tuple[float, IndexReader]] = []

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
        svc = self._embedder_for(self.instance(name))
        if self._owns_embedders:
            self._owned.add(svc)
        return svc

    # -- indexing ----------------------------------------------------------------------------
    async def index(
        self, name: str, progress: Progress | None = None, full: bool = False
    ) -> Summary:
        inst = self.instance(name)
        async with self._build_lock(name):
            return await build_index(
                inst, self.settings.data_dir, self.embedder(name), progress, full=full
            )

    @contextlib.asynccontextmanager
    async def _build_lock(self, name: str) -> AsyncIterator[None]:
        """One build or sync per instance at a time, across processes too (readers never wait:
        they keep using the live build)."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            d = instance_dir(self.settings.data_dir, name)
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(d / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    async def sync(
        self,
        name: str,
        *,
        repo: bool = True,
        issues: bool = True,
        numbers: Iterable[int] = (),
        full: bool = False,
        refetch_issues: bool = False,
        progress: Progress | None = None,
        options: ClientOptions | None = None,
    ) -> SyncReport:
        """One incremental sync: fetch the repository (``repo``), bring the GitHub issues mirror
        up to date (``issues``; ``numbers``: issues a webhook named), update the index. See
        core/index/sync.py."""
        from core.index.sync import sync_instance

        inst = self.instance(name)
        async with self._build_lock(name):
            return await sync_instance(
                inst, self.settings.data_dir, self.embedder(name), repo=repo, issues=issues,
                numbers=numbers, full=full, refetch_issues=refetch_issues, progress=progress,
                options=options,
            )  # fmt: skip

    async def status(self, name: str) -> dict[str, Any]:
        """Indexed commit, chunk counts, last sync and error, issues high-water mark."""
        from core.index.sync import instance_status

        return await instance_status(self.instance(name), self.settings.data_dir)

    def has_index(self, name: str) -> bool:
        return current_build(self.settings.data_dir, name) is not None

    async def reader(self, name: str) -> IndexReader:
        """The open reader of the live build, reopened when a new build has been swapped in.

        The reader it replaces is retired, not closed: questions already running on it finish
        there, and it is closed a grace period later (or by :meth:`close`)."""
        path = current_build(self.settings.data_dir, name)
        r = self._readers.get(name)
        if r is not None and r.path == path:
            return r
        async with self._open_locks.setdefault(name, asyncio.Lock()):
            path = current_build(self.settings.data_dir, name)
            r = self._readers.get(name)
            if r is not None and r.path == path:
                return r  # another task opened it while we waited
            if path is None:
                await self.index(name)
                path = current_build(self.settings.data_dir, name)
                assert path is not None
            new = await IndexReader.open(path)
            await self._check_stamp(name, new)
            self._readers[name] = new
            now = time.monotonic()
            if r is not None:
                self._retired.append((now, r))
            keep = []
            for since, old in self._retired:
                if now - since > RETIRE_GRACE_S:
                    await old.close()
                else:
                    keep.append((since, old))
            self._retired = keep
            return new

    # -- asking ------------------------------------------------------------------------------
    async def retrieve(
        self,
        name: str,
        question: str,
        k: int | None = None,
        weights: dict[Collection, float] | None = None,
        mode: str = "full",
    ) -> Retrieval:
        inst = self.instance(name)
        reader = await self.reader(name)
        cfg = inst.retrieval
        opt = Options(
            k=k or cfg.k, candidates=cfg.candidates, floor=cfg.relevance_floor,
            alpha=cfg.lexical_weight, exact_bonus=cfg.exact_bonus, test_penalty=cfg.test_penalty,
            weights={**cfg.weights, **(weights or {})} or None, mode=mode,
        )  # fmt: skip
        return await retrieve(reader, self.embedder(name), question, opt)

    async def ask(
        self,
        name: str,
        question: str,
        conversation: list[Turn] | None = None,
        on_text: OnText | None = None,
    ) -> Answer:
        """Answer a question about one instance, with numbered, permalinked sources.

        ``on_text``: where the answerer streams (a language model), awaited with the reply so far
        as it arrives. That is a preview — raw citation markers, nothing checked yet; the answer
        returned is the same as without ``on_text`` and replaces it. Extractive answers don't
        stream: ``on_text`` is never called."""
        t = time.perf_counter()
        # A follow-up ("and its default?") is searched together with the turn it follows; the
        # answerer gets the question as asked, and the conversation.
        query = resolve_followup(question, conversation)
        retrieval = await self.retrieve(name, query)
        if query != question:
            retrieval.route["query"] = query
        ta = time.perf_counter()
        answerer = self.answerer_for(name)
        if on_text is not None and getattr(answerer, "streams", False):
            answer = await answerer.answer(  # type: ignore[call-arg]
                question, retrieval, conversation, on_text=on_text
            )
        else:
            answer = await answerer.answer(question, retrieval, conversation)
        answer.timings_ms["answer"] = (time.perf_counter() - ta) * 1000
        answer.timings_ms["total"] = (time.perf_counter() - t) * 1000
        return answer

    def answerer_for(self, name: str) -> Answerer:
        """The instance's answerer: extractive, or the model its ``llm`` settings name."""
        if self.answerer is not None:
            return self.answerer
        a = self._answerers.get(name)
        if a is None:
            inst = self.instance(name)
            svc = self.embedder(name)
            sim = embedding_similarity(svc.embed_query, svc.embed_passages)
            a = self._answerers[name] = make_answerer(inst.llm, inst.name, sim)
        return a

    async def _check_stamp(self, name: str, reader: IndexReader) -> None:
        """Refuse to search vectors of another model: the query would be embedded differently."""
        built = reader.stamp
        model, dim, _ = await self.embedder(name).info()
        if built.get("embedder") != model or built.get("dim") != dim:
            await reader.close()
            raise IndexError_(
                f"the index of '{name}' was built with {built.get('embedder')} "
                f"({built.get('dim')} d) but the instance now embeds with {model} ({dim} d): "
                f"run `repo-expert index {name}` to rebuild it"
            )

    async def close(self) -> None:
        for r in [*self._readers.values(), *(old for _, old in self._retired)]:
            await r.close()
        self._readers.clear()
        self._retired.clear()
        for svc in self._owned:  # services this object took from the process registry
            svc.close()
        self._owned.clear()
