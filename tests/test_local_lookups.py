"""The local reader's fast paths answer exactly what the SQL they replaced answered: the
in-memory lookups (``path = ? OR path LIKE '%/' || ?`` as SQLite reads it — ASCII
case-insensitive, ``%`` and ``_`` wildcards — and the rows of an issue), and BM25 from the
postings (FTS5's ``bm25()`` scores and order)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from core.layout import Layout
from core.models import Chunk
from core.store.local import LocalStore
from core.store.local_index import Lookups

PATHS = [
    "src/widget/config.py", "src/widget/Config.py", "config.py", "docs/config.py.md",
    "tests/test_config.py", "tests/testXconfig.py", "src/ÄÖ/Über.py", "src/äö/über.py",
    "a/b/c/d.txt", "weird/100%/x.py", "src/widget/config.py",
]  # fmt: skip
ASKED = [
    "config.py", "widget/config.py", "CONFIG.PY", "test_config.py", "Über.py", "über.py",
    "c/d.txt", "d.txt", "b", "100%/x.py", "x.py", "src/widget/config.py", "", "/config.py",
]  # fmt: skip


def test_path_rows_match_sqlite_like_exactly() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE chunks (collection TEXT, row INTEGER, path TEXT, issue INTEGER)")
    rows = [("code", i, p, None) for i, p in enumerate(PATHS)]
    rows += [("issues", 0, None, 7), ("issues", 1, None, 7), ("issues", 2, None, 9)]
    db.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?)", rows)
    lookups = Lookups.of(rows)
    for asked in ASKED:
        want = [r for (r,) in db.execute(
            "SELECT row FROM chunks WHERE collection = 'code' AND (path = ? OR path LIKE ?) "
            "ORDER BY row", (asked, f"%/{asked}"),
        )]  # fmt: skip
        assert lookups.path_rows("code", asked) == want, asked
    assert lookups.path_rows("docs", "config.py") == []
    assert lookups.issues == {7: [0, 1], 9: [2]}


@pytest.mark.asyncio
async def test_bm25_from_postings_equals_fts5_bm25(tmp_path: Path) -> None:
    """The postings give FTS5's own scores and order, diacritics and repeated terms included."""
    rng = random.Random(7)
    words = ["parse", "config", "timeout", "über", "uber", "señal", "niño", "retry", "a×b",
             "render", "chart", "draw", "load", "default", "ß", "ça"]  # fmt: skip
    chunks = [
        Chunk("code", f"f{i}.py", " ".join(rng.choices(words, k=rng.randint(3, 60))), f"t{i}", 5,
              path=f"f{i}.py")
        for i in range(400)
    ]  # fmt: skip
    store = LocalStore(Layout(tmp_path))
    async with store.writer("w") as w:
        await w.add_chunks("code", chunks, np.eye(400, 8, dtype=np.float32))
        await w.commit()
    reader = await store.open_live("w")
    assert reader is not None and "code" in reader._bm25
    try:
        for query in (["parse"], ["uber", "señal"], ["über", "uber"], ["timeout", "retry", "ça"],
                      ["nino", "ss"], ["chart", "nothinghere"]):  # fmt: skip
            fast = await reader.lexical("code", query, 15)
            fts = await reader._lexical_fts("code", query, 15)
            assert [h.row for h in fast][:5] == [h.row for h in fts][:5], query
            assert [h.score for h in fast] == pytest.approx([h.score for h in fts], rel=1e-9)
        # a term that folds into two tokens is searched by FTS5 as a phrase, as before
        assert await reader.lexical("code", ["a×b"], 5) == await reader._lexical_fts(
            "code", ["a×b"], 5
        )
    finally:
        await reader.close()
