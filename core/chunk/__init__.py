"""Chunkers: docs by heading, code by tree-sitter symbol, issues by thread.

One contract for every collection: ``chunk(document, count_tokens, window) -> (chunks,
symbols)``. Every chunk fits ``window`` tokens as ``count_tokens`` counts them (the embedder's own
tokenizer, prefix included); only code yields symbols. :data:`CHUNKERS` maps a collection to its
chunker, and :func:`chunk` dispatches on the document's collection.
"""

from __future__ import annotations

from collections.abc import Callable

from core.chunk import code, docs, issues
from core.models import Chunk, Collection, Document, Symbol

TokenCounter = Callable[[str], int]
Chunker = Callable[[Document, TokenCounter, int], tuple[list[Chunk], list[Symbol]]]

CHUNKERS: dict[Collection, Chunker] = {
    "docs": docs.chunk,
    "code": code.chunk,
    "issues": issues.chunk,
}


def chunk(
    document: Document, count_tokens: TokenCounter, window: int
) -> tuple[list[Chunk], list[Symbol]]:
    """The chunks (and, for code, the symbols) of one document."""
    return CHUNKERS[document.collection](document, count_tokens, window)
