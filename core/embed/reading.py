"""The tuned reader's passage vectors (``retrieval.reader``): remembered, kept on disk, read ahead.

The reader (``reader.py``) scores a question's top candidates by the cosine between its own
question and passage vectors. A passage's vector depends only on its text and the reader's weights,
so it is worth reading once:

- in memory, the last few thousand (:class:`Memo`: a follow-up often re-reads the same chunks);
- in the embedding cache beside the embedder's own vectors (``embeddings.sqlite``, under the
  reader's :attr:`~core.embed.reader.Reader.name`: its engine, passage length and weights), so they
  outlive the process;
- ahead of any question: a build of an instance with the reader on reads every chunk the cache
  lacks (:func:`read_ahead`), so a question then only reads itself (about 30 ms) instead of
  twelve passages (about a second on two cores);
- in a PostgreSQL deployment, in the database too (``rx_vectors``, the store's
  :class:`~core.store.base.SharedVectors`): the build keeps there every chunk's vector, so a
  server whose data folder is not the builder's finds them (:func:`scores` asks it for the
  passages memory lacks, before the worker's job).

Everything here runs on the embedding service's worker thread, the one that owns the models. At
question time the cache only saves work (one that cannot be read or written is logged and the
passages are read); a build that cannot keep what it read fails, as the embedder's does.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from core.embed.reader import PASSAGE_TOKENS, QUESTION_TOKENS, Reader, loaded, shared
from core.embed.service import EmbedService, text_hash
from core.errors import ConfigError, ModelFormatError, StoreError
from core.store.base import SharedVectors

log = logging.getLogger(__name__)
T = TypeVar("T")

REMEMBERED = 4096  # passage vectors kept in memory (384 floats each: 6 MB)
# Passages read ahead per worker job: a question waits for one job at most (one to two seconds on
# two cores; the reader's own forward batch).
AHEAD_BATCH = 16
SHARE_BATCH = 2000  # vectors copied from the embedding cache to the shared ones per worker job


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
        extra: Sequence[list[int]] = (), ahead: bool = False,
    ) -> tuple[list[np.ndarray], np.ndarray]:  # fmt: skip
        """The vectors of ``texts``, in order: from memory, then ``svc``'s cache, then read (and
        kept in both). ``extra`` token sequences (a question) are read in the same pass; their
        vectors are returned second. ``ahead`` (a build reading ahead): memory is neither
        consulted nor filled, and a cache failure is the build's."""
        hashes = [text_hash(t) for t in texts]
        known = {} if ahead else self.known(reader, hashes)
        missing = sorted({h for h in hashes if h not in known})
        if missing and svc is not None:
            stored = _cache(ahead, lambda: svc.cached_get(reader.name, missing, reader.hidden))
            known |= stored or {}
            missing = [h for h in missing if h not in known]
        miss = set(missing)
        todo = {h: t for h, t in zip(hashes, texts, strict=True) if h in miss}
        seqs = list(extra) + [reader.ids(t, False, PASSAGE_TOKENS) for t in todo.values()]
        v = reader.vectors(seqs, threads=reader.threads) if seqs else np.zeros((0, reader.hidden))
        new = dict(zip(todo, v[len(extra) :], strict=True))
        with self._lock:
            self.passages_read += len(new)
        if new and svc is not None:
            _cache(ahead, lambda: svc.cached_put(reader.name, list(new.items())))
        known |= new
        if not ahead:
            self.remember(reader, {h: known[h] for h in hashes})
        return [known[h] for h in hashes], v[: len(extra)]

    def scores(
        self, reader: Reader, question: str, texts: Sequence[str], svc: EmbedService | None = None
    ) -> np.ndarray:
        """The reader's cosine between ``question`` and each of ``texts``."""
        q = [reader.ids(question, True, QUESTION_TOKENS)]
        vectors, qv = self.passages(reader, texts, svc, extra=q)
        return np.array([float(v @ qv[0]) for v in vectors], np.float32)


MEMO = Memo()


def _cache(ahead: bool, fn: Callable[[], T]) -> T | None:
    """``fn()`` on the embedding cache: reading ahead, its failure is the build's; at question
    time it is logged and the question goes on without the cache."""
    if ahead:
        return fn()
    try:
        return fn()
    except StoreError as e:
        log.warning("the reader goes on without the embedding cache: %s", e)
        return None


