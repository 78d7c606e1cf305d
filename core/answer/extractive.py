"""The default answerer, no language model: :class:`ExtractiveAnswerer` quotes the sentences of
the top sources that best match the question, each followed by its citation number
(``citations.py`` checks and renumbers them). Its own words (the header, "the sources don't
contain the answer") follow the question's language where it has them (English, Spanish);
quotations stay as the sources wrote them. Code sources are quoted by their definition line and
docstring.
"""

from __future__ import annotations

import math
import re

from core.answer.base import OnText
from core.answer.citations import (
    clip,
    finalize_citations,
    label,
    mark_cited,
    no_answer,
    phrase,
    quote,
    snapshot,
)
from core.chunk.text import prose_units
from core.lexical import terms
from core.models import Answer, Retrieval, Source, Turn
from core.retrieve.followup import resolve_followup
from core.retrieve.language import detect_language


def _sentences(src: Source) -> list[str]:
    body = src.text.split("\n", 1)[1] if "\n" in src.text else src.text
    if src.collection == "code":
        return _code_quotes(body, src.symbol)
    lines = body.splitlines()
    if src.collection == "issues" and lines and re.match(r"(Issue|PR) · ", lines[0]):
        lines = lines[1:]  # the "Issue · state · labels" line of a thread's first piece
    out = []
    for u in prose_units(lines, 1):
        t = u.text.strip()
        if t.startswith(("```", "~~~", "|")) or len(t) < 3:
            continue
        out.append(t)
    return out


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
            re.sub(r"^\s*(#|//|/\*+|\*)\s?", "", ln)
            for ln in lines
            if re.match(r"\s*(#|//|/\*|\*)", ln)
        ]
        comment = " ".join(cl) if cl else None
    if comment:
        out.extend(u.text for u in prose_units(comment.strip().splitlines(), 1) if u.text.strip())
    if not out and lines:  # module-level code with neither a definition nor a comment
        out.append(f"`{lines[0].strip()}`")
    return out


class ExtractiveAnswerer:
    """Quotes the best-matching sentences of the top sources, each with its citation."""

    name = "extractive"

    def __init__(self, max_sources: int = 4, per_source: int = 2) -> None:
        self.max_sources = max_sources
        self.per_source = per_source

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
        q = terms(retrieval.query or resolve_followup(question, conversation))
        qset = set(q)
        # Rarer question terms weigh more: idf over the sentences at hand.
        all_sents = [(i, s) for i, src in enumerate(sources) for s in _sentences(src)]
        df: dict[str, int] = {}
        for _, s in all_sents:
            for t in set(terms(s)):
                if t in qset:
                    df[t] = df.get(t, 0) + 1
        n_s = max(len(all_sents), 1)
        if (
            qset
            and not any(qset & set(terms(s.text)) for s in sources)
            and lang == (_sources_language(sources) or "en")
        ):
            # Same language, and not one question word anywhere in the sources: no answer.
            return no_answer(retrieval, lang, self.name)
        lines: list[str] = []
        used = 0
        for i, src in enumerate(sources):
            if used >= self.max_sources:
                break
            sents = _sentences(src)
            if not sents:
                continue
            scored = []
            for pos, s in enumerate(sents):
                ts = set(terms(s))
                overlap = sum(math.log(1 + n_s / df.get(t, 1)) for t in ts & qset)
                scored.append((overlap - 0.01 * pos, pos, s))
            scored.sort(reverse=True)
            # Keep sentences that share words with the question; with none (another language,
            # or a paraphrase) quote the source's opening sentence, which its rank vouches for.
            best = [x for x in scored if x[0] > 0][: self.per_source] or [
                min(scored, key=lambda x: x[1])
            ]
            if src.collection == "code":
                # A definition is quoted with what its docstring says it does.
                for x in scored:
                    if x[1] <= 1 and x not in best:
                        best.append(x)
            best.sort(key=lambda x: x[1])  # in the source's own order
            quoted = " ".join(quote(s) for _, _, s in best)
            lines.append(f"• {label(src)}: {quoted} [{i + 1}]")
            used += 1
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


def _sources_language(sources: list[Source]) -> str | None:
    prose = [s.text for s in sources[:4] if s.collection != "code"]
    return detect_language(" ".join(prose)[:4000]) if prose else None
