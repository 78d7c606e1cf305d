"""The default answerer, no language model: :class:`ExtractiveAnswerer` quotes the sentences of
the top sources that best match the question, each followed by its citation number
(``citations.py`` checks and renumbers them). Its own words (the header, "the sources don't
contain the answer") follow the question's language where it has them (English, Spanish);
quotations stay as the sources wrote them. Code sources are quoted by their definition line and
docstring.
"""

from __future__ import annotations

import logging
import math
import re
import textwrap
from dataclasses import dataclass

from core.answer.base import OnText
from core.answer.citations import (
    balance_ticks,
    clip,
    finalize_citations,
    label,
    mark_cited,
    no_answer,
    phrase,
    prose_markup,
    quote,
    snapshot,
)
from core.answer.support import Similarity
from core.chunk.text import prose_units
from core.lexical import terms
from core.models import Answer, Retrieval, Source, Turn
from core.retrieve.followup import resolve_followup
from core.retrieve.language import detect_language

log = logging.getLogger(__name__)


def _body(src: Source) -> str:
    return src.text.split("\n", 1)[1] if "\n" in src.text else src.text


def _prose_and_blocks(src: Source) -> tuple[list[str], list[str]]:
    """A docs or issues source's quotable text: its sentences, table rows and the comments of
    its code blocks (prose), and the code of those blocks (for :func:`_code_lines`). A section
    that is one code block — an options object whose comments say what each key does — has
    nothing else to quote."""
    lines = _body(src).splitlines()
    if src.collection == "issues" and lines and re.match(r"(Issue|PR) · ", lines[0]):
        lines = lines[1:]  # the "Issue · state · labels" line of a thread's first piece
    out: list[str] = []
    blocks: list[str] = []
    if (src.path or "").lower().endswith(".rst"):
        lines, blocks = _rst_literals(lines)
        for b in blocks:
            out.extend(_comment_sentences(b.splitlines()))
    for u in prose_units(lines, 1):
        t = u.text.strip()
        if t.startswith(("```", "~~~")):
            inner = [ln for ln in t.splitlines()[1:] if not _FENCE_LINE.match(ln)]
            out.extend(_comment_sentences(inner))
            blocks.append("\n".join(inner))
        elif t.startswith("|"):
            if not _TABLE_RULE.match(t):
                out.append(t)  # a table row, verbatim (an option, its default, its meaning)
        elif len(t) >= 3:
            out.append(t)
    return out, blocks


# reStructuredText's code: the indented block after one of these directives, or after a
# paragraph ending "::" (not a directive: ".. note::" holds prose).
_RST_CODE = re.compile(r"\.\.\s+(code-block|code|sourcecode|doctest|testcode|testsetup)::", re.I)
_RST_DIRECTIVE = re.compile(r"\.\.\s+[\w:-]+::\s*$")  # no argument: ".. note::"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _rst_literals(lines: list[str]) -> tuple[list[str], list[str]]:
    """The lines with reStructuredText's literal blocks, code directives and doctest paragraphs
    (">>>") blanked, and those blocks' code, dedented: quoted as code lines, not as prose
    sentences ("@retry(stop=stop_after_delay(10))" with no backticks, the directive line)."""
    out, blocks, n, i = list(lines), [], len(lines), 0
    while i < n:
        t = lines[i].strip()
        if t.startswith(">>>"):
            j = i
            while j < n and lines[j].strip():
                j += 1
            blocks.append("\n".join(ln.strip() for ln in lines[i:j]))
            out[i:j] = [""] * (j - i)
            i = j
            continue
        directive = _RST_CODE.match(t)
        if not (directive or (t.endswith("::") and not t.startswith(".."))):
            if _RST_DIRECTIVE.match(t):
                out[i] = ""  # ".. note::": its content is prose, the line itself is not
            i += 1
            continue
        base, j = _indent(lines[i]), i + 1
        if directive:
            out[i] = ""
            while j < n and lines[j].strip().startswith(":") and _indent(lines[j]) > base:
                out[j] = ""  # the directive's options (":linenos:")
                j += 1
        while j < n and not lines[j].strip():
            j += 1
        k = j
        while k < n and (not lines[k].strip() or _indent(lines[k]) > base):
            k += 1
        while k > j and not lines[k - 1].strip():
            k -= 1
        if k > j:
            blocks.append(textwrap.dedent("\n".join(lines[j:k])))
            out[j:k] = [""] * (k - j)
        i = max(k, i + 1)
    return out, blocks


