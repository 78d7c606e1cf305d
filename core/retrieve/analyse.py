"""Question analysis: what a question names and which collections can answer it.

Signals: issue/PR references (``#42``, ``issue 42``, ``PR 1234``, an issue URL), identifiers
(snake_case, camelCase/CamelCase, dotted, ``backticked``, ``name()``), file paths, stack-trace
frames and error lines, and the kind of question (how-to → docs; what-does / where-is / default-of
→ code; is-there-an-issue / known bug / was-it-fixed → issues). The route only *weights* the
collections; retrieval still lets a collection that scores well take slots.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.models import Collection
from core.retrieve.repos import issue_refs, named
from core.retrieve.traces import read

_ISSUE_URL = re.compile(r"https?://[^\s]+/(?:issues|pull)/(\d+)")
_ISSUE_REF = re.compile(
    r"(?:(?<![\w&])#(\d{1,7})\b)|\b(?:issues?|bugs?|tickets?|prs?|pull\s+requests?|"
    r"incidencias?|problemas?)\s*(?:no\.?\s*|n[úu]m(?:ero)?\.?\s*)?#?(\d{1,7})\b",
    re.IGNORECASE,
)
_BACKTICK = re.compile(r"`([^`\n]{1,120})`")
# A backticked name: dotted or scoped, a Ruby predicate or bang method (`valid?`, `save!`).
_NAME_PATTERN = r"[A-Za-z_$][\w$]*(?:(?:\.|::)[A-Za-z_$][\w$]*)*[?!]?"
_NAME = re.compile(_NAME_PATTERN)
# A backticked call with its arguments (`PrettyPrinter::highlight(3)`): the name called.
_CALLED = re.compile(rf"({_NAME_PATTERN})\s*\(.*\)\s*;?")
_EMAIL_AT = re.compile(r"\w@")
# Not a name that a backticked call quotes: keywords and the module loader (`if (x)`, `require(…)`).
_NOT_CALLED = frozenset(
    "if for while switch catch return sizeof typeof await new function require import $".split()
)
# CamelCase words that name languages and platforms, not a repository's code (a backticked one
# is still read).
_PRODUCTS = frozenset(
    "typescript javascript coffeescript github gitlab bitbucket powershell macos nodejs "
    "webassembly youtube wordpress stackoverflow jetbrains numpy pytorch ios".split()
)
_CALL = re.compile(r"\b([A-Za-z_][\w.]*)\(\)")
_SNAKE = re.compile(
    r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b_[a-z0-9_]+\b|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"
)
_CAMEL = re.compile(r"\b[a-z]+(?:[A-Z][a-z0-9]*)+\b|\b(?:[A-Z][a-z0-9]+){2,}\b")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*){1,}\b")
# `Rack::Deflater`, `CLI::Range`, `crate::config::Config`: C++, Rust, Ruby and PHP scopes, which
# the symbol table writes with dots (`Rack.Deflater`); not an IPv6 address or `:emoji::codes:`,
# nor the standard libraries' own names (`std::string`: not the repository's).
_SCOPED = re.compile(r"(?<![:\w.])[A-Za-z_]\w*(?:::[A-Za-z_]\w*)+(?:\.[A-Za-z_]\w*)*(?!\w)")
_STD = frozenset({"std", "core", "alloc"})
_PATH = re.compile(
    r"(?<![\w/])(?:[\w.-]+/)*[\w.-]+\.(?:py|pyi|js|jsx|mjs|cjs|ts|tsx|mts|cts|go|rs|java|c|h|cc|"
    r"cpp|cxx|hpp|hh|hxx|ipp|rb|rake|gemspec|cs|php|kt|kts|swift|scala|dart|lua|ex|exs|vue|svelte|"
    r"md|mdx|rst|adoc|asciidoc|txt|toml|yaml|yml|json|cfg|ini|sh)\b"
)  # the suffixes of the files an instance indexes by default (core/config/schema.py)
_ERROR = re.compile(r"\b(\w*(?:Error|Exception|Panic|Fault))\b(?::\s*(.+))?")

_HOWTO = re.compile(
    r"\b(how\s+(?:do|can|should|to)\b|how\s+does\s+one|install|configure|set\s*up|setup|usage|"
    r"example|tutorial|guide|documentation|docs|c[óo]mo\s+(?:se\s+)?(?:configur|instal|us|hag|"
    r"ejecut|obteng|indexo)|instalar|configurar|ejemplo|gu[íi]a)\w*",
    re.IGNORECASE,
)
_CODEQ = re.compile(
    r"\b(what\s+does|where\s+is|where\s+are|which\s+(?:function|class|method|module|file)|"
    r"default\s+(?:value\s+)?of|return(?:s|ed)?|implement(?:ed|s|ation)?|defined|definition|"
    r"who\s+calls|callers?\s+of|signature|qu[ée]\s+devuelve|qu[ée]\s+hace|d[óo]nde\s+(?:est[áa]|"
    r"se\s+(?:define|implementa|calcula))|qu[ée]\s+(?:funci[óo]n|clase|m[ée]todo)|"
    r"valor\s+por\s+defecto|implementa)\b",
    re.IGNORECASE,
)
_ISSUEQ = re.compile(
    r"\b(is\s+there\s+(?:an?\s+)?(?:issue|bug|ticket|pr|pull\s+request|plan)|known\s+(?:bug|issue|"
    r"problem)|was\s+(?:it|this)\s+(?:fixed|reported)|(?:bug|issue)\s+report|regression|"
    r"which\s+(?:issue|pr|pull\s+request)|reported|feature\s+requests?|"
    r"(?:was|were|been)\s+(?:\w+\s+){0,8}?(?:requested|proposed|asked\s+for)"
    r"(?=\s*(?:[?.!,]|$)|\s+(?:by|in|on|before|earlier)\b)|"
    r"(?:has|have|had)\s+(?:anyone|anybody|someone|somebody|people|users?)\s+(?:ever\s+)?"
    r"(?:asked\s+for|requested|proposed)|"
    r"hay\s+(?:una?\s+)?(?:incidencia|issue|error|"
    r"bug|problema)|qu[ée]\s+incidencia|se\s+(?:arregl|corrigi|report|pidi)\w*|"
    r"error\s+conocido|fue\s+(?:arreglado|corregido))\b",
    re.IGNORECASE,
)
_TESTS = re.compile(
    r"\b(tests?|tested|testing|unit[\s-]?tests?|specs?|fixtures?|conftest|pytest|mocks?|stubs?|"
    r"test_\w+|\w+_test|prueb\w*|probad[oa]s?|probar|probando|teste\w*)\b",
    re.IGNORECASE,
)
_WHERE_BUG = re.compile(
    r"\b(where|which\s+code|what\s+code|fix(?:ed)?|caus\w*|d[óo]nde|qu[ée]\s+c[óo]digo|arregl\w*|"
    r"corrig\w*|implement\w*)\b",
    re.IGNORECASE,
)


@dataclass
class Route:
    """What the question names, and the per-collection weights derived from it."""

    issues: list[int] = field(default_factory=list)
    identifiers: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)  # "path:line in func"
    errors: list[str] = field(default_factory=list)
    kind: str = "general"  # howto | code | issues | general
    hop: bool = False  # issue → code: fetch the issue, then search code with its content
    tests: bool = False  # the question is about tests: test code is not down-weighted
    weights: dict[Collection, float] = field(
        default_factory=lambda: {"docs": 1.0, "code": 1.0, "issues": 1.0}
    )
    # An instance over several repositories: those the question names (retrieval tilts toward
    # them), and issue numbers it pins to one repository ("client#42", "issue 42 in client").
    repos: list[str] = field(default_factory=list)
    repo_issues: dict[int, str] = field(default_factory=dict)
    several: dict[int, list[str]] = field(default_factory=dict)  # a bare #N found in several

    def to_json(self) -> dict[str, Any]:
        out = self._json()
        if self.repos or self.repo_issues or self.several:
            out["signals"]["repos"] = self.repos
            out["signals"]["repo_issues"] = {str(n): r for n, r in self.repo_issues.items()}
            out["signals"]["issues_in_several"] = {str(n): r for n, r in self.several.items()}
        return out

    def _json(self) -> dict[str, Any]:
        return {
            "signals": {
                "issues": self.issues, "identifiers": self.identifiers, "paths": self.paths,
                "frames": self.frames, "errors": self.errors, "kind": self.kind,
                "issue_to_code": self.hop, "tests": self.tests,
            },
            "weights": dict(self.weights),
        }  # fmt: skip


def _dedupe(xs: list[str]) -> list[str]:
    out: list[str] = []
    for x in xs:
        if x and x not in out:
            out.append(x)
    return out


def _scoped(name: str) -> str | None:
    """A name as the symbol table writes it: `Rack::Deflater` → `Rack.Deflater`; None for a
    standard library's scoped name (`std::string`); any other name as it is."""
    if "::" not in name:
        return name
    return None if name.split("::")[0] in _STD else name.replace("::", ".")


