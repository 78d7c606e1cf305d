"""An :class:`~core.models.Answer` as Slack Block Kit messages, within Slack's limits.

A message is the answer in ``section`` blocks (at most 3,000 characters of text each), an
optional note, a numbered *Sources* list (each entry a permalink labelled ``path:lines`` or
``#N``, then the title) and 👍/👎 buttons. A message holds at most 50 blocks; a longer answer
continues in further messages of the thread, each marked "part i of n" — nothing is cut.

Everything Slack parses — blocks and the fallback ``text`` alike — carries untrusted text
(questions, issue bodies, model output) only through :func:`escape`, so no ``<!channel>``, user
mention or link can be written by anyone but this module; only well-formed web URLs
(:func:`~bot.common.web_url`) become links.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.models import Answer, sub_markers

from . import messages
from .common import source_label, split_text, web_url

SECTION_TEXT_LIMIT = 3000
BLOCKS_PER_MESSAGE = 50
FALLBACK_CHARS = 300  # notification text; the blocks carry the content
FEEDBACK_UP, FEEDBACK_DOWN = "feedback_up", "feedback_down"

Block = dict[str, Any]


@dataclass
class SlackMessage:
    text: str  # the notification/fallback text
    blocks: list[Block]


def escape(text: str) -> str:
    """Slack mrkdwn control characters; everything else is shown as written."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


_MARKUP = re.compile(r"<([^<>]*)>")


def _plain(m: re.Match[str]) -> str:
    """Slack's markup as the words it shows: ``<@U1>`` → ``@U1``, ``<!channel>`` → ``@channel``,
    ``<#C1|general>`` → ``#general``, ``<url|label>`` → ``label``."""
    body, _, label = m.group(1).partition("|")
    if body[:1] in ("@", "#"):
        return body[0] + (label.lstrip("@#") or body[1:])
    if body[:1] == "!":  # special mentions; a user group or date shows its label
        return label or "@" + body[1:].split("^")[0]
    return label or body


def clean_text(text: str, bot_user: str | None) -> str:
    """What a person typed, from Slack's markup: the bot's mention removed, mentions and links
    as the words they show (so nothing the question says can ping or link when echoed),
    entities decoded."""
    if bot_user:
        text = text.replace(f"<@{bot_user}>", " ")
    text = _MARKUP.sub(_plain, text)
    return re.sub(r"[ \t]+", " ", unescape(text)).strip()


def fallback_text(text: str, limit: int = FALLBACK_CHARS) -> str:
    """A message's notification ``text`` (Slack parses it too): clipped, then escaped."""
    return escape(text if len(text) <= limit else text[: limit - 1] + "…")


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _linked_markers(text: str, answer: Answer) -> str:
    # Only web URLs become links: without a web_url a permalink is a bare "path#L3-L9".
    urls = {s.n: u for s in answer.sources if (u := web_url(s.url))}

    def link(m: re.Match[str]) -> str:
        url = urls.get(int(m.group(1)))
        return f"<{url}|[{m.group(1)}]>" if url else m.group(0)

    return sub_markers(link, text)  # a code span's `argv[0]` is not one


def source_lines(answer: Answer) -> list[str]:
    out = []
    for s in answer.sources:
        for i, part in enumerate([s, *s.passage_sources()]):  # its further passages after it
            where, what = source_label(part)
            url = web_url(part.url)
            label = f"<{url}|{escape(where)}>" if url else escape(where)
            head = f"*[{s.n}]*" if i == 0 else "      ↳"
            out.append(f"{head} {label}" + (f" {escape(what)}" if what else ""))
    return out


def _pack_lines(lines: list[str], limit: int) -> list[str]:
    """Whole lines into texts of at most ``limit`` characters (a longer line is split)."""
    out: list[str] = []
    cur = ""
    for line in lines:
        for piece in split_text(line, limit) if len(line) > limit else [line]:
            if cur and len(cur) + 1 + len(piece) > limit:
                out.append(cur)
                cur = ""
            cur = f"{cur}\n{piece}" if cur else piece
    if cur:
        out.append(cur)
    return out


def feedback_block(turn_id: int) -> Block:
    def button(label: str, action: str) -> dict[str, Any]:
        return {
            "type": "button",
            "text": {"type": "plain_text", "text": label, "emoji": True},
            "action_id": action,
            "value": str(turn_id),
        }

    return {
        "type": "actions",
        "block_id": f"feedback-{turn_id}",
        "elements": [
            button(messages.FEEDBACK_UP, FEEDBACK_UP),
            button(messages.FEEDBACK_DOWN, FEEDBACK_DOWN),
        ],
    }


def preview_message(text: str, section_limit: int = SECTION_TEXT_LIMIT) -> SlackMessage:
    """A streamed answer so far: one section (clipped with an ellipsis) and a "preview" line."""
    body = escape(text)
    if len(body) > section_limit:
        body = body[: section_limit - 1]
        amp = body.rfind("&", len(body) - 4)
        if amp >= 0 and ";" not in body[amp:]:
            body = body[:amp]  # never half an entity
        body += "…"
    return SlackMessage(
        text=fallback_text(text), blocks=[_section(body), _context(messages.WRITING)]
    )


def answer_messages(
    answer: Answer,
    turn_id: int | None,
    section_limit: int = SECTION_TEXT_LIMIT,
    max_blocks: int = BLOCKS_PER_MESSAGE,
) -> list[SlackMessage]:
    """The answer as one or more messages for the thread, in order."""
    body = _linked_markers(escape(answer.text), answer)
    blocks = [_section(p) for p in split_text(body, section_limit)]
    if answer.note:
        blocks.append(_context(escape(answer.note)))
    if answer.unsupported:
        blocks.append(_context(escape(messages.unsupported(answer.unsupported))))
    if answer.sources:
        blocks.append(_section(f"*{messages.SOURCES}*"))
        blocks += [_section(t) for t in _pack_lines(source_lines(answer), section_limit)]
    if turn_id is not None:
        blocks.append(feedback_block(turn_id))
    if len(blocks) <= max_blocks:
        groups = [blocks]
    else:
        per = max_blocks - 1  # one block for "part i of n"
        groups = [blocks[i : i + per] for i in range(0, len(blocks), per)]
    fallback = fallback_text(answer.text)  # the blocks hold all of it
    out = []
    for i, group in enumerate(groups, start=1):
        if len(groups) > 1:
            group = [*group, _context(messages.continued(i, len(groups)))]
        text = fallback if i == 1 else messages.continued(i, len(groups))
        out.append(SlackMessage(text=text, blocks=group))
    return out
