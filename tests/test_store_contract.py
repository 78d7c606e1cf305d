"""The store contract (core/store/base.py): what every backend must do, run against each one.

A backend is given as a factory of an ``IndexStore`` over a fresh location; the same tests run
for all of them: the local store (SQLite + usearch files) and the PostgreSQL store (a real
server from ``tests/pg.py``, one fresh database per test). Vectors here are small and
hand-made so that nearest neighbours are known.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pg
import pytest
import pytest_asyncio

from core.layout import Layout
from core.lexical import query_terms
from core.models import Chunk, Collection, Document, Symbol
from core.store.base import IndexStore
from core.store.local import LocalStore

StoreFactory = Callable[[Path], IndexStore]


def _postgres(root: Path) -> IndexStore:
    """Stores over one database per location (``root``): as two processes would share one."""
    from core.store.postgres.db import Database
    from core.store.postgres.index import PostgresStore

    url = _DATABASES.get(root) or _DATABASES.setdefault(root, pg.new_database())
    return PostgresStore(Database(url))


_DATABASES: dict[Path, str] = {}
BACKENDS: dict[str, StoreFactory] = {
    "local": lambda root: LocalStore(Layout(root)),
    "postgres": _postgres,
}

DIM = 8


def unit(i: int) -> np.ndarray:
    """A unit vector mostly along axis ``i`` (rows are told apart by their nearest axis)."""
    v = np.full(DIM, 0.05, np.float32)
    v[i % DIM] = 1.0
    return v / np.linalg.norm(v)


def chunk(coll: Collection, key: str, text: str, **kw: Any) -> Chunk:
    return Chunk(coll, key, text, kw.pop("title", key), len(text.split()), **kw)


DOCS = [
    chunk("docs", "README.md", "Widget › Configuration\nThe timeout option sets how long.",
          path="README.md", start_line=1, end_line=4, kind="section"),
    chunk("docs", "docs/guide.md", "Guide › Themes\nThemes change colours of every chart.",
          path="docs/guide.md", start_line=1, end_line=3, kind="section"),
]  # fmt: skip
CODE = [
    chunk("code", "src/widget/config.py", "src/widget/config.py › parse_config\n"
          "def parse_config(path):\n    return load(path)", path="src/widget/config.py",
          start_line=5, end_line=7, symbol="parse_config", kind="function"),
    chunk("code", "src/widget/config.py", "src/widget/config.py › Renderer.draw\n"
          "    def draw(self, chart):\n        return chart.points", path="src/widget/config.py",
          start_line=12, end_line=13, symbol="Renderer.draw", kind="method"),
    chunk("code", "tests/test_config.py", "tests/test_config.py › test_parse\n"
          "def test_parse():\n    assert parse_config('x')", path="tests/test_config.py",
          start_line=1, end_line=2, symbol="test_parse", kind="function"),
]  # fmt: skip
ISSUES = [
    chunk("issues", "issue:42", "#42 Timeout ignored\nIssue · closed\nThe timeout is ignored.",
          title="#42 Timeout ignored", issue=42, kind="issue"),
]  # fmt: skip
SYMBOLS = [
    Symbol("parse_config", "parse_config", "function", "src/widget/config.py", 5, 7, ("load",)),
    Symbol("Renderer", "Renderer", "class", "src/widget/config.py", 10, 13),
    Symbol("draw", "Renderer.draw", "method", "src/widget/config.py", 12, 13),
    Symbol("render_er", "render_er", "function", "src/widget/config.py", 15, 16),
    Symbol("test_parse", "test_parse", "function", "tests/test_config.py", 1, 2,
           ("parse_config", "ParseConfig")),
]  # fmt: skip
UNITS = [
    Document("docs", "README.md", "x", "h-readme", path="README.md", title="README.md"),
    Document("docs", "docs/guide.md", "x", "h-guide", path="docs/guide.md", title="guide"),
    Document("code", "src/widget/config.py", "x", "h-config", path="src/widget/config.py"),
    Document("code", "tests/test_config.py", "x", "h-test", path="tests/test_config.py"),
    Document("issues", "issue:42", "x", "h-42", issue=42, title="#42 Timeout ignored",
             url="https://github.com/acme/widget/issues/42"),
    Document("issues", "issue:43", "x", "h-43", issue=43, title="#43 Apply the timeout",
             url="https://github.com/acme/widget/pull/43",
             files=("src/widget/config.py", "README.md"), fixes=(42,)),
]  # fmt: skip
VECTORS: dict[Collection, np.ndarray] = {
    "docs": np.stack([unit(0), unit(1)]),
    "code": np.stack([unit(2), unit(3), unit(4)]),
    "issues": np.stack([unit(5)]),
}
ROWS: dict[Collection, list[Chunk]] = {"docs": DOCS, "code": CODE, "issues": ISSUES}


async def write_build(store: IndexStore, name: str = "widget", commit: str = "c1") -> str:
    async with store.writer(name) as w:
        for coll, chunks in ROWS.items():
            await w.add_chunks(coll, chunks, VECTORS[coll])
        await w.add_units(UNITS)
        await w.add_symbols(SYMBOLS)
        await w.set_meta("stamp", {"schema": store.schema, "embedder": "test", "dim": DIM})
        await w.set_meta("commit", commit)
        return await w.commit()


@pytest_asyncio.fixture(params=sorted(BACKENDS))
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], IndexStore]]:
    """Stores of one backend, all over the same location (as two processes would be); closed
    after the test."""
    factory = BACKENDS[request.param]
    made: list[IndexStore] = []

    def make() -> IndexStore:
        made.append(factory(tmp_path / "store"))
        return made[-1]

    yield make
    for store in made:
        close = getattr(store, "close", None)
        if close is not None:
            await close()


@pytest_asyncio.fixture
async def built(make_store: Callable[[], IndexStore]) -> AsyncIterator[tuple[IndexStore, Any]]:
    store = make_store()
    await write_build(store)
    reader = await store.open_live("widget")
    assert reader is not None
    yield store, reader
    await reader.close()


# -- nothing yet -------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_an_instance_without_a_build(make_store: Callable[[], IndexStore]) -> None:
    store = make_store()
    assert await store.live_id("widget") is None
    assert await store.live_meta("widget") is None
    assert await store.open_live("widget") is None


# -- reading a build -------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_meta_and_sizes(built: tuple[IndexStore, Any]) -> None:
    store, r = built
    assert r.build_id == await store.live_id("widget")
    meta = await store.live_meta("widget")
    assert meta is not None and meta["commit"] == "c1" and meta == r.meta
    assert r.stamp == {"schema": store.schema, "embedder": "test", "dim": DIM}
    assert [r.size(c) for c in ("docs", "code", "issues")] == [2, 3, 1]


@pytest.mark.asyncio
async def test_dense_search_is_exact_best_first(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    q = unit(3)
    hits = await r.dense("code", q, 3)
    expected = sorted(range(3), key=lambda i: -float(VECTORS["code"][i] @ q))
    assert [h.row for h in hits] == expected and expected[0] == 1
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    assert len(await r.dense("code", unit(3), 10)) == 3  # never more than there are
    assert await r.dense("docs", unit(0), 0) == []


@pytest.mark.asyncio
async def test_similarity_of_given_rows_in_their_order(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    q = unit(4)
    sims = await r.similarity("code", q, [2, 0])
    expected = [float(VECTORS["code"][2] @ q), float(VECTORS["code"][0] @ q)]
    assert sims == pytest.approx(expected, abs=1e-5)
    assert await r.similarity("code", q, []) == []


@pytest.mark.asyncio
async def test_lexical_search_over_code_aware_forms(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    for spelling in ("parseConfig", "parse-config", "ParseConfig"):  # any spelling meets
        hits = await r.lexical("code", query_terms(spelling), 5)
        assert hits and hits[0].row == 0 and hits[0].score > 0, spelling
    assert [h.row for h in await r.lexical("docs", ["themes"], 5)] == [1]
    assert await r.lexical("docs", [], 5) == []
    assert await r.lexical("issues", ["nothingmatcheshere"], 5) == []


@pytest.mark.asyncio
async def test_which_terms_a_rows_whole_document_holds(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    got = await r.doc_terms(["chart", "parse", "timeout", "nothingmatcheshere"],
                            {"code": [0, 2], "docs": [0]})  # fmt: skip
    assert got.docs == 5  # files and threads that have chunks (issue 43 has none)
    assert {t: got.df.get(t, 0) for t in ("chart", "parse", "timeout", "nothingmatcheshere")} == {
        "chart": 2, "parse": 2, "timeout": 2, "nothingmatcheshere": 0}  # fmt: skip
    # Row 0 (parse_config) holds no "chart": another chunk of its file (Renderer.draw) does.
    assert got.held[("code", 0)] == {"chart", "parse"}
    assert got.held[("code", 2)] == {"parse"} and got.held[("docs", 0)] == {"timeout"}
    assert (await r.doc_terms([], {"code": [0]})).held[("code", 0)] == frozenset()


@pytest.mark.asyncio
async def test_chunks_and_lookups(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    got = await r.chunks("code", [2, 0, 99])
    assert sorted(got) == [0, 2] and got[0].symbol == "parse_config" and got[0].id is not None
    assert got[2].path == "tests/test_config.py" and got[0].start_line == 5
    every = await r.all_chunks()  # by collection, then row
    assert [c.text for c in every] == [c.text for coll in sorted(ROWS) for c in ROWS[coll]]
    assert [c.path for c in await r.all_chunks("docs")] == ["README.md", "docs/guide.md"]
    assert await r.issue_rows(42) == [0] and await r.issue_rows(7) == []
    assert await r.path_rows("code", "src/widget/config.py") == [0, 1]
    assert await r.path_rows("code", "config.py") == [0, 1]  # a path's tail
    assert await r.path_rows("docs", "guide.md") == [1]
    # next_chunk: the chunk starting first after a line, within so many lines, of exactly that
    # path (a tail is another file; `_` and `%` are not wildcards) and repository.
    nxt = await r.next_chunk("code", "src/widget/config.py", "", 7, 5)
    assert nxt is not None and nxt[0] == 1 and nxt[1].symbol == "Renderer.draw"
    assert nxt[1].id == (await r.chunks("code", [1]))[1].id
    assert await r.next_chunk("code", "src/widget/config.py", "", 7, 4) is None  # 12 > 7 + 4
    assert (await r.next_chunk("code", "src/widget/config.py", "", 0, 20) or (None,))[0] == 0
    assert await r.next_chunk("code", "src/widget/config.py", "", 12, 20) is None
    assert await r.next_chunk("code", "src/widget/config.py", "other", 0, 20) is None
    assert await r.next_chunk("code", "config.py", "", 0, 20) is None
    assert await r.next_chunk("code", "src_widget/config.py", "", 0, 20) is None
    assert await r.next_chunk("code", "tests/test%config.py", "", 0, 20) is None
    assert await r.next_chunk("docs", "src/widget/config.py", "", 0, 20) is None
    assert (await r.next_chunk("docs", "docs/guide.md", "", 0, 1) or (None,))[0] == 1


@pytest.mark.asyncio
async def test_next_chunk_is_by_start_line_then_row(make_store: Callable[[], IndexStore]) -> None:
    # Rows that do not follow the lines (a later row starts earlier), a tie on the start line,
    # a chunk without lines, and the same path in another repository.
    def piece(key: str, start: int | None, repo: str = "") -> Chunk:
        return chunk("code", key, f"{key}\nx = 1", path="a.py", start_line=start,
                     end_line=None if start is None else start + 1, repo=repo)  # fmt: skip

    rows = [piece("r0", 30), piece("r1", 10), piece("r2", 10), piece("r3", None),
            piece("r4", 5, "other")]  # fmt: skip
    store = make_store()
    async with store.writer("w") as w:
        await w.add_chunks("code", rows, np.stack([unit(i) for i in range(len(rows))]))
        await w.set_meta("stamp", {"schema": store.schema, "embedder": "test", "dim": DIM})
        await w.commit()
    r = await store.open_live("w")
    assert r is not None
    try:
        got = {a: await r.next_chunk("code", "a.py", "", a, 100) for a in (0, 10, 30)}
        assert [(g[0], g[1].title) if g else None for g in got.values()] == [
            (1, "r1"), (0, "r0"), None]  # fmt: skip
        other = await r.next_chunk("code", "a.py", "other", 0, 100)
        assert other is not None and other[0] == 4
        assert await r.next_chunk("code", "a.py", "", 0, 9) is None  # 10 > 0 + 9
    finally:
        await r.close()


@pytest.mark.asyncio
async def test_symbols_by_any_name_and_their_definition_rows(
    built: tuple[IndexStore, Any],
) -> None:
    _, r = built
    for name in ("parse_config", "parseConfig", "ParseConfig"):
        assert [s.qualname for s in await r.symbols(name)] == ["parse_config"], name
    # Another spelling only when nothing has the name as written: the class, not the method.
    assert [s.qualname for s in await r.symbols("Renderer")] == ["Renderer"]
    assert [s.qualname for s in await r.symbols("renderer")] == ["Renderer", "render_er"]
    assert [s.qualname for s in await r.symbols("Renderer.draw")] == ["Renderer.draw"]
    assert [s.qualname for s in await r.symbols("draw")] == ["Renderer.draw"]
    rows = await r.definition_rows("parse_config")
    assert [(row, s.qualname) for row, s in rows] == [(0, "parse_config")]
    assert [row for row, _ in await r.definition_rows("Renderer.draw")] == [1]
    assert await r.definition_rows("no_such_thing") == []


@pytest.mark.asyncio
async def test_the_code_graph_who_calls_what(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    (parse,) = await r.symbols("parse_config")
    assert parse.calls == ("load",)  # what it calls, as written
    for name in ("parse_config", "parseConfig", "widget.parse_config"):  # any spelling, dotted
        assert [s.qualname for s in await r.callers(name)] == ["test_parse"], name
    assert [s.qualname for s in await r.callers("load")] == ["parse_config"]
    assert await r.callers("draw") == []


@pytest.mark.asyncio
async def test_issue_links_files_fixes_and_fixed_by(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    links = await r.links([42, 43, 7])
    assert set(links) == {42, 43}  # 7 has none: left out
    assert links[43].files == ("src/widget/config.py", "README.md") and links[43].fixes == (42,)
    assert links[42].fixed_by == (43,) and links[42].files == () and links[42].fixes == ()
    assert await r.links([]) == {}


@pytest.mark.asyncio
async def test_what_the_next_build_carries_over(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    units = await r.units()
    assert units["README.md"].collection == "docs" and units["README.md"].content_hash == "h-readme"
    assert set(units) == {u.key for u in UNITS}
    kept, symbols = await r.carried({"src/widget/config.py", "issue:42"})
    assert [(c.collection, c.symbol) for c, _ in kept] == [
        ("code", "parse_config"), ("code", "Renderer.draw"), ("issues", None),
    ]  # fmt: skip
    assert np.allclose(kept[0][1], VECTORS["code"][0]) and np.allclose(kept[2][1], unit(5))
    assert {s.qualname for s in symbols} == {
        "parse_config", "Renderer", "Renderer.draw", "render_er",
    }  # fmt: skip
    assert next(s for s in symbols if s.name == "parse_config").calls == ("load",)
    assert await r.carried(set()) == ([], [])


# -- writing: atomic, isolated, one writer at a time ---------------------------------------
@pytest.mark.asyncio
async def test_a_failed_build_leaves_the_previous_one_live(
    make_store: Callable[[], IndexStore],
) -> None:
    store = make_store()
    first = await write_build(store)
    with pytest.raises(RuntimeError, match="midway"):
        async with store.writer("widget") as w:
            await w.add_chunks("docs", DOCS[:1], VECTORS["docs"][:1])
            raise RuntimeError("midway")
    assert await store.live_id("widget") == first
    r = await store.open_live("widget")
    assert r is not None and r.size("docs") == 2
    await r.close()


@pytest.mark.asyncio
async def test_a_new_build_swaps_in_and_an_open_reader_keeps_its_own(
    make_store: Callable[[], IndexStore],
) -> None:
    store = make_store()
    first = await write_build(store, commit="c1")
    old = await store.open_live("widget")
    assert old is not None
    other = make_store()  # another process on the same store sees the swap
    second = await write_build(other, commit="c2")
    assert second != first and await store.live_id("widget") == second
    assert (await store.live_meta("widget") or {})["commit"] == "c2"
    # The reader opened before the swap still answers from its own build.
    assert old.build_id == first and old.meta["commit"] == "c1"
    assert [h.row for h in await old.dense("docs", unit(1), 1)] == [1]
    await old.close()


@pytest.mark.asyncio
async def test_instances_are_apart(make_store: Callable[[], IndexStore]) -> None:
    store = make_store()
    await write_build(store, "widget")
    assert await store.live_id("gadget") is None
    async with store.writer("gadget") as w:
        await w.add_chunks("docs", DOCS[1:], VECTORS["docs"][1:])
        await w.add_units(UNITS[1:2])
        await w.set_meta("commit", "g1")
        await w.commit()
    g = await store.open_live("gadget")
    assert g is not None and g.size("docs") == 1 and g.size("code") == 0
    assert (await store.live_meta("widget") or {})["commit"] == "c1"
    await g.close()


@pytest.mark.asyncio
async def test_the_lock_admits_one_holder_at_a_time_across_store_objects(
    make_store: Callable[[], IndexStore],
) -> None:
    a, b = make_store(), make_store()
    events: list[str] = []

    async def hold(store: IndexStore, who: str, entered: asyncio.Event | None) -> None:
        async with store.lock("widget"):
            events.append(f"{who} in")
            if entered is not None:
                entered.set()
            await asyncio.sleep(0.2)
            events.append(f"{who} out")

    entered = asyncio.Event()
    first = asyncio.create_task(hold(a, "a", entered))
    await entered.wait()
    await asyncio.wait_for(asyncio.gather(first, hold(b, "b", None)), 10)
    assert events == ["a in", "a out", "b in", "b out"]
    async with a.lock("gadget"), b.lock("widget"):  # other instances don't wait
        pass


@pytest.mark.asyncio
async def test_test_code_rows_by_path(built: tuple[IndexStore, Any]) -> None:
    _, r = built
    assert r.tests("code", [0, 1, 2]) == {2}  # tests/test_config.py
    assert r.tests("code", [0, 1, 2], files=True) == {2}
    assert r.tests("code", [0, 1]) == set()
    assert r.tests("docs", [0, 1]) == set()  # docs about testing are docs


@pytest.mark.asyncio
async def test_test_code_rows_by_kind_inside_a_source_file(
    make_store: Callable[[], IndexStore],
) -> None:
    """Rust keeps its tests beside the code: a chunk the chunker marked ``test`` is test code
    in a file whose path says nothing; so is a ``tests.rs`` module file."""
    store = make_store()
    code = [
        chunk("code", "src/lib.rs", "src/lib.rs › parse\nfn parse() {}", path="src/lib.rs",
              start_line=1, end_line=1, symbol="parse", kind="function"),
        chunk("code", "src/lib.rs", "src/lib.rs › tests.parses\n#[test]\nfn parses() {}",
              path="src/lib.rs", start_line=3, end_line=5, symbol="tests.parses", kind="test"),
        chunk("code", "src/tests.rs", "src/tests.rs › helper\nfn helper() {}",
              path="src/tests.rs", start_line=1, end_line=1, symbol="helper", kind="function"),
    ]  # fmt: skip
    async with store.writer("rusty") as w:
        await w.add_chunks("code", code, np.stack([unit(0), unit(1), unit(2)]))
        await w.set_meta("stamp", {"schema": store.schema, "embedder": "test", "dim": DIM})
        await w.commit()
    r = await store.open_live("rusty")
    assert r is not None
    try:
        assert r.tests("code", [0, 1, 2]) == {1, 2}
        assert r.tests("code", [0, 1, 2], files=True) == {2}  # the module file, not lib.rs's
    finally:
        await r.close()


# -- an instance over several repositories -----------------------------------------------------
@pytest.mark.asyncio
async def test_repositories_kept_apart(make_store: Callable[[], IndexStore]) -> None:
    """Two READMEs, two #12s and two ``parse`` definitions of two repositories: each records its
    repository, keys never collide, and what a build carries over stays with its repository."""
    store = make_store()
    docs = [chunk("docs", f"{r}:README.md", f"{r} readme", path="README.md", start_line=1,
                  end_line=2, repo=r) for r in ("a", "b")]  # fmt: skip
    code = [chunk("code", f"{r}:src/p.py", "def parse(): pass", path="src/p.py", start_line=1,
                  end_line=1, symbol="parse", repo=r) for r in ("a", "b")]  # fmt: skip
    issues = [chunk("issues", f"{r}:issue:12", f"#12 {r} bug", issue=12, repo=r) for r in "ab"]
    units = [Document(c.collection, c.doc_key, "", f"h-{c.doc_key}", path=c.path, issue=c.issue,
                      repo=c.repo, files=(f"{c.repo}.py",) if c.issue else ())
             for c in [*docs, *code, *issues]]  # fmt: skip
    syms = [Symbol("parse", "parse", "function", "src/p.py", 1, 1, (), r) for r in ("a", "b")]
    async with store.writer("multi") as w:
        await w.add_chunks("docs", docs, np.stack([unit(0), unit(1)]))
        await w.add_chunks("code", code, np.stack([unit(2), unit(3)]))
        await w.add_chunks("issues", issues, np.stack([unit(4), unit(5)]))
        await w.add_units(units)
        await w.add_symbols(syms)
        await w.set_meta("stamp", {"schema": store.schema})
        await w.commit()
    r = await store.open_live("multi")
    assert r is not None
    try:
        assert set(await r.units()) == {u.key for u in units} and len(units) == 6
        got = await r.chunks("issues", await r.issue_rows(12))
        assert sorted(c.repo for c in got.values()) == ["a", "b"]
        assert sorted(c.repo for c in await r.all_chunks("docs")) == ["a", "b"]
        assert sorted(s.repo for s in await r.symbols("parse")) == ["a", "b"]
        defs = await r.definition_rows("parse")  # each definition in its own repository's row
        rows = await r.chunks("code", [row for row, _ in defs])
        assert sorted((s.repo, rows[row].repo) for row, s in defs) == [("a", "a"), ("b", "b")]
        kept, kept_syms = await r.carried({"b:src/p.py", "b:issue:12"})
        assert sorted((c.collection, c.repo, c.doc_key) for c, _ in kept) == [
            ("code", "b", "b:src/p.py"), ("issues", "b", "b:issue:12")]  # fmt: skip
        assert [(s.repo, s.path) for s in kept_syms] == [("b", "src/p.py")]
        assert (await r.links([12], "a"))[12].files == ("a.py",)  # each repository's #12
        assert (await r.links([12], "b"))[12].files == ("b.py",)
        assert sorted((await r.links([12]))[12].files) == ["a.py", "b.py"]  # any repository
    finally:
        await r.close()


# (collection, path, text): a's a1.md has two chunks; the build over both lists b's code first
# and a's docs first (a repository's number must be the same in every collection).
A_ROWS = [("docs", "a1.md", "timeout retry"), ("docs", "a1.md", "colours of the chart"),
          ("docs", "a2.md", "timeout timeout widget"), ("docs", "a3.md", "widget colours"),
          ("code", "a.py", "def retry_timeout(): widget")]  # fmt: skip
B_ROWS = [("code", "b.py", "def retry_loop(): retry")] + [
    ("docs", f"b{i}.md", f"retry loop {w}") for i, w in enumerate(["one", "two", "three", "four"])
]


def _by_text(c: Chunk) -> np.ndarray:
    """A vector of the chunk's own (the same in every build that holds it), none alike."""
    v = np.random.default_rng(zlib.crc32(f"{c.path}:{c.text}".encode())).normal(size=DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


async def _docs_build(
    store: IndexStore, name: str, repos: dict[str, list[Any]],
    vector: Callable[[int, Chunk], np.ndarray] = lambda i, _: unit(i),
) -> Any:  # fmt: skip
    order = list(repos.items())  # code in this order, docs in the reverse one
    rows = {c: [chunk(c, f"{repo}:{p}", text, path=p, start_line=i, end_line=i, repo=repo)
                for repo, got in (order if c == "code" else order[::-1])
                for i, (cc, p, text) in enumerate(got) if cc == c]
            for c in ("code", "docs")}  # fmt: skip
    async with store.writer(name) as w:
        for c, chunks in rows.items():
            await w.add_chunks(c, chunks, np.stack([vector(i, ch) for i, ch in enumerate(chunks)]))
        keys = {(c.collection, c.doc_key): c for cs in rows.values() for c in cs}
        await w.add_units([Document(coll, key, "", f"h-{key}", path=c.path, repo=c.repo)
                           for (coll, key), c in keys.items()])  # fmt: skip
        await w.set_meta("stamp", {"schema": store.schema})
        await w.commit()
    r = await store.open_live(name)
    assert r is not None
    return r


@pytest.mark.asyncio
async def test_a_filter_scores_as_its_repositories_own_build(
    make_store: Callable[[], IndexStore],
) -> None:
    """In a build over several repositories, lexical search and document counts filtered to
    some of them use those repositories' statistics (N, df, mean length), as their own build
    would — the learned ranker was fitted on one-repository builds. Over both repositories
    "retry" is common (b has it everywhere) and weighs nothing; in a's own build it is a's
    rarest term, so a1 ranks first. Without a filter, the build's statistics."""
    from core.retrieve.rank import coverage

    store = make_store()
    both = await _docs_build(store, "both", {"b": B_ROWS, "a": A_ROWS})
    alone = await _docs_build(store, "a", {"a": A_ROWS})
    try:
        terms = ["timeout", "retry", "widget"]

        async def scores(r: Any, coll: Collection, hits: list[Any]) -> dict[Any, float]:
            rows = await r.chunks(coll, [h.row for h in hits])
            return {(rows[h.row].path, rows[h.row].start_line): h.score for h in hits}

        for coll in ("docs", "code"):
            one = await scores(alone, coll, await alone.lexical(coll, terms, 10))
            kept = await scores(both, coll, await both.lexical(coll, terms, 10, ("a",)))
            assert kept == pytest.approx(one, rel=1e-9) and kept, coll
        one = await scores(alone, "docs", await alone.lexical("docs", terms, 10))
        assert max(one, key=one.__getitem__) == ("a1.md", 0)
        every = await scores(both, "docs", await both.lexical("docs", terms, 10))
        assert len(every) == 7 and max(every, key=every.__getitem__) != ("a1.md", 0)
        assert await both.lexical("docs", terms, 10, ("nope",)) == []  # keeps nothing
        a_rows = {(c.path, c.start_line): r for r, c in
                  (await both.chunks("docs", range(8))).items() if c.repo == "a"}  # fmt: skip
        held_one = await alone.doc_terms(terms, {"docs": list(range(4))})
        held_kept = await both.doc_terms(terms, {"docs": sorted(a_rows.values())}, ("a",))
        assert (held_kept.docs, held_kept.df) == (held_one.docs, held_one.df) == (
            4, {"timeout": 3, "retry": 2, "widget": 3})  # fmt: skip
        by_place = {p: coverage(held_kept)[("docs", r)] for p, r in a_rows.items()}
        places = {r: (c.path, c.start_line)
                  for r, c in (await alone.chunks("docs", range(4))).items()}  # fmt: skip
        assert by_place == pytest.approx(
            {places[r]: v for (_, r), v in coverage(held_one).items()})  # fmt: skip
        held_all = await both.doc_terms(terms, {"docs": []})
        assert (held_all.docs, held_all.df) == (9, {"timeout": 3, "retry": 7, "widget": 3})
    finally:
        await both.close()
        await alone.close()


async def _filtered_near(store: IndexStore, hnsw: str = "") -> None:
    """A build over a and b and one of a alone: filtered to a, the vector search of the first
    gives what the second gives (``hnsw``: PostgreSQL through an HNSW index, ``index`` with
    pgvector's iterative scan, ``old`` as with pgvector older than 0.8, ``few`` exact below
    ``hnsw_min_rows``)."""
    by_text = lambda _, c: _by_text(c)  # noqa: E731
    both = await _docs_build(store, "both", {"b": B_ROWS, "a": A_ROWS}, by_text)
    alone = await _docs_build(store, "a", {"a": A_ROWS}, by_text)
    if hnsw:  # the index's first candidates alone would hold too few of a's rows
        assert "docs" in both._hnsw
        await _hnsw_only(store, both)
        both.ef_search = alone.ef_search = 1
        both.iterative = alone.iterative = hnsw != "old"
        both.exact_below = alone.exact_below = 1000 if hnsw == "few" else 1
    try:

        async def near(r: Any, q: np.ndarray, n: int, *repos: str) -> list[tuple[Any, float]]:
            hits = await r.dense("docs", q, n, repos)
            rows = await r.chunks("docs", [h.row for h in hits])
            return [((rows[h.row].repo, rows[h.row].path), h.score) for h in hits]

        for b_text in [t for c, _, t in B_ROWS if c == "docs"]:  # the query is one of b's rows
            q = _by_text(chunk("docs", "", b_text, path=next(
                p for c, p, t in B_ROWS if t == b_text)))  # fmt: skip
            every = await near(both, q, 3)
            assert every[0][0][0] == "b"  # b's own row is nearest
            one = await near(alone, q, 3)
            kept = await near(both, q, 3, "a")
            assert [k for k, _ in kept] == [("a", p) for (_, p), _ in one] and len(kept) == 3
            assert [s for _, s in kept] == pytest.approx([s for _, s in one], rel=1e-5)
        assert await both.dense("docs", q, 3, ("nope",)) == []  # keeps nothing
        assert len(await both.dense("docs", q, 9)) == 8  # no filter: every repository's
    finally:
        await both.close()
        await alone.close()


@pytest.mark.asyncio
async def test_a_filters_vector_search_is_its_repositories_own(
    make_store: Callable[[], IndexStore],
) -> None:
    """Filtered to some repositories of a build over several, the vector search gives the
    nearest ``n`` of *their* rows — what their own build gives — not the build's nearest ``n``
    with the others left out (which, where the others are nearer, is fewer than ``n``)."""
    await _filtered_near(make_store())


async def _hnsw_only(store: Any, reader: Any) -> None:
    """The HNSW index the one way to the docs rows left (the scans are off, see
    :func:`_pg_indexed`): the ``repo`` index dropped, as a build made before it has none."""
    from core.store.postgres.build import table

    pool = await store.db.pool()
    name = table(reader.build_id, "docs")
    for (index,) in await pool.fetch(
        "SELECT indexname FROM pg_indexes WHERE tablename = $1 AND indexdef LIKE '%(repo)%'", name
    ):
        await pool.execute(f'DROP INDEX "{index}"')


def _pg_indexed(*settings: str) -> Any:
    """A PostgreSQL store whose every collection has an HNSW index, used although a scan
    would be cheaper here (``settings``: more of the connection's)."""
    from core.store.postgres.db import Database
    from core.store.postgres.index import PostgresStore

    url = pg.new_database()
    url += ("&" if "?" in url else "?") + "&".join(["enable_seqscan=off", *settings])
    return PostgresStore(Database(url), hnsw_min_rows=1)


@pytest.mark.asyncio
@pytest.mark.parametrize("hnsw", ["index", "old", "few"])
async def test_a_filters_hnsw_search_is_its_repositories_own(hnsw: str) -> None:
    """The same through PostgreSQL's HNSW index: pgvector's iterative scan goes on until
    enough of the kept rows pass (``index``); with pgvector older than 0.8 the search is exact
    (``old``), and so it is where the kept rows are fewer than a collection that gets an index
    (``few``: as their own build, unindexed, would search them)."""
    store = _pg_indexed()
    try:
        await _filtered_near(store, hnsw)
    finally:
        await store.close()


@pytest.mark.asyncio
async def test_a_filters_symbols_are_its_repositories_own(
    make_store: Callable[[], IndexStore],
) -> None:
    """Symbol lookups filtered to a repository choose among its definitions only, as its own
    build would: over both, b's 25 ``parseConfig`` fill the 20 places and, spelled as asked,
    drop a's ``parse_config``; b's 55 callers fill the 50 places of ``callers``."""
    a = [
        Symbol("parse_config", "parse_config", "function", "src/c.py", 1, 2, ("load",), "a"),
        Symbol("load_all", "load_all", "function", "src/c.py", 4, 5, ("parse_config",), "a"),
    ]
    b = [
        Symbol("parseConfig", "parseConfig", "function", f"a{i:02}.js", 1, 2, (), "b")
        for i in range(25)
    ]
    b += [Symbol(f"use{i}", f"use{i}", "function", f"a{i:02}.js", 4, 5, ("parseConfig",), "b")
          for i in range(55)]  # fmt: skip
    code = [chunk("code", f"{s.repo}:{s.path}:{s.name}", f"def {s.name}(): pass", path=s.path,
                  start_line=s.start_line, end_line=s.end_line, symbol=s.qualname, repo=s.repo)
            for s in a + b]  # fmt: skip
    store = make_store()
    async with store.writer("multi") as w:
        await w.add_chunks("code", code, np.stack([unit(i) for i in range(len(code))]))
        await w.add_units([Document("code", c.doc_key, "", f"h-{c.doc_key}", path=c.path,
                                    repo=c.repo) for c in code])  # fmt: skip
        await w.add_symbols(a + b)
        await w.set_meta("stamp", {"schema": store.schema})
        await w.commit()
    r = await store.open_live("multi")
    assert r is not None
    try:
        every = await r.symbols("parseConfig")
        assert len(every) == 20 and {s.repo for s in every} == {"b"}
        assert [(s.repo, s.qualname) for s in await r.symbols("parseConfig", ("a",))] == [
            ("a", "parse_config")]  # fmt: skip
        defs = await r.definition_rows("parseConfig", ("a",))
        rows = await r.chunks("code", [row for row, _ in defs])
        assert [(rows[row].repo, rows[row].symbol) for row, _ in defs] == [("a", "parse_config")]
        assert {s.repo for s in await r.callers("parse_config")} == {"b"}
        assert [s.qualname for s in await r.callers("parse_config", ("a",))] == ["load_all"]
        assert await r.symbols("parse_config", ("nope",)) == []
        assert len(await r.symbols("parseConfig", ("a", "b"))) == 20  # a scope of both
    finally:
        await r.close()


@pytest.mark.asyncio
async def test_a_filters_hnsw_scan_that_stops_short_searches_exactly() -> None:
    """Through an HNSW index, a filter's iterative scan stops after ``hnsw.max_scan_tuples``
    rows (here 1): where that leaves fewer rows than asked and the filter keeps more, the
    search is exact. b's 300 rows surround the query; a's 5 are far from it."""
    store = _pg_indexed("hnsw.max_scan_tuples=1")
    q = unit(0)
    rng = np.random.default_rng(7)

    def vector(_: int, c: Chunk) -> np.ndarray:
        if c.repo == "b":  # near the query
            v = q + rng.normal(scale=0.05, size=DIM).astype(np.float32)
            return (v / np.linalg.norm(v)).astype(np.float32)
        return _by_text(c)

    b_rows = [("docs", f"b{i}.md", f"b row {i}") for i in range(300)]
    a_rows = [("docs", f"a{i}.md", f"a row {i}") for i in range(5)] + [("code", "a.py", "a()")]
    both = await _docs_build(store, "both", {"b": b_rows, "a": a_rows}, vector)
    try:
        assert "docs" in both._hnsw
        await _hnsw_only(store, both)
        both.ef_search = 1
        hits = await both.dense("docs", q, 3, ("a",))
        rows = await both.chunks("docs", [h.row for h in hits])
        a_best = sorted(
            (
                (float(_by_text(c) @ q), c.path)
                for c in (chunk("docs", "", t, path=p) for c, p, t in a_rows if c == "docs")
            ),
            reverse=True,
        )
        assert [rows[h.row].path for h in hits] == [p for _, p in a_best[:3]]
        assert [h.score for h in hits] == pytest.approx([s for s, _ in a_best[:3]], rel=1e-5)
    finally:
        await both.close()
        await store.close()
