"""Non-English software vocabulary → English terms, for lexical search.

The embedding model is multilingual, but BM25 and exact matching are not: "¿cómo ejecuto las
pruebas?" shares no word with a README that says "run the tests". Questions are expanded with the
English terms of the software words they use: the terms join the lexical query, and are appended
in parentheses to the question that is embedded (see ``retrieve.Options``). The vocabulary is data,
``glossary.yaml`` beside this module (one section per language, stems → terms); it is general
software vocabulary, not tuned to any repository, and ``retrieval.glossary: false`` turns it off.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

import yaml

_WORD = re.compile(r"[^\W\d_]+")


Phrase = tuple[tuple[str, ...], tuple[str, ...]]


@cache
def _tables() -> tuple[tuple[Phrase, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Phrases (their words, English terms), longest first, and (stem, English terms), longest
    stem first, over every language of the data file. A key of several words is a phrase, matched
    word for word: it says what its words say together ("código de salida" is an exit code, not
    output), and its words then give nothing alone."""
    raw = yaml.safe_load(resources.files(__package__).joinpath("glossary.yaml").read_text("utf-8"))
    stems: dict[str, tuple[str, ...]] = {}
    phrases: dict[tuple[str, ...], tuple[str, ...]] = {}
    for lang, table in (raw or {}).items():
        if not isinstance(table, dict):
            raise ValueError(f"glossary.yaml: {lang!r} must map stems to English terms")
        for stem, terms in table.items():
            key, english = str(stem).lower(), tuple(str(terms).split())
            words = tuple(_WORD.findall(key))
            if len(words) > 1:
                phrases[words] = english
            else:
                stems[key] = english
    return (
        tuple(sorted(phrases.items(), key=lambda kv: len(kv[0]), reverse=True)),
        tuple(sorted(stems.items(), key=lambda kv: len(kv[0]), reverse=True)),
    )


def english_terms(question: str) -> list[str]:
    """English terms for the glossary words of a question (empty for English text)."""
    out: list[str] = []
    phrases, table = _tables()
    words = _WORD.findall(question.lower())
    i = 0
    while i < len(words):
        hit = next((p for p in phrases if tuple(words[i : i + len(p[0])]) == p[0]), None)
        if hit is not None:
            out.extend(hit[1])
            i += len(hit[0])
            continue
        w = words[i]
        i += 1
        if len(w) < 4:
            continue
        for stem, terms in table:
            if w.startswith(stem) and (len(stem) >= 5 or w == stem or len(w) - len(stem) <= 3):
                out.extend(terms)
                break
    return list(dict.fromkeys(out))
