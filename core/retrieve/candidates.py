"""Candidates: per collection, dense ∪ lexical ∪ exact ∪ graph hits, each with its evidence.

- *dense*: the nearest chunks by cosine; *lexical*: BM25 over code-aware forms;
- *exact*: what the question names outright — an issue, a symbol's definition, a file, and for
  "who calls X?" the definitions that call X (the code graph) and call sites (their text);
- *graph*: what the best-matching definitions call, found through the symbol table (a public
  wrapper's private implementation), and the definitions named in the best-matching issue
  threads (the code a report points at).

Every candidate keeps its evidence (cosine, BM25 over the collection's best, ranks, reasons) and
its chunk, for the ranker (``rank.py``), and one hybrid score for the baselines and the fallback:
``cosine + lexical_weight × BM25/best + exact_bonus (exact hits) − test_penalty (test code,
unless the question is about tests)``. BM25 is scaled per collection: BM25 magnitudes depend on
each collection's own statistics, so one global scale let the biggest collection win every slot.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from core.lexical import parts, query_terms
from core.models import COLLECTIONS, Collection, Symbol, is_test_path
from core.retrieve.analyse import Route, analyse
from core.retrieve.fusion import Candidate
from core.retrieve.options import Options
from core.retrieve.traces import suffixes
from core.store.base import BuildReader, Hit, IssueLinks

_CALLERS = re.compile(
    r"\b(who\s+calls|callers?\s+of|call\s+sites?|used\s+by|usages?\s+of|qui[ée]n\s+llama|"
    r"d[óo]nde\s+se\s+(?:usa|llama))\b",
    re.IGNORECASE,
)
# A distinctive name in an issue's text: snake_case, dotted, Rust paths, camelCase.
DISTINCT = re.compile(r"[_.]|::|[a-z0-9][A-Z]")
# Calls that say nothing about what a definition delegates to.
_COMMON_CALLS = frozenset(
    """len str int float bool list dict set tuple print range isinstance getattr setattr hasattr
    super type append extend get pop join split format keys values items update copy strip
    lower upper replace startswith endswith sorted enumerate zip map filter min max sum any all
    open close read write push slice concat indexOf includes toString forEach then catch
    Error new make Sprintf Errorf Printf Println New String Len""".split()
)
GRAPH_FROM = 3  # best definitions whose callees become candidates
GRAPH_CALLS = 6  # callees followed per definition
ISSUE_FROM = 2  # best issue threads whose named definitions and changed files are candidates
PR_ROWS = 8  # chunks of each file a pull request changed (the ranker picks among them)
_NO_LINKS = IssueLinks()
_FILES: tuple[Collection, ...] = ("code", "docs")  # the collections a path names


async def _call_sites(
    reader: BuildReader, ident: str, skip: set[int], keep: Sequence[str] = ()
) -> list[int]:
    """Code chunks that call ``ident`` (``name(`` in their text), ``skip`` rows excluded
    (``keep``: a filter's repositories only)."""
    name = ident.split(".")[-1]
    joined = "".join(parts(name))
    if not joined:
        return []
    rows = [r for r, _ in await reader.lexical("code", [joined], 60, keep) if r not in skip]
    chunks = await reader.chunks("code", rows)
    call = re.compile(rf"(?<![\w.])(?:[\w.]+\.)?{re.escape(name)}\s*\(")
    return [r for r in rows if r in chunks and call.search(chunks[r].text.split("\n", 1)[-1])]


async def _changed(
    reader: BuildReader, numbers: Sequence[int], repo: str | None = None
) -> dict[str, int]:
    """The files the pull requests among ``numbers``, and those that fix the issues among
    them, changed: path -> the pull request (``repo``: of that repository only)."""
    links = await reader.links(numbers, repo)
    prs = [n for n in numbers if n in links and links[n].files]
    prs += [pr for n in numbers if n in links for pr in links[n].fixed_by]
    more = await reader.links([p for p in prs if p not in links], repo)
    out: dict[str, int] = {}
    for pr in dict.fromkeys(prs):
        for path in (links.get(pr) or more.get(pr) or _NO_LINKS).files:
            out.setdefault(path, pr)
    return out


async def _changed_by_repo(
    reader: BuildReader, numbers: Sequence[tuple[str, int]]
) -> list[tuple[str | None, str, int]]:
    """:func:`_changed` of (repository, number) pairs: (repository, path, pull request). One
    repository ("", a one-repository instance) is asked at once, as it always was."""
    repos = list(dict.fromkeys(r for r, _ in numbers))
    if repos in ([], [""]):
        got = await _changed(reader, [n for _, n in numbers])
        return [(None, path, pr) for path, pr in got.items()]
    out: list[tuple[str | None, str, int]] = []
    for repo in repos:
        got = await _changed(reader, [n for r, n in numbers if r == repo], repo or None)
        out.extend((repo or None, path, pr) for path, pr in got.items())
    return out


async def _path_rows(
    reader: BuildReader, coll: Collection, path: str, repo: str | None
) -> list[int]:
    """Rows of the file at ``path`` (``path_rows``), of ``repo`` only when one is given."""
    rows = await reader.path_rows(coll, path)
    if repo is None or not rows:
        return rows
    chunks = await reader.chunks(coll, rows)
    return [r for r in rows if r in chunks and chunks[r].repo == repo]


async def _rows_of(
    reader: BuildReader, symbols: Sequence[Symbol], keep: Sequence[str] = ()
) -> list[tuple[int, Symbol]]:
    out: list[tuple[int, Symbol]] = []
    for s in symbols:
        for row, sym in await reader.definition_rows(s.qualname, keep):
            if (sym.repo, sym.path, sym.start_line) == (s.repo, s.path, s.start_line):
                out.append((row, sym))
    return out


async def issue_rows(
    reader: BuildReader, route: Route, n: int, per_repo: int, keep: Sequence[str] = ()
) -> tuple[list[int], list[str]]:
    """Rows of issue ``n`` as the question names it: of its repository when the question says
    which ("client#42"), else of every repository that has one (``keep``: a filter's) — at most
    ``per_repo`` rows of each — and the repositories they come from (more than one: the bare #N
    is in several)."""
    rows = await reader.issue_rows(n)
    if not rows:
        return [], []
    want = route.repo_issues.get(n)
    chunks = await reader.chunks("issues", rows)
    taken: dict[str, list[int]] = {}
    for r in rows:
        repo = chunks[r].repo if r in chunks else ""
        if keep and repo not in keep:
            continue
        if (want is None or repo == want) and len(taken.setdefault(repo, [])) < per_repo:
            taken[repo].append(r)
    return [r for rs in taken.values() for r in rs], sorted(x for x in taken if x)


async def _frame_rows(
    reader: BuildReader, coll: Collection, path: str, keep: Sequence[str] = ()
) -> list[int]:
    """Rows of a stack-trace frame's file: its path is the crashed machine's
    (``/home/u/libuv/src/unix/core.c``), so the longest tail of it that is indexed (``keep``:
    in a filter's repositories)."""
    for tail in suffixes(path):
        if rows := await _kept_rows(reader, coll, await reader.path_rows(coll, tail), keep):
            return rows
    return []


async def _kept_rows(
    reader: BuildReader, coll: Collection, rows: Sequence[int], keep: Sequence[str]
) -> list[int]:
    """``rows`` of ``keep``'s repositories, in their order (every one without a filter)."""
    if not keep or not rows:
        return list(rows)
    chunks = await reader.chunks(coll, list(rows))
    return [r for r in rows if r in chunks and chunks[r].repo in keep]


async def exact_rows(
    reader: BuildReader, route: Route, question: str, keep: Sequence[str] = (),
    no_tests: bool = False,
) -> dict[Collection, dict[int, str]]:  # fmt: skip
    """Chunks the question names outright, with why: issue, symbol definition, file path, and
    for "who calls X?" the definitions that call X (the code graph) and its call sites
    (``keep``: a filter's repositories only; the lists are cut to their rows before the caps).
    ``no_tests``: no definition or changed file in a test file (a named path still is), and
    callers outside test files before those in them."""
    out: dict[Collection, dict[int, str]] = {c: {} for c in COLLECTIONS}
    for n in route.issues:
        rows, repos = await issue_rows(reader, route, n, 3, keep)
        if len(repos) > 1:
            route.several[n] = repos
        elif keep and repos:  # a filter's one repository with #N: the hop reads its thread
            route.repo_issues.setdefault(n, repos[0])
        for row in rows:
            out["issues"][row] = f"issue #{n}" + (f" in {', '.join(repos)}" if repos else "")
    if route.issues and route.hop:  # "where was #N fixed?": what its pull requests changed
        named = [(route.repo_issues.get(n, ""), n) for n in route.issues[:2]]
        if keep:  # a filter: a bare #N is each kept repository's (one: as its own instance)
            named = [(r, n) for want, n in named for r in ([want] if want else keep)]
        for repo, path, pr in await _changed_by_repo(reader, named):
            for coll in _FILES:
                if no_tests and coll == "code" and is_test_path(path):
                    continue  # docs under spec/ or tests/ are docs
                for row in (await _path_rows(reader, coll, path, repo))[:PR_ROWS]:
                    out[coll].setdefault(row, f"changed by #{pr}")
    idents = route.identifiers[:8]
    dotted = {i: await reader.definition_rows(i, keep) for i in idents if "." in i}
    # "SchemaMeta.__init__" also yields the bare "__init__": once the dotted name found its
    # definition, the bare last part would add every other class's __init__ as an exact hit.
    shadowed = {i.rsplit(".", 1)[-1] for i, got in dotted.items() if got}
    defined: set[int] = set()  # every definition found, a test file's too
    for ident in idents:
        if ident in shadowed:
            continue
        if ident in dotted:  # a dotted name that finds nothing falls back to its last part
            definitions = dotted[ident] or await reader.definition_rows(
                ident.rsplit(".", 1)[-1], keep
            )
        else:
            definitions = await reader.definition_rows(ident, keep)
        for row, sym in definitions:
            defined.add(row)
            if not (no_tests and is_test_path(sym.path)) or named_path(sym.path, route.paths):
                out["code"].setdefault(row, f"defines {sym.qualname}")
    for path in route.paths[:4]:
        framed = any(f.startswith(f"{path}:") for f in route.frames)
        for coll in _FILES:
            if framed:  # the longest tail the kept repositories hold
                rows = await _frame_rows(reader, coll, path, keep)
            else:
                rows = await _kept_rows(reader, coll, await reader.path_rows(coll, path), keep)
            for row in rows[:3]:
                out[coll].setdefault(row, f"file {path}")
    if route.identifiers and _CALLERS.search(question):
        defs = set(out["code"]) | defined
        for ident in route.identifiers[:2]:
            callers = await reader.callers(ident, keep)
            calling = [r for r, _ in await _rows_of(reader, callers, keep)]
            calling = await _kept_rows(reader, "code", calling, keep)
            sites = await _call_sites(reader, ident, defs, keep)
            if no_tests:  # most call sites are tests: the code's first, then theirs
                calling, sites = _tests_last(reader, calling), _tests_last(reader, sites)
            for row in calling[:8]:
                if row not in defs:
                    out["code"].setdefault(row, f"calls {ident}")
            for row in sites[:8]:
                out["code"].setdefault(row, f"calls {ident}")
    if keep:  # a filter: its repositories' rows only (issues, definitions, changed files)
        for coll, got in out.items():
            kept = set(await _kept_rows(reader, coll, list(got), keep))
            out[coll] = {r: why for r, why in got.items() if r in kept}
    return out


@dataclass
class Found:
    """What the candidate stage found: per collection, the candidates best first; why exact hits
    were taken (for ``route.exact``); and for the rrf baseline, the ranked lists it fuses."""

    hits: dict[Collection, list[Candidate]] = field(default_factory=dict)
    exact: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    ranked: list[list[tuple[Collection, int]]] = field(default_factory=list)


# The lexical query's caps: the question's own terms (its words, identifiers and paths), then
# the extra terms it lacks under a cap of their own. The extra terms are the glossary's and the
# translation's English words, the only ones of a Spanish question that can match an English
# corpus: under one shared cap a long Spanish question's words, which mostly match nothing, took
# their places (PLAN-s55.md, FX).
OWN_TERMS = 40
EXTRA_TERMS = 32


def lexical_terms(text: str, route: Route, extra_terms: Sequence[str] = ()) -> list[str]:
    """The lexical query of a question: its words, identifiers and paths (at most
    :data:`OWN_TERMS`), then the ``extra_terms`` they do not already hold (at most
    :data:`EXTRA_TERMS`)."""
    own = query_terms(" ".join([text, *route.identifiers, *route.paths]), max_terms=OWN_TERMS)
    held = set(own)
    added = [t for t in query_terms(" ".join(extra_terms), max_terms=OWN_TERMS + EXTRA_TERMS)
             if t not in held]  # fmt: skip
    return own + added[:EXTRA_TERMS]


async def find(
    reader: BuildReader,
    q: np.ndarray,
    text: str,
    route: Route,
    opt: Options,
    extra_terms: Sequence[str] = (),
    collections: tuple[Collection, ...] = COLLECTIONS,
    expand: bool = False,
) -> Found:
    """Per collection: dense ∪ lexical ∪ exact candidates (∪ graph ones with ``expand``), each
    with its evidence and one hybrid score (see the module docstring). ``extra_terms`` join the
    lexical query (the glossary's English terms)."""
    cfg = opt.config
    terms = lexical_terms(text, route, extra_terms)
    # Test files left out (``test_candidates`` false) unless the question is about tests; the
    # baselines (dense, bm25, rrf) read the lists as they are.
    no_tests = opt.mode == "full" and not cfg.test_candidates and not route.tests
    exact = await exact_rows(reader, route, text, opt.keep, no_tests) if opt.mode == "full" else {}
    lex: dict[Collection, list[Hit]] = {}
    dense: dict[Collection, list[Hit]] = {}
    n = cfg.candidates
    for c in collections:  # a filter (``opt.keep``): each list is its repositories' own
        if not reader.size(c):
            continue
        # Test code left out (``test_candidates`` false): the lists read deeper, then cut.
        drop = c == "code" and no_tests
        deep = n * TEST_DEPTH if drop else n
        if opt.mode in ("full", "dense", "rrf"):
            dense[c] = _no_tests(reader, c, await reader.dense(c, q, deep, opt.keep), n, drop)
        if opt.mode in ("full", "bm25", "rrf") and terms:
            got = await reader.lexical(c, terms, deep, opt.keep)
            lex[c] = _no_tests(reader, c, got, n, drop)
    if opt.mode == "dense":
        return Found({c: [Candidate(c, h.row, h.score) for h in hs] for c, hs in dense.items()})
    if opt.mode == "bm25":
        return Found({c: [Candidate(c, r, s) for r, s in ls] for c, ls in lex.items()})
    if opt.mode == "rrf":
        ranked = [[(c, h.row) for h in hs] for c, hs in dense.items()]
        return Found({c: [] for c in dense}, ranked=ranked + [
            [(c, r) for r, _ in ls] for c, ls in lex.items()
        ])  # fmt: skip
    found = Found()
    for c in (c for c in COLLECTIONS if c in dense or c in lex):
        found.hits[c] = await _score(reader, q, c, dense.get(c, []), lex.get(c, []),
                                     exact.get(c, {}), route, opt)  # fmt: skip
        for row, reason in exact.get(c, {}).items():
            found.exact.setdefault(c, []).append({"row": row, "why": reason})
    if expand and "code" in found.hits:
        extra = await _graph(reader, found, route, opt.keep, no_tests)
        if extra:
            code = found.hits["code"]
            more = await _score(reader, q, "code", [], [], {}, route, opt, extra)
            known = {h.row for h in code}
            found.hits["code"] = code + [h for h in more if h.row not in known]
    return found


TEST_DEPTH = 3  # how much deeper a code list is read when its test rows are left out


def _no_tests(reader: BuildReader, c: Collection, hits: list[Hit], n: int, drop: bool) -> list[Hit]:
    """``hits`` without those in test files (``drop``), cut to ``n``: tests kept inside a source
    file (Rust's ``#[cfg(test)]`` modules) stay with their file (measured: PLAN-s67.md)."""
    if not drop:
        return hits
    tests = reader.tests(c, [h.row for h in hits], files=True)
    return [h for h in hits if h.row not in tests][:n]


def named_path(path: str | None, named: Sequence[str]) -> bool:
    """Whether ``path`` is one the question names (as written, or its tail: ``login.cy.ts``)."""
    return bool(path) and any(
        path == n or str(path).endswith("/" + n.removeprefix("./")) for n in named if n
    )


def _tests_last(reader: BuildReader, rows: list[int]) -> list[int]:
    """``rows`` (code), those in test files after the others, each in its order."""
    tests = reader.tests("code", rows, files=True)
    return [r for r in rows if r not in tests] + [r for r in rows if r in tests]


async def _score(
    reader: BuildReader,
    q: np.ndarray,
    c: Collection,
    dense: list[Hit],
    lex: list[Hit],
    exact: dict[int, str],
    route: Route,
    opt: Options,
    graph: dict[int, str] | None = None,
) -> list[Candidate]:
    cfg = opt.config
    top = max((s for _, s in lex), default=1.0) or 1.0
    lexs = {r: s / top for r, s in lex}
    lex_rank = {r: i for i, (r, _) in enumerate(lex)}
    dense_rank = {h.row: i for i, h in enumerate(dense)}
    graph = graph or {}
    rows = set(dense_rank) | set(lexs) | set(exact) | set(graph)
    if not rows:
        return []
    order = sorted(rows)
    cos = await reader.similarity(c, q, order)
    tests = reader.tests(c, order) if cfg.test_penalty and not route.tests else set()
    chunks = await reader.chunks(c, order) if opt.mode == "full" else {}
    cands = []
    for row, s in zip(order, cos, strict=True):
        bonus = cfg.exact_bonus if row in exact else 0.0
        base = float(s) + cfg.lexical_weight * lexs.get(row, 0.0)
        if row in tests:
            base -= cfg.test_penalty
        why = [w for w in (exact.get(row), graph.get(row)) if w]
        cands.append(Candidate(
            c, row, base + bonus, bonus, chunk=chunks.get(row), cos=float(s),
            lex=lexs.get(row, 0.0), dense_rank=dense_rank.get(row), lex_rank=lex_rank.get(row),
            exact=row in exact, graph=graph.get(row), test=row in tests, why=why,
        ))  # fmt: skip
    out = sorted(cands, key=lambda h: -h.score)
    return out[: cfg.candidates] if not graph else out


async def _graph(
    reader: BuildReader, found: Found, route: Route, keep: Sequence[str] = (),
    no_tests: bool = False,
) -> dict[int, str]:  # fmt: skip
    """Code rows reached through the graph: what the best definitions call, and the definitions
    the best issue threads name (``keep``: a filter's repositories' only; ``no_tests``: none in
    a test file, left out before the caps). Row -> why."""

    async def defined(name: str) -> list[tuple[int, Symbol]]:
        got = await reader.definition_rows(name, keep)
        return [(r, t) for r, t in got if not (no_tests and is_test_path(t.path))]

    out: dict[int, str] = {}
    code = found.hits.get("code", [])
    known = {h.row for h in code}
    defs = [h for h in code if h.chunk is not None and h.chunk.symbol][:GRAPH_FROM]
    for h in defs:
        assert h.chunk is not None and h.chunk.symbol is not None
        own = [s for s in await reader.symbols(h.chunk.symbol, keep)
               if s.path == h.chunk.path and s.repo == h.chunk.repo][:1]  # fmt: skip
        for s in own:
            calls = [n for n in s.calls if n not in _COMMON_CALLS and len(n) > 3][:GRAPH_CALLS]
            for name in calls:
                targets = await defined(name)
                if not 0 < len({(t.path, t.start_line) for _, t in targets}) <= 3:
                    continue  # unknown here, or too common a name to say where it goes
                for row, t in targets[:2]:
                    if row not in known:
                        out.setdefault(row, f"{s.qualname} calls {t.qualname}")
    issues = sorted(found.hits.get("issues", []), key=lambda h: -h.cos)[:ISSUE_FROM]
    for h in issues:
        if h.chunk is None:
            continue
        sub = analyse(h.chunk.text[:4000])
        for ident in [i for i in sub.identifiers if DISTINCT.search(i)][:6]:
            for row, t in (await defined(ident))[:2]:
                if row not in known:
                    out.setdefault(row, f"#{h.chunk.issue} names {t.qualname}")
    # A past fix of a similar issue: what its pull request changed.
    numbers = [(h.chunk.repo, h.chunk.issue) for h in issues
               if h.chunk is not None and h.chunk.issue is not None]  # fmt: skip
    for repo, path, pr in await _changed_by_repo(reader, numbers):
        if no_tests and is_test_path(path):
            continue
        for row in (await _path_rows(reader, "code", path, repo))[:PR_ROWS]:
            if row not in known:
                out.setdefault(row, f"#{pr} changed {path}")
    return out
