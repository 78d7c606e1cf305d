"""Support-channel mode on Discord (``bot/support.py`` has the rules): a new top-level message
of a support text channel gets a thread with the answer, a new post of a support **forum
channel** (a thread whose starter message has the thread's id) is answered in that post — both
only when retrieval is confident and an answer was found; otherwise nothing is posted (or the
message gets ``reaction``). "no bot" in a thread, or 🚫/⛔/``stop_reaction`` on a message, stops
unasked answers there."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import discord

from core.models import MAX_QUESTION_CHARS

from . import messages
from .common import Pick, Place, Refusal
from .discord_parts import feedback_view
from .discord_render import answer_messages
from .settings import SupportChannel

if TYPE_CHECKING:
    from .common import ChatCore
    from .support import Support


class SupportHost(Protocol):
    """What support mode uses of :class:`bot.discord.DiscordBot` (no import cycle)."""

    core: ChatCore
    support: Support

    @property
    def user(self) -> discord.ClientUser | None: ...

    def spawn(self, coro: Any) -> None: ...
    def _question(self, message: discord.Message) -> str: ...
    def get_channel(self, id: int, /) -> Any: ...
    async def fetch_channel(self, channel_id: int, /) -> Any: ...


log = logging.getLogger(__name__)

WORKING = "👀"
STOP_EMOJI = frozenset({"🚫", "⛔"})


def is_stop_emoji(bot: SupportHost, emoji: str) -> bool:
    return emoji in STOP_EMOJI or emoji == bot.support.settings.stop_reaction


async def in_thread(bot: SupportHost, message: discord.Message, channel: Any) -> bool:
    """A message (not mentioning the bot) in a thread: True when support mode took it — a stop
    word, a thread people stopped, or a new forum post of a support forum."""
    key = str(channel.id)
    if bot.support.says_stop(message.content):
        bot.support.stop(key)
        bot.support.count(bot.core, "stopped")
        return True
    if bot.support.stopped(key):
        return True
    if message.id != channel.id:  # not a forum post's starter message
        return False
    if isinstance(channel, discord.PartialMessageable):
        channel = await bot.fetch_channel(channel.id)
    parent = getattr(channel, "parent_id", None)
    ch = bot.support.channel(str(parent)) if parent else None
    if ch is None:
        return False
    place = Place("discord", str(message.guild.id) if message.guild else None, str(parent))
    bot.spawn(answer_unasked(bot, message, place, ch, channel))
    return True


def in_channel(bot: SupportHost, message: discord.Message, channel: Any) -> bool:
    """A new top-level message of a support text channel: True when support mode took it."""
    ch = bot.support.channel(str(channel.id))
    if ch is None:
        return False
    if bot.support.says_stop(message.content):  # "no bot" in the question itself
        bot.support.stop(str(message.id))
        bot.support.count(bot.core, "stopped")
        return True
    place = Place("discord", str(message.guild.id) if message.guild else None, str(channel.id))
    bot.spawn(answer_unasked(bot, message, place, ch, None))
    return True


async def answer_unasked(
    bot: SupportHost,
    message: discord.Message,
    place: Place,
    ch: SupportChannel,
    thread: discord.abc.Messageable | None,
) -> None:
    """Answer in ``thread`` (a forum post), or in a new thread on ``message``; or stay quiet."""
    core, text = bot.core, bot._question(message)
    name = ch.instance or core.access.default(place)
    if not text or len(text) > MAX_QUESTION_CHARS or name is None:
        return
    if not core.access.allows(name, place):
        log.warning("discord: support channel %s: instance %s is not allowed there", ch.channel,
                    name)  # fmt: skip
        return
    slot = core.limits.admit(f"discord:{message.author.id}")
    if isinstance(slot, Refusal):
        return  # unasked: no refusal to anyone
    key = str(message.id)  # a thread on a message, and a forum post, have the message's id
    reacted = False
    try:
        found = await bot.support.confident(core, name, text, ch)
        if found is None:
            await unsure(message, ch)
            return
        reacted = await react(message, WORKING)
        reply = await core.ask(place, key, Pick(name, text), str(message.author.id),
                               retrieval=found)  # fmt: skip
        if reply.answer.no_answer:  # the answerer found nothing: stay out of it
            bot.support.stop(key)
            bot.support.count(core, "silent")
            await unsure(message, ch)
            return
        if thread is None:
            thread = await message.create_thread(name=messages.thread_name(text))
        parts = answer_messages(reply.answer)
        view = feedback_view(reply.turn_id)
        for i, m in enumerate(parts, start=1):
            last: Any = view if i == len(parts) else discord.utils.MISSING
            await thread.send(content=m.content, embeds=m.embeds, view=last)
        bot.support.count(core, "answered")
    except Exception:
        log.exception("discord: support answer in %s failed (nothing more is posted)", ch.channel)
    finally:
        slot.release()
        if reacted:
            await unreact(bot, message, WORKING)


async def unsure(message: discord.Message, ch: SupportChannel) -> None:
    if ch.otherwise == "react":
        await react(message, ch.reaction or "🤔")


async def react(message: discord.Message, emoji: str) -> bool:
    try:
        await message.add_reaction(emoji)
        return True
    except discord.HTTPException as e:  # a nicety: without the permission nothing is lost
        log.warning("discord: cannot react in %s: %s", message.channel.id, e)
        return False


async def unreact(bot: SupportHost, message: discord.Message, emoji: str) -> None:
    if bot.user is None:
        return
    try:
        await message.remove_reaction(emoji, bot.user)
    except discord.HTTPException as e:
        log.warning("discord: cannot remove a reaction in %s: %s", message.channel.id, e)


def on_reaction(bot: SupportHost, payload: discord.RawReactionActionEvent) -> None:
    """A stop reaction on a message of a support channel or of a thread in one stops unasked
    answers in that thread (a thread on a message has the message's id)."""
    if not bot.support or not is_stop_emoji(bot, str(payload.emoji)):
        return
    channel: Any = bot.get_channel(payload.channel_id)
    parent = getattr(channel, "parent_id", None)
    if bot.support.channel(str(payload.channel_id)) is not None:
        bot.support.stop(str(payload.message_id))
    elif parent is not None and bot.support.channel(str(parent)) is not None:
        bot.support.stop(str(payload.channel_id))
    else:
        return
    bot.support.count(bot.core, "stopped")
