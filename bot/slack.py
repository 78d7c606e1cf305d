"""The Slack face: a Bolt (async) app over :class:`~bot.common.ChatCore`.

* ``/repo [instance] question`` — acked at once (Slack allows 3 s); the work runs in a task:
  "<@user> asked …" is posted in the channel and answered in its thread.
* ``@repo-expert question`` — answered in the mention's thread; a mention inside a thread the bot
  answered (or any reply there, with ``thread_replies``) is a follow-up with the thread's turns.
* While working: an 👀 reaction on a mention and a "Searching …" message in the thread, which the
  answer replaces (``chat.update``). On failure that message becomes one line saying so.
* Where the model streams, that message shows the answer so far (``chat.update`` at most once per
  ``stream_interval`` seconds, one section, marked as a preview) until the checked answer
  replaces it. (Slack's ``chat.startStream``/``appendStream`` only append text, while the
  preview must give way to the renumbered, checked answer; so ``chat.update``.)
* 👍/👎 buttons record feedback. Refusals (access, rate limit, busy, help) are ephemeral.
* Each delivery is handled once: a request Slack retries (``X-Slack-Retry-Num``) or anyone
  replays inside the signature's 5-minute window carries the same ``event_id`` (events) or
  ``trigger_id`` (commands, buttons) and is acked without being answered again (:class:`Once`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from core.models import MAX_QUESTION_CHARS
from core.store.conversations import Verdict

from . import messages
from .common import (
    Background,
    ChatCore,
    Pick,
    Place,
    Refusal,
    Slot,
    StreamPreview,
    failure_line,
)
from .settings import SlackSettings, SupportChannel
from .slack_blocks import (
    FEEDBACK_DOWN,
    FEEDBACK_UP,
    answer_messages,
    clean_text,
    escape,
    preview_message,
)
from .support import Support

log = logging.getLogger(__name__)

WORKING_REACTION = "eyes"
_CANNOT_POST = {"not_in_channel", "channel_not_found", "is_archived", "restricted_action"}


def mention(user: str) -> str:
    """The asker's mention; anything but a Slack user id is shown as text."""
    return f"<@{user}>" if re.fullmatch(r"[UW][A-Z0-9]+", user) else escape(user)


def thread_key(place: Place, thread_ts: str) -> str:
    """A Slack thread in the conversations store: ``team:channel:thread_ts``."""
    return f"{place.space}:{place.channel}:{thread_ts}"


def problem_line(exc: BaseException) -> str:
    """One line for the asker about what went wrong (Slack API errors named, scopes included)."""
    if isinstance(exc, SlackApiError):
        error = str(exc.response.get("error", "error"))
        if error == "missing_scope":
            return messages.missing_permission("Slack", str(exc.response.get("needed", "?")))
        if error in _CANNOT_POST:
            return messages.cannot_post(error)
    return failure_line(exc)


class Once:
    """Delivery ids seen in the last ``ttl`` seconds (at most ``size``): longer than Slack's
    retries and its 5-minute signature window, so a retried or replayed request is seen."""

    def __init__(self, ttl: float = 600.0, size: int = 50_000) -> None:
        self.ttl, self.size = ttl, size
        self._seen: OrderedDict[str, float] = OrderedDict()

    def first(self, key: str) -> bool:
        now = time.monotonic()
        while self._seen and (len(self._seen) >= self.size or
                              next(iter(self._seen.values())) < now - self.ttl):  # fmt: skip
            self._seen.popitem(last=False)
        if key in self._seen:
            return False
        self._seen[key] = now
        return True


def delivery_key(body: dict[str, Any]) -> str | None:
    """What identifies one delivery: an event's ``event_id``, a command's or an action's
    ``trigger_id``."""
    for field in ("event_id", "trigger_id"):
        value = body.get(field)
        if isinstance(value, str) and value:
            return f"{field}:{value}"
    return None


def _same_token_warning(record: logging.LogRecord) -> bool:
    return record.getMessage() != warning_client_prioritized_and_token_skipped()


class Preview(StreamPreview):
    """The streamed answer so far, shown in the "Searching …" message by ``chat.update``."""

    platform = "slack"

    def __init__(self, client: AsyncWebClient, channel: str, ts: str, interval: float) -> None:
        super().__init__(interval)
        self.client, self.channel, self.ts = client, channel, ts

    async def _send(self, text: str) -> None:
        msg = preview_message(text)
        await self.client.chat_update(
            channel=self.channel, ts=self.ts, text=msg.text, blocks=msg.blocks
        )


