"""Retrieval: analyse the question, find candidates in every collection, share the result
slots between them (``fusion.py``), and resolve the chosen rows into sources.

A question that names an issue and asks where its bug is ("where is the bug from issue #42?")
takes the issue → code hop: the issue first, then the code found with the issue's own text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.embed import EmbedService
from core.lexical import query_terms, terms
from core.models import COLLECTIONS, Chunk, Collection, Passage, Retrieval, Source
from core.retrieve.analyse import Route, analyse
from core.retrieve.candidates import DISTINCT, Found, find, lexical_terms
from core.retrieve.candidates import issue_rows as rows_of_issue
from core.retrieve.fusion import Candidate, rrf, select
from core.retrieve.glossary import english_terms
from core.retrieve.kinds import KINDS, KindModel, kind_vector
from core.retrieve.language import detect_language
from core.retrieve.options import Options
from core.retrieve.rank import SPAN, Context, Ranker, coverage, load, matrix
from core.retrieve.reread import reread
from core.retrieve.thin import follow_thin
from core.retrieve.translate import Translator
from core.store.base import BuildReader

# Probability of the bug-report kind above which ``retrieval.per_file_bug`` applies.
BUG = 0.5
# How far (cosine units) a question naming a repository moves that repository's candidates up.
REPO_TILT = 0.03
# Above the pool's best, for a thread the question names by number, and again for the one a bare
# #N of several repositories means (named_issues_first): an order, not a gap.
FIRST = 1e-3


@dataclass
class Pool:
    """A question's candidates across collections, and what retrieval knew when it found them."""

    found: Found
    route: Route
    context: Context | None  # for the ranker (full mode)
    weights: dict[Collection, float]
    # A non-English question's machine translation and the terms it added (translate.py).
    translation: dict[str, Any] | None = None

    def all(self) -> list[Candidate]:
        return [c for hs in self.found.hits.values() for c in hs]


async def candidates(
    reader: BuildReader,
    embedder: EmbedService,
    question: str,
    opt: Options,
    kinds: KindModel | None = None,
    route: Route | None = None,
    timings: dict[str, float] | None = None,
    translator: Translator | None = None,
) -> Pool:
    """Analyse the question and find its candidates in every collection (``candidates.py``;
    with ``retrieval.graph``, the code graph's too). Retrieval and the ranker's training both
    start here. With a ``translator``, a non-English question that does not read as a bug report
    adds its translation's terms to the glossary's (``retrieval.translate``)."""
    timings = {} if timings is None else timings
    t = time.perf_counter()
    route = route or analyse(question, opt.aliases)
    # The glossary's English terms, once: for the lexical query and the embedded text. The
    # baselines (dense, bm25, rrf) see the question as asked: the glossary is ours.
    glossed = opt.mode == "full" and (opt.glossary or opt.glossary_dense)
    english = english_terms(question) if glossed else []
    extra = english if opt.glossary else []
    qtext = f"{question} ({' '.join(english)})" if english and opt.glossary_dense else question
    dq = await embedder.embed_query(qtext)
    lang = detect_language(question) if opt.mode == "full" else None
    # The kind classifier reads the question as asked, and its asking sentence, as it was fitted
    # (ranker_pools.collect: kinds.kind_vector of the questions' own text): the glossary's
    # English terms moved Spanish issue questions towards how-to (PLAN-s35.md, KR).
    if kinds is None:
        probs = dict.fromkeys(KINDS, 1 / len(KINDS))
    else:
        asked = dq if qtext == question else await embedder.embed_query(question)
        if kinds.reads_asking:  # and the sentence that asks (kinds.asking)
            asked = await kind_vector(embedder, question, asked)
        probs = kinds.probs(asked)
    timings["embed_query"] = (time.perf_counter() - t) * 1000
    target = opt.config.align_to
    translation: dict[str, Any] | None = None
    if (opt.mode == "full" and opt.translate and translator is not None and lang and target
            and lang != target and probs.get("bug", 0.0) < BUG):  # fmt: skip
        t = time.perf_counter()
        text = await translator.translate(question, lang, target)
        if text is not None:  # none: no translator for the language (or it failed: logged)
            own = {*terms(question), *english, *terms(" ".join(english))}  # as written, folded
            written = dict(zip(terms(text), terms(text, folded=False), strict=True))
            added = [w for w in written if w not in own]
            # Only words the corpus uses: one no document holds cannot match lexically, yet it
            # would move the embedded text and the ranker's term matches (httpx: "almacén" →
            # warehouse). A word whose folded form no document holds is tried as written
            # ("strategies" folds to "strategie").
            forms = {v: query_terms(v) for w in added for v in (w, written[w])}
            held = await reader.doc_terms(sorted({f for fs in forms.values() for f in fs}), {},
                                          opt.keep)  # a filter: its repositories' documents
            used = {v for v, fs in forms.items() if any(held.df.get(f, 0) for f in fs)}
            unused = [w for w in added if w not in used and written[w] not in used]
            added = [w if w in used else written[w] for w in added if w not in unused]
            translation = {"language": lang, "text": text, "terms": added, "unused": unused}
            if added:
                english, extra = [*english, *added], [*extra, *added]
                if not opt.translate_dense:  # else the translation's own vector is the query
                    dq = await embedder.embed_query(f"{question} ({' '.join(english)})")
        timings["translate"] = (time.perf_counter() - t) * 1000
    if translation is not None and opt.translate_dense:
        # The dense query of a translated question: its translation's vector (the translation
        # is in the corpus's language, the passages': no offset to move it by). Off by default:
        # it won on the dev sets' tuning halves and lost on their reporting halves (PLAN-s36.md).
        dq = await embedder.embed_query(str(translation["text"]))
        translation["dense"] = True
    elif kinds is not None:
        # The dense query of a question in another language than the corpus's: moved by the
        # languages' offset (align.py). The kind classifier reads the question as asked.
        dq = kinds.aligned(dq, lang, target)
    expand = opt.mode == "full" and opt.config.graph
    found = await find(reader, dq, question, route, opt, extra, opt.collections, expand)
    context = None
    if opt.mode == "full":
        rows = {c: [h.row for h in hs] for c, hs in found.hits.items()}
        held = await reader.doc_terms(lexical_terms(question, route, extra), rows, opt.keep)
        context = Context.of(question, extra, route, probs, lang, coverage(held))
    return Pool(found, route, context, opt.weights_for(route.weights), translation)


