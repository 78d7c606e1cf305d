"""One update of an instance — ``index``, ``sync``, a webhook's sync, the first question's
build are all this — and its recorded status (``sync --watch`` repeats it: ``core/cli/watch.py``).

An update is: gather the sources (``ingest/gather.py``: fetch the repository, bring the GitHub
issues mirror up to date, with their fallbacks), then build (``build.py``) — only files ``git
diff`` names and issues whose text changed are chunked and embedded, and the new build is swapped
in atomically, so questions keep being answered from the previous build meanwhile. Only a failed
build fails the update; a failed fetch or API call is recorded and the update goes on with what is
on disk. Every update records its time, outcome and errors in the instance's state file, which
``repo-expert status`` shows (:func:`instance_status`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from core.config import Instance, is_multi, redact, repo_views
from core.embed import EmbedService
from core.errors import IndexError_, RepoExpertError
from core.index.build import Progress, Summary, build_index
from core.ingest.gather import SyncRequest, gather
from core.ingest.github import ClientOptions
from core.ingest.mirror import ISSUES_MARK, MirrorReport
from core.ingest.repo import checkout
from core.layout import Layout
from core.store.base import IndexStore
from core.store.shared import StateOpener, state_of

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
                + (" (nothing changed: live build kept)" if s.kept_live else "")
            )
        if self.issues is not None:
            i = self.issues
            parts.append(
                f"issues: {i.changed} new/updated, {i.comments_fetched} comment lists, "
                f"{i.removed} removed, {i.requests} API requests"
            )
        parts.append(f"{self.seconds:.1f}s")
        line = "; ".join(parts)
        for name, r in (s.repos if s is not None else {}).items():
            at = str(r.get("commit") or "")[:12] or "(no commit)"
            line += (f"\n  {name}: at {at}, units changed {r['units_changed']}, "
                     f"new chunks {r['chunks_new']}")  # fmt: skip
            if r.get("error"):
                line += f" — not updated: {r['error']}" if r.get("stale") else " (with errors)"
        return line + "".join(f"\n  error: {e}" for e in self.errors)


async def sync_instance(
    inst: Instance,
    layout: Layout,
    store: IndexStore,
    embedder: EmbedService,
    request: SyncRequest,
    progress: Progress | None = None,
    options: ClientOptions | None = None,
    state: StateOpener | None = None,
) -> SyncReport:
    """Run one update (callers hold the instance's build lock; see ``RepoExpert.sync``).
    ``state``: a shared store's state (default: the instance's state file)."""
    report = SyncReport(inst.name, started_at=time.time())
    t0 = time.perf_counter()
    try:
        live = await store.live_meta(inst.name)
    except IndexError_:  # a damaged live build: the build below says so, and rebuilds it
        live = None
    report.commit_before = str(live["commit"]) if live and live.get("commit") else None
    try:
        sources = await gather(inst, layout, request, options, state)
        report.issues, report.retry_at = sources.mirror, sources.retry_at
        report.errors.extend(sources.errors)
        report.summary = await build_index(
            inst, sources, store, embedder, progress, full=request.full
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
        report.errors = [redact(e) for e in report.errors]  # whatever echoed a token
        await _record(layout, report, state)
    return report


async def _record(layout: Layout, report: SyncReport, state: StateOpener | None) -> None:
    values: dict[str, Any] = {
        "last_sync_at": report.started_at,
        "last_sync_seconds": report.seconds,
        "last_sync_ok": report.ok,
        "last_sync": report.to_json(),
    }
    if report.errors:
        values["last_error"] = "; ".join(report.errors)
        values["last_error_at"] = report.started_at
    async with state_of(layout, state)(report.instance) as db:
        await db.put(**values)


def _source(inst: Instance) -> str:
    return inst.repo.url or str(inst.resolve(inst.repo.path or "."))


async def instance_status(
    inst: Instance, layout: Layout, store: IndexStore, state: StateOpener | None = None
) -> dict[str, Any]:
    """What `repo-expert status` shows for one instance (reads the store only; no network)."""
    views = repo_views(inst)
    out: dict[str, Any] = {
        "instance": inst.name,
        "source": ", ".join(_source(v) for v in views),
        "ref": inst.repo.ref,
        "issues_source": f"github:{inst.issues.github}" if inst.issues.github else inst.issues.file,
        "indexed_commit": None,
        "built_at": None,
        "chunks": {},
    }
    try:
        meta = await store.live_meta(inst.name)
    except IndexError_ as e:
        meta, out["live_build_error"] = None, str(e)
    if meta is not None:
        out["indexed_commit"] = meta.get("commit")
        out["built_at"] = meta.get("built_at")
        out["chunks"] = dict((meta.get("summary") or {}).get("chunks") or {})
    if is_multi(inst):  # per repository: commit, files, chunks, its last error
        built = (meta or {}).get("repos") or {}
        out["repos"] = [
            {"name": v.repo_name, "source": _source(v), "ref": v.repo.ref,
             **{k: (built.get(v.repo_name) or {}).get(k) for k in ("commit", "files", "chunks")},
             "last_error": (built.get(v.repo_name) or {}).get("error")}
            for v in views
        ]  # fmt: skip
    keys = ("last_sync_at", "last_sync_seconds", "last_sync_ok", "last_error", "last_error_at")
    out.update(dict.fromkeys(keys))
    out["issues_mark"] = None
    if state is not None or layout.state(inst.name).exists():
        async with state_of(layout, state)(inst.name) as db:
            for k in keys:
                out[k] = await db.get(k)
            out["issues_mark"] = await db.get(ISSUES_MARK)
            if inst.issues.github:
                out["issues_mirror"] = await db.counts()
    return out


async def behind(inst: Instance, layout: Layout, store: IndexStore) -> list[str]:
    """The repositories of ``inst`` read from a local folder whose commit is no longer the one
    its live build indexed ("widget is at 1a2b3c4, its index at 9f8e7d6"). Reads git and the
    store only: a cloned ``url`` is left alone (it moves only when a sync fetches it, and the
    sync indexes it too)."""
    try:
        meta = await store.live_meta(inst.name)
    except IndexError_:
        return []
    if not meta:
        return []
    multi = is_multi(inst)
    out = []
    for v in repo_views(inst):
        if not v.repo.path:
            continue
        built = ((meta.get("repos") or {}).get(v.repo_name) or {}) if multi else meta
        indexed = built.get("commit")
        try:
            now = (await checkout(v, layout, fetch=False)).commit
        except RepoExpertError:  # the folder is gone: the next index says so
            continue
        if indexed and now and now != indexed:
            out.append(f"{v.repo_name or inst.name} is at {now[:7]}, its index at {indexed[:7]}")
    return out
