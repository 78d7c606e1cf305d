"""A file of the repository read back as the index saw it: ``RepoExpert.read_source``.

What an agent (MCP) or an API caller may read is exactly what the live build indexed as a docs
or code unit, never more: a path is refused unless it is relative, stays inside the repository
(no ``..`` component, no absolute or drive path, no NUL), and names an indexed unit. Excluded,
ignored, binary and oversized files and symbolic links are never units (``select_files`` skips
them), so they cannot be read through here either.

The text is the indexed version, checked by the unit's content hash: the work tree's file when it
still hashes the same (and is a regular file inside the checkout, reached through no symbolic
link), else the blob at the indexed commit (``git show COMMIT:PATH``: git reads the object store,
so no link is followed). A file that changed since the build, with the commit gone from a
shallow clone, is refused with a line saying to sync, rather than shown in a version the index
does not describe.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from core.config import Instance
from core.errors import IndexError_, PathNotAllowed
from core.ingest.repo import checkout_dir, permalink, web_url
from core.layout import Layout

# Lines one call returns at most: a large file is read in pages (``next_start_line``).
MAX_LINES = 400


@dataclass
class FileLines:
    """Lines ``start_line``..``end_line`` (1-based, inclusive) of an indexed file."""

    path: str
    commit: str | None
    start_line: int
    end_line: int
    total_lines: int
    text: str
    url: str  # the permalink of these lines at the indexed commit
    collection: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "commit": self.commit, "collection": self.collection,
            "start_line": self.start_line, "end_line": self.end_line,
            "total_lines": self.total_lines, "url": self.url, "text": self.text,
            "next_start_line": self.end_line + 1 if self.end_line < self.total_lines else None,
        }  # fmt: skip


def safe_path(path: str) -> str:
    """``path`` as a repository-relative POSIX path, or :class:`PathNotAllowed`: empty, absolute
    (``/x``, ``C:\\x``, ``\\\\host``), with a ``..`` component, a backslash or a NUL."""
    p = path.strip()
    if not p:
        raise PathNotAllowed("give a file path relative to the repository root, e.g. README.md")
    if "\0" in p or "\\" in p:
        raise PathNotAllowed(f"{path!r}: write paths with '/' (no backslashes or NUL)")
    if p.startswith(("/", "~")) or (len(p) > 1 and p[1] == ":"):
        raise PathNotAllowed(f"{path!r}: absolute paths are not allowed; give it relative to "
                             "the repository root")  # fmt: skip
    parts = [s for s in PurePosixPath(p).parts if s != "."]
    if ".." in parts:
        raise PathNotAllowed(f"{path!r}: '..' would leave the repository")
    if not parts:
        raise PathNotAllowed(f"{path!r}: not a file path")
    return "/".join(parts)


def checkout_root(inst: Instance, layout: Layout) -> Path:
    """Where the instance's files are on disk (the local ``repo.path``, or the clone)."""
    return inst.resolve(inst.repo.path) if inst.repo.path else checkout_dir(inst, layout)


def public_address(inst: Instance) -> str | None:
    """The repository as a caller may see it: the web URL, else the clone URL without any
    user or token in it; never a local path."""
    web = web_url(inst)
    if web:
        return web
    if not inst.repo.url:
        return None
    parts = urlsplit(inst.repo.url)
    if parts.scheme and parts.netloc:
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return inst.repo.url.rpartition("@")[2]  # scp-like git@host:owner/repo


def _from_work_tree(root: Path, rel: str) -> bytes | None:
    """The file's bytes if it is a regular file inside ``root`` reached through no symbolic
    link (every component checked, not just the last), else None."""
    here = root
    for part in rel.split("/"):
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except OSError:
            return None
        if stat.S_ISLNK(mode):
            return None
    if not stat.S_ISREG(mode):
        return None
    try:
        return here.read_bytes()
    except OSError:
        return None


def _from_commit(root: Path, commit: str, rel: str) -> bytes | None:
    r = subprocess.run(
        ["git", "-C", str(root), "show", f"{commit}:{rel}"],
        capture_output=True, check=False, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
    )  # fmt: skip
    return r.stdout if r.returncode == 0 else None


def read_indexed(
    inst: Instance,
    root: Path,
    rel: str,
    content_hash: str,
    commit: str | None,
    collection: str,
    start_line: int | None = None,
    end_line: int | None = None,
) -> FileLines:
    """The indexed version of ``rel`` (already checked to be a unit of the build), lines
    ``start_line``..``end_line`` (default: from the first, at most :data:`MAX_LINES`)."""
    data = _from_work_tree(root, rel)
    if data is None or hashlib.sha256(data).hexdigest() != content_hash:
        data = _from_commit(root, commit, rel) if commit else None
        if data is None or hashlib.sha256(data).hexdigest() != content_hash:
            at = f" at {commit[:12]}" if commit else ""
            raise IndexError_(
                f"{rel} changed since instance '{inst.name}' was indexed{at}: run "
                f"`repo-expert sync {inst.name}` to read the current version"
            )
    lines = data.decode("utf-8", errors="replace").splitlines()
    total = len(lines)
    start = start_line or 1
    if start < 1 or (end_line is not None and end_line < start):
        raise PathNotAllowed(f"{rel}: lines {start}-{end_line} is not a range (1-based, "
                             "start ≤ end)")  # fmt: skip
    if start > max(total, 1):
        raise PathNotAllowed(f"{rel} has {total} lines; start_line {start} is past its end")
    end = min(end_line or total, total, start + MAX_LINES - 1)
    text = "\n".join(lines[start - 1 : end])
    url = permalink(web_url(inst), commit, rel, start, max(end, start))
    return FileLines(rel, commit, start, end, total, text, url, collection)
