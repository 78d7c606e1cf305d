"""The answerer contract: every way of writing an answer (extractive, a language model) takes a
question with what retrieval found and returns an :class:`~core.models.Answer` whose citations
were checked (``citations.finalize_citations``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from core.models import Answer, Retrieval, Turn

OnText = Callable[[str], Awaitable[None]]  # receives the streamed reply so far (a preview)


class Answerer(Protocol):
    name: str

    async def answer(
        self,
        question: str,
        retrieval: Retrieval,
        conversation: list[Turn] | None = None,
        on_text: OnText | None = None,
    ) -> Answer:
        """The checked answer to ``question``. ``on_text``: where an answerer that streams (a
        language model) sends its reply so far, a preview — raw citation markers, nothing
        checked; the returned answer replaces it. An answerer that doesn't stream never calls
        it."""
        ...
