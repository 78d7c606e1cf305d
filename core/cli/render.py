"""How the command line shows things to a person: progress, index summaries, instance status,
answers with their sources. Plain text for a terminal; ``--json`` output is built elsewhere from
each object's ``to_json``."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, ClassVar

from tqdm import tqdm

from core.index.build import Summary
from core.models import Answer, Source


class ProgressBar:
    """Index progress on stderr (tqdm): the files chunked, then the chunks embedded, each with
    its rate and the time left. Silent when stderr is not a terminal (a log gets the summary)
    or when told to be (``--json``), and for a stage with nothing to do (no "0/0")."""

    # stage -> (label, what is counted, the rate's unit)
    STAGES: ClassVar[dict[str, tuple[str, str, str]]] = {
        "chunk": ("chunking ", "files", "files"),
        "embed": ("embedding", "chunks", "embeddings"),
        "read": ("reading  ", "chunks", "chunks"),  # the tuned reader (retrieval.reader)
    }

    def __init__(self, stream: Any = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = tty if enabled is None else enabled
        self.stage = ""
        self.bar: tqdm[Any] | None = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if stage != self.stage:
            self.close()
            self.stage = stage
            if total > 0:
                self.bar = self._open(stage, total)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            if done >= total:
                self.close()

    def _open(self, stage: str, total: int) -> tqdm[Any]:
        label, counted, rate = self.STAGES.get(stage, (stage, "", ""))
        width = _columns(self.stream)
        return tqdm(
            total=total, file=self.stream, desc=label, unit=f" {rate}", leave=True,
            bar_format="{desc} {n_fmt}/{total_fmt} " + counted
            + " |{bar}| {rate_fmt}, {elapsed} elapsed, ETA {remaining}",
            mininterval=0.25, dynamic_ncols=width > 0,
            # a terminal that reports no size (a pseudo-terminal nobody sized) hides tqdm bars
            ncols=None if width else 100, nrows=None if width else 24,
        )  # fmt: skip

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _columns(stream: Any) -> int:
    """The terminal's width, 0 when it reports none (a pseudo-terminal nobody sized)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, AttributeError, ValueError):
        return 0


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
        f"  time:       {s.seconds:.1f}s (embedding {s.embed_seconds:.1f}s"
        + (f", reader {s.read_seconds:.1f}s for {s.chunks_read} chunks" if s.chunks_read else "")
        + ")",
    ]
    if s.rebuilt_reason:
        lines.append(f"  rebuilt:    {s.rebuilt_reason}")
    if s.kept_live:
        lines.append("  build:      nothing changed; the live build is kept as it is")
    elif s.carried:
        *most, last = s.carried
        said = f"{', '.join(most)} and {last}" if most else last
        lines.append(f"  build:      {said} unchanged; carried from the live build")
    for name, r in s.repos.items():
        lines.append(f"  {name}: {_repo_line(r)}")
    return "\n".join(lines)


def _repo_line(r: dict[str, Any]) -> str:
    """One repository of several: commit, files, chunks, its error."""
    at = str(r.get("commit") or "")[:12] or "(no commit)"
    files = sum((r.get("files") or {}).values())
    chunks = ", ".join(f"{c} {n}" for c, n in (r.get("chunks") or {}).items()) or "none"
    err = f"; error: {r['error']}" if r.get("error") else ""
    return f"at {at}, {files} files, chunks {chunks}{err}"


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
    for r in st.get("repos") or []:
        lines.append(f"  repo {r['name']}: {r['source']}" + (f" @ {r['ref']}" if r["ref"] else "")
                     + f"\n    {_repo_line({**r, 'error': r.get('last_error')})}")  # fmt: skip
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
            where = f"{s.repo}{s.title}" if s.repo else s.title
        link = f"\n    {s.url}" if s.is_link() else ""  # else `where` is the pinned place
        out.append(f"[{s.n}] {where}{title}{link}")
        for p in s.passage_sources():  # further passages of the same file or thread
            name = f" — {p.symbol or p.title}" if (p.symbol or p.title) != p.path else ""
            plink = f"\n      {p.url}" if p.is_link() else ""
            out.append(f"    + {p.location()}{name}{plink}")
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
