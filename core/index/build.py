"""The indexer: gathered sources → documents → chunks → vectors → a new build, swapped in
atomically by the store. It fetches nothing: :func:`core.ingest.gather.gather` made the checkout
and read the issues.

Re-indexing is incremental. Each unit (a file, or one issue thread) has a content hash; a unit
whose hash matches the live build keeps its chunks and vectors as they are (only its permalink
is re-pinned to the new commit). Files git reports unchanged are not even read
(``ingest/documents.py``). Changed and new units are chunked (``core.chunk``) and embedded;
deleted ones are simply not carried over. A collection none of whose units changed, came or
went, in an update that moved no repository's pins (an issue or pull-request event: no commit
moved), is carried as the live build holds it (``base.Carry``): the store takes it from the live
build (a copy of its file locally, its very tables on PostgreSQL) rather than writing its rows,
postings and vectors again. A build stamped differently (another store format, chunker or
lexical-form version, embedding model, dimension or window) is not reused: everything is
rebuilt instead of mixing vectors.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.chunk import chunk
from core.config import Instance
from core.embed import Embedder, EmbedService, text_hash
from core.embed.reading import load as load_reader
from core.embed.reading import read_ahead
from core.errors import IndexError_, RepoExpertError
from core.index.carry import as_before, carry_of, unread
from core.ingest.documents import change_set, read_documents
from core.ingest.gather import Sources
from core.ingest.issues import issue_document
from core.ingest.repo import permalink, web_url
from core.lexical import LEXICAL_VERSION
from core.models import COLLECTIONS, Chunk, Document, Symbol, unit_key
from core.store.base import BuildReader, IndexStore, Unit

log = logging.getLogger(__name__)

CHUNKER_VERSION = 24  # 2: symbols carry the names they call; 3: Markdown by markdown-it-py;
# 4: a long code block split into fenced parts with their own lines; 5: module code named by the
# declarations it holds, which join the symbol table; 6: that name is the chunk's title; 7: a
# heading keeps its code spans paired (only markup wrapping the whole title is dropped); 8: a
# heading's inline HTML dropped (an image as its alt text); 9: C#, PHP, Kotlin and Swift by
# symbol (they were line windows); 10: AsciiDoc by section (it was one untitled section); 11:
# its listings kept as blocks, nested blocks and discrete headings read as Asciidoctor does; 12:
# C/C++ headers by content (a C++ `.h`) and read past their export/attribute macros, guarded
# headers' #defines named, a context line names a declaration once; 13: macros in a row and
# before a qualified type, declarations read inside an error node; 14: C# properties, events,
# indexers and operators, Kotlin secondary constructors and Swift subscripts as definitions;
# 15: the macro rules narrowed after review (types, values, return types alone, CRLF); 16:
# Rust's inline tests (`#[cfg(test)]` items, `#[test]` functions) as chunks of kind `test`; 17:
# (a screened label change, reverted); 18: a `cfg` counts when it needs `test`, `#![cfg(test)]`;
# 19: a method group titled by the methods it holds, chunks of imports / package lines / licence
# text alone left out, JS `export default cond && function …` a definition; 20: a `/** … */`
# block parted from its definition by blank lines is that definition's (20 crashed on
# `x = 5; /* c */` above a blank line); 21: re-exports, cgo preambles and a file of imports alone
# keep their chunks; 22: 20's doc blocks reverted (screened: s52, addendum 4); 23: a block comment
# the parse puts right above a definition is its doc, whatever its inner lines start with; 24: not
# one that ends a line of code (`x = 5; /* c */`)


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
    chunks_read: int = 0  # chunks the tuned reader read ahead (retrieval.reader)
    read_seconds: float = 0.0
    rebuilt_reason: str | None = None
    # Nothing the build holds would differ: the live build was kept, not written again.
    kept_live: bool = False
    # Collections taken as the live build held them (none of their units changed, came or
    # went, no repository's pins moved): taken from it by the store, not written again.
    carried: list[str] = field(default_factory=list)
    # Per collection: its largest chunk's tokens and its chunks over the window (what a carried
    # collection's next build takes as they are).
    collection_tokens: dict[str, list[int]] = field(default_factory=dict)
    # An instance over several repositories: per repository its commit, whether its work tree
    # was clean, files and chunks per collection, units changed, new chunks, and its error.
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# progress(stage, done, total): stage is "chunk", "embed" or "read" (the tuned reader)
Progress = Callable[[str, int, int], None]


def build_stamp(schema: int, embedder: str, dim: int, window: int) -> dict[str, Any]:
    """What a build is made with; a build stamped otherwise is rebuilt, never reused."""
    return {
        "schema": schema,
        "chunker": CHUNKER_VERSION,
        "lexical": LEXICAL_VERSION,
        "embedder": embedder,
        "dim": dim,
        "window": window,
    }


async def build_index(
    inst: Instance,
    sources: Sources,
    store: IndexStore,
    embedder: EmbedService,
    progress: Progress | None = None,
    *,
    full: bool = False,
) -> Summary:
    """Build or incrementally update the index of one instance from ``sources``; returns what
    it did. Callers hold the store's lock for the instance (``RepoExpert.sync``)."""
    t0 = time.perf_counter()
    multi = len(sources.repos) > 1
    summary = Summary(instance=inst.name, commit=None if multi else sources.checkout.commit)
    name, dim, window = await embedder.info()
    summary.window = window
    if inst.retrieval.reader:  # before any work: a reader that cannot load fails the build now
        await load_reader(embedder, inst.name)
    stamp = build_stamp(store.schema, name, dim, window)

    old: BuildReader | None = None
    if full:
        summary.rebuilt_reason = "full rebuild requested"
    else:
        try:
            old = await store.open_live(inst.name)
        except IndexError_ as e:  # a live build that cannot be read: rebuild, never fail on it
            log.info("rebuilding %s from scratch: %s", inst.name, e)
            summary.rebuilt_reason = str(e)
        if old is not None and old.stamp != stamp:
            summary.rebuilt_reason = f"index was built with {old.stamp}, now {stamp}"
            log.info("rebuilding %s: %s", inst.name, summary.rebuilt_reason)
            await old.close()
            old = None
    try:
        old_units = await old.units() if old else {}
        docs, fresh = await _read_repos(sources, old_units, old.meta if old else None, full,
                                        summary)  # fmt: skip
        # A unit is reused when its content is unchanged *and* it belongs to the same
        # collection (changing the include globs moves a file between docs and code).
        reuse = {
            d.key
            for d in docs
            if (u := old_units.get(d.key)) is not None
            and u.content_hash == d.content_hash
            and u.collection == d.collection
        }
        # A unit no chunker got through, unchanged since, fails again: left out as it was, not
        # re-chunked, and no reason to write the build (nor to keep its collection from being
        # carried). A new chunker (another stamp) tries it again.
        was_failed = (old.meta.get("failed") or {}) if old is not None else {}
        failing = {
            d.key: str([*was_failed[d.key], ""][2])
            for d in docs
            if d.key not in reuse
            and list(was_failed.get(d.key) or [])[:2] == [d.collection, d.content_hash]
        }
        changed = [d for d in docs if d.key not in reuse and d.key not in failing]
        summary.units_reused = len(reuse)
        summary.units_changed = len(changed)
        summary.units_deleted = len(set(old_units) - {d.key for d in docs})
        for reason in failing.values():
            summary.excluded[reason] = summary.excluded.get(reason, 0) + 1

        pins = _pins(sources, fresh, summary)
        if old is not None and _unchanged(old, changed, summary, pins):
            await _keep_live(old, summary, inst, embedder, store, progress, reuse)
            summary.seconds = time.perf_counter() - t0
            return summary

        # Chunk the changed units on the model's thread (token counts need its tokenizer), one
        # unit a job behind any question's; one that cannot be chunked is left out, "excluded".
        new_chunks, new_symbols, failed = await _chunk_units(changed, embedder, window, progress)
        for reason in failed.values():
            summary.excluded[reason] = summary.excluded.get(reason, 0) + 1
        left_out = {d.key: [d.collection, d.content_hash, failed.get(d.key) or failing[d.key]]
                    for d in docs if d.key in failed or d.key in failing}  # fmt: skip
        docs = [d for d in docs if d.key not in left_out]
        for key, why in failed.items():  # out of memory may pass: tried again next time
            if why.endswith("(MemoryError)"):
                left_out.pop(key, None)
        for c in new_chunks:
            c.text_hash = text_hash(c.text)
        for d in changed:
            if d.repo in summary.repos:
                summary.repos[d.repo]["units_changed"] += 1
        for c in new_chunks:
            if c.repo in summary.repos:
                summary.repos[c.repo]["chunks_new"] += 1

        # Reused units: their chunks, vectors and symbols come from the live build; a collection
        # carried whole is not read when the live build's summary gives its counts.
        carry = carry_of(old, docs, changed, old_units, pins)
        before_s = (old.meta.get("summary") or {}) if old is not None else {}
        whole = unread(carry, before_s, summary.repos, inst.retrieval.reader)
        asked = {k for k in reuse if old_units[k].collection not in whole}
        kept, kept_symbols = await old.carried(asked, whole) if old is not None else ([], [])

        te = time.perf_counter()
        before = embedder.passages_embedded
        new_vecs = await embedder.embed_passages(
            [c.text for c in new_chunks],
            progress=(lambda a, b: progress("embed", a, b)) if progress else None,
            background=True,
        )
        summary.embed_seconds = time.perf_counter() - te
        summary.chunks_embedded = embedder.passages_embedded - before
        if inst.retrieval.reader:
            texts = [c.text for c, _ in kept] + [c.text for c in new_chunks]
            await _read_ahead(texts, summary, embedder, store, progress)
        summary.carried = sorted(carry.collections) if carry else []
        async with store.writer(inst.name, carry) as w:
            for coll in COLLECTIONS:
                if coll in whole:  # carried, not read: its counts are the live build's
                    assert old is not None
                    summary.chunks[coll] = old.size(coll)
                    summary.collection_tokens[coll], per_repo = as_before(
                        before_s, coll, summary.repos
                    )
                    for name, n in per_repo.items():
                        summary.repos[name]["chunks"][coll] = n
                    continue
                rows: list[Chunk] = [c for c, _ in kept if c.collection == coll]
                vecs = [v for c, v in kept if c.collection == coll]
                for c, v in zip(new_chunks, new_vecs, strict=True):
                    if c.collection == coll:
                        rows.append(c)
                        vecs.append(v)
                for c in rows:
                    got = fresh.get(c.repo)
                    if got is None:  # its repository could not be read: kept as it was
                        continue
                    c.commit, web = got
                    if c.path is not None and c.start_line is not None:
                        c.url = permalink(web, c.commit, c.path, c.start_line, c.end_line or 0)
                if carry is None or coll not in carry.collections:
                    await w.add_chunks(coll, rows, np.stack(vecs) if vecs else None)
                summary.chunks[coll] = len(rows)
                for c in rows:
                    if c.repo in summary.repos:
                        per = summary.repos[c.repo]["chunks"]
                        per[coll] = per.get(coll, 0) + 1
                summary.collection_tokens[coll] = [
                    max((c.tokens for c in rows), default=0),
                    sum(1 for c in rows if c.tokens > window),
                ]
            summary.largest_chunk_tokens = max(t for t, _ in summary.collection_tokens.values())
            summary.over_window = sum(n for _, n in summary.collection_tokens.values())
            await w.add_units(docs)
            for d in docs:
                summary.files[d.collection] = summary.files.get(d.collection, 0) + 1
                if d.repo in summary.repos:
                    per = summary.repos[d.repo]["files"]
                    per[d.collection] = per.get(d.collection, 0) + 1
            if carry is not None and "code" in carry.collections:  # the symbols are code's
                summary.symbols = (
                    int(before_s["symbols"]) if "code" in whole else len(kept_symbols)
                )
            else:
                symbols = kept_symbols + new_symbols
                await w.add_symbols(symbols)
                summary.symbols = len(symbols)
            summary.seconds = time.perf_counter() - t0
            await w.set_meta("stamp", stamp)
            if summary.repos:  # several repositories: each its own commit (``status``)
                await w.set_meta("commit", None)
                await w.set_meta("tree_clean", False)
                await w.set_meta("repos", summary.repos)
            else:
                co = sources.checkout
                await w.set_meta("commit", co.commit)
                # git diff may stand in for reading files only against a build of a clean commit
                await w.set_meta("tree_clean", co.commit is not None and not co.dirty)
            await w.set_meta("pins", pins)
            await w.set_meta("failed", left_out)
            await w.set_meta("built_at", time.time())
            await w.set_meta("summary", summary.to_json())
            await w.commit()
    finally:
        if old is not None:
            await old.close()
    return summary


