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
from dataclasses import dataclass

from core.answer.base import OnText
from core.answer.citations import (
    clip,
    finalize_citations,
    label,
    mark_cited,
    no_answer,
    passage_name,
    phrase,
    quote,
    snapshot,
)
from core.answer.markup import balance_ticks, prose_markup
from core.answer.quotable import body, code_lines, prose_and_blocks, sentences
from core.answer.support import Similarity
from core.chunk.code_langs import language_for_path
from core.chunk.text import FENCE
from core.lexical import terms
from core.models import Answer, Retrieval, Source, Turn
from core.retrieve.followup import resolve_followup
from core.retrieve.language import detect_language

log = logging.getLogger(__name__)


# Quoted per code source: its definition, its docstring's opening and this many of the lines that
# hold the answer. One line missed the identifier a question asked about in the lines the source
# held (the dev sets' tuning halves: the answer's own text held 0.592 of the expected facts, with
# two lines 0.633; benchmarks/results/devsets/RESULTS.md, 2026-12-05, fourth session).
ANSWER_LINES = 2
# The first source — the one retrieval is surest of, always quoted — gets one more quote (a
# sentence, or a code line): 0.633 → 0.665 there, the answer 4% longer.
FIRST_SOURCE_EXTRA = 1
UNITS_PER_SOURCE = 10  # quotable units of a source scored by embedding (the best by words)


@dataclass
class _Quote:
    source: int  # index into the retrieval's sources
    pos: int  # order within its source
    text: str
    words: float  # idf-weighted words shared with the question
    cos: float = 0.0  # embedding similarity to the question (0 without a similarity)
    signature: bool = False
    line: bool = False  # a code line (``_code_lines``), wrapped in backticks here
    part: int = 0  # 0: the source's own chunk; j: its j-th passage (``Source.passages``)


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
            and not any(qset & set(terms(t)) for s in sources for t in s.texts())
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
            python = (src.path or "").endswith((".py", ".pyi"))
            shown = self._parts(src, qs, FIRST_SOURCE_EXTRA if i == 0 else 0, python, lang)
            if not shown:  # neither it nor a passage offers a quote worth showing
                continue
            lines.append(f"• {label(src)}: {shown[0]} [{i + 1}]")
            # Each further passage's quote on its own line under it, cited like it.
            lines.extend(f"  ↳ {part} [{i + 1}]" for part in shown[1:])
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

    def _parts(
        self, src: Source, qs: list[_Quote], extra: int, python: bool, lang: str | None = None
    ) -> list[str]:
        """A source's quotes as shown, one text per part: its own chunk's, then each passage's
        that answers about as well as the source's best (by the drop margin; without a
        similarity, one sharing a word with the question), named by its symbol or heading."""
        own = [q for q in qs if q.part == 0]
        top = max((self._score(q) for q in own), default=None)
        out = [_shown(self._choose(src, own, extra), python)] if own else []
        parts = zip(src.passages, src.passage_sources(), strict=True)
        for j, (p, as_source) in enumerate(parts, start=1):
            pq = [q for q in qs if q.part == j]
            if not pq:
                continue
            best = max(self._score(q) for q in pq)
            if self.similarity is None and best <= 0:
                continue
            if self.similarity is not None and top is not None and best < top - self.drop_margin:
                continue
            chosen = self._choose(as_source, pq)
            out.append(
                f"{passage_name(src, p.title, p.symbol, p.lines(), lang)}: {_shown(chosen, python)}"
            )
        return [part for part in out if part]

    def _score(self, q: _Quote) -> float:
        """Similarity first (when there is one), shared words as the tie-break."""
        return q.cos + 0.002 * q.words if self.similarity is not None else q.words

    def _quotes(self, sources: list[Source], qset: set[str]) -> list[_Quote]:
        per: list[list[_Quote]] = []
        for i, part, src in (
            (i, j, p) for i, s in enumerate(sources)
            for j, p in enumerate([s, *s.passage_sources()])
        ):  # fmt: skip
            if src.collection == "code":
                units = sentences(src)
                sig = min(1, len(units))
                code = code_lines(body(src), qset, lang=language_for_path(src.path or ""))
            else:
                units, blocks = prose_and_blocks(src)
                sig = 0
                code = code_lines("\n".join(blocks), qset, skip=0)
            units = list(dict.fromkeys(units))  # a line a section repeats is quoted once
            code = [u for u in dict.fromkeys(code) if u not in units]
            units += code
            if not units:  # nothing quotable (a bare heading): its first line, not silence
                text = [ln.strip() for ln in body(src).splitlines()]
                first = next((t for t in text if t and not FENCE.match(t)), "")
                units = [clip(first, 160)] if first else []
            lines = set(code)
            sig_of = sig if src.collection == "code" else 0
            per.append([_Quote(i, pos, u, 0.0, signature=pos < sig_of, line=u in lines, part=part)
                        for pos, u in enumerate(units)])  # fmt: skip
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
            prose = [q for q in qs if not q.signature and not q.text.startswith("`")]
            # Its opening, and the sentence of its docstring or comments that best meets the
            # question when another does (its later lines are not offered as code lines).
            more = [q for q in ranked if q in prose[1:] and q.words > 0][:1]
            doc = prose[:1] + more
            # A line the quotes above already show (a parameter of the joined signature, a
            # docstring line, the definition line itself with its "{" or ":") is not quoted twice.
            shown = " ".join(q.text.strip("`") for q in head + doc)
            lines = [q for q in ranked if q.text.startswith("`") and q not in head
                     and q.text.strip("`").rstrip(",;:{ ") not in shown]  # fmt: skip
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
