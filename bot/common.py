"""What the Slack and Discord adapters share, free of either platform's SDK.

* :class:`Access` — which instances may answer in a place (workspace/guild + channel), which one
  is the channel's default, and how ``[instance] question`` is read.
* :class:`Limits` — a per-person rate limit and a global cap on answers in progress.
* :class:`ChatCore` — the one call the adapters make: history in, ``RepoExpert.ask``, turn out.
* :class:`StreamPreview` — a streamed answer's text so far, sent at most once per interval.
* :func:`split_text` and the source-label helpers used to render answers within platform limits;
  :func:`web_url`, the one test of whether a source's URL may become a link.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from core.config import Instance
from core.errors import ConfigError, NotAllowed, RepoExpertError
from core.models import Answer, Retrieval, Source, Turn
from core.ops.metrics import Metrics
from core.service import Conversations, OnText, RepoExpert, says_repo
from core.store.conversations import FeedbackRecord, Verdict

from . import messages
from .settings import ServeConfig

log = logging.getLogger(__name__)

Platform = Literal["slack", "discord"]


@dataclass(frozen=True)
class Place:
    """Where a question was asked. For a thread, ``channel`` is the thread's parent channel."""

    platform: Platform
    space: str | None  # Slack team id, Discord guild id; None for a Discord DM
    channel: str
    # A Discord DM: the guilds the asker is a member of — an instance allowed in one of them
    # (and not restricted to channels) may answer there.
    member_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pick:
    instance: str
    question: str


@dataclass(frozen=True)
class Refusal:
    """A polite answer instead of an answer: shown to the asker only where the platform can."""

    message: str


class Access:
    """The instances' ``access:`` rules over all loaded instances."""

    def __init__(self, instances: Mapping[str, Instance]) -> None:
        self.instances = dict(instances)
        self._defaults: dict[tuple[str, str], str] = {}
        for name, inst in sorted(self.instances.items()):
            for platform, side in (("slack", inst.access.slack), ("discord", inst.access.discord)):
                for ch in side.default_channels:
                    other = self._defaults.setdefault((platform, ch), name)
                    if other != name:
                        raise ConfigError(
                            f"{inst.source_file}: access.{platform}.default_channels: channel {ch}"
                            f" is already the default of instance '{other}' "
                            f"({self.instances[other].source_file}); one default per channel"
                        )

    def allows(self, name: str, place: Place) -> bool:
        inst = self.instances.get(name)
        if inst is None:
            return False
        spaces = (place.space, *place.member_of)
        return any(inst.access.allows(place.platform, sp, place.channel) for sp in spaces)

    def allowed(self, place: Place) -> list[str]:
        return [n for n in sorted(self.instances) if self.allows(n, place)]

    def default(self, place: Place) -> str | None:
        """The channel's configured default, else the only instance allowed there."""
        name = self._defaults.get((place.platform, place.channel))
        if name is not None and self.allows(name, place):
            return name
        allowed = self.allowed(place)
        return allowed[0] if len(allowed) == 1 else None

    def _visible_name(self, word: str, place: Place) -> bool:
        """A word names an instance here unless it is a private one this place may not use:
        those stay invisible (the word is just part of the question)."""
        inst = self.instances.get(word)
        return inst is not None and (not inst.access.private or self.allows(word, place))

    def pick(
        self,
        place: Place,
        text: str,
        example: str,
        named: str | None = None,
        current: str | None = None,
    ) -> Pick | Refusal:
        """Read ``[instance] question``: an instance named by its first word (or ``named``, a
        separate argument), else the thread's ``current`` instance, else the channel default."""
        question = text.strip()
        if named is None:
            first, _, rest = question.partition(" ")
            word = first.rstrip(":,")
            if self._visible_name(word, place):
                named, question = word, rest.strip()
        allowed = self.allowed(place)
        if named is not None:
            if named not in allowed:
                return Refusal(messages.not_here(named, allowed))
            if not question:
                return Refusal(messages.no_question(named, example))
            return Pick(named, question)
        if current is not None and current in allowed:
            return Pick(current, question)
        default = self.default(place)
        if default is not None:
            return Pick(default, question)
        if not allowed:
            return Refusal(messages.no_instance_here())
        return Refusal(messages.choose_instance(allowed, example))


class Slot:
    """One answer in progress; :meth:`release` frees it (once)."""

    def __init__(self, limits: Limits) -> None:
        self._limits: Limits | None = limits

    def release(self) -> None:
        if self._limits is not None:
            self._limits.active -= 1
            self._limits = None


