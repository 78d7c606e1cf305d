"""The embedding cache (``Layout.embeddings_cache``): passage vectors by (model name, sha256 of
the text), so unchanged text is never embedded twice — across builds, instances and rebuilds.

The cache only saves work: a file that turns out not to be SQLite, or garbled, is set aside
(``embeddings.sqlite.corrupt-{time}``, for a post-mortem) and a new one started
(:meth:`VectorCache.open`, :func:`set_aside`); everything else about it raises as usual."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from core.errors import CorruptFile, StoreError
from core.store.sqlite import Migration, migrate

log = logging.getLogger(__name__)


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
        self.path = path
        migrate(path, self.MIGRATIONS, "embedding cache")
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")

    @classmethod
    def open(cls, path: Path) -> VectorCache:
        """The cache at ``path``; a corrupt one is set aside and a new one started."""
        try:
            return cls(path)
        except CorruptFile as e:
            set_aside(path, str(e))
            return cls(path)

    def get_many(self, model: str, hashes: list[str], dim: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for h, blob in self._select("hash, v", model, hashes):
            v = np.frombuffer(blob, dtype=np.float32)
            if v.shape[0] == dim:
                out[h] = v
        return out

    def has_many(self, model: str, hashes: list[str]) -> set[str]:
        """Which of ``hashes`` have a vector of ``model`` (without reading the vectors)."""
        return {h for (h,) in self._select("hash", model, hashes)}

    def _select(self, columns: str, model: str, hashes: list[str]) -> list[tuple[Any, ...]]:
        """``columns`` of ``model``'s rows among ``hashes`` (asked 500 at a time)."""
        rows: list[tuple[Any, ...]] = []
        try:
            for i in range(0, len(hashes), 500):
                part = hashes[i : i + 500]
                q = ",".join("?" * len(part))
                rows += self._db.execute(
                    f"SELECT {columns} FROM vectors WHERE model=? AND hash IN ({q})", [model, *part]
                ).fetchall()
        except sqlite3.OperationalError as e:  # locked past the busy timeout, unreadable
            raise StoreError(f"{self.path}: cannot read the embedding cache: {e}") from None
        except sqlite3.DatabaseError as e:  # garbled pages: found only when read
            raise CorruptFile(f"{self.path}: the embedding cache is damaged: {e}") from None
        return rows

    def put_many(self, model: str, items: list[tuple[str, np.ndarray]]) -> None:
        try:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                    [(model, h, np.asarray(v, np.float32).tobytes()) for h, v in items],
                )
        except sqlite3.OperationalError as e:  # the disk is full, locked past the busy timeout
            raise StoreError(f"{self.path}: cannot write the embedding cache: {e}") from None
        except sqlite3.DatabaseError as e:
            raise CorruptFile(f"{self.path}: the embedding cache is damaged: {e}") from None

    def close(self) -> None:
        self._db.close()


def set_aside(path: Path, why: str) -> Path:
    """Move a corrupt cache (and its WAL files) out of the way; returns where it went."""
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            os.replace(src, f"{aside}{suffix}")
    log.warning("%s; set aside as %s, starting a new cache (vectors are embedded again)", why,
                aside.name)  # fmt: skip
    return aside
