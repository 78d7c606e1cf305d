"""How an answer looks on Discord: text split at 2,000 characters, a numbered *Sources* embed,
the streamed preview's text, and :func:`inert` (untrusted text never makes a masked link)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import discord

from core.models import Answer

from . import messages
from .common import source_label, web_url
from .common import split_text as split

CONTENT_LIMIT = 2000
EMBED_DESCRIPTION_LIMIT = 4096
EMBED_TOTAL_LIMIT = 6000
EMBEDS_PER_MESSAGE = 10
SOURCES_COLOUR = 0x2B6CB0


@dataclass
class DiscordMessage:
    content: str | None
    embeds: list[discord.Embed] = field(default_factory=list)


_CODE = re.compile(r"(```.*?(?:```|$)|`[^`\n]*`)", re.S)


def inert(text: str) -> str:
    """``text`` with every masked link broken (``[github.com](https://evil)`` shows as
    ``[github.com] (https://evil)``: the real address, linked only as itself); code spans and
    blocks, where Discord renders no links, are left as written."""
    parts = _CODE.split(text)
    return "".join(p if i % 2 else p.replace("](", "] (") for i, p in enumerate(parts))


def _embed_size(e: discord.Embed) -> int:
    return len(e.title or "") + len(e.description or "")


def answer_messages(answer: Answer) -> list[DiscordMessage]:
    """Text split at 2,000 characters, then the sources embed(s) on the last text message."""
    text = answer.text + (f"\n-# {answer.note}" if answer.note else "")
    if answer.unsupported:
        text += f"\n-# {messages.unsupported(answer.unsupported)}"
    text = inert(text)
    out = [DiscordMessage(content=p) for p in split(text, CONTENT_LIMIT)]
    lines = []
    for s in answer.sources:
        for i, part in enumerate([s, *s.passage_sources()]):  # its further passages after it
            where, what = source_label(part)
            url = web_url(part.url)
            where = discord.utils.escape_markdown(where)
            label = f"[{where}]({url})" if url else where
            head = f"**[{s.n}]**" if i == 0 else "  ↳"
            lines.append(f"{head} {label} {inert(discord.utils.escape_markdown(what))}".rstrip())
    descriptions: list[str] = []
    for line in lines:
        for piece in split(line, EMBED_DESCRIPTION_LIMIT):
            if descriptions and len(descriptions[-1]) + 1 + len(piece) <= EMBED_DESCRIPTION_LIMIT:
                descriptions[-1] += "\n" + piece
            else:
                descriptions.append(piece)
    embeds = []
    for i, d in enumerate(descriptions, start=1):
        title = messages.SOURCES + (f" ({i}/{len(descriptions)})" if len(descriptions) > 1 else "")
        embeds.append(discord.Embed(title=title, description=d, colour=SOURCES_COLOUR))
    target = out[-1]
    for e in embeds:
        used = sum(_embed_size(x) for x in target.embeds)
        if len(target.embeds) >= EMBEDS_PER_MESSAGE or used + _embed_size(e) > EMBED_TOTAL_LIMIT:
            target = DiscordMessage(content=None)
            out.append(target)
        target.embeds.append(e)
    return out


def preview_content(text: str) -> str:
    """A streamed answer so far, clipped to one message, with the "preview" line under it."""
    marker = f"\n-# {messages.WRITING}"
    room = CONTENT_LIMIT - len(marker)
    body = text if len(text) <= room else text[: room - 1] + "…"
    return inert(body) + marker
