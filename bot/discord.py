"""The Discord face: a discord.py client over :class:`~bot.common.ChatCore`.

* A direct message is a question, answered in the DM (the DM is one conversation) with the
  asker's instances: those allowed in a guild they are a member of (without a channel list),
  and those open everywhere.
* 👍/👎 buttons under each answer record feedback as Slack's do (``discord_parts.py``).
* Application commands are synced at startup only when they changed (``discord_parts.py``).
* Mentioning the bot in a channel opens a thread on that message and answers there; later
  messages in that thread (all of them with ``thread_replies``, else those mentioning the bot)
  are follow-ups answered with the thread's earlier turns.
* ``/ask question:<text> instance:<choice>`` (autocomplete: the instances this guild/channel may
  use) posts the question and opens a thread on it for the answer.
* The typing indicator shows while an answer is worked on; the answer is text (2,000 characters
  per message) followed by a numbered *Sources* embed; failures are one line in the thread.
* Where the model streams, a message in the thread shows the answer so far (posted with the
  first text, then edited at most once per ``stream_interval`` seconds, marked as a preview);
  the checked answer replaces it by one more edit.
* Untrusted text (questions, answers, issue titles) never makes a link: masked links
  ``[text](url)`` outside code are broken (:func:`inert`), only well-formed web URLs are linked
  in the Sources embed, and no message may mention anyone (``AllowedMentions.none()``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path
from typing import Any

import discord
from discord import app_commands

from core.models import MAX_QUESTION_CHARS
from core.ops.health import Probe

from . import discord_support, messages
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
from .discord_parts import feedback_view, parse_feedback, sync_if_changed
from .discord_render import (
    CONTENT_LIMIT,
    DiscordMessage,
    answer_messages,
    inert,
    preview_content,
)
from .settings import DiscordSettings
from .support import Support

log = logging.getLogger(__name__)

MEMBERS_TTL = 600.0  # seconds a DM asker's guild memberships are remembered


class Preview(StreamPreview):
    """The streamed answer so far as a message in the thread: posted with the first text, then
    edited; ``message`` is what the answer replaces (None while nothing was posted)."""

    platform = "discord"

    def __init__(self, thread: discord.abc.Messageable, interval: float) -> None:
        super().__init__(interval)
        self.thread = thread
        self.message: discord.Message | None = None

    async def _send(self, text: str) -> None:
        if self.message is None:
            self.message = await self.thread.send(content=preview_content(text))
        else:
            await self.message.edit(content=preview_content(text))


def problem_line(exc: BaseException) -> str:
    if isinstance(exc, discord.Forbidden):
        return messages.missing_permission("Discord", "Send Messages in Threads")
    return failure_line(exc)


def _is_thread(channel: Any) -> bool:
    return isinstance(channel, discord.Thread)


class DiscordBot(discord.Client):
    """Owns the command tree; every answer goes through ``core``."""

    def __init__(
        self,
        core: ChatCore,
        settings: DiscordSettings,
        probe: Probe | None = None,
        **options: Any,
    ) -> None:
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.dm_messages = True  # direct messages: each one is a question
        support = Support(core.config.support, "discord")
        # Privileged: replies and support-channel messages without a mention.
        intents.message_content = settings.thread_replies or bool(support)
        intents.guild_reactions = bool(support)  # the stop reaction
        super().__init__(
            intents=intents, allowed_mentions=discord.AllowedMentions.none(), **options
        )
        self.core, self.settings = core, settings
        self.tree = app_commands.CommandTree(self)
        self._tasks = Background("discord")
        self._members: dict[int, tuple[float, tuple[str, ...]]] = {}  # user → (when, guilds)
        self.support = support
        self.probe = probe
        if probe is not None:
            probe.waiting("discord")
        self._add_command()

    async def on_ready(self) -> None:
        if self.probe is not None:
            self.probe.up("discord")

    async def on_disconnect(self) -> None:
        if self.probe is not None:
            self.probe.down("discord")

    async def on_resumed(self) -> None:
        await self.on_ready()

    async def setup_hook(self) -> None:
        if self.settings.sync_commands:
            await sync_if_changed(self.tree, self.application_id, self.commands_file)

    @property
    def commands_file(self) -> Path:
        return self.core.app.layout.discord_commands

    def spawn(self, coro: Any) -> None:
        self._tasks.spawn(coro)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        discord_support.on_reaction(self, payload)

    async def drain(self, grace: float | None = None) -> None:
        """Wait for every answer in progress (tests); ``grace``: shutdown (``Background``)."""
        await self._tasks.drain(grace)

    def _example(self) -> str:
        """How to ask, for help texts: the mention (``/ask`` shows its own options)."""
        return f"@{self.user.name if self.user else 'repo-expert'}"

    # -- the application command ------------------------------------------------------------
    def _add_command(self) -> None:
        bot = self

        async def ask(
            interaction: discord.Interaction, question: str, instance: str | None = None
        ) -> None:
            await bot.on_ask(interaction, question, instance)

        async def complete(
            interaction: discord.Interaction, current: str
        ) -> list[app_commands.Choice[str]]:
            place = bot._place(interaction.guild_id, interaction.channel, interaction.channel_id)
            names = [n for n in bot.core.access.allowed(place) if current.lower() in n.lower()]
            return [app_commands.Choice(name=n, value=n) for n in names[:25]]

        cmd: app_commands.Command[Any, Any, None] = app_commands.Command(
            name=self.settings.command,
            description="Ask about a code repository; the answer comes in a thread.",
            callback=ask,
        )
        app_commands.describe(
            question="Your question", instance="Which repository (default: this channel's)"
        )(cmd)
        cmd.autocomplete("instance")(complete)
        self.tree.add_command(cmd)

    def _place(self, guild_id: int | None, channel: Any, channel_id: int | None) -> Place:
        """Threads count as their parent channel."""
        cid = getattr(channel, "parent_id", None) if _is_thread(channel) else channel_id
        return Place("discord", str(guild_id) if guild_id else None, str(cid))

    async def on_ask(
        self, interaction: discord.Interaction, question: str, instance: str | None
    ) -> None:
        place = self._place(interaction.guild_id, interaction.channel, interaction.channel_id)
        reply = interaction.response
        if self._tasks.closing:  # shutting down: no new work
            await reply.send_message(messages.restarting(), ephemeral=True)
            return
        if not question.strip() or question.strip().lower() == "help":
            allowed = self.core.access.allowed(place)
            usage = messages.usage(allowed, self.core.access.default(place), self._example())
            await reply.send_message(usage, ephemeral=True)
            return
        if len(question) > MAX_QUESTION_CHARS:
            await reply.send_message(
                messages.too_long(len(question), MAX_QUESTION_CHARS), ephemeral=True
            )
            return
        pick = self.core.access.pick(place, question, self._example(), named=instance or None)
        if isinstance(pick, Refusal):
            await reply.send_message(pick.message, ephemeral=True)
            return
        slot = self.core.limits.admit(f"discord:{interaction.user.id}")
        if isinstance(slot, Refusal):
            await reply.send_message(slot.message, ephemeral=True)
            return
        try:
            asked = messages.asked(
                interaction.user.mention, pick.instance, inert(pick.question), "**"
            )
            sent = await reply.send_message(asked)
            if _is_thread(interaction.channel):
                thread: discord.abc.Messageable = interaction.channel  # type: ignore[assignment]
            else:
                message = sent.resource
                if not isinstance(message, discord.InteractionMessage):
                    message = await interaction.original_response()
                thread = await message.create_thread(name=messages.thread_name(pick.question))
        except discord.HTTPException as e:
            slot.release()
            log.warning("discord: /%s could not open a thread: %s", self.settings.command, e)
            if reply.is_done():
                line = messages.cannot_thread(e.text or str(e.status))
                try:
                    await interaction.followup.send(line, ephemeral=True)
                except discord.HTTPException as e2:
                    log.error("discord: could not tell %s why: %s", interaction.user.id, e2)
            return
        except Exception as e:
            # Anything else (e.g. no guild to open a thread in): the slot must not leak, or the
            # bot ends up "busy" for everyone.
            slot.release()
            log.exception("discord: /%s failed before answering", self.settings.command)
            if not reply.is_done():
                await reply.send_message(failure_line(e), ephemeral=True)
            return
        self._tasks.spawn(self._answer(thread, place, pick, str(interaction.user.id), slot))

    # -- mentions and follow-ups -------------------------------------------------------------
    def _mentions_me(self, message: discord.Message) -> bool:
        return self.user is not None and any(u.id == self.user.id for u in message.mentions)

    def _question(self, message: discord.Message) -> str:
        assert self.user is not None
        return re.sub(rf"<@!?{self.user.id}>", " ", message.content).strip()

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A 👍/👎 button (``discord_parts``); commands go to the tree."""
        if interaction.type is not discord.InteractionType.component:
            return
        data: Any = interaction.data or {}
        parsed = parse_feedback(str(data.get("custom_id", "")))
        if parsed is None:
            return
        verdict, turn = parsed
        record = await self.core.feedback("discord", turn, str(interaction.user.id), verdict)
        text = messages.feedback_thanks(verdict) if record else messages.feedback_unknown()
        try:
            await interaction.response.send_message(text, ephemeral=True)
        except discord.HTTPException as e:
            log.warning("discord: could not thank %s for feedback: %s", interaction.user.id, e)

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or self.user is None or self._tasks.closing:
            return  # (closing: shutting down, no new work)
        if message.guild is None:  # a direct message: answered there, with a DM's instances
            await self._in_dm(message)
            return
        mentioned = self._mentions_me(message)
        channel: Any = message.channel
        if _is_thread(channel) or isinstance(channel, discord.PartialMessageable):
            key = str(channel.id)
            if self.support and not mentioned:
                if await discord_support.in_thread(self, message, channel):
                    return
            current = await self.core.thread_instance("discord", key)
            wanted = mentioned or (current is not None and self.settings.thread_replies)
            if not wanted:
                return
            if isinstance(channel, discord.PartialMessageable):  # not cached: ask Discord
                channel = await self.fetch_channel(channel.id)
            if _is_thread(channel):
                await self._in_thread(message, channel, current)
                return
        if mentioned:
            await self._new_thread(message, channel)
        elif self.support:
            discord_support.in_channel(self, message, channel)

    async def _admit(
        self, message: discord.Message, place: Place, current: str | None
    ) -> tuple[Pick, Slot] | None:
        text = self._question(message)
        access = self.core.access
        if not text or text.lower() == "help":
            usage = messages.usage(access.allowed(place), access.default(place), self._example())
            await message.reply(usage)
            return None
        if len(text) > MAX_QUESTION_CHARS:
            await message.reply(messages.too_long(len(text), MAX_QUESTION_CHARS))
            return None
        pick = access.pick(place, text, self._example(), current=current)
        if isinstance(pick, Refusal):
            await message.reply(pick.message)
            return None
        slot = self.core.limits.admit(f"discord:{message.author.id}")
        if isinstance(slot, Refusal):
            await message.reply(slot.message)
            return None
        return pick, slot

    async def _in_thread(
        self, message: discord.Message, thread: discord.Thread, current: str | None
    ) -> None:
        place = self._place(message.guild.id if message.guild else None, thread, thread.id)
        admitted = await self._admit(message, place, current)
        if admitted:
            pick, slot = admitted
            self._tasks.spawn(self._answer(thread, place, pick, str(message.author.id), slot))

    async def _in_dm(self, message: discord.Message) -> None:
        """Every DM is a question; the DM is one conversation (its earlier turns are the
        history). The instances are the asker's: those allowed in a guild they are a member of
        (not restricted to channels: a DM is no channel of it), and the ones open everywhere."""
        key = str(message.channel.id)
        guilds = await self._member_of(message.author.id)
        place = Place("discord", None, key, member_of=guilds)
        current = await self.core.thread_instance("discord", key)
        admitted = await self._admit(message, place, current)
        if admitted:
            pick, slot = admitted
            self._tasks.spawn(
                self._answer(message.channel, place, pick, str(message.author.id), slot)
            )

    async def _member_of(self, user_id: int) -> tuple[str, ...]:
        """The bot's guilds ``user_id`` is a member of, asked of Discord (one call per guild;
        no privileged members intent needed), remembered for ``MEMBERS_TTL`` seconds."""
        now = time.monotonic()
        known = self._members.get(user_id)
        if known is not None and now - known[0] < MEMBERS_TTL:
            return known[1]
        found = []
        for guild in self.guilds:
            try:
                await guild.fetch_member(user_id)
                found.append(str(guild.id))
            except discord.NotFound:
                pass
            except discord.HTTPException as e:  # unknown: not counted as a member
                log.warning("discord: cannot check membership in guild %s: %s", guild.id, e)
        self._members[user_id] = (now, tuple(found))
        return tuple(found)

    async def _new_thread(self, message: discord.Message, channel: Any) -> None:
        place = self._place(message.guild.id if message.guild else None, channel, channel.id)
        admitted = await self._admit(message, place, None)
        if not admitted:
            return
        pick, slot = admitted
        try:
            thread = await message.create_thread(name=messages.thread_name(pick.question))
        except discord.HTTPException as e:
            slot.release()
            log.warning("discord: cannot open a thread in %s: %s", channel.id, e)
            try:
                await message.reply(messages.cannot_thread(e.text or str(e.status)))
            except discord.HTTPException as e2:
                log.error("discord: could not tell %s why not either: %s", message.author.id, e2)
            return
        self._tasks.spawn(self._answer(thread, place, pick, str(message.author.id), slot))

    async def _answer(
        self, thread: discord.abc.Messageable, place: Place, pick: Pick, user: str, slot: Slot
    ) -> None:
        key = str(getattr(thread, "id", ""))
        interval = self.settings.stream_interval
        preview = Preview(thread, interval) if interval else None
        answered: discord.Message | None = None  # the message holding the answer's first part
        first: DiscordMessage | None = None
        try:
            async with thread.typing():
                try:
                    reply = await self.core.ask(place, key, pick, user, on_text=preview)
                finally:
                    if preview is not None:
                        await preview.settle()
            first, *rest = answer_messages(reply.answer)
            view = feedback_view(reply.turn_id)  # 👍/👎 under the answer's last message
            none: Any = discord.utils.MISSING
            top = view if not rest else none
            if preview is not None and preview.message is not None:
                try:
                    await preview.message.edit(content=first.content, embeds=first.embeds, view=top)
                    answered = preview.message
                except discord.NotFound:  # the preview was deleted meanwhile
                    preview.message = None
            if answered is None:
                answered = await thread.send(content=first.content, embeds=first.embeds, view=top)
            for i, m in enumerate(rest, start=1):
                last = view if i == len(rest) else none
                await thread.send(content=m.content, embeds=m.embeds, view=last)
        except asyncio.CancelledError:  # shut down past the grace: say so where it was asked
            await self._report(thread, key, messages.interrupted(), preview, answered, first)
            raise
        except Exception as e:
            log.exception("discord: answering in thread %s failed", key)
            await self._report(thread, key, problem_line(e), preview, answered, first)
        finally:
            slot.release()

    async def _report(
        self,
        thread: discord.abc.Messageable,
        key: str,
        line: str,
        preview: Preview | None,
        answered: discord.Message | None,
        first: DiscordMessage | None,
    ) -> None:
        """Say what went wrong without taking back what was delivered: under the answer's first
        message when that got out (edited: posting more may be what failed; the part is cut to
        make room if it must), else in place of the preview, else as a new message."""
        try:
            if answered is not None and first is not None:
                marker = f"\n-# {line}"
                body = first.content or ""
                if len(body) + len(marker) > CONTENT_LIMIT:  # make room, visibly
                    body = body[: CONTENT_LIMIT - len(marker) - 1] + "…"
                await answered.edit(content=body + marker, embeds=first.embeds)
            elif preview is not None and preview.message is not None:
                await preview.message.edit(content=line, embeds=[])
            else:
                await thread.send(line)
        except discord.HTTPException as e2:
            log.error("discord: could not report the failure in %s: %s", key, e2)
