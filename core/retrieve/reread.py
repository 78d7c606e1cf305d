"""The reader stage (``retrieval.reader``): the learned ranker's first candidates read again.

The ranker (``rank.py``) orders every candidate from evidence about the question and the chunk
(cosine, BM25, names, paths, kinds); the cosine in it is the bundled embedder's, which read each
chunk once for any question. Here the ranker's top :data:`TOP` are read again by the tuned reader
(``core/embed/reader.py``: e5-small fine-tuned on the dev sets' tuning halves to put a question's
sources above its near misses), and four features join the ranker's: the reader's cosine
standardised within those :data:`TOP` (0 below them), a mark for being among them, and the score
crossed with the question's code and bug probabilities. A second ranker fitted on all of them
(``ranker-reader.json``, on the reader's out-of-fold scores) then orders every candidate.

The passages are read on the embedding service's worker thread (the one that owns the models), so
the event loop never waits on the forward pass. A passage's vector depends only on its text, so
the last few thousand are remembered: a follow-up or a related question often re-reads the same
chunks.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from core.embed.reader import PASSAGE_TOKENS, QUESTION_TOKENS, Reader, shared
from core.embed.service import EmbedService
from core.retrieve.fusion import Candidate
from core.retrieve.rank import READER_FEATURES, READER_MODEL, Context, Ranker, load

TOP = 12  # the candidates read again (the reader was trained on the ranker's top 12)
REMEMBERED = 4096  # passage vectors kept (384 floats each: 6 MB)


def columns(n: int, top: Sequence[int], scores: np.ndarray, kinds: dict[str, float]) -> np.ndarray:
    """The four reader features of ``n`` candidates, ``top`` the indices that were read and
    ``scores`` their cosines: z-score within the read ones, read mark, z × P(code), z × P(bug)."""
    x = np.zeros((n, 4), np.float32)
    if len(top):
        s = np.asarray(scores, np.float64)
        sd = s.std()
        z = (s - s.mean()) / (sd if sd > 0 else 1.0)
        idx = np.asarray(top, np.int64)
        x[idx, 0] = z
        x[idx, 1] = 1.0
        x[:, 2] = x[:, 0] * kinds.get("code", 0.0)
        x[:, 3] = x[:, 0] * kinds.get("bug", 0.0)
    return x


class _Memo:
    """Passage vectors by (reader, text digest), the most recent kept. Two embedding services'
    workers (instances on different embedders) may read at once: the dictionary is locked, the
    forward pass is not."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self.vectors: OrderedDict[tuple[int, bytes], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def scores(self, reader: Reader, question: str, texts: Sequence[str]) -> np.ndarray:
        keys = [(id(reader), hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest())
                for t in texts]  # fmt: skip
        with self._lock:
            known = {k: self.vectors[k] for k in keys if k in self.vectors}
        todo = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in known}.items())
        seqs = [reader.ids(question, True, QUESTION_TOKENS)]
        seqs += [reader.ids(t, False, PASSAGE_TOKENS) for _, t in todo]
        v = reader.vectors(seqs, threads=reader.threads)
        known |= {k: vec for (k, _), vec in zip(todo, v[1:], strict=True)}
        with self._lock:
            for k in keys:
                self.vectors[k] = known[k]
                self.vectors.move_to_end(k)
            while len(self.vectors) > self.size:
                self.vectors.popitem(last=False)
        return np.array([float(known[k] @ v[0]) for k in keys], np.float32)


_MEMO = _Memo()


async def reread(
    cands: Sequence[Candidate], context: Context, question: str, embedder: EmbedService,
    timings: dict[str, float],
) -> tuple[Ranker, np.ndarray] | None:  # fmt: skip
    """The reader's ranker and its four columns for ``cands`` (already ordered by the first
    ranker); None when the reader's ranker is not shipped or there is nothing to read."""
    second = load(READER_MODEL, READER_FEATURES)
    if second is None or not cands:
        return None
    t = time.perf_counter()
    cols = await reader_columns(cands, context, question, embedder)
    timings["reader"] = (time.perf_counter() - t) * 1000
    return second, cols


async def reader_columns(
    cands: Sequence[Candidate], context: Context, question: str, embedder: EmbedService
) -> np.ndarray:
    """The reader features of ``cands`` (scored by the first ranker already): the top
    :data:`TOP` by score are read again (a candidate whose chunk was not fetched, as an empty
    passage: the rule the reader's ranker was fitted with, ``benchmarks/train_reader.py``)."""
    order = sorted(range(len(cands)), key=lambda i: -cands[i].score)
    top = order[:TOP]
    texts = [c.chunk.text if (c := cands[i]).chunk is not None else "" for i in top]

    def read(_: object) -> np.ndarray:
        return _MEMO.scores(shared(), question, texts)

    scores = await embedder.run(read) if texts else np.zeros(0, np.float32)
    return columns(len(cands), top, scores, context.kinds)
