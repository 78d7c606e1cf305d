"""``repo-expert feedback NAME --unanswered`` and ``--export-eval FILE``: the questions users
asked that got no answer (the answerer said the sources don't hold it) or a 👎, listed, or
written as an eval question file skeleton (README, "Evaluating") with ``gold`` left empty for a
person to fill — so the questions users really ask become the next eval. ``eval`` refuses a
question whose gold is still empty, with a line saying so (``core/eval/metrics.py``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from core.errors import ConfigError
from core.retrieve.language import detect_language
from core.store.conversations import Unanswered

SKELETON_HEADER = """\
# Questions users asked about {name} that got no answer or a 👎
# (written by `repo-expert feedback {name} --export-eval`).
# For each: fill gold.paths (files that hold the answer) and/or gold.issues (issue numbers),
# check route (docs | code | issues: where the answer lives), add answer_facts if you can, then
# `repo-expert eval {name} --questions THIS_FILE`. A question whose gold is still empty is
# refused by eval with its id: fill it or delete it.
"""


def guess_route(sources: list[dict[str, Any]]) -> str:
    """Where the closest source the bot found lives: a starting point for the person filling
    the file (who checks it)."""
    for s in sources:
        if s.get("issue") is not None:
            return "issues"
        if s.get("collection") in ("docs", "code", "issues"):
            return str(s["collection"])
    return "docs"


def why(r: Unanswered) -> str:
    parts = (["no answer"] if r.no_answer else []) + ([f"{r.down} 👎"] if r.down else [])
    return ", ".join(parts)


def format_unanswered(name: str, records: list[Unanswered]) -> str:
    if not records:
        return f"{name}: every recorded question got an answer and no 👎"
    lines = [f"{name}: {len(records)} question(s) with no answer or a 👎 (newest first)"]
    for r in records:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created))
        lines.append(f"\n{when}  {why(r)}  {r.platform} (turn {r.turn_id})")
        lines.append(f"  Q: {r.question}")
        cited = [str(s.get("path") or (f"#{s['issue']}" if s.get("issue") else s.get("title")))
                 for s in r.sources]  # fmt: skip
        if cited:
            lines.append(f"  sources shown: {', '.join(cited[:6])}")
    return "\n".join(lines)


def skeleton(name: str, records: list[Unanswered]) -> str:
    """The eval file: one question per distinct question text (oldest turn's id), a comment
    above each with why it is here and what the bot showed."""
    seen: set[str] = set()
    out = [SKELETON_HEADER.format(name=name)]
    for r in sorted(records, key=lambda r: r.turn_id):
        key = " ".join(r.question.lower().split())
        if key in seen:
            continue
        seen.add(key)
        shown = ", ".join(str(s.get("path") or f"#{s.get('issue')}") for s in r.sources[:6])
        out.append(f"# turn {r.turn_id} on {r.platform}: {why(r)}; shown: {shown or 'nothing'}")
        item = {
            "id": f"{name}-turn-{r.turn_id}",
            "lang": detect_language(r.question) or "en",
            "route": guess_route(r.sources),
            "question": r.question,
            "gold": {"paths": [], "issues": []},
            "answer_facts": [],
        }
        out.append(yaml.safe_dump([item], allow_unicode=True, sort_keys=False, width=100))
    return "\n".join(out)


def write_skeleton(path: Path, name: str, records: list[Unanswered]) -> int:
    """Write the skeleton; returns how many questions it holds."""
    text = skeleton(name, records)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot write the eval file: {e.strerror or e}") from None
    return text.count("\n- id: ") + text.startswith("- id: ")


def unanswered_json(records: list[Unanswered]) -> str:
    return json.dumps([r.to_json() for r in records], ensure_ascii=False, indent=2)