def rerank(
    pool: Pool, ranker: Ranker, test_penalty: float, extra: np.ndarray | None = None
) -> None:
    """Replace each candidate's hybrid score by the ranker's (and keep why, for ``route``).

    ``test_penalty`` (cosine units, ``retrieval.test_penalty``) still moves test code down
    unless the question is about tests: the dev sets the ranker learned from index no tests, so
    it cannot have learned that; the penalty is turned into score units by the ranker's own
    slope for cosine (what raising a candidate's cosine by that much would add). The ranker's
    own ``is_test`` weight, fitted on a few Rust in-file tests, about cancels it (PLAN-s67):
    test files are kept out of the candidates instead (``retrieval.test_candidates``). ``extra``:
    more feature columns, one row per candidate of ``pool.all()`` (the reader's, ``reread.py``).
    """
    cands = pool.all()
    if not cands or pool.context is None:
        return
    x = matrix(cands, pool.context)
    if extra is not None:
        x = np.hstack([x, extra])
    penalty = test_penalty * ranker.slope(("cos", "cos_gap", "cos_gap_coll"))
    for c, s, row in zip(cands, ranker.score(x), x, strict=True):
        c.score, c.bonus = float(s) - (penalty if c.test else 0.0), 0.0
        c.why = [*c.why, *(f"{k} {v:+.2f}" for k, v in ranker.contributions(row, 4).items())]
    for hs in pool.found.hits.values():
        hs.sort(key=lambda h: -h.score)