def _backticked(span: str) -> str | None:
    """The name a backticked span quotes (a call's name without its arguments), or None when
    it quotes something else (a command, a snippet)."""
    s = span.strip("() ")
    if _NAME.fullmatch(s):
        return s
    m = _CALLED.fullmatch(span.strip())
    return m.group(1) if m and m.group(1) not in _NOT_CALLED else None


def analyse(question: str, aliases: Mapping[str, str] | None = None) -> Route:
    """The signals of ``question``; ``aliases``: the names of an instance's repositories (lower
    case) -> the repository, when it has several (``core/retrieve/repos.py``)."""
    r = Route()
    q = question
    nums = [int(m) for m in _ISSUE_URL.findall(q)]
    # A trace's paths and names are its frames' (the crash site first); the rest of its text
    # (arguments, addresses, the library a frame is from, a backtrace's #N) names nothing.
    trace, bare = read(q)
    for a, b in _ISSUE_REF.findall(_ISSUE_URL.sub(" ", bare)):
        nums.append(int(a or b))
    if aliases:
        r.repos = named(q, aliases)
        for repo, n in issue_refs(q, aliases):
            r.repo_issues.setdefault(n, repo)
            nums.append(n)
    r.issues = list(dict.fromkeys(nums))

    for f in trace:
        r.frames.append(str(f))
        if f.name:
            r.identifiers.append(f.name)
    for m in _ERROR.finditer(q):
        r.errors.append(m.group(0).strip()[:200])

    found = [p for p in _PATH.findall(bare) if not p.startswith("http")]
    r.paths = _dedupe([f.path for f in trace] + found)

    # Backticks quote code, but also commands and config snippets: keep what looks like a name.
    idents = [name for b in _BACKTICK.findall(bare) if (name := _backticked(b))]
    idents = [dotted for i in idents if (dotted := _scoped(i))]
    idents += _CALL.findall(bare)
    idents += _SNAKE.findall(bare)
    idents += [
        m.group(0)
        for m in _CAMEL.finditer(bare)
        if m.group(0).lower() not in _PRODUCTS
        and not bare[max(0, m.start() - 2) : m.start()].endswith(("<", "</"))  # an HTML tag
    ]
    idents += [
        m.group(0)
        for m in _DOTTED.finditer(bare)
        if not any(m.group(0) in p for p in r.paths)
        and max(len(x) for x in m.group(0).split(".")) > 2  # "e.g", "i.e" are not names
        # nor an e-mail address's parts (yet `@app.route` is a name)
        and not _EMAIL_AT.fullmatch(bare[max(0, m.start() - 2) : m.start()])
        and bare[m.end() : m.end() + 1] != "@"
    ]
    idents += [
        dotted
        for d in _SCOPED.findall(bare)
        if max(len(x) for x in re.split(r"::|\.", d)) > 2 and (dotted := _scoped(d))
    ]
    r.identifiers = _dedupe(
        [i for i in r.identifiers + idents if i not in r.paths and not i.startswith("http")]
    )

    r.tests = bool(_TESTS.search(q))
    howto, codeq, issueq = _HOWTO.search(q), _CODEQ.search(q), _ISSUEQ.search(q)
    if issueq and not r.issues:
        r.kind = "issues"
    elif r.issues:
        r.kind = "issues"
        r.hop = bool(_WHERE_BUG.search(q))
    elif codeq or r.frames or (r.identifiers and not howto):
        r.kind = "code"
    elif howto:
        r.kind = "howto"
    w = r.weights
    if r.kind == "howto":
        w["docs"] = 1.6
    elif r.kind == "code":
        w["code"] = 1.6
    elif r.kind == "issues":
        w["issues"] = 1.8
        if r.hop:
            w["code"] = 1.4
    if r.identifiers or r.paths:
        w["code"] = max(w["code"], 1.3)
    if r.errors and r.kind != "issues":
        w["issues"] = max(w["issues"], 1.2)
    return r