_FENCE_LINE = re.compile(r"^\s*(```|~~~)")
_TABLE_RULE = re.compile(r"^[|\s:-]+$")
_COMMENT = re.compile(r"^\s*(#|//|/\*+|\*(?!\*))\s?")


def _comment_sentences(lines: list[str]) -> list[str]:
    """The sentences of a code block's comments; a code line ends a comment's paragraph."""
    text = [_COMMENT.sub("", ln).rstrip(" */") if _COMMENT.match(ln) else "" for ln in lines]
    return [u.text.strip() for u in prose_units(text, 1) if len(u.text.strip()) >= 3]


def _sentences(src: Source) -> list[str]:
    if src.collection == "code":
        return _code_quotes(_body(src), src.symbol)
    return _prose_and_blocks(src)[0]


_DEFINITION = re.compile(
    r"\s*(async\s+)?(def|class|func|fn|function|pub|public|private|static|export|interface|"
    r"struct|impl|module)\b"
)
_SIGNATURE_CHARS = 200


def _closing(s: str, start: int) -> int:
    """Index of the bracket that closes the one at ``start``, or -1."""
    depth = 0
    for i in range(start, len(s)):
        if s[i] in "([":
            depth += 1
        elif s[i] in ")]":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _signature(lines: list[str]) -> str:
    """A definition's header as one line: joined over the lines its brackets span (a
    one-parameter-per-line signature), no further. A long one keeps its end after the
    parameter list — the return type is what people ask about."""
    sig_lines = []
    depth = 0
    for ln in lines[:24]:
        t = ln.strip()
        sig_lines.append(t)
        depth += sum(t.count(c) for c in "([") - sum(t.count(c) for c in ")]")
        if depth <= 0:
            break
    sig = " ".join(" ".join(sig_lines).split()).replace("( ", "(").replace(" )", ")")
    sig = sig.replace(",)", ")").rstrip(":{ ")  # a trailing comma of a one-per-line list
    if len(sig) <= _SIGNATURE_CHARS:
        return sig
    close = _closing(sig, sig.find("(")) if "(" in sig else -1
    tail = sig[close:] if close > 0 else ""
    if 1 < len(tail) < _SIGNATURE_CHARS // 3:
        return clip(sig[:close], _SIGNATURE_CHARS - len(tail) - 1) + " " + tail
    return clip(sig, _SIGNATURE_CHARS)


