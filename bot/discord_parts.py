"""Two pieces of the Discord face kept apart from the event handling in ``discord.py``:

* 👍/👎 buttons under an answer, like Slack's: ``custom_id`` ``rx:feedback:up:TURN`` — no
  registered view, so a button keeps working after a restart; a click is read in
  ``on_interaction`` and stored like Slack's (the conversations store, ``record_feedback``).
* Application commands synced only when they changed: the SHA-256 of the command payload per
  application id is kept in ``{data}/discord-commands.json``; a start with the same payload
  makes no call (Discord rate-limits command updates, and a sync drops a command being typed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import discord

from core.store.conversations import Verdict

from . import messages

if TYPE_CHECKING:
    from discord import app_commands

log = logging.getLogger(__name__)

_FEEDBACK = re.compile(r"rx:feedback:(up|down):(\d{1,18})")


def feedback_view(turn_id: int) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    for verdict, label in (("up", messages.FEEDBACK_UP), ("down", messages.FEEDBACK_DOWN)):
        view.add_item(discord.ui.Button(label=label, style=discord.ButtonStyle.secondary,
                                        custom_id=f"rx:feedback:{verdict}:{turn_id}"))  # fmt: skip
    return view


def parse_feedback(custom_id: str) -> tuple[Verdict, int] | None:
    m = _FEEDBACK.fullmatch(custom_id)
    if m is None:
        return None
    verdict: Verdict = "up" if m.group(1) == "up" else "down"
    return verdict, int(m.group(2))


def command_digest(tree: app_commands.CommandTree[discord.Client]) -> str:
    payload = [c.to_dict(tree) for c in tree.get_commands()]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


async def sync_if_changed(
    tree: app_commands.CommandTree[discord.Client], app_id: int | None, path: Path
) -> bool:
    """Sync the commands unless the last sync of this application had the same payload."""
    digest, key = command_digest(tree), str(app_id)
    known = await asyncio.to_thread(_read, path)
    if known.get(key) == digest:
        log.info("discord: application commands unchanged since the last sync: not synced")
        return False
    synced = await tree.sync()
    log.info("discord: registered %d application command(s)", len(synced))
    known[key] = digest
    try:
        await asyncio.to_thread(_write, path, known)
    except OSError as e:  # the next start syncs again: harmless
        log.warning("discord: cannot record the synced commands in %s: %s", path, e)
    return True


def _read(path: Path) -> dict[str, str]:
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in known.items()} if isinstance(known, dict) else {}


def _write(path: Path, known: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=1), encoding="utf-8")
    os.replace(tmp, path)
