"""How the command line shows things to a person: progress, index summaries, instance status,
answers with their sources. Plain text for a terminal; ``--json`` output is built elsewhere from
each object's ``to_json``."""

from __future__ import annotations

import sys
import time
from typing import Any

from core.index.build import Summary
from core.models import Answer, Source


class ProgressBar:
    """Indexing progress on stderr: chunking, then embedding with embeddings/s."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.stage = ""
        self.last = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if stage != self.stage:
            if self.stage and self.tty:
                self.stream.write("\n")
            self.stage, self.t0 = stage, now
        if not self.tty and done not in (0, total) and now - self.last < 5:
            return  # in logs, a line every few seconds is enough
        self.last = now
        width = 30
        filled = int(width * done / total) if total else width
        bar = "█" * filled + "·" * (width - filled)
        rate = done / (now - self.t0) if now > self.t0 and done else 0.0
        unit = "files" if stage == "chunk" else "embeddings"
        msg = f"{stage:<6}[{bar}] {done}/{total} {unit} {rate:.1f}/s"
        if self.tty:
            self.stream.write("\r" + msg)
            if done >= total:
                self.stream.write("\n")
                self.stage = ""
        else:
            self.stream.write(msg + "\n")
        self.stream.flush()


def format_summary(s: Summary) -> str:
    chunks = ", ".join(f"{c} {n}" for c, n in s.chunks.items())
    files = ", ".join(f"{c} {n}" for c, n in s.files.items()) or "none"
    excluded = sum(s.excluded.values())
    lines = [
        f"indexed {s.instance} at {s.commit[:12] if s.commit else '(not a git commit)'}",
        f"  units:      {files}  (changed {s.units_changed}, reused {s.units_reused}, "
        f"deleted {s.units_deleted})",
        f"  chunks:     {chunks}  (embedded now: {s.chunks_embedded})",
        f"  symbols:    {s.symbols}",
        f"  largest chunk: {s.largest_chunk_tokens} tokens; over the {s.window}-token window: "
        f"{s.over_window}",
        f"  excluded:   {excluded} files"
        + "".join(f"\n    {n:>5}  {why}" for why, n in sorted(s.excluded.items())),
        f"  time:       {s.seconds:.1f}s (embedding {s.embed_seconds:.1f}s)",
    ]
    if s.rebuilt_reason:
        lines.append(f"  rebuilt:    {s.rebuilt_reason}")
    return "\n".join(lines)


def format_status(st: dict[str, Any]) -> str:
    def when(t: Any) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "never"

    chunks = ", ".join(f"{c} {n}" for c, n in st["chunks"].items()) or "no index"
    ok = {True: "ok", False: "failed", None: ""}[st["last_sync_ok"]]
    lines = [
        f"{st['instance']}",
        f"  source:        {st['source']}" + (f" @ {st['ref']}" if st["ref"] else ""),
        f"  indexed:       {st['indexed_commit'] or '(no commit)'}  built {when(st['built_at'])}",
        f"  chunks:        {chunks}",
        f"  last sync:     {when(st['last_sync_at'])} {ok}".rstrip(),
        f"  issues:        {st['issues_source'] or 'none'}",
    ]
    if st.get("issues_mirror"):
        m = st["issues_mirror"]
        lines.append(
            f"  issues mark:   {st['issues_mark'] or 'none'}  ({m['stored']} mirrored, "
            f"{m['pull_requests']} PRs, {m['pending_comments']} awaiting comments)"
        )
    if st.get("live_build_error"):
        lines.append(f"  live build:    {st['live_build_error']}")
    if st["last_error"]:
        lines.append(f"  last error:    {when(st['last_error_at'])}: {st['last_error']}")
    return "\n".join(lines)


def render_sources(sources: list[Source]) -> str:
    out = []
    for s in sources:
        where = s.location()
        title = "" if s.collection == "issues" else f" — {s.title}" if s.title != s.path else ""
        if s.collection == "issues":
            where = s.title
        out.append(f"[{s.n}] {where}{title}\n    {s.url}")
    return "\n".join(out)


def render_answer(answer: Answer) -> str:
    parts = [f"Note: {answer.note}"] if answer.note else []
    parts.append(answer.text)
    if answer.unsupported:
        flagged = "\n".join(f"  ! {s}" for s in answer.unsupported)
        parts.append(f"Not supported by the sources they cite (check before relying on them):\n"
                     f"{flagged}")  # fmt: skip
    if answer.sources:
        parts.append(f"Sources:\n{render_sources(answer.sources)}")
    return "\n\n".join(parts)
