"""The language of a question, so that an answer follows it.

Simple on purpose: script-unique alphabets first, then which language's function words (and
marks such as ``¿`` or ``ã``) the text uses most. Identifiers (``parse_config``) and capitalised
names don't count, so an English question about Spanish-named code stays English.
"""

from __future__ import annotations

import re

LANGUAGE_NAMES = {
    "en": "English", "es": "Spanish", "fr": "French", "de": "German", "pt": "Portuguese",
    "it": "Italian", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "el": "Greek",
    "he": "Hebrew", "th": "Thai",
}  # fmt: skip


# Frequent function words: a text's language is the list it hits most.
_FUNCTION_WORDS = {
    "en": """the is are was what how does do did where which why when who can could should would
        and of to in it its this that with for from an a i my you your there be been have has not
        default about use""",
    "es": """el la los las es son qué que cómo como dónde donde cuál cuáles cual por para con un
        una unos y de del en se su sus hay está están puedo cuando cuándo porque lo al le
        pero también sobre tiene hace""",
    "fr": """le la les est sont quel quelle quels comment où pourquoi avec un une des du de et en
        pour que qui ce cette je vous il elle ne pas sur dans""",
    "de": """der die das ist sind wie wo warum welche welcher welches mit ein eine und zu von für
        nicht ich sie es auf den dem wird kann im bei""",
    "pt": """o os as é são como onde qual quais não com um uma do da dos das em para por que se sua
        seu está posso você também""",
    "it": """il lo gli le è sono come dove perché quale quali con un una e di del della per che
        non si posso anche nel""",
}


_WORDSETS = {lang: set(ws.split()) for lang, ws in _FUNCTION_WORDS.items()}


_MARKS = {"es": "¿¡ñ", "pt": "ãõç", "fr": "çœêèàù", "de": "äöüß", "it": "òìè"}


_LOWER_WORD = re.compile(r"[a-zà-ÿœß]+")
# A word joined to an identifier: after '_' or '.', or before '_', '.' or '(' (parse_config,
# os.path, run()).
_PIECE = re.compile(r"(?<=[_.])[a-zà-ÿœß]+|[a-zà-ÿœß]+(?=[_.(])")


_SCRIPTS = [  # script-unique languages only; Cyrillic or Arabic script alone does not say which
    ("ko", re.compile(r"[\uac00-\ud7af]")),
    ("ja", re.compile(r"[\u3040-\u30ff]")),
    ("zh", re.compile(r"[\u4e00-\u9fff]")),
    ("el", re.compile(r"[\u0370-\u03ff]")),
    ("he", re.compile(r"[\u0590-\u05ff]")),
    ("th", re.compile(r"[\u0e00-\u0e7f]")),
]


def detect_language(text: str) -> str | None:
    """ISO 639-1 code of the text's language, or None when it can't tell.

    Simple on purpose: script-unique alphabets first, then which language's function words
    (and marks such as ``¿`` or ``ã``) the text uses most. Identifiers (``parse_config``) and
    capitalised names don't count, so an English question about Spanish-named code stays English.
    """
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return None
    for lang, rx in _SCRIPTS:
        if len(rx.findall(text)) >= max(1, len(letters) // 4):
            return lang
    pieces = set(_PIECE.findall(text))  # words that are part of an identifier: one pass
    words = [w for w in _LOWER_WORD.findall(text) if w not in pieces]
    scores = {lang: sum(w in ws for w in words) for lang, ws in _WORDSETS.items()}
    for lang, marks in _MARKS.items():
        scores[lang] += sum(text.count(m) for m in marks)
    best = max(scores, key=lambda lang: scores[lang])  # ties: the order of _FUNCTION_WORDS
    return best if scores[best] > 0 else None


def language_name(lang: str | None) -> str | None:
    return LANGUAGE_NAMES.get(lang or "")