class SlackBot:
    """Registers the listeners on ``app``; answers through ``core``."""

    def __init__(self, core: ChatCore, settings: SlackSettings, app: AsyncApp) -> None:
        self.core, self.settings, self.app = core, settings, app
        self.client: AsyncWebClient = app.client
        self._tasks = Background("slack")
        self._once = Once()
        self.support = Support(core.config.support, "slack")
        app.middleware(self.dedupe)
        app.command(settings.command)(self.on_command)
        app.event("app_mention")(self.on_mention)
        app.event("message")(self.on_message)
        app.event("reaction_added")(self.on_reaction)
        app.action(FEEDBACK_UP)(self.on_feedback)
        app.action(FEEDBACK_DOWN)(self.on_feedback)
        app.error(self.on_error)

    @classmethod
    def create(
        cls,
        core: ChatCore,
        settings: SlackSettings,
        token: str,
        signing_secret: str | None,
        client: AsyncWebClient | None = None,
    ) -> SlackBot:
        """The Bolt app; requests over HTTP must carry a valid signature (``signing_secret``);
        Socket Mode requests come over the authenticated socket instead."""
        # Bolt also reads SLACK_BOT_TOKEN itself and warns, on every start, that the client's
        # token wins over it (the same token): that one line is dropped, nothing else.
        logging.getLogger("slack_bolt.AsyncApp").addFilter(_same_token_warning)
        app = AsyncApp(
            client=client or AsyncWebClient(token=token, base_url=settings.api_url),
            signing_secret=signing_secret or "",
            name="repo-expert",
        )
        return cls(core, settings, app)

    async def drain(self, grace: float | None = None) -> None:
        """Wait for every answer in progress (tests); ``grace``: shutdown (``Background``)."""
        await self._tasks.drain(grace)

    # -- listeners ----------------------------------------------------------------------------
    async def dedupe(
        self, body: dict[str, Any], next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        """Runs after Bolt verified the signature: a delivery already handled is acked, once
        more, with nothing done."""
        key = delivery_key(body)
        if key is not None and not self._once.first(key):
            log.info("slack: %s was already handled (a retry or a replay): ignored", key[:80])
            return BoltResponse(status=200, body="")
        await next()
        return None

    async def on_command(
        self, ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond
    ) -> None:
        place = Place("slack", command.get("team_id"), command["channel_id"])
        user = command["user_id"]
        text = clean_text(command.get("text", ""), None)
        if text.lower() in ("", "help"):
            await ack(text=self._usage(place), response_type="ephemeral")
            return
        if len(text) > MAX_QUESTION_CHARS:
            await ack(
                text=messages.too_long(len(text), MAX_QUESTION_CHARS), response_type="ephemeral"
            )
            return
        pick = self.core.access.pick(place, text, self.settings.command)
        if isinstance(pick, Refusal):
            await ack(text=pick.message, response_type="ephemeral")
            return
        slot = self.core.limits.admit(f"slack:{place.space}:{user}")
        if isinstance(slot, Refusal):
            await ack(text=slot.message, response_type="ephemeral")
            return
        if self._tasks.closing:  # shutting down (HTTP mode still acks while it drains)
            slot.release()
            await ack(text=messages.restarting(), response_type="ephemeral")
            return
        await ack()
        self._tasks.spawn(self._run_command(place, pick, user, respond, slot))

    async def on_mention(self, event: dict[str, Any], context: AsyncBoltContext) -> None:
        self._tasks.spawn(self._run_message(event, context, mentioned=True))

    async def on_message(self, event: dict[str, Any], context: AsyncBoltContext) -> None:
        """A direct message to the app (``message.im``: each one is for the bot); thread replies
        without a mention (``thread_replies``); mentions come as app_mention."""
        if event.get("channel_type") == "im" and not event.get("subtype"):
            if not event.get("bot_id"):
                self._tasks.spawn(self._run_message(event, context, mentioned=True))
            return
        thread_ts = event.get("thread_ts")
        mentions_me = f"<@{context.bot_user_id}>" in event.get("text", "")
        if self.support and not event.get("subtype") and not event.get("bot_id"):
            place = Place("slack", event.get("team") or context.team_id, event["channel"])
            root = thread_ts or event.get("ts", "")
            if self.support.says_stop(event.get("text", "")):
                self.support.stop(thread_key(place, root))
                self.support.count(self.core, "stopped")
                return
            ch = self.support.channel(event["channel"])
            if ch is not None and not thread_ts and not mentions_me:
                self._tasks.spawn(self._support(event, context, place, ch))
                return
            if thread_ts and self.support.stopped(thread_key(place, thread_ts)):
                return  # people asked the bot to keep out of this thread
        if (
            not self.settings.thread_replies
            or event.get("subtype")
            or event.get("bot_id")
            or not thread_ts
            or thread_ts == event.get("ts")
            or mentions_me
        ):
            return
        self._tasks.spawn(self._run_message(event, context, mentioned=False))

    async def on_feedback(
        self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        await ack()
        # Bolt runs the rest after the ack, outside the request: tracked like an answer, so
        # drain() (tests, SIGTERM) waits for the vote to be recorded and thanked.
        self._tasks.spawn(self._record_feedback(body, action))

    async def _record_feedback(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        verdict: Verdict = "up" if action["action_id"] == FEEDBACK_UP else "down"
        user = body["user"]["id"]
        record = await self.core.feedback("slack", int(action["value"]), user, verdict)
        text = messages.feedback_thanks(verdict) if record else messages.feedback_unknown()
        channel = body.get("channel", {}).get("id")
        if channel:
            await self.client.chat_postEphemeral(
                channel=channel, user=user, text=text,
                thread_ts=body.get("message", {}).get("thread_ts"),
            )  # fmt: skip

    async def on_reaction(self, event: dict[str, Any], context: AsyncBoltContext) -> None:
        """``stop_reaction`` on a message of a support channel stops unasked answers in its
        thread (the reacted message's own ts, or the thread it is in: Slack gives only the ts,
        and either is the key of a thread the bot answered)."""
        item = event.get("item") or {}
        if not self.support or event.get("reaction") != self.support.settings.stop_reaction:
            return
        if item.get("type") != "message" or self.support.channel(item.get("channel", "")) is None:
            return
        place = Place("slack", context.team_id, item["channel"])
        self.support.stop(thread_key(place, str(item.get("ts"))))
        self.support.count(self.core, "stopped")

    async def on_error(self, error: Exception, body: dict[str, Any]) -> None:
        log.error("slack: unhandled error in a listener (%s)", body.get("type"), exc_info=error)

    # -- the work -----------------------------------------------------------------------------
    def _usage(self, place: Place) -> str:
        allowed = self.core.access.allowed(place)
        return messages.usage(allowed, self.core.access.default(place), self.settings.command)

    async def _run_command(
        self, place: Place, pick: Pick, user: str, respond: AsyncRespond, slot: Slot
    ) -> None:
        try:
            try:
                root = await self.client.chat_postMessage(
                    channel=place.channel,
                    text=messages.asked(mention(user), pick.instance, escape(pick.question)),
                    unfurl_links=False, unfurl_media=False,
                )  # fmt: skip
            except SlackApiError as e:
                log.warning("slack: cannot post in %s: %s", place.channel, e.response.get("error"))
                await respond(text=problem_line(e), response_type="ephemeral")
                return
            await self._answer(place, str(root["ts"]), pick, user)
        finally:
            slot.release()

    async def _run_message(
        self, event: dict[str, Any], context: AsyncBoltContext, mentioned: bool
    ) -> None:
        channel, ts, user = event["channel"], event["ts"], event.get("user", "")
        place = Place("slack", event.get("team") or context.team_id, channel)
        thread_ts = event.get("thread_ts") or ts
        key = thread_key(place, thread_ts)
        current = await self.core.thread_instance("slack", key) if "thread_ts" in event else None
        if not mentioned and current is None:
            return  # a reply in a thread the bot never answered
        text = clean_text(event.get("text", ""), context.bot_user_id)
        if text.lower() in ("", "help"):
            await self._ephemeral(place, user, thread_ts, self._usage(place))
            return
        if len(text) > MAX_QUESTION_CHARS:
            await self._ephemeral(
                place, user, thread_ts, messages.too_long(len(text), MAX_QUESTION_CHARS)
            )
            return
        pick = self.core.access.pick(place, text, self.settings.command, current=current)
        if isinstance(pick, Refusal):
            await self._ephemeral(place, user, thread_ts, pick.message)
            return
        slot = self.core.limits.admit(f"slack:{place.space}:{user}")
        if isinstance(slot, Refusal):
            await self._ephemeral(place, user, thread_ts, slot.message)
            return
        try:
            reacted = await self._react("reactions_add", channel, ts)
            await self._answer(place, thread_ts, pick, user)
            if reacted:
                await self._react("reactions_remove", channel, ts)
        finally:
            slot.release()

    async def _support(
        self, event: dict[str, Any], context: AsyncBoltContext, place: Place, ch: SupportChannel
    ) -> None:
        """A new top-level message in a support channel: answered in its thread only when
        retrieval is confident and an answer was found; else silence (or ``ch.reaction``). No
        "Searching …" message (it could be for nothing): 👀 while working."""
        text = clean_text(event.get("text", ""), context.bot_user_id)
        ts, user = event["ts"], event.get("user", "")
        name = ch.instance or self.core.access.default(place)
        if not text or len(text) > MAX_QUESTION_CHARS or name is None:
            return
        if not self.core.access.allows(name, place):
            log.warning("slack: support channel %s: instance %s is not allowed there", ch.channel,
                        name)  # fmt: skip
            return
        slot = self.core.limits.admit(f"slack:{place.space}:{user}")
        if isinstance(slot, Refusal):
            return  # unasked: no refusal to anyone
        key = thread_key(place, ts)
        try:
            found = await self.support.confident(self.core, name, text, ch)
            if found is None:
                await self._unsure(ch, place.channel, ts)
                return
            reacted = await self._react("reactions_add", place.channel, ts)
            try:
                reply = await self.core.ask(place, key, Pick(name, text), user, retrieval=found)
                if reply.answer.no_answer:  # the answerer found nothing: stay out of it
                    self.support.stop(key)
                    self.support.count(self.core, "silent")
                    await self._unsure(ch, place.channel, ts)
                    return
                for part in answer_messages(reply.answer, reply.turn_id):
                    await self.client.chat_postMessage(
                        channel=place.channel, thread_ts=ts, text=part.text, blocks=part.blocks,
                        unfurl_links=False, unfurl_media=False,
                    )  # fmt: skip
                self.support.count(self.core, "answered")
            finally:
                if reacted:
                    await self._react("reactions_remove", place.channel, ts)
        except Exception:
            log.exception("slack: support answer in %s failed (nothing was posted)", ch.channel)
        finally:
            slot.release()

    async def _unsure(self, ch: SupportChannel, channel: str, ts: str) -> None:
        if ch.otherwise == "react":
            await self._react("reactions_add", channel, ts, ch.reaction or "thinking_face")

    async def _answer(self, place: Place, thread_ts: str, pick: Pick, user: str) -> None:
        """Post "Searching …" in the thread, then replace it with the answer (continued in
        further messages if long); on failure, with one line saying so."""
        channel, status_ts = place.channel, None
        try:
            status = await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=messages.searching(pick.instance)
            )
            status_ts = str(status["ts"])
            interval = self.settings.stream_interval
            preview = Preview(self.client, channel, status_ts, interval) if interval else None
            try:
                reply = await self.core.ask(
                    place, thread_key(place, thread_ts), pick, user, on_text=preview
                )
            finally:
                if preview is not None:
                    await preview.settle()
            parts = answer_messages(reply.answer, reply.turn_id)
            first, rest = parts[0], parts[1:]
            await self.client.chat_update(
                channel=channel, ts=status_ts, text=first.text, blocks=first.blocks
            )
            for part in rest:
                await self.client.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, text=part.text, blocks=part.blocks,
                    unfurl_links=False, unfurl_media=False,
                )  # fmt: skip
        except asyncio.CancelledError:  # shut down past the grace: never leave "Searching …"
            await self._report(channel, thread_ts, status_ts, messages.interrupted())
            raise
        except Exception as e:
            log.exception("slack: answering in %s (thread %s) failed", channel, thread_ts)
            await self._report(channel, thread_ts, status_ts, problem_line(e))

    async def _report(self, channel: str, thread_ts: str, status_ts: str | None, line: str) -> None:
        try:
            if status_ts:
                await self.client.chat_update(channel=channel, ts=status_ts, text=line, blocks=[])
            else:
                await self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=line)
        except SlackApiError as e:
            log.error(
                "slack: could not tell %s about a failure (%s); they were told nothing: %s",
                channel, e.response.get("error"), line,
            )  # fmt: skip

    async def _ephemeral(self, place: Place, user: str, thread_ts: str, text: str) -> None:
        try:
            await self.client.chat_postEphemeral(
                channel=place.channel, user=user, text=text, thread_ts=thread_ts
            )
        except SlackApiError as e:
            log.error("slack: could not reply to %s in %s: %s (%s)", user, place.channel, text,
                      e.response.get("error"))  # fmt: skip

    async def _react(self, method: str, channel: str, ts: str, name: str = WORKING_REACTION
                     ) -> bool:  # fmt: skip
        """The working reaction is a nicety: without the scope the answer still comes."""
        try:
            await getattr(self.client, method)(channel=channel, timestamp=ts, name=name)
            return True
        except SlackApiError as e:
            log.warning("slack: %s failed in %s: %s (needed: %s)", method, channel,
                        e.response.get("error"), e.response.get("needed", "-"))  # fmt: skip
            return False