async def _read_repos(
    sources: Sources, old_units: dict[str, Unit], live: dict[str, Any] | None, full: bool,
    summary: Summary,
) -> tuple[list[Document], dict[str, tuple[str | None, str | None]]]:  # fmt: skip
    """Every repository's documents, keyed apart (``models.unit_key``), and per repository that
    was read its (commit, web URL) for the permalinks. A repository of several that could not
    be had keeps its units as the live build has them (they are reused: nothing is re-read)."""
    docs: list[Document] = []
    fresh: dict[str, tuple[str | None, str | None]] = {}
    multi = len(sources.repos) > 1
    how: list[str] = []
    for part in sources.repos:
        name = part.name
        units = _units_of(old_units, name) if multi else old_units
        before = (live or {}).get("repos", {}).get(name) if multi else None
        if multi:
            summary.repos[name] = {
                "commit": part.checkout.commit if part.checkout else (before or {}).get("commit"),
                "files": {}, "chunks": {}, "units_changed": 0, "chunks_new": 0,
                "error": "; ".join(part.errors) or None, "stale": False,
            }  # fmt: skip
        if part.checkout is None:
            docs.extend(_as_was(name, k, u) for k, u in units.items())
            summary.repos[name]["tree_clean"] = bool((before or {}).get("tree_clean"))
            summary.repos[name]["stale"] = True  # what the live build had, not re-read
            continue
        co = part.checkout
        if multi:
            summary.repos[name]["tree_clean"] = co.commit is not None and not co.dirty
            base = {"commit": before.get("commit"), "tree_clean": before.get("tree_clean")} if (
                before and units) else None  # fmt: skip
        else:
            base = live
        changes, detection = await asyncio.to_thread(change_set, co, base, full)
        how.append(f"{name}: {detection}" if name else detection)
        read = await read_documents(part.inst, co, units, changes)
        for reason, n in read.excluded.items():
            summary.excluded[reason] = summary.excluded.get(reason, 0) + n
        summary.files_read += read.files_read
        web = await asyncio.to_thread(web_url, part.inst)  # the file's, else the GitHub remote's
        fresh[name] = (co.commit, web)
        got = [*read.documents, *(issue_document(i, web) for i in part.issues)]
        docs.extend(dataclasses.replace(d, key=unit_key(name, d.key), repo=name) if name else d
                    for d in got)  # fmt: skip
    summary.change_detection = "; ".join(how)
    return docs, fresh


