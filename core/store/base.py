"""The store interface: how the rest of repo-expert writes and reads an instance's index.

An instance's index is a sequence of *builds*. A build holds, per collection (docs, code,
issues), the chunks in *rows* 0..n-1 with one vector per row, their lexical forms for BM25, the
symbol table, the indexed *units* (files and issue threads with their content hashes) and a few
meta values (the stamp of what built it, the commit, the summary). One build is *live*; a new
one is written aside and made live atomically by :meth:`BuildWriter.commit`, so a reader sees a
whole build or the previous one, and a build that fails or is killed leaves the previous one
live.

Nothing outside a store implementation touches SQL, FTS syntax, vector files or arrays of
vectors: retrieval asks for dense or lexical hits, cosines of given rows and lookups by issue,
path or symbol; the indexer writes chunks with their vectors and asks the live build for what it
can carry over. ``local.py`` (SQLite + usearch files under the data folder) is the first
implementation; ``tests/test_store_contract.py`` is the suite any implementation must pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from core.models import Chunk, Collection, Document, Symbol
from core.store.doc_terms import DocTerms


class Hit(NamedTuple):
    """A row of a collection and its score (cosine similarity, or BM25 ≥ 0)."""

    row: int
    score: float


@dataclass(frozen=True)
class IssueLinks:
    """How an issue or pull request connects to others and to the code."""

    files: tuple[str, ...] = ()  # a pull request's changed files
    fixes: tuple[int, ...] = ()  # the issues a pull request closes
    fixed_by: tuple[int, ...] = ()  # the indexed pull requests that close this issue


def as_named(name: str, found: list[Symbol]) -> list[Symbol]:
    """``found`` (by qualified name, name or any spelling) without the other spellings when a
    definition has ``name`` as written: a question naming the class ``ContentLength`` is not
    about the method ``content_length``."""
    exact = [s for s in found if name in (s.qualname, s.name)]
    return exact or found


def group_links(
    numbers: Sequence[int], forward: Iterable[Sequence[Any]],
    backward: Iterable[Sequence[Any]],
) -> dict[int, IssueLinks]:  # fmt: skip
    """Both backends' ``links``: ``forward`` rows (issue, rel, target) in their written order,
    ``backward`` rows (fixed issue, pull request) — grouped per number, those without any
    left out."""
    files: dict[int, list[str]] = {}
    fixes: dict[int, list[int]] = {}
    fixed_by: dict[int, list[int]] = {}
    for n, rel, target in forward:
        if rel == "file":
            files.setdefault(int(n), []).append(str(target))
        elif rel == "fixes" and str(target).isdigit():
            fixes.setdefault(int(n), []).append(int(target))
    for target, n in backward:
        fixed_by.setdefault(int(target), []).append(int(n))
    return {
        n: IssueLinks(tuple(files.get(n, ())), tuple(fixes.get(n, ())),
                      tuple(sorted(fixed_by.get(n, ()))))
        for n in numbers
        if n in files or n in fixes or n in fixed_by
    }  # fmt: skip


@dataclass(frozen=True)
class Unit:
    """An indexed unit (a file or an issue thread) as the build recorded it."""

    collection: Collection
    content_hash: str


@dataclass(frozen=True)
class Carry:
    """Collections a new build takes as the live build ``build_id`` holds them — rows, vectors,
    lexical postings and all, and with the code its symbol table and calls — rather than having
    them written again: an update that changed, added and removed none of their units and moved
    no repository's pins (``index/build.py``). The writer is given it when it starts;
    ``add_chunks`` is not called for these, nor ``add_symbols`` when the code is carried."""

    build_id: str
    collections: frozenset[Collection]


class SharedVectors(Protocol):
    """Vectors every process of a deployment shares, by (model name, text hash): the tuned
    reader's passage vectors in a PostgreSQL store (``rx_vectors``), written by the build that
    read them ahead, so a server whose data folder is not the builder's never reads them again.
    A local store has none (``shared_vectors`` is None): its processes share the data folder's
    embedding cache. Failures are :class:`~core.errors.StoreError`."""

    async def missing(self, model: str, hashes: Sequence[str], dim: int) -> set[str]:
        """Which of ``hashes`` have no vector of ``model`` (of ``dim`` floats)."""
        ...

    async def get(self, model: str, hashes: Sequence[str], dim: int) -> dict[str, np.ndarray]:
        """The vectors of ``model`` kept for ``hashes`` (those it has), float32 of ``dim``; one
        of another size is damaged: left out, as if missing."""
        ...

    async def put(self, model: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        """Keep ``model``'s vectors by text hash (one already kept stays as it is, unless its
        size is wrong)."""
        ...


class BuildReader(Protocol):
    """One build, read-only. Safe to use from many tasks at once; closed by whoever opened it."""

    build_id: str  # changes with every build: a reader is stale when the live id differs
    meta: dict[str, Any]  # what the build recorded: stamp, commit, tree_clean, built_at, summary
    shared_vectors: SharedVectors | None  # the deployment's (PostgreSQL), else None

    @property
    def stamp(self) -> dict[str, Any]: ...

    def size(self, collection: Collection) -> int:
        """Rows (chunks) of a collection."""
        ...

    async def dense(
        self, collection: Collection, query: np.ndarray, n: int, repos: Sequence[str] = ()
    ) -> list[Hit]:
        """The ``n`` rows nearest to ``query`` by cosine similarity (exact), best first.
        ``repos`` (a filter, in a build over several): the nearest ``n`` of their rows only."""
        ...

    async def similarity(
        self, collection: Collection, query: np.ndarray, rows: Sequence[int]
    ) -> list[float]:
        """Cosine similarity of ``query`` with each of ``rows``, in that order."""
        ...

    async def lexical(
        self, collection: Collection, terms: Sequence[str], n: int, repos: Sequence[str] = ()
    ) -> list[Hit]:
        """BM25 top ``n`` of the rows whose lexical form holds any of ``terms`` (lexical tokens,
        ``core.lexical.query_terms``), best first; scores ≥ 0, higher is better. ``repos`` (a
        filter, in a build over several): only their rows, scored with their statistics — N,
        df, mean length — as their own build would (``bm25.py``)."""
        ...

    async def doc_terms(
        self, terms: Sequence[str], rows: Mapping[Collection, Sequence[int]],
        repos: Sequence[str] = (),
    ) -> DocTerms:  # fmt: skip
        """For lexical ``terms`` (as ``lexical`` takes them): how many documents of the build
        (of ``repos``, a filter's, when given) hold each, and which of them the document of
        each of ``rows`` holds in any of its chunks (``doc_terms.py``; what the ranker's
        coverage feature reads)."""
        ...

    def tests(self, collection: Collection, rows: Sequence[int], files: bool = False) -> set[int]:
        """Which of ``rows`` hold test code (``models.is_test_code``: a test file or a test
        chunk; code only: docs about testing are docs); ``files``: only those in test files
        (``models.is_test_path``), not a source file's own tests. Cheap: asked for every
        candidate of every question."""
        ...

    async def chunks(self, collection: Collection, rows: Sequence[int]) -> dict[int, Chunk]:
        """The chunks of these rows (missing rows are left out)."""
        ...

    async def all_chunks(self, collection: Collection | None = None) -> list[Chunk]:
        """Every chunk (of one collection), by collection and row."""
        ...

    async def issue_rows(self, number: int) -> list[int]:
        """Rows of the issues collection holding issue or pull request ``number``."""
        ...

    async def path_rows(self, collection: Collection, path: str) -> list[int]:
        """Rows of chunks of the file at ``path``, or of a file whose path ends in ``/path``."""
        ...

    async def next_chunk(
        self, collection: Collection, path: str, repo: str, after: int, within: int
    ) -> tuple[int, Chunk] | None:
        """The chunk of the file at exactly ``path`` of repository ``repo`` that starts first
        after line ``after``, at most ``within`` lines after it (a tie: the lower row) — its row
        and itself —, or None. One lookup on the path index that returns that chunk alone, not
        the file's others (``retrieve/thin.py`` asks it for every thin piece shown)."""
        ...

    async def symbols(self, name: str, repos: Sequence[str] = ()) -> list[Symbol]:
        """Definitions named ``name``: by qualified name (``Parser.parse``), by name (which also
        finds methods), or — only when nothing has the name as written — by any spelling
        (``parseConfig`` finds ``parse_config``; ``ContentLength`` does not find
        ``content_length`` beside the class ``ContentLength``): the exact qualified name first,
        then the exact name, then by path and line (at most 20; :func:`as_named`). ``repos`` (a
        filter, in a build over several): their definitions only, chosen as their own build
        would."""
        ...

    async def callers(self, name: str, repos: Sequence[str] = ()) -> list[Symbol]:
        """The definitions whose body calls ``name`` (its last dotted part, any spelling), by
        path and line (at most 50): the code graph read backwards (``repos``: as ``symbols``)."""
        ...

    async def links(self, numbers: Sequence[int], repo: str | None = None) -> dict[int, IssueLinks]:
        """The links of these issues and pull requests (those with none are left out); ``repo``:
        of that repository's only (an instance over several; None: of any)."""
        ...

    async def definition_rows(
        self, name: str, repos: Sequence[str] = ()
    ) -> list[tuple[int, Symbol]]:
        """Code rows holding the definition of a symbol named ``name`` (at most two per
        definition; ``repos``: as ``symbols``)."""
        ...

    async def units(self) -> dict[str, Unit]:
        """The units this build indexed, by key (``path`` or ``issue:N``)."""
        ...

    async def carried(
        self, keys: set[str], without: frozenset[Collection] = frozenset()
    ) -> tuple[list[tuple[Chunk, np.ndarray]], list[Symbol]]:
        """What a next build keeps of the units ``keys``: their chunks (by collection and row)
        each with its vector, and the symbols defined in them. Chunks of the collections
        ``without`` are not read (the next build carries them whole: ``Carry``); their units'
        symbols are."""
        ...

    async def close(self) -> None: ...


class BuildWriter(Protocol):
    """A build being written. Nothing is visible to readers until :meth:`commit`; leaving the
    ``async with`` block without committing (an error, a cancellation) discards it."""

    async def add_units(self, docs: Sequence[Document]) -> None:
        """Record the indexed units (key, collection, content hash, path, issue, title, url),
        and of issue threads the links they carry (a pull request's changed files and the
        issues it closes: ``BuildReader.links``)."""
        ...

    async def add_chunks(
        self, collection: Collection, chunks: Sequence[Chunk], vectors: np.ndarray | None
    ) -> None:
        """A collection's chunks, row i = ``chunks[i]`` with vector ``vectors[i]`` (called once
        per collection not carried; ``vectors`` is None when there are no chunks). The store
        derives the lexical forms itself (``core.lexical.lexical_form``)."""
        ...

    async def add_symbols(self, symbols: Sequence[Symbol]) -> None: ...

    async def set_meta(self, key: str, value: Any) -> None:
        """A JSON-serialisable value recorded with the build (``stamp``, ``commit``, …)."""
        ...

    async def commit(self) -> str:
        """Make this build the live one, atomically; returns its build id."""
        ...


class IndexStore(Protocol):
    """Where the builds of every instance of a deployment live."""

    schema: int  # the version of this store's build format: part of every build's stamp
    shared_vectors: SharedVectors | None  # shared by every process (PostgreSQL), else None

    async def live_id(self, instance: str) -> str | None:
        """The id of the live build, or None when the instance has none. Cheap: called before
        every question to notice a build swapped in by another process."""
        ...

    async def live_meta(self, instance: str) -> dict[str, Any] | None:
        """The live build's meta values, without opening its vectors."""
        ...

    async def open_live(self, instance: str) -> BuildReader | None:
        """A reader of the live build (the caller closes it), or None."""
        ...

    def writer(
        self, instance: str, carry: Carry | None = None
    ) -> AbstractAsyncContextManager[BuildWriter]:
        """A new build of ``instance``, written aside: ``async with store.writer(n) as w``.
        ``carry``: the live build this one is written from (its id must be the live build's;
        the caller holds the instance's lock) and the collections taken as it holds them; with
        none, a store may still reuse what it derived from the chunks it keeps (the local
        store: their lexical forms)."""
        ...

    async def tidy(self, instance: str) -> None:
        """Clear what writers that died left behind, as a new build's commit does; the builds
        themselves stay (an update that found nothing changed writes none)."""
        ...

    def lock(self, instance: str) -> AbstractAsyncContextManager[None]:
        """Held while building or syncing ``instance``: one at a time, across processes too.
        Readers never take it."""
        ...
