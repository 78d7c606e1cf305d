"""Follow-up questions in a conversation: "and its default?" is searched together with the
question it follows."""

from __future__ import annotations

import re

from core.models import Turn

# -- follow-up questions ------------------------------------------------------------------------
_FOLLOW_START = re.compile(
    r"^\s*[¿¡]?\s*(and|also|what about|how about|or|but|then|y|e|o|pero|también|y qué|"
    r"et|und|oder|ou|anche|e quanto)\b",
    re.I,
)


_ANAPHORA = set(
    """it its it's that this those these them they their there one ones same
    su sus eso esto ese esa esos esas ello él ella lo mismo misma
    ça cela celui elle son sa ses ihn ihr dessen dabei dele dela isso isto esso""".split()
)


_WORDS = re.compile(r"[\w']+", re.U)


def is_followup(question: str) -> bool:
    """Does the question lean on an earlier turn ("and its default?", "¿y en Windows?")?"""
    words = [w.lower() for w in _WORDS.findall(question)]
    if not words:
        return False
    if _FOLLOW_START.match(question):
        return True
    return len(words) <= 6 and any(w in _ANAPHORA for w in words)


def resolve_followup(question: str, conversation: list[Turn] | None) -> str:
    """The retrieval query for a question in a conversation.

    A follow-up is searched together with the question it follows (resolved the same way, so a
    chain "what does X do?" → "and its default?" → "¿y en Windows?" keeps X); any other question
    is searched as it is. The model still sees the earlier turns themselves.
    """
    if not conversation or not is_followup(question):
        return question
    context: str | None = None
    for turn in conversation:
        q = turn.question.strip()
        context = f"{context} {q}" if context and is_followup(q) else q
    assert context is not None
    words = context.split()
    if len(words) > 60:  # keep the query about the latest topic
        context = " ".join(words[-60:])
    return f"{context} {question.strip()}"