def _pins(
    sources: Sources, fresh: dict[str, tuple[str | None, str | None]], summary: Summary
) -> dict[str, list[Any]]:
    """What the build's permalinks and change detection are pinned to, per repository read:
    its commit, web address and whether its work tree was clean."""
    out: dict[str, list[Any]] = {}
    for name, (commit, web) in fresh.items():
        if name in summary.repos:
            clean = bool(summary.repos[name].get("tree_clean"))
        else:
            co = sources.checkout
            clean = co.commit is not None and not co.dirty
        out[name] = [commit, web, clean]
    return out


def _unchanged(
    old: BuildReader, changed: list[Document], summary: Summary, pins: dict[str, list[Any]]
) -> bool:
    """Whether the build this update would write holds what the live one does: no unit changed
    or went, every repository read at the commit, web address and clean state the live build
    is pinned to, and no repository's error — this read's, or one the live build records
    (writing a build without it is what clears it from ``status``)."""
    repos = [*summary.repos.values(), *(old.meta.get("repos") or {}).values()]
    return (
        not changed
        and not summary.units_deleted
        and not any(r.get("error") for r in repos)
        and old.meta.get("pins") == pins
    )


async def _keep_live(
    old: BuildReader,
    summary: Summary,
    inst: Instance,
    embedder: EmbedService,
    store: IndexStore,
    progress: Progress | None,
    reuse: set[str],
) -> None:
    """Nothing changed: the live build stays (no copy of every chunk, vector and index), and
    ``summary`` gives its counts. The tuned reader, if on, still reads ahead what its cache
    lacks (it may have just been turned on)."""
    summary.kept_live = True
    await store.tidy(inst.name)
    before = old.meta.get("summary") or {}
    for key in ("files", "chunks", "symbols", "largest_chunk_tokens", "over_window",
                "collection_tokens"):
        if key in before:
            setattr(summary, key, before[key])
    for name, r in summary.repos.items():
        was = (before.get("repos") or {}).get(name) or {}
        r["files"], r["chunks"] = dict(was.get("files") or {}), dict(was.get("chunks") or {})
    if inst.retrieval.reader:
        kept, _ = await old.carried(reuse)
        await _read_ahead([c.text for c, _ in kept], summary, embedder, store, progress)


