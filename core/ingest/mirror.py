"""Issues and pull requests of a GitHub repository, mirrored incrementally into the state file.

One sync (:func:`sync_mirror`):

1. Issues named by a webhook are fetched one by one (a 404/410/301 removes them: deleted or
   transferred) and their comments are marked for re-fetching.
2. The issues listing (pull requests included: they carry a ``pull_request`` key) is read with
   ``since=<high-water mark>``, ``sort=updated&direction=asc``, page by page (see ``_Listing``:
   re-anchored on ``since``, the ``Link`` header within one timestamp). Each page is stored
   *together with* the new mark in one transaction, so an interrupted sync resumes after the last
   stored page and never loses or duplicates an issue (rows are keyed by number). The mark is the
   newest ``updated_at`` stored, but never later than the server's clock when the listing
   started. ``since`` goes out a second before the mark, so the issue at the mark comes back on
   every sync: that first page is unchanged when nothing happened, and then its ``ETag`` makes
   the next request a free 304.
3. The repository-wide comment listings (``/issues/comments`` and ``/pulls/comments`` with
   ``since=``) name the issues whose comments were added or *edited* since their own marks; those
   issues' comments are marked for re-fetching.
4. Every issue whose ``updated_at`` changed (a new comment, a closed/reopened state, an edit) or
   that was marked has its full comment list fetched again (issue comments and, for pull
   requests, review comments) — so edited and deleted comments are replaced, not patched. Only
   issues the filters keep are fetched; the others wait until the filters keep them.

``refetch`` lists everything again and drops mirrored issues the listing no longer shows; a changed
comment count then re-fetches that issue's comments (GitHub's incremental listings cannot show a
deleted comment or issue; webhooks report them at once). A sync does this by itself every
``issues.full_listing_hours``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from core.config import Instance, IssuesConfig
from core.errors import SourceError
from core.ingest.github import ClientOptions, GitHubClient, Page
from core.ingest.issues import Comment, Issue, closing_refs, keep_issue
from core.layout import Layout
from core.store.shared import State, StateOpener, state_of
from core.store.state import IssueRow

log = logging.getLogger(__name__)

ISSUES_MARK, COMMENTS_MARK, REVIEWS_MARK = "issues_mark", "comments_mark", "review_comments_mark"
FULL_LISTING = "last_full_listing"


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@dataclass
class MirrorReport:
    listed: int = 0  # issues and pull requests received from listings
    changed: int = 0  # of them new or changed (stored)
    removed: int = 0  # deleted or transferred
    comments_fetched: int = 0  # issues whose full comment list was fetched
    not_modified: int = 0  # listings answered 304 Not Modified
    requests: int = 0
    mark: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def token_for(cfg: IssuesConfig) -> str | None:
    if cfg.token is not None:
        return cfg.token.get_secret_value() or None
    return os.environ.get("GITHUB_TOKEN") or None


def client_for(cfg: IssuesConfig, options: ClientOptions | None = None) -> GitHubClient:
    assert cfg.github
    return GitHubClient(cfg.github, api_url=cfg.api_url, token=token_for(cfg), options=options)


# -- API shapes → mirror rows → Issue ----------------------------------------------------------
def row_from_api(obj: dict[str, Any]) -> IssueRow:
    pr = obj.get("pull_request")
    state = str(obj.get("state") or "open").lower()
    if isinstance(pr, dict) and pr.get("merged_at"):
        state = "merged"
    user = obj.get("user") if isinstance(obj.get("user"), dict) else {}
    data = {
        "title": str(obj.get("title") or ""),
        "body": str(obj.get("body") or ""),
        "labels": [
            str(lb.get("name") if isinstance(lb, dict) else lb) for lb in obj.get("labels") or []
        ],
        "url": str(obj.get("html_url") or ""),
        "author": str((user or {}).get("login") or ""),
        "created_at": str(obj.get("created_at") or ""),
        "closed_at": str(obj.get("closed_at") or ""),
        "comments": int(obj.get("comments") or 0),
    }
    return IssueRow(
        number=int(obj["number"]),
        is_pr=isinstance(pr, dict),
        state=state,
        updated_at=str(obj.get("updated_at") or ""),
        data=data,
    )


def comment_from_api(obj: dict[str, Any], review: bool) -> dict[str, Any]:
    user = obj.get("user") if isinstance(obj.get("user"), dict) else {}
    c = {
        "id": obj.get("id"),
        "author": str((user or {}).get("login") or "unknown"),
        "created_at": str(obj.get("created_at") or ""),
        "body": str(obj.get("body") or ""),
    }
    if review:
        c["path"] = str(obj.get("path") or "")
        c["line"] = obj.get("line") or obj.get("original_line")
    return c


def row_to_issue(row: IssueRow) -> Issue:
    d = row.data
    comments = tuple(
        Comment(str(c["author"]), str(c["created_at"]), str(c["body"]), c.get("path"),
                c.get("line"))
        for c in row.comments
    )  # fmt: skip
    return Issue(
        number=row.number,
        title=str(d.get("title", "")),
        state=row.state,
        labels=tuple(d.get("labels", [])),
        body=str(d.get("body", "")),
        comments=comments,
        url=str(d.get("url", "")),
        created_at=str(d.get("created_at", "")),
        closed_at=str(d.get("closed_at", "")),
        is_pr=row.is_pr,
        updated_at=row.updated_at,
        files=tuple(row.files),
        fixes=closing_refs(str(d.get("body", ""))) if row.is_pr else (),
    )


def _number_from(url: Any, kind: str) -> int | None:
    m = re.search(rf"/{kind}/(\d+)$", str(url or ""))
    return int(m.group(1)) if m else None


# -- the sync ----------------------------------------------------------------------------------
def _shift(stamp: str, seconds: float) -> str:
    try:
        t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return stamp
    return iso(t + seconds)


class _Listing:
    """One incremental listing, oldest update first, from ``since`` = its mark.

    Pages are read by *re-anchoring*: when a page is full, the next request asks again for page
    1 with ``since`` moved to the page's newest ``updated_at`` (less a second, in case ``since``
    is exclusive) instead of following ``rel="next"``. Page numbers shift when an issue is updated
    mid-listing (it jumps to the end and every later item moves one place up, so the first item
    of the next page would slip into a page already read); a re-anchored request cannot skip
    anything. Only a run of a whole page sharing one timestamp, where re-anchoring cannot
    advance, follows the ``Link`` header's next page."""

    def __init__(self, gh: GitHubClient, db: State, report: MirrorReport) -> None:
        self.gh, self.db, self.report = gh, db, report
        self.started: float | None = None  # server clock when the listing's first page came
        self.not_modified = False  # answered 304: nothing changed since the last identical listing

    async def pages(self, url: str, params: dict[str, Any]) -> AsyncGenerator[Page, None]:
        params = dict(params)
        if "since" in params:
            params["since"] = _shift(params["since"], -1)
        key = f"{url}?{urlencode(sorted(params.items()))}"
        etag = await self.db.etag(key)
        first = True
        save: str | None = None
        while True:
            anchored = False
            async with aclosing(self.gh.pages(url, params, etag if first else None)) as pages:
                async for page in pages:
                    if page.not_modified:
                        self.report.not_modified += 1
                        self.not_modified = True
                        return
                    if first:
                        first = False
                        self.started = page.server_time
                        # An ETag is only safe when the first page is the whole listing: a new
                        # item then necessarily changes it (otherwise it could land on page 2
                        # behind an unchanged page 1).
                        whole = page.next_url is None and len(page.items) < self.gh.opt.per_page
                        save = page.etag if whole else None
                    yield page
                    newest = max((str(i.get("updated_at") or "") for i in page.items), default="")
                    anchor = _shift(newest, -1) if newest else ""
                    if page.next_url and anchor > str(params.get("since") or ""):
                        params["since"] = anchor
                        anchored = True
                        break
            if not anchored:
                break
        # Reached only after the caller stored every page: a crash before this point must not
        # leave an ETag that would answer 304 for pages never stored.
        await self.db.set_etag(key, save)

    def mark(self, old: str | None, items: list[dict[str, Any]], field: str) -> str | None:
        newest = max((str(i.get(field) or "") for i in items), default="")
        if not newest:
            return old
        if self.started is not None:
            # Never past the second the listing began in: something updated later in that
            # second may not have been listed.
            newest = min(newest, iso(self.started - 1))
        return max(newest, old or "")


