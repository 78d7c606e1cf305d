"""The data that flows through the pipeline: documents, chunks, sources and answers."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Collection = Literal["docs", "code", "issues"]

# A citation marker: "[3]" cites sources[2]. The one definition every module uses.
MARKER = re.compile(r"\[(\d{1,3})\]")
# Code spans and fences: a "[0]" there is an index (`argv[0]`, Go's `%[1]q`), not a citation,
# and a quote keeps it as written. A fence is three backticks that end their line (an optional
# language after them): quoted reStructuredText — "``exc_info``" inside a quote's own backticks
# reads "```exc_info``" — is not one, or it would run to the next such quote and swallow every
# citation between them.
CODE = re.compile(r"```[\w+.-]*[ \t]*\n.*?```|`[^`\n]*`", re.S)


def sub_markers(
    repl: Callable[[re.Match[str]], str], text: str, pattern: re.Pattern[str] = MARKER
) -> str:
    """``pattern.sub(repl, text)`` outside code spans and fences (:data:`CODE`); ``pattern``:
    :data:`MARKER`, or one built on it (the marker with the space before it)."""
    pieces, last = [], 0
    for m in CODE.finditer(text):
        pieces += [pattern.sub(repl, text[last : m.start()]), m.group(0)]
        last = m.end()
    pieces.append(pattern.sub(repl, text[last:]))
    return "".join(pieces)


def markers(text: str) -> list[int]:
    """The citation numbers ``text`` holds, in order, outside code spans and fences."""
    return [int(n) for n in MARKER.findall(CODE.sub(" ", text))]


COLLECTIONS: tuple[Collection, ...] = ("docs", "code", "issues")
# The longest question (or search query) the service reads: about four times what the embedder's
# 512-token window holds, so nothing a question says is lost to a cap, and every step per question
# stays in milliseconds (a 40,000-character question, Slack's limit, stalled the loop 3.3 s).
MAX_QUESTION_CHARS = 4000


# Test code by its path: a tests/test/spec folder (any case), or a test file name in the common
# conventions (test_x.py, tests.py, Rust's tests.rs, x_test.go, x.test.ts, x.spec.js, x.cy.ts,
# XTest.java, XTests.cs, conftest.py). A "testing/" package is left alone: in libraries it is
# often public API (numpy.testing).
_TEST_DIR = re.compile(r"(^|/)(tests?|__tests__|specs?)/", re.IGNORECASE)
_TEST_FILE = re.compile(
    r"(^|/)(test_[^/]+|tests\.(py|rs)|[^/]+_test\.[a-z]+|[^/]+\.(test|spec|cy)\.[a-z]+|"
    r"[^/]*[a-z0-9]Tests?\.[a-z]+|conftest\.py)$"
)


def is_test_path(path: str | None) -> bool:
    """True for test code: ``tests/…``, ``test_x.py``, ``x_test.go``, ``x.spec.ts``, …"""
    if not path:
        return False
    return bool(_TEST_DIR.search(path) or _TEST_FILE.search(path))


def is_test_code(path: str | None, kind: str | None) -> bool:
    """True for a code chunk of test code: in a test file (:func:`is_test_path`), or test code
    inside a source file (kind ``test``: Rust's ``#[cfg(test)]`` modules and ``#[test]``
    functions, ``chunk.rust_tests.rows_of_tests``)."""
    return kind == "test" or is_test_path(path)


@dataclass(frozen=True)
class Document:
    """One unit read from a source: a file of the repository or one issue thread."""

    collection: Collection
    key: str  # "path/to/file.py" or "issue:42": the unit of incremental re-indexing
    text: str
    content_hash: str
    path: str | None = None
    issue: int | None = None
    title: str = ""
    url: str | None = None  # issue URL (files get permalinks per chunk)
    # A pull request's changed files and the issues it closes (issues collection only).
    files: tuple[str, ...] = ()
    fixes: tuple[int, ...] = ()
    # The repository it comes from in an instance over several ("" for a one-repository
    # instance); ``key`` then starts with ``{repo}:`` so two READMEs or two #12s never collide.
    repo: str = ""


def unit_key(repo: str, key: str) -> str:
    """The key of a unit within its instance: ``key`` itself in a one-repository instance,
    ``{repo}:{key}`` in one over several (a repository name never holds ``:``)."""
    return f"{repo}:{key}" if repo else key


@dataclass(frozen=True)
class Symbol:
    """An entry of the symbol table: where a function, class or method is defined, and the
    names it calls (the code graph)."""

    name: str
    qualname: str
    kind: str
    path: str
    start_line: int
    end_line: int
    calls: tuple[str, ...] = ()
    repo: str = ""  # its repository in an instance over several


@dataclass
class Chunk:
    """A piece of a document small enough to embed, with everything a citation needs."""

    collection: Collection
    doc_key: str
    text: str  # the text that is embedded and shown (context header included)
    title: str  # heading path, qualified symbol or "#N title"
    tokens: int
    path: str | None = None
    issue: int | None = None
    start_line: int | None = None
    end_line: int | None = None
    symbol: str | None = None
    kind: str = ""
    url: str = ""
    commit: str | None = None
    text_hash: str = ""
    id: int | None = None  # row id in the store (also the vector key)
    repo: str = ""  # its repository in an instance over several ("" for one)


def line_span(start: int, end: int | None) -> str:
    """``10-20``, or ``10`` for one line."""
    return str(start) if end in (None, start) else f"{start}-{end}"


@dataclass
class Passage:
    """A further piece of a source's file or thread (``retrieval.passages``, or the chunk right
    after a thin piece or after the first source's own: ``retrieval.thin_lines``,
    ``read_on_first``): its own lines, title and link, shown and quoted
    under the source it belongs to."""

    title: str
    url: str
    text: str
    start_line: int | None = None
    end_line: int | None = None
    symbol: str | None = None
    chunk_id: int | None = None

    @classmethod
    def of(cls, c: Chunk) -> Passage:
        """The passage that shows chunk ``c``."""
        return cls(title=c.title, url=c.url, text=c.text, start_line=c.start_line,
                   end_line=c.end_line, symbol=c.symbol, chunk_id=c.id)  # fmt: skip

    def lines(self) -> str:
        """``10-20`` (``10`` for one line; the title when it has none)."""
        return self.title if self.start_line is None else line_span(self.start_line, self.end_line)

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "start_line": self.start_line, "end_line": self.end_line,
                "url": self.url, "text": self.text}  # fmt: skip


@dataclass
class Source:
    """A retrieved chunk as shown to a person: numbered, scored, linked (and, with
    ``retrieval.passages``, the further passages of its file that fit the question)."""

    collection: Collection
    title: str
    url: str
    text: str
    score: float
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    issue: int | None = None
    symbol: str | None = None
    chunk_id: int | None = None
    n: int = 0  # citation number, set by the answerer
    repo: str = ""  # its repository in an instance over several ("" for one: never shown)
    passages: list[Passage] = field(default_factory=list)

    def texts(self) -> list[str]:
        """Everything the source shows: its chunk's text and its passages'."""
        return [self.text, *(p.text for p in self.passages)]

    def passage_sources(self) -> list[Source]:
        """Each passage as a source of its own (its text, title, symbol, lines and link; the
        same file, number and repository): what the faces label and the answerer quotes."""
        later = " (later in the thread)" if self.collection == "issues" else ""
        return [
            replace(self, text=p.text, title=p.title + later, url=p.url, start_line=p.start_line,
                    end_line=p.end_line, symbol=p.symbol, chunk_id=p.chunk_id, passages=[])
            for p in self.passages
        ]  # fmt: skip

    def full_text(self) -> str:
        """Its text and each passage's after a line naming the passage's lines (what a
        language model is shown of it)."""
        parts = [self.text]
        for p in self.passages:
            head = ("later in the thread" if self.collection == "issues"
                    else f"lines {p.lines()} · {p.symbol or p.title}")  # fmt: skip
            parts.append(f"[… {head}]\n{p.text}")
        return "\n\n".join(parts)

    def is_link(self) -> bool:
        """Whether ``url`` is a web link (else it is ``path:lines @ <short sha>``)."""
        return self.url.startswith(("http://", "https://"))

    def location(self) -> str:
        """A short human label: ``path:10-20``, ``#42`` — or, when the repository has no web
        URL, the pinned place that stands in for a link: ``path:10-20 @ 1a2b3c4``. In an
        instance over several repositories the repository comes first: ``server: path:10-20``,
        ``client#42``."""
        if self.issue is not None:
            return f"{self.repo}#{self.issue}"
        where = self._place()
        return f"{self.repo}: {where}" if self.repo else where

    def _place(self) -> str:
        if self.url and not self.is_link() and self.path and self.url.startswith(self.path):
            return self.url
        if self.path and self.start_line is not None:
            return f"{self.path}:{line_span(self.start_line, self.end_line)}"
        return self.path or self.title

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "collection": self.collection,
            # only in an instance over several repositories (one-repository output unchanged)
            **({"repo": self.repo} if self.repo else {}),
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "issue": self.issue,
            "title": self.title,
            "url": self.url,
            "score": round(float(self.score), 4),
            "text": self.text,
            # only when it carries some (output without passages unchanged)
            **({"passages": [p.to_json() for p in self.passages]} if self.passages else {}),
        }


