"""The embedding cache (``Layout.embeddings_cache``): passage vectors by (model name, sha256 of
the text), so unchanged text is never embedded twice — across builds, instances and rebuilds."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import ClassVar

import numpy as np

from core.store.sqlite import Migration, migrate


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