async def sync_mirror(
    cfg: IssuesConfig,
    db: State,
    gh: GitHubClient,
    *,
    numbers: set[int] | frozenset[int] = frozenset(),
    refetch: bool = False,
    now: float | None = None,
) -> MirrorReport:
    """Bring the mirror up to date (see the module docstring); raises SourceError/RateLimited
    with everything fetched so far kept."""
    report = MirrorReport()
    before = gh.requests
    now = time.time() if now is None else now
    try:
        await _targeted(db, gh, numbers, report)
        first_sync = await db.get(ISSUES_MARK) is None
        last_full = await db.get(FULL_LISTING)
        if cfg.full_listing_hours and last_full and now - last_full > cfg.full_listing_hours * 3600:
            refetch = True
        complete = await _list_issues(cfg, db, gh, report, refetch, now)
        # A first listing that was interrupted completes in a later sync (resumed from its
        # mark): that completion is the full listing the timer starts from.
        if (first_sync or refetch or last_full is None) and complete:
            await db.put(**{FULL_LISTING: now})
        await _list_comments(cfg, db, gh, report)
        await _fetch_comments(cfg, db, gh, report, now)
    finally:
        report.requests = gh.requests - before
        report.mark = await db.get(ISSUES_MARK)
    return report


async def _targeted(db: State, gh: GitHubClient, numbers: Any, report: MirrorReport) -> None:
    for n in sorted(numbers):
        obj = await gh.issue(n)
        if obj is None:
            report.removed += await db.delete([n])
            continue
        report.listed += 1
        report.changed += await db.store_issues([row_from_api(obj)], {})
        await db.mark_stale([n])


