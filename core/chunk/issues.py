"""Issues chunker: one chunk per thread when it fits the window; otherwise the thread is split by
comment and sentence, every piece starting with ``#N title`` so it stays findable and citable."""

from __future__ import annotations

from core.models import Chunk, Document, Symbol

from .text import Piece, TokenCounter, pack, prose_units


def chunk_issue(title_line: str, text: str, count: TokenCounter, max_tokens: int) -> list[Piece]:
    """``title_line`` is ``#N title``; ``text`` is the document text that starts with it."""
    tokens = count(text)
    if tokens <= max_tokens:
        return [Piece(text, text, 0, 0, tokens)]
    lines = text.splitlines()
    body = lines[1:] if lines and lines[0].strip() == title_line.strip() else lines
    # Comment headers ("Comment by @x:") start a new block, so pieces break between comments first.
    units = prose_units(body, 1)
    return pack(title_line, units, count, max_tokens)


def chunk(doc: Document, count: TokenCounter, window: int) -> tuple[list[Chunk], list[Symbol]]:
    """The chunker contract (``core.chunk``): an issue thread → one chunk, or its pieces."""
    chunks = [
        Chunk("issues", doc.key, p.text, doc.title, p.tokens, issue=doc.issue, kind="issue",
              url=doc.url or "")
        for p in chunk_issue(doc.title, doc.text, count, window)
    ]  # fmt: skip
    return chunks, []