async def retrieve(
    reader: BuildReader,
    embedder: EmbedService,
    question: str,
    opt: Options,
    route: Route | None = None,
    kinds: KindModel | None = None,
    translator: Translator | None = None,
) -> Retrieval:
    """Analyse, search each collection, rank, share the slots, and resolve the sources.
    ``question`` is what is searched (a follow-up already joined to the turn it follows)."""
    timings: dict[str, float] = {}
    pool = await candidates(reader, embedder, question, opt, kinds, route, timings, translator)
    route, found, weights = pool.route, pool.found, pool.weights
    t = time.perf_counter()
    ranker = None
    if opt.mode == "full" and opt.config.ranker == "learned":
        ranker = load(opt.config.ranker_file) if opt.config.ranker_file else load()
    read = None
    if ranker is not None:
        whys = {id(c): c.why for c in pool.all()} if opt.config.reader else {}
        rerank(pool, ranker, opt.config.test_penalty)
        if opt.config.reader and pool.context is not None:
            read = await reread(pool.all(), pool.context, question, embedder, timings,
                                reader.shared_vectors)  # fmt: skip
        if read is not None:  # the reader's ranker orders them again, with its four features
            ranker = read[0]
            for c in pool.all():  # its contributions replace the first ranker's
                c.why = whys[id(c)]
            rerank(pool, ranker, opt.config.test_penalty, read[1])
    if opt.aliases:
        tilt(pool, opt, ranker)
    if opt.mode == "full":
        resolve_several(pool)
        named_issues_first(pool)
        call_sites_kept(pool)
    slots: dict[Collection, int]
    localize = False
    if opt.mode == "rrf":
        chosen = rrf(found.ranked, opt.k)
        slots = {}
        for h in chosen:
            slots[h.collection] = slots.get(h.collection, 0) + 1
    elif opt.mode == "full" and route.hop and route.issues and (
        hop := await _issue_hop(reader, embedder, route, opt, timings)
    ):
        chosen, slots = hop
        localize = True  # the code after the issue: the files most likely to hold its bug
    else:  # the question as asked (also a hop whose issue is not indexed)
        per_doc = per_doc_limits(opt, pool.context.kinds if pool.context else None)
        localize = bug_report(opt, pool.context.kinds if pool.context else None)
        span = SPAN if ranker is not None else None
        pick = select_by_repo if opt.aliases and opt.mode == "full" else select
        first = opt.mode == "full" and opt.config.file_first
        chosen, slots = pick(
            found.hits, opt.k, opt.config.relevance_floor, weights, per_doc, span,
            file_first=first, passages=opt.config.passages if opt.mode == "full" else 0,
            first_passages=opt.config.first_passages,
        )  # fmt: skip
    timings["search"] = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    sources = await to_sources(reader, chosen)
    follows: dict[int, list[int]] = {}
    if opt.mode == "full":
        sources, follows = await follow_thin(reader, sources, opt.config.thin_lines,
                                             opt.config.read_on_first)
    timings["fetch"] = (time.perf_counter() - t) * 1000
    rj = route.to_json()
    rj["weights"] = weights
    if found.exact:
        rj["exact"] = found.exact
    if pool.context is not None:
        rj["signals"]["kinds"] = {k: round(v, 3) for k, v in pool.context.kinds.items()}
    rj["mode"] = opt.mode
    if pool.translation is not None:
        rj["translation"] = pool.translation
    if opt.repo is not None:  # the filter asked for, and the repositories it kept
        rj["filter"] = {"name": opt.repo, "repos": list(opt.keep)}
    if localize:  # answered as a bug report: the sources are the files most likely to hold it
        rj["localize"] = True
    rj["ranker"] = "hybrid" if ranker is None else "learned+reader" if read else "learned"
    rj["sources"] = [
        {"collection": h.collection, "row": h.row, "why": h.why,
         **({"passages": [p.row for p in h.passages]} if h.passages else {}),
         # rows of chunks shown because the piece before them was thin, or the first source's own
         # chunk (read_on_first; thin.py)
         **({"follows_thin": follows[i]} if i in follows else {})}
        for i, h in enumerate(chosen)
    ]  # fmt: skip
    return Retrieval(
        sources=sources, route=rj, slots={str(c): n for c, n in slots.items()},
        timings_ms=timings, query=question,
    )  # fmt: skip


def resolve_several(pool: Pool) -> None:
    """A bare ``#N`` that several repositories of the instance have (``issues_in_several``)
    means the one whose thread fits the question best: the repository of the best-scored chunk
    of #N. The named-issue rule and the issue → code hop then take that repository's #N (else
    they took the first repository's in row order: "where is the bug from issue #2281 (a Local
    slice flag …)" answered from another library's #2281). ``route.signals.repo_issues`` says
    which was taken."""
    route = pool.route
    issues = pool.found.hits.get("issues") or []
    for n, repos in route.several.items():
        if n in route.repo_issues:
            continue
        best = max(
            (h for h in issues
             if h.chunk is not None and h.chunk.issue == n and h.chunk.repo in repos),
            key=lambda h: h.score,
            default=None,
        )  # fmt: skip
        if best is not None and best.chunk is not None:
            route.repo_issues[n] = best.chunk.repo


