"""Helpers shared by the bot tests: extra instances with access rules on the ``sample`` repo, and
answerer wrappers around the real answerer (record, hold at a gate, lengthen, fail)."""

from __future__ import annotations

import asyncio
from typing import Any

from core.answer import Answerer, OnText
from core.models import Answer, Retrieval, Turn

# Discord ids are snowflakes (17-20 digits); Slack ids are letters and digits.
GUILD = 110000000000000003
GENERAL, SECRET_CH, TEAM_CH = 110000000000000100, 110000000000000900, 110000000000000901

# widget: public in workspace T1 / any guild, default in Slack CGEN and Discord GENERAL.
# secret: private; Slack channel CSECRET of T1 only, Discord GUILD's SECRET_CH only.
# team: public, but only Slack channel CTEAM and Discord TEAM_CH.
ACCESS = {
    "widget": "access: {slack: {workspaces: [T1], default_channels: [CGEN]},"
    f" discord: {{default_channels: [{GENERAL}]}}}}\n",
    "secret": "access: {private: true, slack: {workspaces: [T1], channels: [CSECRET]},"
    f" discord: {{guilds: [{GUILD}], channels: [{SECRET_CH}]}}}}\n",
    "team": f"access: {{slack: {{channels: [CTEAM]}}, discord: {{channels: [{TEAM_CH}]}}}}\n",
}


def add_instances(sample: dict[str, Any]) -> None:
    """Give ``widget`` access rules and add ``secret`` and ``team`` on the same repository."""
    inst = sample["tmp"] / "instances"
    base = (inst / "widget.yaml").read_text()
    (inst / "widget.yaml").write_text(base + ACCESS["widget"])
    for name in ("secret", "team"):
        (inst / f"{name}.yaml").write_text(base + ACCESS[name])


class RecordingAnswerer:
    """The real answerer, recording (question, conversation, answer text) of every call; can
    append ``expand`` numbered paragraphs to the answer, or raise ``fail``."""

    def __init__(self, inner: Answerer) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[str, list[Turn] | None, str]] = []
        self.expand = 0
        self.fail: BaseException | None = None

    async def answer(
        self,
        question: str,
        retrieval: Retrieval,
        conversation: list[Turn] | None = None,
        on_text: OnText | None = None,
    ) -> Answer:
        if self.fail is not None:
            raise self.fail
        a = await self.inner.answer(question, retrieval, conversation, on_text)
        if self.expand:
            a.text += "".join(f"\n\nparagraph {i} of the long answer." for i in range(self.expand))
        self.calls.append((question, conversation, a.text))
        return a


class GatedAnswerer:
    """Holds every answer until ``release`` is set: a slow core."""

    def __init__(self, inner: Answerer) -> None:
        self.inner = inner
        self.name = inner.name
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def answer(
        self,
        question: str,
        retrieval: Retrieval,
        conversation: list[Turn] | None = None,
        on_text: OnText | None = None,
    ) -> Answer:
        self.entered.set()
        await self.release.wait()
        return await self.inner.answer(question, retrieval, conversation, on_text)


class StreamingAnswerer:
    """A model that streams: ``on_text`` gets ``steps`` growing prefixes of ``preview`` (default:
    the real answer's text) ``gap`` seconds apart, then the real answer is returned."""

    def __init__(self, inner: Answerer, steps: int = 20, gap: float = 0.05) -> None:
        self.inner = inner
        self.name = inner.name
        self.steps, self.gap = steps, gap
        self.preview: str | None = None

    async def answer(
        self,
        question: str,
        retrieval: Retrieval,
        conversation: list[Turn] | None = None,
        on_text: OnText | None = None,
    ) -> Answer:
        a = await self.inner.answer(question, retrieval, conversation)
        text = self.preview if self.preview is not None else a.text
        if on_text is not None:
            for i in range(1, self.steps + 1):
                await on_text(text[: max(1, len(text) * i // self.steps)])
                await asyncio.sleep(self.gap)
        return a


def section_texts(blocks: list[dict[str, Any]]) -> list[str]:
    """The mrkdwn texts of section and context blocks, in order."""
    out = []
    for b in blocks:
        if b["type"] == "section":
            out.append(b["text"]["text"])
        elif b["type"] == "context":
            out += [e["text"] for e in b["elements"]]
    return out
