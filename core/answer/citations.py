"""Citations that hold, and how every answerer says the sources don't contain the answer.

:func:`finalize_citations` is the single place where ``[n]`` markers are checked: markers that
point at no source are removed (and counted), sources never cited are dropped, and the rest are
renumbered 1..n in order of first use. Every answerer goes through it.

:func:`no_answer` is how every answerer says the sources don't contain the answer: plainly, with
the closest sources cited so a person can look for themselves. The answerers' own words follow
the question's language where they have them (:func:`phrase`: English, Spanish); quotations stay
as the sources wrote them (:func:`quote`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from core.answer.markup import balance_ticks, prose_markup
from core.models import Answer, Retrieval, Source, sub_markers

_GONE = "\x00"  # a dropped marker, until the space before it goes too
_GONE_SPACE = re.compile(rf"[ \t]*{_GONE}(?:[ \t]*(?=[.,;:]))?")


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
            return _GONE
        if i not in order:
            order.append(i)
        return f"[{order.index(i) + 1}]"

    new_text = sub_markers(visit, text)
    new_text = re.sub(r"\[(\d+)\](?:\s*\[\1\])+", r"[\1]", new_text)  # "[1][1]" -> "[1]"
    # Where a marker went, so does the space before it ("C [9]." -> "C."); nowhere else: the
    # quotes keep their own (":meth:`load`", Ruby's "option :force").
    new_text = _GONE_SPACE.sub("", new_text).strip()
    kept = []
    for n, i in enumerate(order, start=1):
        s = sources[i]
        s.n = n
        kept.append(s)
    report.dropped_sources = len(sources) - len(kept)
    return new_text, kept, report


def snapshot(sources: list[Source]) -> list[Source]:
    """Copies of the sources an answerer is about to see: its evidence (a source's passages in
    its text, as a model is shown them: what a judge checks the answer against)."""
    return [replace(s, n=0, text=s.full_text(), passages=[]) for s in sources]


def mark_cited(evidence: list[Source], shown: list[Source], kept: list[Source]) -> list[Source]:
    """Give each evidence copy the citation number its original got (0: not cited)."""
    for e, o in zip(evidence, shown, strict=True):
        e.n = o.n if any(o is k for k in kept) else 0
    return evidence


def clip(s: str, n: int = 320) -> str:
    """One line of at most ``n`` characters, cut at a word boundary with an ellipsis."""
    s = " ".join(s.split())
    if len(s) <= n:
        return s
    cut = s[:n].rsplit(" ", 1)[0]
    return cut + " …"


def quote(s: str, n: int = 320, code: bool = False) -> str:
    """Source text to quote in an answer: clipped, any "[3]" of its own outside code spans
    turned into "［3］" so that it is never taken for one of our citation markers (in a code span
    it is an index, kept as written: every reader of markers skips code, :func:`sub_markers`);
    prose (not ``code``) also in the markup chat clients read (:func:`prose_markup`). The
    answerer pairs its code spans (:func:`balance_ticks`) once it has joined adjacent
    sentences."""
    s = sub_markers(lambda m: f"［{m.group(1)}］", clip(s, n))
    return s if code else prose_markup(s)


_TEXTS = {
    "en": {
        "header": "From the indexed sources:",
        "nothing": "I found nothing in this instance's docs, code or issues that matches the "
        "question. Try naming a file, a function or an issue number.",
        "no_answer": "The indexed sources don't contain the answer to this question.",
        "closest": "The closest ones are",
        "lines": "lines",
        "later": "later in the thread",
    },
    "es": {
        "header": "Según las fuentes indexadas:",
        "nothing": "No encontré nada en la documentación, el código ni los issues de esta "
        "instancia que corresponda a la pregunta. Prueba a nombrar un archivo, una función o un "
        "número de issue.",
        "no_answer": "Las fuentes indexadas no contienen la respuesta a esta pregunta.",
        "closest": "Las más cercanas son",
        "lines": "líneas",
        "later": "más adelante en el hilo",
    },
}


# Lines the answerers write themselves, not claims about the repository: the support check
# (``support.py``) and so ``eval --judge`` skip them, in every language.
OWN_LINES = frozenset(t["header"] for t in _TEXTS.values())


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
        refs = "; ".join(f"{label(s)} [{i}]" for i, s in enumerate(shown, start=1))
        text, kept, _ = finalize_citations(
            f"{phrase(lang, 'no_answer')} {phrase(lang, 'closest')}: {refs}.", shown
        )
    originals, evidence = seen or (retrieval.sources, snapshot(retrieval.sources))
    return Answer(
        text=text, sources=kept, route=retrieval.route, timings_ms=dict(retrieval.timings_ms),
        backend=backend, no_answer=True, language=lang,
        evidence=mark_cited(evidence, originals, kept),
    )  # fmt: skip


def label(src: Source) -> str:
    """How an answer names a source: an issue's title, a code file and its symbol, a docs file
    and its heading path (code spans paired, as in quotes); in an instance over several
    repositories, its repository first (``client#42 …``, ``server: src/app.py``)."""
    own = _label(src)
    if not src.repo:
        return own
    return f"{src.repo}{own}" if own.startswith("#") else f"{src.repo}: {own}"


def passage_name(
    src: Source, title: str, symbol: str | None, lines: str, lang: str | None = None
) -> str:
    """How an answer names a passage of ``src`` on its line under the source's, in the answer's
    language: its symbol (code), its heading's last part (docs), "later in the thread" (issues)
    — with its lines."""
    if src.collection == "issues":
        return phrase(lang, "later")
    name = symbol if src.collection == "code" and symbol else title.split(" › ")[-1]
    name = balance_ticks(name) if name and name != src.path else ""
    where = f"{phrase(lang, 'lines')} {lines}"
    return f"{name} ({where})" if name else where


def _label(src: Source) -> str:
    if src.collection == "issues":
        return balance_ticks(src.title)
    if src.collection == "code":
        return f"{src.path} ({src.symbol})" if src.symbol else f"{src.path}"
    return f"{src.path} › {balance_ticks(src.title)}" if src.title != src.path else f"{src.path}"
