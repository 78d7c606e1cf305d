"""Code-aware lexical search: the tokens FTS5 indexes and the queries it runs.

Identifiers are written many ways: ``parse_config``, ``parseConfig``, ``ParseConfig``,
``parse-config``, "parse config"; dotted names (``click.core.Option``) and paths
(``src/click/core.py``) join words with punctuation. The *lexical form* of a text lists, for every
word-ish token, its lower-cased parts (split at ``_ . / - :`` and camelCase boundaries) and, for a
compound, the parts joined (``parseconfig``). A query is expanded the same way, so every spelling
meets every other: the parts match each other, and the joined form rewards the exact identifier.
The store indexes the lexical form and ranks by BM25 (``query_terms`` is what a question is
searched with); :func:`terms` compares texts word by word (answers, the support check).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

# Part of every build's stamp (``index/build.py``): bump it when ``lexical_form`` (or what it
# calls) gives other tokens for any text. A build keeps the forms of the chunks it carries over
# from the live one (the local store reuses them), so only a stamp that differs makes every
# build derive them again.
LEXICAL_VERSION = 1

_TOKEN = re.compile(r"[A-Za-zÀ-ÿ0-9_$]+(?:[./:\-][A-Za-zÀ-ÿ0-9_$]+)*")
_SPLIT = re.compile(r"[_./:\-$]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

STOP = frozenset(
    """a an the and or of to in on for with by at from is are was were be been being it its this
    that these those what which who whom whose how why where when do does did can could should
    would will shall may might must i you we they he she me my our your their there here as if
    then than so not no yes into about over under between via get set there any some all
    using use used
    el la los las un una unos unas y o de del al en con por para que qué cómo como cuál cuales
    cuáles dónde donde cuándo es son está están ser se su sus lo le les me mi mis tu tus este
    esta estos estas ese esa hay hace hacer puedo puede sobre entre""".split()
)


def parts(token: str) -> list[str]:
    """``parseConfig`` → [parse, config]; ``click.core.Option`` → [click, core, option]."""
    return list(_parts(token))


_REMEMBERED = 64  # longer tokens (a hash, a blob) are split each time, never kept


def _remembered(fn: Callable[[str], tuple[str, ...]]) -> Callable[[str], tuple[str, ...]]:
    """``fn`` with its results kept for tokens up to :data:`_REMEMBERED` characters (at most
    32,768 of them): a build's texts repeat the same identifiers and words, and splitting them
    was most of an index write's lexical work."""
    kept = functools.lru_cache(maxsize=1 << 15)(fn)
    return lambda token: kept(token) if len(token) <= _REMEMBERED else fn(token)


def _split(token: str) -> tuple[str, ...]:
    out: list[str] = []
    for piece in _SPLIT.split(token):
        out.extend(p.lower() for p in _CAMEL.split(piece) if p)
    return tuple(out)


_parts = _remembered(_split)  # :func:`parts` as a tuple


def _expand_one(token: str) -> tuple[str, ...]:
    """One token's lexical tokens: its parts, then for a compound the parts joined."""
    ps = _parts(token)
    return (*ps, "".join(ps)) if len(ps) > 1 else ps


_expanded = _remembered(_expand_one)


def expand(text: str, *, keep_stop: bool = True) -> list[str]:
    """Lexical tokens of a text: parts of every token, plus the joined form of compounds."""
    out: list[str] = []
    if keep_stop:
        for tok in _TOKEN.findall(text):
            out.extend(_expanded(tok))
        return out
    for tok in _TOKEN.findall(text):
        ps = [p for p in _parts(tok) if p not in STOP]
        out.extend(ps)
        if len(ps) > 1:
            out.append("".join(ps))
    return out


def lexical_form(text: str) -> str:
    return " ".join(expand(text))


def query_terms(text: str, max_terms: int = 32) -> list[str]:
    """The lexical tokens a question is searched with: its expanded terms without stop words or
    one-letter tokens, first occurrence first, at most ``max_terms`` (BM25 does the weighing; the
    store turns them into its own query syntax)."""
    seen: list[str] = []
    for t in expand(text, keep_stop=False):
        if len(t) < 2 or t in seen:
            continue
        seen.append(t)
        if len(seen) >= max_terms:
            break
    return seen


_WORD = re.compile(r"[A-Za-zÀ-ÿ_][A-Za-zÀ-ÿ0-9_]*")


def terms(text: str, folded: bool = True) -> list[str]:
    """Lower-cased words, identifiers split too (``parse_config``/``parseConfig`` → parse, config),
    stop words removed, crude plural folding (:func:`fold`; ``folded=False``: the same words as
    written, one for one). Splitting and stop words are lexical search's; used to compare texts
    word by word (quotes, support, the fake embedder)."""
    out: list[str] = []
    for w in _WORD.findall(text):
        ps = parts(w)
        for p in [w.lower(), *ps] if len(ps) > 1 else [w.lower()]:
            if len(p) < 2 or p in STOP:
                continue
            out.append(fold(p) if folded else p)
    return out


def fold(word: str) -> str:
    """The crude plural folding of :func:`terms` (``options`` → ``option``; ``class`` kept)."""
    return word[:-1] if len(word) > 4 and word.endswith("s") and not word.endswith("ss") else word