@dataclass
class Turn:
    """One earlier exchange of a conversation (a chat thread)."""

    question: str
    answer: str


@dataclass
class Retrieval:
    """What retrieval found for a question, and why."""

    sources: list[Source]
    route: dict[str, Any] = field(default_factory=dict)
    slots: dict[str, int] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    # What was searched: the question, or a follow-up joined to the turn it follows (resolved
    # once, by the service; the answerer scores its quotes against the same text).
    query: str = ""
    commit: str | None = None  # the commit of the build searched (set by the service)

    def top_score(self) -> float:
        """How sure retrieval is of its first source (a support channel's ``min_score`` is
        compared with it): that source's score — as the whole instance ranked it when the
        question was searched in the repository it names alone (``route.narrowed.first_score``,
        ``core/retrieve/narrow.py``: the scale the threshold was set on); -inf without sources."""
        first = (self.route.get("narrowed") or {}).get("first_score")
        if first is not None:
            return float(first)
        return self.sources[0].score if self.sources else float("-inf")


@dataclass
class Answer:
    """An answer whose every ``[n]`` marker points at ``sources[n-1]``."""

    text: str
    sources: list[Source]
    route: dict[str, Any] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    backend: str = "extractive"
    # Sentences the support check found no support for in the sources they cite.
    unsupported: list[str] = field(default_factory=list)
    dropped_markers: int = 0  # [n] markers that pointed at no source, removed
    note: str = ""  # one line for the person asking, e.g. "the model is down: extractive answer"
    no_answer: bool = False  # the sources don't contain the answer; ``sources`` are the closest
    language: str | None = None  # detected language of the question (ISO 639-1), if known
    # What the answerer saw: copies of the sources in prompt order, with the text as given to it
    # (cut to the token budget); ``n`` is the citation number in ``text``, 0 when not cited.
    evidence: list[Source] = field(default_factory=list)
    commit: str | None = None  # the commit of the build the sources come from

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": self.text,
            "sources": [s.to_json() for s in self.sources],
            "route": self.route,
            "timings_ms": {k: round(v, 2) for k, v in self.timings_ms.items()},
            "backend": self.backend,
            "note": self.note,
            "no_answer": self.no_answer,
            "unsupported": self.unsupported,
            "dropped_markers": self.dropped_markers,
            "language": self.language,
            "commit": self.commit,
            "evidence": {"sources": len(self.evidence),
                         "chars": sum(len(t) for e in self.evidence for t in e.texts())},
        }  # fmt: skip


