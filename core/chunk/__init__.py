"""Chunkers: docs by heading, code by tree-sitter symbol, issues by thread.

One contract for every collection: ``chunk(document, count_tokens, window) -> (chunks,
symbols)``. Every chunk fits ``window`` tokens as ``count_tokens`` counts them (the embedder's own
tokenizer, prefix included); only code yields symbols. :data:`CHUNKERS` names each collection's
chunker module (imported on first use: tree-sitter loads only where code is chunked), and
:func:`chunk` dispatches on the document's collection.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

from core.chunk.text import TokenCounter
from core.models import Chunk, Collection, Document, Symbol

Chunker = Callable[[Document, TokenCounter, int], tuple[list[Chunk], list[Symbol]]]

# collection -> the module whose ``chunk`` implements the contract for it
CHUNKERS: dict[Collection, str] = {
    "docs": "core.chunk.docs",
    "code": "core.chunk.code",
    "issues": "core.chunk.issues",
}


def chunker(collection: Collection) -> Chunker:
    fn: Chunker = importlib.import_module(CHUNKERS[collection]).chunk
    return fn


def chunk(
    document: Document, count_tokens: TokenCounter, window: int
) -> tuple[list[Chunk], list[Symbol]]:
    """The chunks (and, for code, the symbols) of one document, each recording the document's
    repository."""
    chunks, symbols = chunker(document.collection)(document, count_tokens, window)
    if document.repo:
        for c in chunks:
            c.repo = document.repo
        symbols = [dataclasses.replace(s, repo=document.repo) for s in symbols]
    return chunks, symbols
