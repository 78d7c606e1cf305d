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


@cache
def _table() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(stem, English terms), longest stem first, over every language of the data file."""
    raw = yaml.safe_load(resources.files(__package__).joinpath("glossary.yaml").read_text("utf-8"))
    stems: dict[str, tuple[str, ...]] = {}
    for lang, table in (raw or {}).items():
        if not isinstance(table, dict):
            raise ValueError(f"glossary.yaml: {lang!r} must map stems to English terms")
        for stem, terms in table.items():
            stems[str(stem).lower()] = tuple(str(terms).split())
    return tuple(sorted(stems.items(), key=lambda kv: len(kv[0]), reverse=True))


def english_terms(question: str) -> list[str]:
    """English terms for the glossary words of a question (empty for English text)."""
    out: list[str] = []
    table = _table()
    for w in _WORD.findall(question.lower()):
        if len(w) < 4:
            continue
        for stem, terms in table:
            if w.startswith(stem) and (len(stem) >= 5 or w == stem or len(w) - len(stem) <= 3):
                out.extend(terms)
                break
    return list(dict.fromkeys(out))
