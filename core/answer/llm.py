"""Answers written by a language model and held to their citations.

:class:`LLMAnswerer` builds the prompt (``prompt.py``), calls the model (``chat.py``) and then
checks what came back: ``NO_ANSWER`` becomes the plain "the sources don't contain the answer"
with the closest sources; citations go through :func:`~core.answer.citations.finalize_citations`;
each sentence goes through the support check (``support.py``). If the model is down — or its
reply cites nothing, so nothing in it can be verified — the person gets the extractive answer
with its sources and a one-line note.

Streaming: given ``on_text``, the model's reply is streamed to it as a *preview*: the raw reply,
before citations are renumbered and checked; the :class:`Answer` returned at the end is built
exactly as without streaming, and is what a face must show last. An ``on_text`` that raises is
logged and not called again, and never costs the answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from core.answer.base import Answerer, OnText
from core.answer.chat import ChatModel, make_chat
from core.answer.citations import finalize_citations, mark_cited, no_answer
from core.answer.extractive import ExtractiveAnswerer
from core.answer.prompt import build_context, is_no_answer
from core.answer.support import Similarity, check_support
from core.config import LLMConfig
from core.errors import LLMError
from core.models import Answer, Retrieval, Turn
from core.retrieve.language import detect_language

log = logging.getLogger(__name__)


class LLMAnswerer:
    """Answers written by a model from the numbered sources, checked before anyone sees them."""

    def __init__(
        self,
        model: ChatModel,
        cfg: LLMConfig,
        repo: str = "",
        similarity: Similarity | None = None,
        fallback: Answerer | None = None,
    ) -> None:
        self.model = model
        self.cfg = cfg
        self.repo = repo
        self.similarity = similarity
        self.fallback = fallback or ExtractiveAnswerer(similarity=similarity)
        self.name = model.label

    async def answer(
        self,
        question: str,
        retrieval: Retrieval,
        conversation: list[Turn] | None = None,
        on_text: OnText | None = None,
    ) -> Answer:
        """The checked answer. With ``on_text`` the reply is streamed to it as a preview; the
        returned answer is the same as without (citations renumbered, support checked)."""
        lang = detect_language(question)
        if not retrieval.sources:
            return await self.fallback.answer(question, retrieval, conversation)
        ctx = build_context(
            question, retrieval.sources, conversation,
            lang=lang, max_tokens=self.cfg.max_context_tokens, repo=self.repo,
        )  # fmt: skip
        log.debug("prompt: %d sources (%d left out, %s cut), ~%d tokens",
                  len(ctx.sources), ctx.dropped, ctx.cut, ctx.tokens)  # fmt: skip
        t = time.perf_counter()
        try:
            if on_text is None:
                reply = await self.model.complete(ctx.system, ctx.messages)
            else:
                reply = await self.model.complete(ctx.system, ctx.messages, _guarded(on_text))
        except LLMError as e:
            return await self._fall_back(question, retrieval, conversation, f"{e}")
        ms = (time.perf_counter() - t) * 1000
        if is_no_answer(reply):
            ans = no_answer(retrieval, lang, self.name, seen=(ctx.sources, ctx.evidence))
        else:
            text, kept, rep = finalize_citations(reply, ctx.sources)
            if not kept:
                return await self._fall_back(
                    question, retrieval, conversation,
                    f"{self.model.label}: the reply cited none of the sources, so it is not shown",
                )  # fmt: skip
            evidence = mark_cited(ctx.evidence, ctx.sources, kept)
            cited = sorted((e for e in evidence if e.n), key=lambda e: e.n)
            support = await check_support(text, cited, self.similarity)
            ans = Answer(
                text=text, sources=kept, route=retrieval.route,
                timings_ms=dict(retrieval.timings_ms), backend=self.name,
                unsupported=[s.text for s in support.unsupported],
                dropped_markers=rep.dropped_markers, language=lang, evidence=evidence,
            )  # fmt: skip
            if rep.dropped_markers:
                log.info("%s: removed %d citation(s) to no source", self.name, rep.dropped_markers)
        ans.timings_ms["llm"] = ms
        return ans

    async def _fall_back(
        self, question: str, retrieval: Retrieval, conversation: list[Turn] | None, why: str
    ) -> Answer:
        ans = await self.fallback.answer(question, retrieval, conversation)
        ans.note = f"{why} — showing the extractive answer instead."
        return ans


def _guarded(on_text: OnText) -> OnText:
    """``on_text`` that logs its first failure and is then skipped: a preview never costs the
    answer."""
    broken = False

    async def call(text: str) -> None:
        nonlocal broken
        if broken:
            return
        try:
            await on_text(text)
        except Exception:
            broken = True
            log.warning("streaming preview failed; the answer is still coming", exc_info=True)

    return call


def make_answerer(
    cfg: LLMConfig,
    repo: str = "",
    similarity: Similarity | None = None,
    env: Mapping[str, str] | None = None,
) -> Answerer:
    """The answerer an instance's ``llm`` settings ask for."""
    chat = make_chat(cfg, env)
    if chat is None:
        return ExtractiveAnswerer(similarity=similarity)
    log.info("answers by %s", chat.label)
    return LLMAnswerer(chat, cfg, repo, similarity)