class Limits:
    """At most ``per_user`` questions per ``window`` seconds per person, and at most
    ``concurrent`` answers in progress across everyone."""

    def __init__(
        self,
        per_user: int,
        window: float,
        concurrent: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_user, self.window, self.concurrent = per_user, window, concurrent
        self.clock = clock
        self.active = 0
        self._recent: dict[str, deque[float]] = {}

    def admit(self, who: str) -> Slot | Refusal:
        now = self.clock()
        recent = self._recent.setdefault(who, deque())
        while recent and recent[0] <= now - self.window:
            recent.popleft()
        if len(recent) >= self.per_user:
            return Refusal(messages.rate_limited(recent[0] + self.window - now))
        if self.active >= self.concurrent:
            return Refusal(messages.busy())
        recent.append(now)
        self.active += 1
        return Slot(self)


@dataclass
class Reply:
    answer: Answer
    turn_id: int


class ChatCore:
    """The service as the bots see it: access, limits, thread history, feedback."""

    def __init__(
        self,
        app: RepoExpert,
        store: Conversations,
        config: ServeConfig,
        instances: Mapping[str, Instance] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.app, self.store, self.config = app, store, config
        self.access = Access(instances if instances is not None else app.load_instances())
        self.limits = Limits(config.rate_limit, config.rate_window, config.max_concurrent)
        self.metrics = metrics or Metrics()

    async def ask(
        self,
        place: Place,
        thread: str,
        pick: Pick,
        user: str,
        on_text: OnText | None = None,
        retrieval: Retrieval | None = None,
    ) -> Reply:
        """Answer ``pick`` in ``thread`` with the thread's earlier turns, and record the turn.
        ``on_text``: the streamed preview, where the answerer streams; ``retrieval``: what was
        already found for this question (``RepoExpert.ask``)."""
        if not self.access.allows(pick.instance, place):  # the adapters checked; make sure
            raise NotAllowed(f"instance {pick.instance} is not allowed in {place}")
        n = self.config.history_turns
        t = time.perf_counter()
        self.metrics.in_progress.inc()
        try:
            history = await self.store.history(place.platform, thread, n) if n else []
            repo = self.channel_repo(pick.instance, place.platform, place.channel, pick.question,
                                     history)  # fmt: skip
            answer = await self.app.ask(
                pick.instance, pick.question, conversation=history or None, on_text=on_text,
                retrieval=retrieval, repo=repo,
            )  # fmt: skip
            if repo is not None:
                answer.note = "; ".join(x for x in (answer.note, channel_note(answer)) if x)
            turn = await self.store.add_turn(
                place.platform, thread, pick.instance, user, pick.question, answer
            )
        except Exception as e:
            self.metrics.failed(place.platform, e)
            raise
        finally:
            self.metrics.in_progress.dec()
        self.metrics.answered(place.platform, time.perf_counter() - t, answer.no_answer)
        log.info(
            "%s answered %s in %s (%d sources, %.0f ms)", place.platform, pick.instance,
            thread, len(answer.sources), answer.timings_ms.get("total", 0.0),
        )  # fmt: skip
        return Reply(answer, turn)

    def channel_repo(self, instance: str, platform: Platform, channel: str, question: str,
                     earlier: list[Turn] | None = None) -> str | None:  # fmt: skip
        """The repository or scope a channel's questions search (``access.*.channel_repos``),
        unless the question names its own with ``repo:NAME`` (``repo:all``: every one) — it
        or, for a follow-up, the turn it follows (searched together with it)."""
        inst = self.access.instances.get(instance)
        if inst is None or says_repo(question, earlier):
            return None
        return inst.access.channel_repo(platform, channel)

    async def thread_instance(self, platform: Platform, thread: str) -> str | None:
        return await self.store.thread_instance(platform, thread)

    async def feedback(
        self, platform: Platform, turn_id: int, user: str, verdict: Verdict
    ) -> FeedbackRecord | None:
        record = await self.store.record_feedback(platform, turn_id, user, verdict)
        if record is not None:
            self.metrics.feedback.labels(verdict).inc()
        return record


def channel_note(answer: Answer) -> str:
    """What a channel's default repository or scope did to the answer, and how to lift it;
    inside it, the repository the question names may have been searched alone (the answer's
    note says so already: ``core/retrieve/narrow.py``)."""
    kept = answer.route.get("filter") or {}
    name, repos = kept.get("name"), kept.get("repos") or []
    if not name or not repos:
        return ""
    which = name if repos == [name] else f"{name} ({', '.join(repos)})"
    if answer.route.get("narrowed"):
        return f"within {which}, this channel's default"
    return f"searched {which}, this channel's default: add repo:all to search every repository"


class StreamPreview:
    """A streamed answer shown as it grows: ``_send`` (the platform's post or edit) runs at
    most once per ``interval`` seconds (monotonic clock; the first text waits that long after
    the work started), never awaited by the model's callback — a slow platform call must not
    eat the model's time — and with one call in flight at a time. Text arriving in between
    waits for the next tick or for the answer (latest wins)."""

    platform = "preview"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last = time.monotonic()
        self.updates = 0
        self._sending: asyncio.Task[None] | None = None

    async def __call__(self, text: str) -> None:
        now = time.monotonic()
        if now - self.last < self.interval or (self._sending and not self._sending.done()):
            return
        self.last = now
        self._sending = asyncio.create_task(self._guarded(text))

    async def _guarded(self, text: str) -> None:
        try:
            await self._send(text)
            self.updates += 1
        except Exception as e:  # a preview is best effort; the answer still comes
            log.warning("%s: preview update failed: %s", self.platform, e)

    async def _send(self, text: str) -> None:
        raise NotImplementedError

    async def settle(self) -> None:
        """Wait for an update in flight, so it cannot land after (and over) the answer."""
        if self._sending is not None:
            await asyncio.gather(self._sending, return_exceptions=True)


class Background:
    """Answers in progress: started without being awaited (the platform's handler returns at
    once), awaited by :meth:`drain` (tests, shutdown); an error that escapes one is logged."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[None]] = set()
        self.closing = False

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self.closing:  # shutting down: a question arriving now is not started
            coro.close()
            log.info("%s: shutting down; a new question was not taken", self.name)
            return
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: a question was dropped by an error", self.name,
                      exc_info=task.exception())  # fmt: skip

    async def drain(self, grace: float | None = None) -> None:
        """Wait for the answers in progress; with ``grace`` (shutdown) take no new ones, wait
        at most that many seconds, then cancel the rest — each says so where it was asked
        (the adapters' ``CancelledError`` handling) before it ends."""
        if grace is None:
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            return
        self.closing = True
        if self._tasks:
            log.info("%s: draining %d answer(s) in progress (up to %.0f s)", self.name,
                     len(self._tasks), grace)  # fmt: skip
            _, late = await asyncio.wait(list(self._tasks), timeout=grace)
            for t in late:
                t.cancel()
            if late:
                log.warning("%s: %d answer(s) cut short by the shutdown", self.name, len(late))
                await asyncio.gather(*late, return_exceptions=True)


def failure_line(exc: BaseException) -> str:
    """One line for the thread; the details go to the log (by the caller)."""
    what = exc.user_line if isinstance(exc, RepoExpertError) else RepoExpertError.user_line
    return messages.failed(what)


def split_text(text: str, limit: int) -> list[str]:
    """Split ``text`` into pieces of at most ``limit`` characters, at a paragraph, line or word
    boundary when there is one (only the separator at a cut is dropped), keeping fenced code
    blocks closed in each piece."""
    if limit < 16:
        raise ValueError("limit too small")
    budget = limit - 8  # room to close and reopen a ``` fence
    pieces: list[str] = []
    rest = text
    while len(rest) > budget:
        for sep in ("\n\n", "\n", " "):
            cut = rest.rfind(sep, 0, budget + 1)
            if cut > 0:
                pieces.append(rest[:cut])
                rest = rest[cut + len(sep) :]
                break
        else:
            pieces.append(rest[:budget])
            rest = rest[budget:]
    if rest or not pieces:
        pieces.append(rest)
    out: list[str] = []
    fence_open = False
    for p in pieces:
        if fence_open:
            p = "```\n" + p
        if p.count("```") % 2:
            p += "\n```"
            fence_open = True
        else:
            fence_open = False
        out.append(p)
    return out


_ISSUE_PREFIX = re.compile(r"^#\d+\s+")
# An http(s) URL of RFC 3986 characters, less those a chat platform's link syntax uses (<>|()[]
# and quotes): an issue's `url` comes from a file or an API and must not close a link and open
# markup of its own.
_WEB_URL = re.compile(
    r"https?://[A-Za-z0-9.-]+(?::\d{1,5})?(?:[/?#][A-Za-z0-9\-._~:/?#@!$&*+,;=%]*)?"
)


def web_url(url: str | None) -> str | None:
    """``url`` if it is a well-formed web URL that can be a link on every platform, else None
    (then it is shown as text, or not at all)."""
    return url if url and _WEB_URL.fullmatch(url) else None


def source_label(s: Source) -> tuple[str, str]:
    """(where, what): ``("README.md:9-12", "Widget › Configuration")``, ``("#42", "Timeout …")``."""
    where = s.location()
    if s.issue is not None:
        what = _ISSUE_PREFIX.sub("", s.title)
    else:
        what = s.title if s.title and s.title != s.path else (s.symbol or "")
    return where, what
