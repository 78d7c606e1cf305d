"""One way to gather an instance's sources before a build: the checkout and the issues.

Every path that updates an index — ``index``, ``sync``, ``sync --watch``, a webhook delivery, the
first question's build — asks :func:`gather` with a :class:`SyncRequest` and builds from what it
returns; the build itself fetches nothing.

Failures are kept apart, as a sync needs them to be:

- the repository: a ``url`` instance is fetched (``request.repo``); if the fetch fails and a clone
  is on disk, that clone is indexed and the error recorded. A local ``path`` is read as it is.
- the issues: a gh-JSON file is read (a broken file is an error); a GitHub instance's mirror is
  brought up to date (``request.issues``, or issues a webhook named) — if GitHub's API is down or
  rate-limited, the issues mirrored so far are indexed, the error recorded, and for a rate limit
  the time to retry noted; the next sync resumes the mirror where this one stopped.

An instance over several repositories (``repos:``) is gathered one repository at a time, each
through its view of the instance (``config/repos.py``) with its own clone and its own mirror
(:func:`repo_state`); one that cannot be had at all — a first clone that fails — is left out with
its error (the build keeps what the live build had of it), and the others go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from core.config import Instance, repo_views
from core.errors import RateLimited, SourceError
from core.ingest.github import ClientOptions
from core.ingest.issues import Issue, keep_issue, load_issues_file
from core.ingest.mirror import MirrorReport, mirrored_issues, sync_and_read
from core.ingest.repo import Checkout, checkout, checkout_dir
from core.layout import Layout
from core.models import SyncRequest  # the request is data every stage passes on
from core.store.shared import StateOpener
from core.store.state import StateDB


@dataclass
class RepoSources:
    """One repository's part: its view of the instance (``config/repos.py``), its checkout
    (None: it could not be had at all — its units are carried over from the live build), its
    filtered issues, and what went wrong."""

    name: str  # "" in a one-repository instance
    inst: Instance
    checkout: Checkout | None
    issues: list[Issue] = field(default_factory=list)
    mirror: MirrorReport | None = None
    errors: list[str] = field(default_factory=list)
    retry_at: float | None = None


@dataclass
class Sources:
    """What a build is made from, and what went wrong getting it (kept going where it could):
    one part per repository (one for a one-repository instance)."""

    repos: list[RepoSources]

    @property
    def checkout(self) -> Checkout:
        """The first repository's checkout (the one of a one-repository instance)."""
        co = self.repos[0].checkout
        assert co is not None
        return co

    @property
    def issues(self) -> list[Issue]:
        return [i for r in self.repos for i in r.issues]

    @property
    def mirror(self) -> MirrorReport | None:
        return next((r.mirror for r in self.repos if r.mirror is not None), None)

    @property
    def errors(self) -> list[str]:
        """Every part's errors; in an instance over several, each names its repository."""
        return [f"{r.name}: {e}" if r.name else e for r in self.repos for e in r.errors]

    @property
    def retry_at(self) -> float | None:
        return max((r.retry_at for r in self.repos if r.retry_at is not None), default=None)


async def gather(
    inst: Instance, layout: Layout, request: SyncRequest, options: ClientOptions | None = None,
    state: StateOpener | None = None,
) -> Sources:  # fmt: skip
    """The checkout and the filtered issues of every repository of ``inst`` (see the module
    docstring). ``state``: where the issues mirror lives when it is not the instance's state
    file (a shared store). In an instance over several repositories one that cannot be had at
    all (a first clone that fails) is left out with its error, and the others go on."""
    views = repo_views(inst)
    if len(views) == 1:
        return Sources([await _gather_one(views[0], layout, request, options, state)])
    parts = []
    for view in views:
        try:
            parts.append(await _gather_one(view, layout, request, options, state))
        except SourceError as e:
            parts.append(RepoSources(view.repo_name, view, None, errors=[str(e)]))
    return Sources(parts)


def repo_state(layout: Layout, state: StateOpener | None, view: Instance) -> StateOpener | None:
    """Where one repository's issues mirror lives: the instance's own state for a one-repository
    instance, else its own (``{data}/{instance}/repos/{repo}/state.sqlite``, or the shared
    store's state named ``{instance}:{repo}``)."""
    if not view.repo_name:
        return state
    if state is not None:
        shared, key = state, f"{view.name}:{view.repo_name}"
        return lambda _name: shared(key)
    path = layout.repo(view.name, view.repo_name) / "state.sqlite"

    @asynccontextmanager
    async def open_state(_name: str) -> AsyncIterator[StateDB]:
        async with await StateDB.open(path) as db:
            yield db

    return open_state


async def _gather_one(
    inst: Instance, layout: Layout, request: SyncRequest, options: ClientOptions | None,
    state: StateOpener | None,
) -> RepoSources:  # fmt: skip
    errors: list[str] = []
    try:
        co = await checkout(inst, layout, fetch=request.repo)
    except SourceError as e:
        if not (inst.repo.url and (checkout_dir(inst, layout) / ".git").exists()):
            raise
        errors.append(f"repository: {e}")
        co = await checkout(inst, layout, fetch=False)
    sources = RepoSources(inst.repo_name, inst, co, errors=errors)
    state = repo_state(layout, state, inst)
    if inst.issues.file:
        sources.issues = await _issues_file(inst)
    elif inst.issues.github:
        if request.issues or request.numbers:
            try:
                sources.mirror, sources.issues = await sync_and_read(
                    inst, layout, numbers=set(request.numbers),
                    refetch=request.refetch_issues, options=options, state=state,
                )  # fmt: skip
                return sources
            except SourceError as e:
                errors.append(f"issues: {e}")
                if isinstance(e, RateLimited):
                    sources.retry_at = e.reset_at
        sources.issues = await mirrored_issues(inst, layout, state=state)
    return sources


async def _issues_file(inst: Instance) -> list[Issue]:
    assert inst.issues.file
    path = inst.resolve(inst.issues.file)
    try:
        issues = await asyncio.to_thread(load_issues_file, path)
    except SourceError as e:
        raise SourceError(f"{inst.source_file}: issues.file: {e}") from None
    return [i for i in issues if keep_issue(i, inst.issues)]