@dataclass(frozen=True)
class SyncRequest:
    """What one update of an instance should do."""

    repo: bool = True  # fetch the repository (a url clone); False: index the clone as it is
    issues: bool = True  # bring the GitHub issues mirror up to date (a github instance)
    numbers: frozenset[int] = frozenset()  # issues/PRs a webhook named: fetched first
    full: bool = False  # rebuild the index from scratch instead of incrementally
    refetch_issues: bool = False  # list every issue again (drops deleted ones from the mirror)

    def merge(self, other: SyncRequest) -> SyncRequest:
        """One request that does what both ask (a burst of webhook deliveries → one sync)."""
        return SyncRequest(
            repo=self.repo or other.repo, issues=self.issues or other.issues,
            numbers=self.numbers | other.numbers, full=self.full or other.full,
            refetch_issues=self.refetch_issues or other.refetch_issues,
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "numbers": sorted(self.numbers)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SyncRequest:
        """The request :meth:`to_json` wrote (a queued job's)."""
        return cls(
            repo=bool(d.get("repo", True)), issues=bool(d.get("issues", True)),
            numbers=frozenset(int(n) for n in d.get("numbers") or ()), full=bool(d.get("full")),
            refetch_issues=bool(d.get("refetch_issues")),
        )  # fmt: skip