def _code_quotes(body: str, symbol: str | None = None) -> list[str]:
    """For code: the definition line and the docstring/comment sentences. A method's chunk
    starts with its class's header as context; the quote is the method's own definition."""
    lines = [ln for ln in body.splitlines() if ln.strip()]
    out = []
    defs = [i for i, ln in enumerate(lines) if _DEFINITION.match(ln)]
    if defs:
        start = defs[0]
        name = re.split(r"\.|::|#", symbol)[-1] if symbol else ""
        if name:
            own = [i for i in defs if re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", lines[i])]
            start = own[0] if own else start
        out.append(f"`{_signature(lines[start:])}`")
    doc = re.search(r'"""(.*?)"""|\'\'\'(.*?)\'\'\'', body, re.S)
    comment = doc.group(1) or doc.group(2) if doc else None
    if comment is None:
        cl = [
            re.sub(r"^\s*(#|//[/!]?|/\*+|\*)\s?", "", ln)  # Rust's /// and //! too
            for ln in lines
            if re.match(r"\s*(#|//|/\*|\*)", ln)
        ]
        comment = " ".join(cl) if cl else None
    if comment:
        out.extend(u.text for u in prose_units(comment.strip().splitlines(), 1) if u.text.strip())
    if not out and lines:  # module-level code with neither a definition nor a comment
        out.append(f"`{lines[0].strip()}`")
    return out


# Code lines that tend to hold an answer: a raised error, a default, an environment variable,
# a return, a string literal (messages, names, keys).
_ANSWER_LINE = re.compile(
    r"\b(raise|throw|panic|errors?\.New|fmt\.Errorf|return|default|environ|getenv|process\.env|"
    r"ENV\b|os\.Getenv)\b|=\s*\S|[\"'`][^\"'`]{3,}[\"'`]"
)
_TRIVIAL_LINE = re.compile(r"^[\s{}()\[\];,]*$|^\s*(import|from|package|use|#include)\b")
CODE_LINES = 12  # answer-bearing lines of a code source considered for quoting
# Quoted per code source: its definition, its docstring's opening and this many of the lines that
# hold the answer. One line missed the identifier a question asked about in the lines the source
# held (the dev sets' tuning halves: the answer's own text held 0.592 of the expected facts, with
# two lines 0.633; benchmarks/results/devsets/RESULTS.md, 2026-12-05, fourth session).
ANSWER_LINES = 2
# The first source — the one retrieval is surest of, always quoted — gets one more quote (a
# sentence, or a code line): 0.633 → 0.665 there, the answer 4% longer.
FIRST_SOURCE_EXTRA = 1
UNITS_PER_SOURCE = 10  # quotable units of a source scored by embedding (the best by words)


def _code_lines(body: str, qterms: set[str], skip: int = 1) -> list[str]:
    """A code chunk's lines that may hold the answer: those sharing words with the question,
    then raises, defaults, returns, environment variables and string literals. ``skip``: the
    leading lines not offered (a chunk's definition line: its signature is quoted anyway)."""
    out: list[tuple[int, str]] = []
    for ln in body.splitlines()[skip:]:
        t = ln.strip()
        if len(t) < 4 or _TRIVIAL_LINE.match(t) or t.startswith(("#", "//", "*", "/*", '"""')):
            continue
        shared = len(set(terms(t)) & qterms)
        if shared or _ANSWER_LINE.search(t):
            out.append((shared, t))
    out.sort(key=lambda x: -x[0])  # stable: file order among equals
    return [f"`{clip(t, 160)}`" for _, t in out[:CODE_LINES]]


@dataclass
class _Quote:
    source: int  # index into the retrieval's sources
    pos: int  # order within its source
    text: str
    words: float  # idf-weighted words shared with the question
    cos: float = 0.0  # embedding similarity to the question (0 without a similarity)
    signature: bool = False
    line: bool = False  # a code line (``_code_lines``), wrapped in backticks here


class ExtractiveAnswerer:
    """Quotes, per source, what answers the question best, each with its citation.

    Each source offers its sentences (docs, issues) or its definition, docstring and the code
    lines that may hold the answer (code). With a ``similarity`` (the instance's multilingual
    embedder: a Spanish question finds the English sentence that answers it) they are scored by
    it, with words shared with the question as a tie-break; without one, by the words alone.
    The first source, always quoted, gets one quote more than the others
    (``FIRST_SOURCE_EXTRA``). Up to ``max_sources`` sources are cited, in retrieval order; a
    source whose best quote is far less similar to the question than the best source's
    (``drop_margin``) is left out — never the first, and never for a bug report
    (``route["localize"]``): its sources are the files most likely to hold the bug, which a
    quote's likeness to the report does not judge."""

    name = "extractive"

    def __init__(
        self,
        max_sources: int = 6,
        per_source: int = 2,
        similarity: Similarity | None = None,
        drop_margin: float = 0.08,
    ) -> None:
        self.max_sources = max_sources
        self.per_source = per_source
        self.similarity = similarity
        self.drop_margin = drop_margin

    async def answer(
        self,
        question: str,
        retrieval: Retrieval,
        conversation: list[Turn] | None = None,
        on_text: OnText | None = None,  # quotes arrive whole: never called
    ) -> Answer:
        sources = retrieval.sources
        lang = detect_language(question)
        if not sources:
            return Answer(
                text=phrase(lang, "nothing"),
                sources=[],
                route=retrieval.route,
                timings_ms=dict(retrieval.timings_ms),
                language=lang,
            )
        # A follow-up ("and its default?") is scored with the question it follows: what was
        # searched (resolved by the service), else resolved here.
        asked = retrieval.query or resolve_followup(question, conversation)
        qset = set(terms(asked))
        if (
            qset
            and not any(qset & set(terms(s.text)) for s in sources)
            and lang == (_sources_language(sources) or "en")
            and self.similarity is None
        ):
            # Same language, and not one question word anywhere in the sources: no answer.
            return no_answer(retrieval, lang, self.name)
        quotes = self._quotes(sources[: self.max_sources], qset)
        if self.similarity is not None and quotes:
            try:
                sims = await self.similarity([asked], [q.text.strip("`") for q in quotes])
            except Exception as e:  # the words alone still choose
                log.warning("quote similarity skipped: %s", type(e).__name__)
            else:
                for q, c in zip(quotes, sims[0], strict=True):
                    q.cos = float(c)
        by_source: dict[int, list[_Quote]] = {}
        for q in quotes:
            by_source.setdefault(q.source, []).append(q)
        best = {i: max(self._score(q) for q in qs) for i, qs in by_source.items()}
        top = max(best.values(), default=0.0)
        lines: list[str] = []
        drop = self.similarity is not None and not retrieval.route.get("localize")
        for i, src in enumerate(sources[: self.max_sources]):
            qs = by_source.get(i)
            if not qs:
                continue
            if lines and drop and best[i] < top - self.drop_margin:
                continue  # its best quote answers much less than the best source's
            chosen = self._choose(src, qs, FIRST_SOURCE_EXTRA if i == 0 else 0)
            python = (src.path or "").endswith((".py", ".pyi"))
            lines.append(f"• {label(src)}: {_shown(chosen, python)} [{i + 1}]")
        body = phrase(lang, "header") + "\n" + "\n".join(lines)
        evidence = snapshot(sources)
        text, kept, rep = finalize_citations(body, sources)
        return Answer(
            text=text,
            sources=kept,
            route=retrieval.route,
            timings_ms=dict(retrieval.timings_ms),
            backend=self.name,
            dropped_markers=rep.dropped_markers,
            language=lang,
            evidence=mark_cited(evidence, sources, kept),
        )

    def _score(self, q: _Quote) -> float:
        """Similarity first (when there is one), shared words as the tie-break."""
        return q.cos + 0.002 * q.words if self.similarity is not None else q.words

    def _quotes(self, sources: list[Source], qset: set[str]) -> list[_Quote]:
        per: list[list[_Quote]] = []
        for i, src in enumerate(sources):
            if src.collection == "code":
                units = _sentences(src)
                sig = min(1, len(units))
                code = _code_lines(_body(src), qset)
            else:
                units, blocks = _prose_and_blocks(src)
                sig = 0
                code = _code_lines("\n".join(blocks), qset, skip=0)
            units = list(dict.fromkeys(units))  # a line a section repeats is quoted once
            code = [u for u in dict.fromkeys(code) if u not in units]
            units += code
            if not units:  # nothing quotable (a bare heading): its first line, not silence
                body = [ln.strip() for ln in _body(src).splitlines()]
                first = next((t for t in body if t and not _FENCE_LINE.match(t)), "")
                units = [clip(first, 160)] if first else []
            lines = set(code)
            per.append([_Quote(i, pos, u, 0.0, signature=pos < sig and src.collection == "code",
                               line=u in lines) for pos, u in enumerate(units)])  # fmt: skip
        # Rarer question terms weigh more: idf over the units at hand.
        n = max(sum(len(qs) for qs in per), 1)
        df: dict[str, int] = {}
        for qs in per:
            for q in qs:
                for t in set(terms(q.text)) & qset:
                    df[t] = df.get(t, 0) + 1
        out: list[_Quote] = []
        for qs in per:
            for q in qs:
                ts = set(terms(q.text)) & qset
                q.words = sum(math.log(1 + n / df.get(t, 1)) for t in ts) - 0.01 * q.pos
            # What the embedder scores: each source's best units by words, its opening ones.
            keep = sorted(qs, key=lambda q: (-q.words, q.pos))[:UNITS_PER_SOURCE]
            keep += [q for q in qs[:2] if q not in keep]
            out.extend(sorted(keep, key=lambda q: q.pos))
        return out

    def _choose(self, src: Source, qs: list[_Quote], extra: int = 0) -> list[_Quote]:
        """A source's quotes, in its own order; ``extra``: more than a source's usual share
        (the first source's)."""
        ranked = sorted(qs, key=lambda q: -self._score(q))
        if src.collection == "code":
            # What it is (the definition), what it does (its docstring's opening), and the lines
            # that answer (a raise, a default, a return …) when some do.
            head = [q for q in qs if q.signature][:1]
            doc = [q for q in qs if not q.signature and not q.text.startswith("`")][:1]
            # A line the quotes above already show (a parameter of the joined signature, a
            # docstring line) is not quoted twice.
            shown = " ".join(q.text.strip("`") for q in head + doc)
            lines = [q for q in ranked if q.text.startswith("`") and q not in head
                     and q.text.strip("`").rstrip(",;") not in shown]  # fmt: skip
            if self.similarity is None:
                lines = [q for q in lines if q.words > 0]
            chosen = head + doc + lines[: ANSWER_LINES + extra]
        elif self.similarity is not None:
            chosen = ranked[: self.per_source + extra]
        else:
            # Sentences that share words with the question; with none (another language, or a
            # paraphrase) the source's opening sentence, which its rank vouches for.
            chosen = [q for q in ranked if q.words > 0][: self.per_source + extra] or [
                min(qs, key=lambda q: q.pos)
            ]
        return sorted(chosen, key=lambda q: q.pos)  # in the source's own order


def _shown(chosen: list[_Quote], python: bool = False) -> str:
    """A source's quotes as the answer shows them, their code spans paired: per run of adjacent
    sentences (a span the sentence splitter cut in two is whole again once they are joined), per
    code line otherwise. A code line shown unwrapped holds backticks of its own — a docstring's
    line, mostly —: its roles are shown as what they name, and in Python (where code has no
    backticks) its ``literals`` as `literals`."""
    runs: list[tuple[_Quote, str]] = []
    for q in chosen:
        if q.line:
            shown = _unwrapped(q.text)
            text = quote(shown, code=True)
            if shown != q.text:
                text = prose_markup(text, literals=python)
        else:
            text = quote(q.text)
        prev = runs[-1][0] if runs else None
        if prev is not None and not (q.line or prev.line) and q.pos == prev.pos + 1:
            runs[-1] = (q, f"{runs[-1][1]} {text}")
        else:
            runs.append((q, text))
    return " ".join(balance_ticks(text) for _, text in runs)


def _unwrapped(text: str) -> str:
    """A code line as the answer shows it: in backticks, unless it holds backticks of its own
    (reStructuredText's ``exc_info``, a template literal) — wrapped, those made runs like
    "```exc_info``" that chat clients render as a code block running on to the next quote;
    unwrapped, its own backticks mark its code."""
    inner = text[1:-1] if len(text) > 2 and text[0] == text[-1] == "`" else ""
    return inner if "`" in inner else text


def _sources_language(sources: list[Source]) -> str | None:
    prose = [s.text for s in sources[:4] if s.collection != "code"]
    return detect_language(" ".join(prose)[:4000]) if prose else None
