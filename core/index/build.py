"""The indexer: source → documents → chunks → vectors → a new build, swapped in atomically.

Re-indexing is incremental. Each unit (a file, or one issue thread) has a content hash; a unit
whose hash matches the live build keeps its chunks and vectors as they are (only its permalink
is re-pinned to the new commit). When the live build came from a clean work tree at a commit that
is still in the repository, ``git diff`` names the changed files and only those are read at all
(see ``ingest/git_diff.py``); otherwise every file is read and hashed. Changed and new units are
chunked and embedded; deleted ones are simply not carried over. A build stamped differently
(another embedding model, dimension, window or chunker version) is not reused: everything is
rebuilt instead of mixing vectors.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.chunk.code import chunk_code
from core.chunk.docs import chunk_doc
from core.chunk.issues import chunk_issue
from core.config import Instance
from core.embed.service import EmbedService, text_hash
from core.errors import SourceError
from core.ingest.git_diff import ChangeSet, changes_between
from core.ingest.issues import Issue, issue_document, keep_issue, load_issues_file
from core.ingest.repo import Checkout, checkout, permalink, read_text, select_files
from core.models import COLLECTIONS, Chunk, Document, Symbol
from core.store.local import SCHEMA_VERSION, BuildWriter, IndexReader, current_build

log = logging.getLogger(__name__)

CHUNKER_VERSION = 1


@dataclass
class Summary:
    instance: str
    commit: str | None
    files: dict[str, int] = field(default_factory=dict)  # collection -> units indexed
    chunks: dict[str, int] = field(default_factory=dict)  # collection -> chunks
    excluded: dict[str, int] = field(default_factory=dict)
    units_changed: int = 0
    units_reused: int = 0
    units_deleted: int = 0
    files_read: int = 0  # files read from disk (the others were unchanged according to git)
    change_detection: str = ""  # "git diff <old>..<new>", or why every file was hashed
    chunks_embedded: int = 0
    largest_chunk_tokens: int = 0
    over_window: int = 0
    window: int = 0
    symbols: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0
    rebuilt_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# progress(stage, done, total): stage is "chunk" or "embed"
Progress = Callable[[str, int, int], None]


def build_stamp(embedder: str, dim: int, window: int) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "chunker": CHUNKER_VERSION,
        "embedder": embedder,
        "dim": dim,
        "window": window,
    }


def _chunk_document(
    doc: Document, co: Checkout, web_url: str | None, count: Callable[[str], int], window: int
) -> tuple[list[Chunk], list[Symbol]]:
    """Chunk one unit (runs on the embedder's thread: token counts use the model's tokenizer)."""
    chunks: list[Chunk] = []
    symbols: list[Symbol] = []
    if doc.collection == "issues":
        for p in chunk_issue(doc.title, doc.text, count, window):
            chunks.append(
                Chunk("issues", doc.key, p.text, doc.title, p.tokens, issue=doc.issue,
                      kind="issue", url=doc.url or "")
            )  # fmt: skip
        return chunks, symbols
    assert doc.path is not None
    if doc.collection == "docs":
        for dc in chunk_doc(doc.path, doc.text, count, window):
            chunks.append(
                Chunk("docs", doc.key, dc.piece.text, dc.title, dc.piece.tokens, path=doc.path,
                      start_line=dc.piece.start_line, end_line=dc.piece.end_line, kind="section")
            )  # fmt: skip
        return chunks, symbols
    code_chunks, defs = chunk_code(doc.path, doc.text, count, window)
    for cc in code_chunks:
        chunks.append(
            Chunk("code", doc.key, cc.text, cc.symbol or doc.path, count(cc.text), path=doc.path,
                  start_line=cc.start_line, end_line=cc.end_line, symbol=cc.symbol, kind=cc.kind)
        )  # fmt: skip
    symbols = [Symbol(d.name, d.qualname, d.kind, doc.path, d.start_line, d.end_line) for d in defs]
    return chunks, symbols


async def _read_documents(
    inst: Instance,
    co: Checkout,
    summary: Summary,
    old_units: dict[str, str],
    changes: ChangeSet | None,
    old_colls: dict[str, str],
) -> list[Document]:
    """The repository's documents. With a ``changes`` set, a file git reports unchanged that the
    live build holds is not read: its unit keeps the old hash, so the old chunks are reused —
    unless the configuration moved it to another collection, which needs it re-chunked."""
    trusted = {k for k in old_units if changes.unchanged(k)} if changes is not None else set[str]()
    sel = await asyncio.to_thread(select_files, inst, co, trusted)
    summary.excluded = dict(sel.excluded)

    def read_all() -> list[Document]:
        docs = []
        for rel, coll in sel.files.items():
            if rel in trusted and old_colls.get(rel) == coll:
                docs.append(Document(coll, rel, "", old_units[rel], path=rel, title=rel))
                continue
            try:
                text, h = read_text(co.root, rel)
            except OSError as e:
                log.warning("skipping unreadable file %s: %s", rel, e)
                continue
            summary.files_read += 1
            if not text.strip():
                continue
            docs.append(Document(coll, rel, text, h, path=rel, title=rel))
        return docs

    return await asyncio.to_thread(read_all)


async def load_issues(inst: Instance, data_dir: Path) -> list[Issue]:
    """The configured issues, filtered: from the gh-JSON file, or the GitHub mirror after an
    incremental sync of it (network)."""
    if inst.issues.file:
        path = inst.resolve(inst.issues.file)
        try:
            issues = await asyncio.to_thread(load_issues_file, path)
        except SourceError as e:
            raise SourceError(f"{inst.source_file}: issues.file: {e}") from None
        return [i for i in issues if keep_issue(i, inst.issues)]
    if inst.issues.github:
        from core.ingest.mirror import sync_and_read

        return (await sync_and_read(inst, data_dir))[1]
    return []


def _change_set(co: Checkout, old: IndexReader | None, full: bool) -> tuple[ChangeSet | None, str]:
    if old is None:
        return None, "content hashes (no previous build)" if not full else "full rebuild"
    base = old.meta.get("commit")
    if not old.meta.get("tree_clean"):
        return None, "content hashes (the previous build was not of a clean commit)"
    if co.commit is None or co.dirty:
        return None, "content hashes (the work tree has uncommitted changes)"
    changes = changes_between(co.root, base, co.commit)
    if changes is None:
        return None, f"content hashes (commit {str(base)[:12]} is not in the clone)"
    return changes, (
        f"git diff {str(base)[:12]}..{co.commit[:12]}: {len(changes.changed)} changed, "
        f"{len(changes.deleted)} deleted ({len(changes.renamed)} renamed)"
    )


async def build_index(
    inst: Instance,
    data_dir: Path,
    embedder: EmbedService,
    progress: Progress | None = None,
    *,
    full: bool = False,
    co: Checkout | None = None,
    issues: Sequence[Issue] | None = None,
) -> Summary:
    """Build or incrementally update the index of one instance; returns what it did.

    ``co``: a checkout already made (default: check out / fetch now). ``issues``: the issues to
    index, already filtered (default: :func:`load_issues`)."""
    t0 = time.perf_counter()
    if co is None:
        co = await checkout(inst, data_dir)
    summary = Summary(instance=inst.name, commit=co.commit)
    if issues is None:
        issues = await load_issues(inst, data_dir)
    name, dim, window = await embedder.info()
    summary.window = window
    stamp = build_stamp(name, dim, window)

    old: IndexReader | None = None
    old_path = current_build(data_dir, inst.name)
    if old_path is not None and not full:
        old = await IndexReader.open(old_path)
        if old.stamp != stamp:
            summary.rebuilt_reason = f"index was built with {old.stamp}, now {stamp}"
            log.info("rebuilding %s: %s", inst.name, summary.rebuilt_reason)
            await old.close()
            old = None
    elif full:
        summary.rebuilt_reason = "full rebuild requested"
    try:
        old_units = await old.units() if old else {}
        old_colls = await old.unit_collections() if old else {}
        changes, summary.change_detection = await asyncio.to_thread(_change_set, co, old, full)
        docs = await _read_documents(inst, co, summary, old_units, changes, old_colls)
        docs.extend(issue_document(i, inst.web_url) for i in issues)
        # A unit is reused when its content is unchanged *and* it belongs to the same
        # collection (changing the include globs moves a file between docs and code).
        reuse = {
            d.key
            for d in docs
            if old_units.get(d.key) == d.content_hash and old_colls.get(d.key) == d.collection
        }
        changed = [d for d in docs if d.key not in reuse]
        summary.units_reused = len(reuse)
        summary.units_changed = len(changed)
        summary.units_deleted = len(set(old_units) - {d.key for d in docs})

        # Chunk the changed units on the model's thread (token counts need its tokenizer).
        def chunk_all(m: Any) -> tuple[list[Chunk], list[Symbol]]:
            out_c: list[Chunk] = []
            out_s: list[Symbol] = []
            for i, d in enumerate(changed):
                cs, ss = _chunk_document(d, co, inst.web_url, m.count_tokens, window)
                out_c.extend(cs)
                out_s.extend(ss)
                if progress:
                    progress("chunk", i + 1, len(changed))
            return out_c, out_s

        new_chunks, new_symbols = await embedder.run(chunk_all)
        for c in new_chunks:
            c.text_hash = text_hash(c.text)

        # Reused units: their chunks, vectors and symbols come from the live build.
        kept: list[tuple[Chunk, np.ndarray]] = []
        kept_symbols: list[Symbol] = []
        if old is not None and reuse:
            rows_of = await _rows_by_id(old)
            for c in await old.all_chunks():
                if c.doc_key in reuse:
                    assert c.id is not None
                    kept.append((c, np.array(old.vectors[c.collection][rows_of[c.id]])))
            kept_symbols = [s for s in await _all_symbols(old) if s.path in reuse]

        te = time.perf_counter()
        before = embedder.passages_embedded
        new_vecs = await embedder.embed_passages(
            [c.text for c in new_chunks],
            progress=(lambda a, b: progress("embed", a, b)) if progress else None,
        )
        summary.embed_seconds = time.perf_counter() - te
        summary.chunks_embedded = embedder.passages_embedded - before
        async with BuildWriter(data_dir, inst.name) as w:
            for coll in COLLECTIONS:
                rows: list[Chunk] = [c for c, _ in kept if c.collection == coll]
                vecs = [v for c, v in kept if c.collection == coll]
                for c, v in zip(new_chunks, new_vecs, strict=True):
                    if c.collection == coll:
                        rows.append(c)
                        vecs.append(v)
                for c in rows:
                    c.commit = co.commit
                    if c.path is not None and c.start_line is not None:
                        c.url = permalink(
                            inst.web_url, co.commit, c.path, c.start_line, c.end_line or 0
                        )
                await w.add_chunks(coll, rows)
                if vecs:
                    await w.write_vectors(coll, np.stack(vecs))
                summary.chunks[coll] = len(rows)
                summary.largest_chunk_tokens = max(
                    [summary.largest_chunk_tokens, *(c.tokens for c in rows)]
                )
                summary.over_window += sum(1 for c in rows if c.tokens > window)
            for d in docs:
                await w.add_unit(d.key, d.collection, d.content_hash, d.path, d.issue, d.title,
                                 d.url)  # fmt: skip
                summary.files[d.collection] = summary.files.get(d.collection, 0) + 1
            symbols = kept_symbols + new_symbols
            await w.add_symbols(symbols)
            summary.symbols = len(symbols)
            summary.seconds = time.perf_counter() - t0
            await w.set_meta("stamp", stamp)
            await w.set_meta("commit", co.commit)
            # git diff may stand in for reading files only against a build of a clean commit.
            await w.set_meta("tree_clean", co.commit is not None and not co.dirty)
            await w.set_meta("built_at", time.time())
            await w.set_meta("summary", summary.to_json())
            await w.commit()
    finally:
        if old is not None:
            await old.close()
    return summary


async def _rows_by_id(old: IndexReader) -> dict[int, int]:
    async with old.db.execute("SELECT id, row FROM chunks") as cur:
        return {int(i): int(r) async for i, r in cur}


async def _all_symbols(old: IndexReader) -> list[Symbol]:
    async with old.db.execute(
        "SELECT name, qualname, kind, path, start_line, end_line FROM symbols"
    ) as cur:
        return [Symbol(*r) async for r in cur]
