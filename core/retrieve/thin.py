"""A thin piece brings what follows it: a shown chunk of a code or docs file with fewer lines than
``retrieval.thin_lines`` — a heading's one-sentence intro ("If you want some recipes to be
available everywhere, you have a few options."), a doc comment a blank line above its function, a
one-line type alias above the function that uses it, a class's fields above its constructor —
answers little by itself; a person shown it would read on. So the chunk that starts right after it
in its file (with at most :data:`GAP` lines between: blank lines) is shown with it, as a passage
placed after it — unless that chunk is shown already (then nothing is added: the reader has it).
Issue threads are left as they are. The first source — the place read first — reads on whatever
its own chunk's length (``retrieval.read_on_first``): its answer is the likeliest to run on past
the chunk's end (a default set a few lines into the next function, a flag's subsection). An issue
thread first (the issue → code hop's) does not, and no code source after it does either;
``thin_lines`` 0 turns both off.

Measured on the dev sets' tuning halves before each was kept (PLAN-s56.md): thin pieces (NB)
answer facts shown +0.005 ± 0.002, every rank the same, the text shown × 1.06; the first source
reading on (NF1) +0.005 ± 0.002 more, × 1.04."""

from __future__ import annotations

from dataclasses import replace

from core.models import Passage, Source
from core.store.base import BuildReader

# At most this many lines between a thin piece's last line and the next chunk's first.
GAP = 3
FOLLOWED = ("code", "docs")  # collections whose pieces read on (not issue threads)


async def follow_thin(
    reader: BuildReader, sources: list[Source], thin: int, first_on: bool = False
) -> tuple[list[Source], dict[int, list[int]]]:
    """``sources`` with every thin piece followed by its file's next chunk (``thin``: fewer
    lines than this is thin; 0: off) — and, with ``first_on``, the first source's own chunk
    whatever its length —, and for each source that got some (by its index) the rows
    of the chunks it got, for the route to say why they are shown. Each follower is one
    lookup on the path index that returns that chunk alone (:meth:`BuildReader.next_chunk`):
    a long README's hundreds of chunks are not loaded to find one."""
    added: dict[int, list[int]] = {}
    if thin <= 0:
        return sources, added
    shown = {cid for s in sources for cid in (s.chunk_id, *(p.chunk_id for p in s.passages))
             if cid is not None}  # fmt: skip
    out = []
    for i, src in enumerate(sources):
        if src.collection not in FOLLOWED or src.path is None:
            out.append(src)
            continue
        pieces: list[tuple[int | None, int | None, Passage | None]] = [
            (src.start_line, src.end_line, None),
            *((p.start_line, p.end_line, p) for p in src.passages),
        ]
        passages: list[Passage] = []
        for start, end, passage in pieces:
            if passage is not None:
                passages.append(passage)
            on = first_on and i == 0 and passage is None
            if start is None or end is None or (end - start + 1 >= thin and not on):
                continue
            nxt = await reader.next_chunk(src.collection, src.path, src.repo, end, 1 + GAP)
            if nxt is None or nxt[1].id in shown:
                continue
            row, chunk = nxt
            passages.append(Passage.of(chunk))
            if chunk.id is not None:
                shown.add(chunk.id)
            added.setdefault(i, []).append(row)
        out.append(replace(src, passages=passages) if len(passages) > len(src.passages) else src)
    return out, added
