"""Support-channel mode: in the channels named under ``support:`` in the serve settings, the bot
answers every new top-level question without being mentioned — on Discord also every new post
of a forum channel (each post is a thread) — but only when retrieval is confident: the top
source's fused score (``sources[0].score`` of ``ask --json``: the learned ranker's; for a question
searched alone in the repository it names, ``route.narrowed.first_score``, the first source's as
the whole instance ranked it: ``Retrieval.top_score``) is at least
``min_score``, and the answerer found the answer (an answer saying the sources don't hold it is
never posted). Otherwise the bot stays silent, or reacts (``otherwise: react``).

People stop it in a thread: a message there containing one of ``stop_words`` ("no bot"), or a
``stop_reaction`` on the question or an answer. A stopped thread gets no more unasked answers
(a mention still works: that is asking). The default ``min_score`` is measured on the dev sets
(``benchmarks/support_sweep.py``; README, "Support channels").
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from .settings import SupportChannel, SupportSettings

if TYPE_CHECKING:
    from core.models import Retrieval

    from .common import ChatCore, Platform

log = logging.getLogger(__name__)


class Support:
    """The support channels of one platform, and the threads people stopped the bot in (kept
    in memory, the newest 10,000: a restart forgets them; the answers given stay)."""

    def __init__(self, settings: SupportSettings, platform: Platform) -> None:
        self.settings, self.platform = settings, platform
        self._channels = {c.channel: c for c in settings.channels if c.platform == platform}
        self._stopped: OrderedDict[str, None] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._channels)

    def channel(self, channel_id: str) -> SupportChannel | None:
        return self._channels.get(channel_id)

    def says_stop(self, text: str) -> bool:
        low = " ".join(text.lower().split())
        return any(w in low for w in self.settings.stop_words)

    def stop(self, thread: str) -> None:
        self._stopped[thread] = None
        self._stopped.move_to_end(thread)
        while len(self._stopped) > 10_000:
            self._stopped.popitem(last=False)
        log.info("%s: stopped in thread %s (asked to)", self.platform, thread)

    def stopped(self, thread: str) -> bool:
        return thread in self._stopped

    async def confident(self, core: ChatCore, instance: str, question: str, ch: SupportChannel
                        ) -> Retrieval | None:  # fmt: skip
        """What retrieval found, if it is sure enough to answer unasked (the answer then uses
        it: one search per question); None otherwise, counted as silent."""
        repo = core.channel_repo(instance, self.platform, ch.channel, question)
        found = await core.app.retrieve(instance, question, repo=repo)
        top = found.top_score()
        sure = top >= ch.min_score
        log.info("%s support: top score %.2f %s %.2f in %s", self.platform, top,
                 ">=" if sure else "<", ch.min_score, ch.channel)  # fmt: skip
        if not sure:
            self.count(core, "silent")
            return None
        return found

    def count(self, core: ChatCore, decision: str) -> None:
        core.metrics.support.labels(self.platform, decision).inc()
