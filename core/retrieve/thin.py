"""A thin piece brings what follows it: a shown chunk of a code or docs file with fewer lines than
``retrieval.thin_lines`` — a heading's one-sentence intro ("If you want some recipes to be
available everywhere, you have a few options."), a doc comment a blank line above its function, a
one-line type alias above the function that uses it, a class's fields above its constructor —
answers little by itself; a person shown it would read on. So the chunk that starts right after it
in its file (at most :data:`GAP` lines later: blank lines between) is shown with it, as a passage
placed after it, unless it is shown already. Issue threads are left as they are.

Measured on the dev sets' tuning halves before it was kept (PLAN-s56.md, NB)."""

from __future__ import annotations

from dataclasses import replace

from core.models import Chunk, Passage, Source
from core.store.base import BuildReader

# The next chunk must start within this many lines after the thin piece's last line.
GAP = 3
COLLECTIONS = ("code", "docs")


async def _file_chunks(reader: BuildReader, src: Source) -> list[Chunk]:
    """The chunks of ``src``'s file (of its repository, in an instance over several)."""
    assert src.path is not None
    rows = await reader.path_rows(src.collection, src.path)
    chunks = await reader.chunks(src.collection, rows) if rows else {}
    return [c for c in chunks.values() if c.path == src.path and c.repo == src.repo
            and c.start_line is not None]  # fmt: skip


def _next(chunks: list[Chunk], end: int, shown: set[int]) -> Chunk | None:
    after = [c for c in chunks if c.start_line is not None and end < c.start_line <= end + 1 + GAP
             and c.id not in shown]  # fmt: skip
    return min(after, key=lambda c: (c.start_line or 0, c.id or 0), default=None)


def _passage(c: Chunk) -> Passage:
    return Passage(title=c.title, url=c.url, text=c.text, start_line=c.start_line,
                   end_line=c.end_line, symbol=c.symbol, chunk_id=c.id)  # fmt: skip


async def follow_thin(
    reader: BuildReader, sources: list[Source], thin: int
) -> tuple[list[Source], dict[int, list[int]]]:
    """``sources`` with every thin piece followed by its file's next chunk (``thin``: fewer
    lines than this is thin; 0: off), and for each source that got some (by its index) the
    chunks it got, for the route to say why they are shown."""
    added: dict[int, list[int]] = {}
    if thin <= 0:
        return sources, added
    shown = {cid for s in sources for cid in (s.chunk_id, *(p.chunk_id for p in s.passages))
             if cid is not None}  # fmt: skip
    out = []
    for i, src in enumerate(sources):
        if src.collection not in COLLECTIONS or src.path is None:
            out.append(src)
            continue
        pieces: list[tuple[int | None, int | None, Passage | None]] = [
            (src.start_line, src.end_line, None),
            *((p.start_line, p.end_line, p) for p in src.passages),
        ]
        chunks: list[Chunk] | None = None
        passages: list[Passage] = []
        for start, end, passage in pieces:
            if passage is not None:
                passages.append(passage)
            if start is None or end is None or end - start + 1 >= thin:
                continue
            if chunks is None:
                chunks = await _file_chunks(reader, src)
            nxt = _next(chunks, end, shown)
            if nxt is not None:
                passages.append(_passage(nxt))
                if nxt.id is not None:
                    shown.add(nxt.id)
                    added.setdefault(i, []).append(nxt.id)
        out.append(replace(src, passages=passages) if len(passages) > len(src.passages) else src)
    return out, added