def named_issues_first(pool: Pool) -> None:
    """An issue the question names by number ("is #12 still open?") is what it asks about: its
    thread ranks first, whatever the ranker made of its text — an exact signal, like a named
    path or symbol, but one a question about it never wants to lose. A bare #N of several
    repositories: every one's thread is kept, the one the question means (``resolve_several``)
    first."""
    hits = pool.found.hits.get("issues") or []
    named = [
        h for h in hits if h.exact and h.chunk is not None and h.chunk.issue in pool.route.issues
    ]
    if not named:
        return
    top = max(c.score for c in pool.all())
    chosen = pool.route.repo_issues
    for h in named:  # above the best (a tie would keep the best first: the sort is stable)
        h.score = max(h.score, top + FIRST)
        c = h.chunk
        if c is not None and c.issue is not None and chosen.get(c.issue) == c.repo:
            h.score += FIRST
    hits.sort(key=lambda h: -h.score)


def call_sites_kept(pool: Pool) -> None:
    """"Who calls `parse_config`?" is answered by the places that call it (the code graph's
    call sites, found exactly): they rank with the best candidate whatever the ranker made of
    their text — a caller's few lines share little with the question beyond the name."""
    why = pool.found.exact.get("code", [])
    rows = {e["row"] for e in why if str(e.get("why", "")).startswith("calls ")}
    hits = pool.found.hits.get("code") or []
    if not rows or not hits:
        return
    top = max(c.score for c in pool.all())
    for h in hits:
        if h.row in rows:
            h.score = max(h.score, top)
    hits.sort(key=lambda h: -h.score)


def tilt(pool: Pool, opt: Options, ranker: Ranker | None) -> None:
    """An instance over several repositories: keep only the candidates of the repositories the
    caller's filter keeps (``opt.keep``: a repository, a scope's); then move the candidates of
    the repositories the question names up by :data:`REPO_TILT` (cosine units; in the ranker's
    units through its slope for cosine) — a tilt, not a filter: another repository's candidate
    that fits much better still wins."""
    if opt.mode != "full":
        return
    hits = pool.found.hits
    if opt.keep:
        for c, hs in hits.items():
            hits[c] = only_repo(hs, opt.keep)
        keep_issues(pool.route, opt.keep)
        if len(opt.keep) == 1:
            return
    if not pool.route.repos:
        return
    bonus = REPO_TILT * (ranker.slope(("cos", "cos_gap", "cos_gap_coll")) if ranker else 1.0)
    named = set(pool.route.repos)
    for hs in hits.values():
        for h in hs:
            if h.chunk is not None and h.chunk.repo in named:
                h.score += bonus
                h.why = [*h.why, f"repository {h.chunk.repo} named"]
        hs.sort(key=lambda h: -h.score)


def select_by_repo(
    hits: dict[Collection, list[Candidate]],
    k: int,
    floor: float,
    weights: dict[Collection, float] | None = None,
    per_doc: dict[Collection, int] | None = None,
    span: float | None = None,
    file_first: bool = False,
    passages: int = 0,
    first_passages: int | None = None,
) -> tuple[list[Candidate], dict[Collection, int]]:
    """:func:`select` over (collection, repository) groups: the slots are shared in proportion
    to how well each repository's candidates of each collection fit, so a repository with
    nothing relevant gets none, and one that fits less still gets its share instead of being
    crowded out by one that fits a little better (the weights and limits are the collection's)."""
    groups: dict[tuple[Collection, str], list[Candidate]] = {}
    for c, hs in hits.items():
        for h in hs:
            groups.setdefault((c, h.chunk.repo if h.chunk is not None else ""), []).append(h)
    w = {g: (weights or {}).get(g[0], 1.0) for g in groups}
    limits = {g: per_doc[g[0]] for g in groups if g[0] in per_doc} if per_doc else None
    chosen, got = select(groups, k, floor, w, limits, span, file_first=file_first,
                         passages=passages, first_passages=first_passages)  # fmt: skip
    slots: dict[Collection, int] = {}
    for (c, _repo), n in got.items():
        slots[c] = slots.get(c, 0) + n
    return chosen, slots


def keep_issues(route: Route, keep: tuple[str, ...]) -> None:
    """A filter's issue numbers: ``candidates.exact_rows`` looked a bare ``#N`` up in the kept
    repositories only (``route.several`` names none the filter leaves out, and where one kept
    repository has it, that one is ``route.repo_issues``'); a filter keeping one repository
    makes every bare ``#N`` its own, for the issue → code hop."""
    if len(keep) == 1:
        for n in route.issues:
            if n not in route.several:
                route.repo_issues.setdefault(n, keep[0])


def only_repo(hits: list[Candidate], keep: tuple[str, ...]) -> list[Candidate]:
    return [h for h in hits if h.chunk is not None and h.chunk.repo in keep]