async def _list_issues(
    cfg: IssuesConfig, db: State, gh: GitHubClient, report: MirrorReport, refetch: bool,
    now: float,
) -> bool:  # fmt: skip
    mark = None if refetch else await db.get(ISSUES_MARK)
    since = mark or (iso(now - cfg.max_age_days * 86400) if cfg.max_age_days else None)
    params: dict[str, Any] = {"state": "all", "sort": "updated", "direction": "asc"}
    if since:
        params["since"] = since
    listing = _Listing(gh, db, report)
    seen: set[int] = set()
    complete = False  # reached the last page
    async for page in listing.pages(gh.url("/issues"), params):
        rows = [row_from_api(o) for o in page.items if "number" in o]
        seen.update(r.number for r in rows)
        report.listed += len(rows)
        mark = listing.mark(mark, page.items, "updated_at")
        marks = {ISSUES_MARK: mark} if mark else {}
        if await db.get(COMMENTS_MARK) is None:
            # The first listing fetches every issue's comments anyway: the comment listings only
            # need to start from when it began.
            start = iso((listing.started if listing.started is not None else now) - 1)
            marks.update({COMMENTS_MARK: start, REVIEWS_MARK: start})
        report.changed += await db.store_issues(rows, marks)
        complete = page.next_url is None
    if refetch and complete:
        gone = await db.numbers() - seen
        if gone:
            log.info("%s: %d issues no longer listed; removing them", gh.repo, len(gone))
            report.removed += await db.delete(gone)
    return complete or listing.not_modified


