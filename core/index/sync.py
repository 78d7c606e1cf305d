"""One incremental sync of an instance, and its recorded status (``sync --watch`` repeats it:
``core/cli/watch.py``).

A sync is: fetch the repository (a ``url`` clone; a local ``path`` is read as it is), bring the
GitHub issues mirror up to date (``ingest/mirror.py``), then update the index — only
files ``git diff`` names and issues whose text changed are chunked and embedded, and the new build
is swapped in atomically, so questions keep being answered from the previous build meanwhile.

Failures are kept apart: if GitHub's API is down or rate-limited, the code is still indexed with
the issues mirrored so far (the error is recorded, and the next sync resumes the mirror); if the
repository cannot be fetched, the clone already on disk is indexed. Only a failed index build
fails the sync. Every sync records its time, outcome and error in the instance's state file, which
``repo-expert status`` shows (:func:`instance_status`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.config import Instance
from core.embed.service import EmbedService
from core.errors import RateLimited, RepoExpertError, SourceError
from core.index.build import Progress, Summary, build_index, load_issues
from core.ingest.github import ClientOptions
from core.ingest.issues import Issue
from core.ingest.mirror import ISSUES_MARK, MirrorReport, mirrored_issues, sync_and_read
from core.ingest.repo import checkout
from core.store.local import IndexReader, current_build
from core.store.state import StateDB, state_path

log = logging.getLogger(__name__)


@dataclass
class SyncReport:
    instance: str
    started_at: float
    seconds: float = 0.0
    commit_before: str | None = None
    commit: str | None = None
    summary: Summary | None = None
    issues: MirrorReport | None = None
    errors: list[str] = field(default_factory=list)
    retry_at: float | None = None  # a rate limit said: not before then

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "ok": self.ok,
            "started_at": self.started_at,
            "seconds": round(self.seconds, 3),
            "commit_before": self.commit_before,
            "commit": self.commit,
            "index": self.summary.to_json() if self.summary else None,
            "issues": self.issues.to_json() if self.issues else None,
            "errors": self.errors,
            "retry_at": self.retry_at,
        }

    def line(self) -> str:
        """One line for people: what changed, what was embedded, what failed."""
        parts = [f"synced {self.instance}"]
        if self.commit:
            before = self.commit_before[:12] if self.commit_before else "none"
            parts.append(
                f"at {self.commit[:12]}"
                if before == self.commit[:12]
                else f"{before} → {self.commit[:12]}"
            )
        s = self.summary
        if s is not None:
            parts.append(
                f"files read {s.files_read}, units changed {s.units_changed} (deleted "
                f"{s.units_deleted}), chunks embedded {s.chunks_embedded}"
            )
        if self.issues is not None:
            i = self.issues
            parts.append(
                f"issues: {i.changed} new/updated, {i.comments_fetched} comment lists, "
                f"{i.removed} removed, {i.requests} API requests"
            )
        parts.append(f"{self.seconds:.1f}s")
        line = "; ".join(parts)
        return line + "".join(f"\n  error: {e}" for e in self.errors)


async def _previous_commit(data_dir: Path, name: str) -> str | None:
    path = current_build(data_dir, name)
    if path is None:
        return None
    r = await IndexReader.open(path)
    try:
        c = r.meta.get("commit")
        return str(c) if c else None
    finally:
        await r.close()


async def sync_instance(
    inst: Instance,
    data_dir: Path,
    embedder: EmbedService,
    *,
    repo: bool = True,
    issues: bool = True,
    numbers: Iterable[int] = (),
    full: bool = False,
    refetch_issues: bool = False,
    progress: Progress | None = None,
    options: ClientOptions | None = None,
) -> SyncReport:
    """Run one sync (callers hold the instance's build lock; see ``RepoExpert.sync``)."""
    report = SyncReport(inst.name, started_at=time.time())
    t0 = time.perf_counter()
    wanted = set(numbers)
    report.commit_before = await _previous_commit(data_dir, inst.name)
    try:
        try:
            co = await checkout(inst, data_dir, fetch=repo)
        except SourceError as e:
            if not (inst.repo.url and (data_dir / inst.name / "checkout" / ".git").exists()):
                raise
            report.errors.append(f"repository: {e}")
            co = await checkout(inst, data_dir, fetch=False)
        issue_list: list[Issue] | None = None
        if inst.issues.github:
            if issues or wanted:
                try:
                    report.issues, issue_list = await sync_and_read(
                        inst, data_dir, numbers=wanted, refetch=refetch_issues,
                        options=options,
                    )  # fmt: skip
                except SourceError as e:
                    report.errors.append(f"issues: {e}")
                    if isinstance(e, RateLimited):
                        report.retry_at = e.reset_at
            if issue_list is None:
                issue_list = await mirrored_issues(inst, data_dir)
        else:
            issue_list = await load_issues(inst, data_dir)
        report.summary = await build_index(
            inst, data_dir, embedder, progress, full=full, co=co, issues=issue_list
        )
        report.commit = report.summary.commit
    except RepoExpertError as e:
        report.errors.append(str(e))
        raise
    except Exception as e:  # a bug or an unexpected failure: never recorded as a success
        report.errors.append(f"unexpected {type(e).__name__}: {e}")
        raise
    finally:
        report.seconds = time.perf_counter() - t0
        await _record(data_dir, report)
    return report


async def _record(data_dir: Path, report: SyncReport) -> None:
    values: dict[str, Any] = {
        "last_sync_at": report.started_at,
        "last_sync_seconds": report.seconds,
        "last_sync_ok": report.ok,
        "last_sync": report.to_json(),
    }
    if report.errors:
        values["last_error"] = "; ".join(report.errors)
        values["last_error_at"] = report.started_at
    async with await StateDB.open(state_path(data_dir, report.instance)) as db:
        await db.put(**values)


async def instance_status(inst: Instance, data_dir: Path) -> dict[str, Any]:
    """What `repo-expert status` shows for one instance (reads files only; no network)."""
    out: dict[str, Any] = {
        "instance": inst.name,
        "source": inst.repo.url or str(inst.resolve(inst.repo.path or ".")),
        "ref": inst.repo.ref,
        "issues_source": f"github:{inst.issues.github}" if inst.issues.github else inst.issues.file,
        "indexed_commit": None,
        "built_at": None,
        "chunks": {},
    }
    build = current_build(data_dir, inst.name)
    if build is not None:
        r = await IndexReader.open(build)
        try:
            out["indexed_commit"] = r.meta.get("commit")
            out["built_at"] = r.meta.get("built_at")
            out["chunks"] = dict((r.meta.get("summary") or {}).get("chunks") or {})
        finally:
            await r.close()
    path = state_path(data_dir, inst.name)
    keys = ("last_sync_at", "last_sync_seconds", "last_sync_ok", "last_error", "last_error_at")
    out.update(dict.fromkeys(keys))
    out["issues_mark"] = None
    if path.exists():
        async with await StateDB.open(path) as db:
            for k in keys:
                out[k] = await db.get(k)
            out["issues_mark"] = await db.get(ISSUES_MARK)
            if inst.issues.github:
                out["issues_mirror"] = await db.counts()
    return out