def bug_report(opt: Options, kinds: dict[str, float] | None) -> bool:
    """Whether the question is answered as a bug report (the full system, and the kind
    classifier's bug probability at least :data:`BUG`)."""
    return opt.mode == "full" and kinds is not None and kinds.get("bug", 0.0) >= BUG


def per_doc_limits(opt: Options, kinds: dict[str, float] | None) -> dict[Collection, int] | None:
    """At most how many chunks of one file or thread each collection may give (None: no limit;
    the baselines have none)."""
    limit = 1 if opt.config.passages else opt.config.per_file
    if not limit or opt.mode != "full":
        return None
    per_doc = dict.fromkeys(COLLECTIONS, limit)
    if bug_report(opt, kinds) and opt.config.per_file_bug:
        # A bug report is answered with the files most likely to hold the bug: one chunk each
        # (by default), so six sources are six candidate files.
        per_doc["code"] = opt.config.per_file_bug
    return per_doc


async def _issue_hop(
    reader: BuildReader,
    embedder: EmbedService,
    route: Route,
    opt: Options,
    timings: dict[str, float],
) -> tuple[list[Candidate], dict[Collection, int]] | None:
    """ "Where is the bug from issue #42?": the issue itself first, then the code it points at,
    found with the issue's own title, body, stack-trace frames and identifiers, chosen as a bug
    report's are (one chunk per file; with passages, a file's further chunks ride along). None
    when the issue is not indexed: the question is then answered as asked."""
    floor = opt.config.relevance_floor
    issue_rows: list[int] = []
    for n in route.issues[:2]:
        issue_rows.extend((await rows_of_issue(reader, route, n, 2))[0])
    chunks = await reader.chunks("issues", issue_rows) if issue_rows else {}
    if opt.keep:  # a filter over several repositories: an issue of the repositories it keeps
        issue_rows = [r for r in issue_rows if r in chunks and chunks[r].repo in opt.keep]
    if not issue_rows:
        return None
    issue_text = "\n".join(chunks[r].text for r in issue_rows if r in chunks)[:4000]
    sub = analyse(issue_text)
    sub.issues, sub.hop = [], False
    sub.tests = route.tests  # the question says whether it wants tests, not the issue's text
    # Only distinctive names from a long issue text (snake_case, camelCase, dotted, calls): a
    # plain word in backticks ("`ask`") would pull in every definition of that word.
    sub.identifiers = [i for i in sub.identifiers if DISTINCT.search(i)]
    t = time.perf_counter()
    # The title and the opening of the body say what the issue is about; a query of ~150
    # tokens embeds in a fraction of the time of the whole thread.
    head = issue_text[:600]
    q2 = await embedder.embed_query(head)
    timings["embed_hop_query"] = (time.perf_counter() - t) * 1000
    extra = english_terms(head) if opt.glossary else []
    code = await find(reader, q2, head, sub, opt, extra, ("code",))
    if opt.keep and opt.mode == "full":
        code.hits = {c: only_repo(hs, opt.keep) for c, hs in code.hits.items()}
    # The question asks for code: the rest of the slots go to the code the issue points at
    # (the docs that merely discuss the same topic would crowd it out).
    first = [Candidate("issues", r, 1.0) for r in issue_rows[:1]]
    rest, slots = select(
        code.hits, opt.k - len(first), floor, per_doc=per_doc_limits(opt, {"bug": 1.0}),
        file_first=opt.config.file_first, passages=opt.config.passages,
        first_passages=opt.config.first_passages,
    )  # fmt: skip
    slots = {**slots, "issues": len(first)}
    return first + rest, slots


async def to_sources(reader: BuildReader, chosen: list[Candidate]) -> list[Source]:
    by_coll: dict[Collection, list[int]] = {}
    for h in (x for c in chosen for x in (c, *c.passages)):
        if h.chunk is None:  # the candidate stage fetched most already
            by_coll.setdefault(h.collection, []).append(h.row)
    rows = {c: await reader.chunks(c, r) for c, r in by_coll.items()}

    def chunk(h: Candidate) -> Chunk:
        return h.chunk if h.chunk is not None else rows[h.collection][h.row]

    out = []
    for h in chosen:
        ch = chunk(h)
        passages = [Passage.of(p) for p in map(chunk, h.passages)]
        out.append(
            Source(
                collection=h.collection, title=ch.title, url=ch.url, text=ch.text, score=h.score,
                path=ch.path, start_line=ch.start_line, end_line=ch.end_line, issue=ch.issue,
                symbol=ch.symbol, chunk_id=ch.id, repo=ch.repo, passages=passages,
            )
        )  # fmt: skip
    return out