async def scores(
    svc: EmbedService, question: str, texts: Sequence[str], vectors: SharedVectors | None = None
) -> np.ndarray:
    """The reader's cosines of ``texts`` for ``question``, on ``svc``'s worker (before any
    indexing job). ``vectors``: the deployment's shared vectors, asked first for the passages
    memory lacks (on the event loop; one that cannot be read is logged and the passages are
    looked for in the cache, then read)."""
    if not texts:
        return np.zeros(0, np.float32)
    if vectors is not None:
        await recall(svc, texts, vectors)
    return await svc.run(lambda _: MEMO.scores(shared(), question, texts, svc))


async def recall(svc: EmbedService, texts: Sequence[str], vectors: SharedVectors) -> int:
    """Remember the shared vectors of those of ``texts`` memory lacks; returns how many were
    found."""
    reader = loaded()
    if reader is None:  # not loaded at start (a command line's question): load it now
        reader = await svc.run(lambda _: shared())
    hashes = list(dict.fromkeys(text_hash(t) for t in texts))
    known = MEMO.known(reader, hashes)
    want = [h for h in hashes if h not in known]
    if not want:
        return 0
    try:
        got = await vectors.get(reader.name, want, reader.hidden)
    except StoreError as e:
        log.warning("the reader goes on without the shared vectors: %s", e)
        return 0
    MEMO.remember(reader, got)
    return len(got)


async def load(svc: EmbedService, instance: str) -> None:
    """Load the reader on ``svc``'s worker, behind any question's job: at a server's start, so
    the first question does not wait for it, and before a build reads ahead. One that cannot be
    loaded is a configuration error naming ``instance`` (whose ``retrieval.reader`` is on)."""
    await svc.info()  # the embedder first: its own failures are not the reader's
    try:
        await svc.run(lambda _: shared(), background=True)
    except (OSError, ModelFormatError) as e:
        raise ConfigError(f"instance '{instance}': retrieval.reader is on, but the tuned reader "
                          f"cannot be loaded: {e}") from e  # fmt: skip


async def read_ahead(
    svc: EmbedService, texts: Sequence[str], progress: Callable[[int, int], None] | None = None,
    vectors: SharedVectors | None = None,
) -> int:  # fmt: skip
    """Read every passage of ``texts`` that is kept nowhere a question will look: not in the
    embedding cache, and (``vectors``: a PostgreSQL deployment's shared vectors) not in the
    shared ones either, which then get every vector they lack — read, or copied from the
    cache. Reading runs in background jobs of :data:`AHEAD_BATCH` (a question waits for one at
    most); returns how many distinct texts were read. A store that cannot keep them fails the
    build."""
    uniq = list(dict.fromkeys(texts))
    if not uniq or (vectors is None and not svc.caching):
        return 0  # nowhere to keep them: they would be read for nothing
    reader = await svc.run(lambda _: shared(), background=True)
    by_hash = {text_hash(t): t for t in uniq}
    need = list(by_hash)
    if vectors is not None:
        lacking = await vectors.missing(reader.name, need, reader.hidden)
        need = [h for h in need if h in lacking]
    cached = await svc.run(lambda _: svc.cached_has(reader.name, need), background=True)
    todo = [h for h in need if h not in cached]
    if vectors is not None:  # the shared ones lack these, the cache has them: copy them over
        copy = [h for h in need if h in cached]
        for i in range(0, len(copy), SHARE_BATCH):
            part = copy[i : i + SHARE_BATCH]

            def get(_: object, part: list[str] = part) -> dict[str, np.ndarray]:
                return svc.cached_get(reader.name, part, reader.hidden)

            got = await svc.run(get, background=True)
            await vectors.put(reader.name, list(got.items()))
            todo += [h for h in part if h not in got]  # the cache lost them meanwhile: read
    if progress:
        progress(0, len(todo))
    read = 0
    for i in range(0, len(todo), AHEAD_BATCH):
        batch = todo[i : i + AHEAD_BATCH]

        def one(_: object, batch: list[str] = batch) -> list[np.ndarray]:
            return MEMO.passages(reader, [by_hash[h] for h in batch], svc, ahead=True)[0]

        got_v = await svc.run(one, background=True)
        if vectors is not None:
            await vectors.put(reader.name, list(zip(batch, got_v, strict=True)))
        read += len(batch)
        if progress:
            progress(read, len(todo))
    return read