async def _list_comments(
    cfg: IssuesConfig, db: State, gh: GitHubClient, report: MirrorReport
) -> None:
    kinds = [("/issues/comments", COMMENTS_MARK, "issue_url", "issues")]
    if cfg.pull_requests and cfg.review_comments:
        kinds.append(("/pulls/comments", REVIEWS_MARK, "pull_request_url", "pulls"))
    known = await db.numbers()
    for path, mark_key, link, kind in kinds:
        mark = await db.get(mark_key)
        params: dict[str, Any] = {"sort": "updated", "direction": "asc"}
        if mark:
            params["since"] = mark
        listing = _Listing(gh, db, report)
        seen_up_to = mark or ""
        async for page in listing.pages(gh.url(path), params):
            # Comments at or before the old mark were handled by an earlier sync (the listing
            # overlaps it by a second).
            fresh = [c for c in page.items if str(c.get("updated_at") or "") > seen_up_to]
            nums = {_number_from(c.get(link), kind) for c in fresh}
            stale = {n for n in nums if n is not None and n in known}
            await db.mark_stale(stale)
            mark = listing.mark(mark, page.items, "updated_at")
            if mark:
                await db.put(**{mark_key: mark})


async def _fetch_comments(
    cfg: IssuesConfig, db: State, gh: GitHubClient, report: MirrorReport, now: float
) -> None:
    for row in await db.pending():
        if not keep_issue(row_to_issue(row), cfg, now):
            continue  # not indexed: fetched when (if) the filters keep it
        comments: list[dict[str, Any]] = []
        gone = False
        if int(row.data.get("comments") or 0) > 0:
            items = await gh.all_items(gh.url(f"/issues/{row.number}/comments"), missing_ok=True)
            gone = items is None
            comments += [comment_from_api(c, review=False) for c in items or []]
        if not gone and row.is_pr and cfg.review_comments:
            items = await gh.all_items(gh.url(f"/pulls/{row.number}/comments"), missing_ok=True)
            gone = items is None
            comments += [comment_from_api(c, review=True) for c in items or []]
        files: list[str] | None = None
        if not gone and row.is_pr and cfg.pr_files:
            items = await gh.all_items(gh.url(f"/pulls/{row.number}/files"), missing_ok=True)
            gone = items is None
            files = [str(f.get("filename")) for f in items or [] if f.get("filename")]
        if gone:  # deleted or transferred since it was listed: it leaves the mirror
            await db.delete([row.number])
            continue
        comments.sort(key=lambda c: (c["created_at"], str(c.get("id"))))
        await db.store_comments(row.number, comments, row.updated_at, files)
        report.comments_fetched += 1


# -- what the indexer reads --------------------------------------------------------------------
async def mirrored_issues(
    inst: Instance, layout: Layout, now: float | None = None, state: StateOpener | None = None
) -> list[Issue]:
    """The mirrored issues the instance's filters keep (no network). ``state``: a shared
    database's state (default: the instance's state file)."""
    if state is None and not layout.state(inst.name).exists():
        return []
    async with state_of(layout, state)(inst.name) as db:
        rows = await db.rows()

    def convert() -> list[Issue]:
        issues = [row_to_issue(r) for r in rows]
        rows.clear()  # free the decoded rows here, not on the event loop when this returns
        return [i for i in issues if keep_issue(i, inst.issues, now)]

    return await asyncio.to_thread(convert)


async def sync_and_read(
    inst: Instance,
    layout: Layout,
    *,
    numbers: set[int] | frozenset[int] = frozenset(),
    refetch: bool = False,
    options: ClientOptions | None = None,
    state: StateOpener | None = None,
) -> tuple[MirrorReport, list[Issue]]:
    """Sync the mirror of ``inst.issues.github``, then read it back filtered."""
    if not inst.issues.github:
        raise SourceError(f"{inst.source_file}: issues.github is not set")
    async with state_of(layout, state)(inst.name) as db:
        async with client_for(inst.issues, options) as gh:
            report = await sync_mirror(inst.issues, db, gh, numbers=numbers, refetch=refetch)
    return report, await mirrored_issues(inst, layout, state=state)
