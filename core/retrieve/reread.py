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
the event loop never waits on the forward pass. A passage's vector depends only on its text: it is
remembered, kept in the embedding cache (and, in a PostgreSQL deployment, in the database for every
process) and, when the instance's build read it ahead, never read at question time at all
(``core/embed/reading.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from core.embed import reading
from core.embed.service import EmbedService
from core.retrieve.fusion import Candidate
from core.retrieve.rank import READER_FEATURES, READER_MODEL, Context, Ranker, load
from core.store.base import SharedVectors

TOP = 12  # the candidates read again (the reader was trained on the ranker's top 12)


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


async def reread(
    cands: Sequence[Candidate], context: Context, question: str, embedder: EmbedService,
    timings: dict[str, float], vectors: SharedVectors | None = None,
) -> tuple[Ranker, np.ndarray] | None:  # fmt: skip
    """The reader's ranker and its four columns for ``cands`` (already ordered by the first
    ranker); None when the reader's ranker is not shipped or there is nothing to read.
    ``vectors``: the deployment's shared passage vectors (a PostgreSQL store), if any."""
    second = load(READER_MODEL, READER_FEATURES)
    if second is None or not cands:
        return None
    t = time.perf_counter()
    cols = await reader_columns(cands, context, question, embedder, vectors)
    timings["reader"] = (time.perf_counter() - t) * 1000
    return second, cols


async def reader_columns(
    cands: Sequence[Candidate], context: Context, question: str, embedder: EmbedService,
    vectors: SharedVectors | None = None,
) -> np.ndarray:  # fmt: skip
    """The reader features of ``cands`` (scored by the first ranker already): the top
    :data:`TOP` by score are read again (a candidate whose chunk was not fetched, as an empty
    passage: the rule the reader's ranker was fitted with, ``benchmarks/train_reader.py``)."""
    order = sorted(range(len(cands)), key=lambda i: -cands[i].score)
    top = order[:TOP]
    texts = [c.chunk.text if (c := cands[i]).chunk is not None else "" for i in top]
    scores = await reading.scores(embedder, question, texts, vectors)
    return columns(len(cands), top, scores, context.kinds)
