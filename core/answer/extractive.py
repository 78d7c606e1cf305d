"""Answers with citations that hold.

:func:`finalize_citations` is the single place where ``[n]`` markers are checked: markers that
point at no source are removed (and counted), sources never cited are dropped, and the rest are
renumbered 1..n in order of first use. Every answerer goes through it.

The default :class:`ExtractiveAnswerer` needs no language model: it quotes the sentences of the
top sources that best match the question, each followed by its citation number. Its own words
(the header, "the sources don't contain the answer") follow the question's language where it
has them (English, Spanish); quotations stay as the sources wrote them.

:func:`no_answer` is how every answerer says the sources don't contain the answer: plainly, with
the closest sources cited so a person can look for themselves.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Protocol

from core.answer.prompt import detect_language, resolve_followup
from core.chunk.text import prose_units
from core.lexical import STOP, parts
from core.models import MARKER, Answer, Retrieval, Source, Turn

# Code spans and fences: a "[0]" there is an index, not a citation.
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


@dataclass
class CitationReport:
    dropped_markers: int = 0
    dropped_sources: int = 0


def finalize_citations(
    text: str, sources: list[Source]
) -> tuple[str, list[Source], CitationReport]:
    """Renumber ``[n]`` markers (1-based into ``sources``) by first use; drop bad markers and
    uncited sources."""
    report = CitationReport()
    order: list[int] = []

    def visit(m: re.Match[str]) -> str:
        i = int(m.group(1)) - 1
        if not 0 <= i < len(sources):
            report.dropped_markers += 1
            return ""
        if i not in order:
            order.append(i)
        return f"[{order.index(i) + 1}]"

    pieces = []
    last = 0
    for m in _CODE.finditer(text):
        pieces.append(MARKER.sub(visit, text[last : m.start()]))
        pieces.append(m.group(0))
        last = m.end()
    pieces.append(MARKER.sub(visit, text[last:]))
    new_text = "".join(pieces)
    new_text = re.sub(r"\[(\d+)\](?:\s*\[\1\])+", r"[\1]", new_text)  # "[1][1]" -> "[1]"
    new_text = re.sub(r"[ \t]+([.,;:])", r"\1", new_text).strip()
    kept = []
    for n, i in enumerate(order, start=1):
        s = sources[i]
        s.n = n
        kept.append(s)
    report.dropped_sources = len(sources) - len(kept)
    return new_text, kept, report


def snapshot(sources: list[Source]) -> list[Source]:
    """Copies of the sources an answerer is about to see: its evidence."""
    return [replace(s, n=0) for s in sources]


def mark_cited(evidence: list[Source], shown: list[Source], kept: list[Source]) -> list[Source]:
    """Give each evidence copy the citation number its original got (0: not cited)."""
    for e, o in zip(evidence, shown, strict=True):
        e.n = o.n if any(o is k for k in kept) else 0
    return evidence


_TEXTS = {
    "en": {
        "header": "From the indexed sources:",
        "nothing": "I found nothing in this instance's docs, code or issues that matches the "
        "question. Try naming a file, a function or an issue number.",
        "no_answer": "The indexed sources don't contain the answer to this question.",
        "closest": "The closest ones are",
    },
    "es": {
        "header": "Según las fuentes indexadas:",
        "nothing": "No encontré nada en la documentación, el código ni los issues de esta "
        "instancia que corresponda a la pregunta. Prueba a nombrar un archivo, una función o un "
        "número de issue.",
        "no_answer": "Las fuentes indexadas no contienen la respuesta a esta pregunta.",
        "closest": "Las más cercanas son",
    },
}


def phrase(lang: str | None, key: str) -> str:
    return _TEXTS.get(lang or "en", _TEXTS["en"])[key]


def no_answer(
    retrieval: Retrieval,
    lang: str | None,
    backend: str = "extractive",
    seen: tuple[list[Source], list[Source]] | None = None,
    closest: int = 3,
) -> Answer:
    """Say plainly that the sources don't contain the answer; cite and list the closest ones.

    ``seen`` is (the sources the answerer was shown, its evidence copies of them); default: all
    retrieved sources, whole."""
    shown = retrieval.sources[:closest]
    kept: list[Source] = []
    if not shown:
        text = phrase(lang, "nothing")
    else:
        refs = "; ".join(f"{_label(s)} [{i}]" for i, s in enumerate(shown, start=1))
        text, kept, _ = finalize_citations(
            f"{phrase(lang, 'no_answer')} {phrase(lang, 'closest')}: {refs}.", shown
        )
    originals, evidence = seen or (retrieval.sources, snapshot(retrieval.sources))
    return Answer(
        text=text, sources=kept, route=retrieval.route, timings_ms=dict(retrieval.timings_ms),
        backend=backend, no_answer=True, language=lang,
        evidence=mark_cited(evidence, originals, kept),
    )  # fmt: skip


class Answerer(Protocol):
    name: str

    async def answer(
        self, question: str, retrieval: Retrieval, conversation: list[Turn] | None = None
    ) -> Answer: ...


_WORD = re.compile(r"[A-Za-zÀ-ÿ_][A-Za-zÀ-ÿ0-9_]*")


def terms(text: str) -> list[str]:
    """Lower-cased words, identifiers split too (``parse_config``/``parseConfig`` → parse, config),
    stop words removed, crude plural folding. Splitting and stop words are lexical search's."""
    out: list[str] = []
    for w in _WORD.findall(text):
        ps = parts(w)
        for p in [w.lower(), *ps] if len(ps) > 1 else [w.lower()]:
            if len(p) < 2 or p in STOP:
                continue
            if len(p) > 4 and p.endswith("s") and not p.endswith("ss"):
                p = p[:-1]
            out.append(p)
    return out


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


def clip(s: str, n: int = 320) -> str:
    """One line of at most ``n`` characters, cut at a word boundary with an ellipsis."""
    s = " ".join(s.split())
    if len(s) <= n:
        return s
    cut = s[:n].rsplit(" ", 1)[0]
    return cut + " …"


def quote(s: str, n: int = 320) -> str:
    """Source text to quote in an answer: clipped, and any "[3]" of its own turned into "［3］"
    so that it is never taken for one of our citation markers."""
    return MARKER.sub(lambda m: f"［{m.group(1)}］", clip(s, n))


class ExtractiveAnswerer:
    """Quotes the best-matching sentences of the top sources, each with its citation."""

    name = "extractive"

    def __init__(self, max_sources: int = 4, per_source: int = 2) -> None:
        self.max_sources = max_sources
        self.per_source = per_source

    async def answer(
        self, question: str, retrieval: Retrieval, conversation: list[Turn] | None = None
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
        # A follow-up ("and its default?") is scored with the question it follows.
        q = terms(resolve_followup(question, conversation))
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
            label = _label(src)
            lines.append(f"• {label}: {quoted} [{i + 1}]")
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


def _label(src: Source) -> str:
    if src.collection == "issues":
        return src.title
    if src.collection == "code":
        return f"{src.path} ({src.symbol})" if src.symbol else f"{src.path}"
    return f"{src.path} › {src.title}" if src.title != src.path else f"{src.path}"
