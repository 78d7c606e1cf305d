"""Sentence-level support: does each sentence of an answer stand on the sources it cites?

For every sentence (a citation at the end of a paragraph covers the uncited sentences before it
in that paragraph):

- **numbers** — every number in the sentence must occur in a cited source (``thirty`` counts as
  30). A wrong number is unsupported whatever else overlaps.
- **lexical** — the share of the sentence's content words (identifiers split, stop words out,
  plurals folded, a shared 5-letter stem counts) found in the cited sources. Supported at
  ``>= lexical_min`` (0.5).
- **semantic** — only when the lexical check fails and a similarity function is given (the
  instance's embedding model, so it works across languages): the best cosine between the
  sentence and a cited source. Supported at ``>= semantic_min``.

A sentence with no citation (and none to inherit) that makes a claim (3+ content words) is
checked against all the cited sources of the answer and flagged when they don't carry it.

What this can't do: it measures overlap, not entailment. A sentence that reuses a source's words
to say something the source doesn't ("X is *not* the default [1]") passes; so does a reply that
copies an injected instruction's own words. It catches invented facts, wrong numbers and
citations to the wrong source — the common failures — and says which sentences to check.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from core.answer.citations import OWN_LINES
from core.lexical import terms
from core.models import MARKER, Source, markers
from core.retrieve.language import detect_language

log = logging.getLogger(__name__)

# (sentences, passages) -> cosine matrix, sentences × passages
Similarity = Callable[[list[str], list[str]], Awaitable[np.ndarray]]

LEXICAL_MIN = 0.5
# multilingual-e5-small, sentence as query ↔ source as passage, measured on 8 supported and 9
# unsupported (same-topic, invented) sentences, mostly Spanish against English docs: supported
# 0.80–0.885, unsupported 0.78–0.834. Embeddings can't tell a same-topic invention from a
# paraphrase, so this only rescues close paraphrases (2 of 8 there, no false rescue).
SEMANTIC_MIN = 0.86
CLAIM_MIN_TERMS = 3

_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?![\w])")
_SENTENCE = re.compile(r"\S.*?(?:[.!?。！？]+[\"'”’)\]*_`]*(?:\s*\[\d{1,3}\])*(?=\s|$)|$)", re.S)
_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "hundred": 100, "thousand": 1000,
    "cero": 0, "uno": 1, "una": 1, "dos": 2, "tres": 3, "cuatro": 4, "cinco": 5, "seis": 6,
    "siete": 7, "ocho": 8, "nueve": 9, "diez": 10, "veinte": 20, "treinta": 30, "cuarenta": 40,
    "cincuenta": 50, "sesenta": 60, "cien": 100, "mil": 1000,
}  # fmt: skip


@dataclass
class SentenceSupport:
    text: str  # the sentence as written, markers included
    cited: list[int]  # the citation numbers it relies on (own or inherited)
    lexical: float  # share of its content words found in the cited sources
    semantic: float | None = None  # best cosine with a cited source, when it was computed
    missing_numbers: list[str] = field(default_factory=list)
    supported: bool = True
    reason: str = ""  # why not: "wrong or unknown number", "low overlap", "no citation",
    # "other language than its source: not verified"


@dataclass
class SupportReport:
    sentences: list[SentenceSupport]

    @property
    def unsupported(self) -> list[SentenceSupport]:
        return [s for s in self.sentences if not s.supported]

    def score(self) -> float | None:
        """Share of checked sentences that are supported (None: nothing was claimed)."""
        if not self.sentences:
            return None
        return sum(s.supported for s in self.sentences) / len(self.sentences)


def split_sentences(text: str) -> list[list[str]]:
    """Paragraphs (blank-line or list-item separated) of sentences; code fences and headings
    are skipped."""
    paras: list[list[str]] = []
    current: list[str] = []
    fence = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        bullet = re.match(r"^([-*•]|\d+[.)])\s+", line)
        if not line or bullet or line.startswith("#"):
            if current:
                paras.append(current)
            current = []
            if bullet:
                line = line[bullet.end() :]
            elif line.startswith("#"):
                continue
        if line:
            current.extend(m.group(0).strip() for m in _SENTENCE.finditer(line))
    if current:
        paras.append(current)
    return [[s for s in p if s] for p in paras if p]


def _numbers(text: str) -> set[str]:
    out = {n.replace(",", ".") for n in _NUMBER.findall(MARKER.sub(" ", text))}
    return {n[:-2] if n.endswith(".0") else n for n in out}


def _source_numbers(text: str) -> set[str]:
    found = _numbers(text)
    for w in re.findall(r"[a-záéíóúñ]+", text.lower()):
        if w in _NUMBER_WORDS:
            found.add(str(_NUMBER_WORDS[w]))
    return found


class Vocab:
    """The words (and 5-letter stems) and numbers (number words included) of some texts."""

    def __init__(self, texts: list[str]) -> None:
        self.terms = {t for x in texts for t in terms(x)}
        self.stems = {t[:5] for t in self.terms if len(t) >= 5}
        self.numbers = {n for x in texts for n in _source_numbers(x)}

    @classmethod
    def union(cls, parts: list[Vocab]) -> Vocab:
        if len(parts) == 1:
            return parts[0]
        v = cls([])
        for p in parts:
            v.terms |= p.terms
            v.stems |= p.stems
            v.numbers |= p.numbers
        return v

    def has(self, term: str) -> bool:
        return term in self.terms or (len(term) >= 5 and term[:5] in self.stems)


def _content(sentence: str) -> list[str]:
    return list(dict.fromkeys(terms(MARKER.sub(" ", sentence))))


async def check_support(
    text: str,
    sources: list[Source],
    similarity: Similarity | None = None,
    lexical_min: float = LEXICAL_MIN,
    semantic_min: float = SEMANTIC_MIN,
) -> SupportReport:
    """Check every claim of ``text`` against ``sources`` (``[n]`` is ``sources[n-1]``, as after
    :func:`~core.answer.citations.finalize_citations`)."""
    vocab = {i: Vocab([s.text]) for i, s in enumerate(sources, start=1)}
    checked: list[SentenceSupport] = []
    for para in split_sentences(text):
        cites = [markers(s) for s in para]  # not a code span's `argv[0]`
        for j, sentence in enumerate(para):
            own = [n for n in cites[j] if n in vocab]
            inherited = next((c for c in cites[j + 1 :] if c), [])
            cited = own or [n for n in inherited if n in vocab]
            words = _content(sentence)
            if not cited and len(words) < CLAIM_MIN_TERMS:
                continue  # "Here is how:" — not a claim
            if not cited and sentence.strip() in OWN_LINES:
                continue  # the answerer's own header ("Según las fuentes indexadas:")
            merged = Vocab.union([vocab[n] for n in cited] if cited else list(vocab.values()))
            lex = sum(merged.has(w) for w in words) / len(words) if words else 1.0
            missing = sorted(_numbers(sentence) - merged.numbers)
            res = SentenceSupport(sentence, cited, lex, missing_numbers=missing)
            if missing:
                res.supported, res.reason = False, "wrong or unknown number"
            elif lex < lexical_min:
                res.supported, res.reason = False, "low overlap" if cited else "no citation"
                texts = [sources[n - 1].text for n in cited] if cited else [x.text for x in sources]
                if cited and _other_language(sentence, texts):
                    res.reason = "other language than its source: not verified"
            checked.append(res)
    if similarity is not None:
        await _semantic_rescue(checked, sources, similarity, semantic_min)
    return SupportReport(checked)


async def _semantic_rescue(
    checked: list[SentenceSupport],
    sources: list[Source],
    similarity: Similarity,
    semantic_min: float,
) -> None:
    """Second look, by embedding, at sentences that failed only for low word overlap (e.g. a
    Spanish answer citing English docs)."""
    todo = [s for s in checked if not s.supported and not s.missing_numbers]
    if not todo or not sources:
        return
    try:
        sims = await similarity([re.sub(r"\s*\[\d{1,3}\]", "", s.text).strip() for s in todo],
                                [s.text for s in sources])  # fmt: skip
    except Exception as e:  # the lexical verdict stands; say why in the log
        log.warning("semantic support check skipped: %s", type(e).__name__)
        return
    for row, s in zip(sims, todo, strict=True):
        cols = [n - 1 for n in s.cited] or list(range(len(sources)))
        s.semantic = float(max(row[c] for c in cols))
        if s.semantic >= semantic_min:
            s.supported, s.reason = True, ""


def _other_language(sentence: str, texts: list[str]) -> bool:
    mine = detect_language(MARKER.sub("", sentence))
    theirs = detect_language(" ".join(texts)[:4000])
    return mine is not None and theirs is not None and mine != theirs


def embedding_similarity(embed_query: Callable[[str], Awaitable[np.ndarray]],
                         embed_passages: Callable[[list[str]], Awaitable[np.ndarray]]
                         ) -> Similarity:  # fmt: skip
    """A :data:`Similarity` from an embedding service: sentences as queries, sources as passages
    (the source texts are the indexed chunk texts, so their vectors come from the cache)."""

    async def sim(sentences: list[str], passages: list[str]) -> np.ndarray:
        q = np.stack([await embed_query(s) for s in sentences])
        p = await embed_passages(passages)
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-9)
        p = p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-9)
        return np.asarray(q @ p.T)

    return sim
