"""Which files changed between the indexed commit and the new one, according to git.

``git diff --name-status -z -M old new`` lists additions, modifications, type changes,
deletions, renames (old path deleted, new path added) and copies. Untracked, non-ignored files are
not in any commit, so they always count as changed. The indexer re-reads only changed files and
keeps every other file's unit (hash, chunks, vectors) from the live build; content hashes remain
the safety net for whatever git cannot vouch for.

:func:`changes_between` returns None — meaning "hash everything" — when the old commit is unknown
or no longer in the clone (a fresh clone, a force-push that was gc'ed), or the work tree has
uncommitted changes.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class ChangeSet:
    base: str
    head: str
    changed: set[str] = field(default_factory=set)  # to read again: added, modified, renamed to
    deleted: set[str] = field(default_factory=set)  # gone: deleted, renamed from
    renamed: dict[str, str] = field(default_factory=dict)  # old path -> new path

    def unchanged(self, path: str) -> bool:
        return path not in self.changed and path not in self.deleted


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    cmd = ["git", "-C", str(root), *args]
    return subprocess.run(cmd, capture_output=True, check=False, env=env)


def has_commit(root: Path, sha: str) -> bool:
    return _run(root, "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0


def parse_name_status(out: bytes) -> tuple[set[str], set[str], dict[str, str]]:
    """Parse ``git diff --name-status -z`` output into (changed, deleted, renamed)."""
    fields = out.decode("utf-8", errors="surrogateescape").split("\0")
    changed: set[str] = set()
    deleted: set[str] = set()
    renamed: dict[str, str] = {}
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        kind = status[0]
        if kind in "RC":
            src, dst = fields[i + 1], fields[i + 2]
            changed.add(dst)
            if kind == "R":
                deleted.add(src)
                renamed[src] = dst
            i += 3
            continue
        path = fields[i + 1]
        (deleted if kind == "D" else changed).add(path)
        i += 2
    return changed, deleted, renamed


def changes_between(root: Path, old: str | None, new: str | None) -> ChangeSet | None:
    """The files changed from ``old`` to ``new`` (plus untracked files); None when git cannot
    tell (then every file is hashed)."""
    if not old or not new:
        return None
    if not has_commit(root, old):
        log.info("indexed commit %s is not in %s: hashing every file", old[:12], root)
        return None
    r = _run(root, "diff", "--name-status", "-z", "-M", "--no-ext-diff", old, new)
    if r.returncode != 0:
        log.info("git diff %s..%s failed: hashing every file", old[:12], new[:12])
        return None
    changed, deleted, renamed = parse_name_status(r.stdout)
    u = _run(root, "ls-files", "-z", "--others", "--exclude-standard")
    if u.returncode == 0:
        changed |= {p for p in u.stdout.decode("utf-8", "surrogateescape").split("\0") if p}
    return ChangeSet(old, new, changed, deleted, renamed)
