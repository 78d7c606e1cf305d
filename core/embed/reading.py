"""The tuned reader's passage vectors (``retrieval.reader``): remembered, kept on disk, read ahead.

The reader (``reader.py``) scores a question's top candidates by the cosine between its own
question and passage vectors. A passage's vector depends only on its text and the reader's weights,
so it is worth reading once:

- in memory, the last few thousand (:class:`Memo`: a follow-up often re-reads the same chunks);
- in the embedding cache beside the embedder's own vectors (``embeddings.sqlite``, under the
  reader's :attr:`~core.embed.reader.Reader.name`: its weight file's digest and engine), so they
  outlive the process;
- ahead of any question: a build of an instance with the reader on reads every chunk the cache
  lacks (:func:`read_ahead`), so a question then only reads itself (a few ms) instead of twelve
  passages (about a second on two cores).

Everything here runs on the embedding service's worker thread, the one that owns the models.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from core.embed.reader import PASSAGE_TOKENS, QUESTION_TOKENS, Reader, shared
from core.embed.service import EmbedService, text_hash

REMEMBERED = 4096  # passage vectors kept in memory (384 floats each: 6 MB)
AHEAD_BATCH = 64  # passages read ahead per worker job (a question waits for one at most)


class Memo:
    """Passage vectors by (reader, text digest), the most recent kept; behind it, the embedding
    cache of the service given to :meth:`scores`. Two embedding services' workers (instances on
    different embedders) may read at once: the dictionary is locked, the forward pass is not."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self.vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self.passages_read = 0  # run through the reader (found neither in memory nor cached)
        self._lock = threading.Lock()

    def known(self, reader: Reader, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        with self._lock:
            return {h: self.vectors[(reader.name, h)] for h in hashes
                    if (reader.name, h) in self.vectors}  # fmt: skip

    def remember(self, reader: Reader, items: dict[str, np.ndarray]) -> None:
        with self._lock:
            for h, v in items.items():
                self.vectors[(reader.name, h)] = v
                self.vectors.move_to_end((reader.name, h))
            while len(self.vectors) > self.size:
                self.vectors.popitem(last=False)

    def passages(
        self, reader: Reader, texts: Sequence[str], svc: EmbedService | None = None,
        extra: Sequence[list[int]] = (), memory: bool = True,
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:  # fmt: skip
        """The vectors of ``texts`` by text hash: from memory (unless not ``memory``: reading
        ahead, which must fill the cache), then ``svc``'s cache, then read (and kept in both).
        ``extra`` token sequences (a question) are read in the same pass; their vectors are
        returned second."""
        hashes = [text_hash(t) for t in texts]
        known = self.known(reader, hashes) if memory else {}
        missing = sorted({h for h in hashes if h not in known})
        if missing and svc is not None:
            stored = svc.cached_get(reader.name, missing, reader.hidden)
            known |= stored
            missing = [h for h in missing if h not in stored]
        miss = set(missing)
        todo = {h: t for h, t in zip(hashes, texts, strict=True) if h in miss}
        seqs = list(extra) + [reader.ids(t, False, PASSAGE_TOKENS) for t in todo.values()]
        v = reader.vectors(seqs, threads=reader.threads) if seqs else np.zeros((0, reader.hidden))
        new = dict(zip(todo, v[len(extra):], strict=True))
        with self._lock:
            self.passages_read += len(new)
        if new and svc is not None:
            svc.cached_put(reader.name, list(new.items()))
        known |= new
        if memory:
            self.remember(reader, {h: known[h] for h in hashes})
        return known, v[: len(extra)]

    def scores(
        self, reader: Reader, question: str, texts: Sequence[str], svc: EmbedService | None = None
    ) -> np.ndarray:
        """The reader's cosine between ``question`` and each of ``texts``."""
        q = [reader.ids(question, True, QUESTION_TOKENS)]
        known, qv = self.passages(reader, texts, svc, extra=q)
        return np.array([float(known[text_hash(t)] @ qv[0]) for t in texts], np.float32)


MEMO = Memo()


async def scores(svc: EmbedService, question: str, texts: Sequence[str]) -> np.ndarray:
    """The reader's cosines of ``texts`` for ``question``, on ``svc``'s worker (before any
    indexing job)."""
    if not texts:
        return np.zeros(0, np.float32)
    return await svc.run(lambda _: MEMO.scores(shared(), question, texts, svc))


async def load(svc: EmbedService) -> None:
    """Load the reader on ``svc``'s worker, behind any question's job (at start-up, so the
    first question does not wait for it). A reader that cannot be loaded raises here too."""
    await svc.run(lambda _: shared(), background=True)


async def read_ahead(
    svc: EmbedService, texts: Sequence[str], progress: Callable[[int, int], None] | None = None
) -> int:
    """Read every passage of ``texts`` that the cache lacks, in background jobs of
    :data:`AHEAD_BATCH` (a question waits for one at most); returns how many were read."""
    uniq = list(dict.fromkeys(texts))
    read = 0
    if not svc.caching or not uniq:  # nowhere to keep them: they would be read for nothing
        return 0

    def missing(_: object) -> list[str]:
        reader = shared()
        by_hash = {text_hash(t): t for t in uniq}
        have = svc.cached_get(reader.name, list(by_hash), reader.hidden)
        return [t for h, t in by_hash.items() if h not in have]

    todo = await svc.run(missing, background=True)
    if progress:
        progress(0, len(todo))
    for i in range(0, len(todo), AHEAD_BATCH):
        batch = todo[i : i + AHEAD_BATCH]

        def one(_: object, batch: list[str] = batch) -> None:
            MEMO.passages(shared(), batch, svc, memory=False)

        await svc.run(one, background=True)
        read += len(batch)
        if progress:
            progress(read, len(todo))
    return read