async def _read_ahead(
    texts: list[str],
    summary: Summary,
    embedder: EmbedService,
    store: IndexStore,
    progress: Progress | None,
) -> None:
    """The tuned reader's vectors of every chunk the cache lacks (reused ones too: the reader
    may have just been turned on), so that questions only read themselves; a PostgreSQL store
    keeps them for every process too."""
    tr = time.perf_counter()
    summary.chunks_read = await read_ahead(
        embedder,
        texts,
        progress=(lambda a, b: progress("read", a, b)) if progress else None,
        vectors=store.shared_vectors,
    )
    summary.read_seconds = time.perf_counter() - tr


def _units_of(units: dict[str, Unit], repo: str) -> dict[str, Unit]:
    """The live build's units of one repository, by their key within it."""
    head = f"{repo}:"
    return {k[len(head) :]: u for k, u in units.items() if k.startswith(head)}


def _as_was(repo: str, key: str, u: Unit) -> Document:
    """A unit kept as the live build has it (its repository could not be read this time)."""
    issue = int(key[6:]) if key.startswith("issue:") and key[6:].isdigit() else None
    path = None if issue is not None else key
    return Document(u.collection, unit_key(repo, key), "", u.content_hash, path=path,
                    issue=issue, title=key, repo=repo)  # fmt: skip


async def _chunk_units(
    units: list[Document], embedder: EmbedService, window: int, progress: Progress | None
) -> tuple[list[Chunk], list[Symbol], dict[str, str]]:
    """Chunks and symbols of ``units``; those that could not be chunked by key, with the reason
    (a bug or a pathological file must not fail the build; the model failing does)."""
    chunks: list[Chunk] = []
    symbols: list[Symbol] = []
    failed: dict[str, str] = {}
    for i, d in enumerate(units):

        def one(m: Embedder, d: Document = d) -> tuple[list[Chunk], list[Symbol]]:
            return chunk(d, m.count_tokens, window)

        try:
            cs, ss = await embedder.run(one, background=True)
        except RepoExpertError:
            raise
        except Exception as e:
            log.warning("%s could not be chunked; left out of the index: %r", d.key, e)
            failed[d.key] = f"could not be chunked ({type(e).__name__})"
            continue
        chunks.extend(cs)
        symbols.extend(ss)
        if progress:
            progress("chunk", i + 1, len(units))
    return chunks, symbols, failed
