"""The repository source: a checkout, the commit it is at, and which files go where.

A local ``path`` is read as it is on disk (``git ls-files`` where it is a git work tree, so
``.gitignore`` applies); a ``url`` is cloned once (shallow) under the data directory and fetched
on later runs. A ``repo.token`` for a private https URL reaches git only through its environment
(``GIT_CONFIG_*`` → ``http.<origin>/.extraHeader``): it is never in the remote URL, never in
``.git/config``, never on a command line and never logged. File selection uses gitignore-style
patterns (pathspec): ``**/tasks/**`` excludes ``tasks/x.md`` at the root as well as
``a/tasks/x.md``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import logging
import os
import re
import stat
import subprocess
import urllib.parse
from collections.abc import Collection as Paths
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import pathspec

from core.config import BUILTIN_EXCLUDES, Instance
from core.errors import SourceError
from core.layout import Layout
from core.models import Collection

log = logging.getLogger(__name__)


@dataclass
class Checkout:
    root: Path
    commit: str | None  # None when the source is not a git work tree
    dirty: bool = False
    # folders under root never indexed, relative to it: the data folder when it lies inside
    skip: tuple[str, ...] = ()


@dataclass
class Selection:
    """The files of each collection, and what was left out and why."""

    files: dict[str, Collection] = field(default_factory=dict)  # path -> collection
    excluded: dict[str, int] = field(default_factory=dict)  # reason -> count

    def skip(self, reason: str) -> None:
        self.excluded[reason] = self.excluded.get(reason, 0) + 1


def _git(root: Path, *args: str, auth: dict[str, str] | None = None) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(auth or {})}
    r = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, env=env, check=False,
        encoding="utf-8", errors="surrogateescape",  # a file name need not be valid UTF-8
    )  # fmt: skip
    if r.returncode != 0:
        raise SourceError(f"git {' '.join(args[:2])} failed in {root}: {r.stderr.strip()[:300]}")
    return r.stdout


def _redact(url: str) -> str:
    """Never echo credentials that may sit in a URL."""
    import re

    return re.sub(r"//[^/@]+@", "//***@", url)


@functools.cache
def _git_version() -> tuple[int, ...]:
    r = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False)
    m = re.search(r"(\d+)\.(\d+)", r.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def auth_env(inst: Instance) -> dict[str, str]:
    """Environment that makes git send the token to the clone URL's origin (and nowhere else):
    ``Authorization: Basic base64(x-access-token:TOKEN)``, as GitHub (and actions/checkout)
    expect for https. Empty without a token or for non-https URLs."""
    url = inst.repo.url or ""
    token = inst.repo.token.get_secret_value() if inst.repo.token else ""
    parts = urlsplit(url)
    if not token or parts.scheme not in ("https", "http"):
        return {}
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        log.warning("repo.token goes to %s over plain http (unencrypted)", parts.hostname)
    if _git_version() < (2, 31):  # older git silently ignores GIT_CONFIG_COUNT/KEY/VALUE
        raise SourceError(
            f"{inst.source_file}: repo.token needs git 2.31 or newer to pass the token "
            f"without writing it anywhere (this git is {'.'.join(map(str, _git_version()))})"
        )
    origin = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"http.{origin}/.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
    }


_GITHUB = re.compile(
    r"^(?:https?://(?:[^/@]+@)?github\.com/|ssh://git@github\.com/|git@github\.com:)"
    r"([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)


def github_repo(remote: str | None) -> str | None:
    """``owner/name`` of a github.com remote URL (https, ssh or scp-like), else None. Only
    GitHub: the permalinks are GitHub's ``/blob/{sha}/{path}#L{a}-L{b}``."""
    m = _GITHUB.match((remote or "").strip())
    return f"{m.group(1)}/{m.group(2)}" if m else None


def origin_url(root: Path) -> str | None:
    """The URL of the ``origin`` remote of the git work tree at ``root``, if it has one."""
    r = subprocess.run(
        ["git", "-C", str(root), "remote", "get-url", "origin"],
        capture_output=True, text=True, check=False, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
    )  # fmt: skip
    return (r.stdout.strip() or None) if r.returncode == 0 else None


@functools.lru_cache(maxsize=256)
def _derived_web_url(remote: str | None, root: str | None) -> str | None:
    repo = github_repo(remote if remote else origin_url(Path(root)) if root else None)
    return f"https://github.com/{repo}" if repo else None


def web_url(inst: Instance) -> str | None:
    """Where permalinks point: ``web_url`` from the instance file, else the GitHub repository
    of ``repo.url`` or of a local checkout's ``origin`` remote (read once per process), else
    None (sources then show ``path:lines @ <short sha>``)."""
    if inst.web_url:
        return inst.web_url
    if inst.repo.url:
        return _derived_web_url(inst.repo.url, None)
    assert inst.repo.path
    return _derived_web_url(None, str(inst.resolve(inst.repo.path)))


def inside(root: Path, folder: Path) -> str | None:
    """``folder`` relative to ``root`` when it lies inside it (both resolved), else None."""
    try:
        rel = folder.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    return rel.as_posix() if rel.parts else None


def checkout_dir(inst: Instance, layout: Layout) -> Path:
    """Where the clone of a ``repo.url`` lives (``inst``: an instance or one repository's view)."""
    if inst.repo_name:
        return layout.repo(inst.name, inst.repo_name) / "checkout"
    return layout.checkout(inst.name)


def _checkout_sync(inst: Instance, layout: Layout, fetch: bool = True) -> Checkout:
    co = _checkout_at(inst, layout, fetch)
    data = inside(co.root, layout.data)
    co.skip = (data,) if data else ()
    return co


def _checkout_at(inst: Instance, layout: Layout, fetch: bool = True) -> Checkout:
    if inst.repo.path:
        root = inst.resolve(inst.repo.path)
        if not root.is_dir():
            raise SourceError(f"{inst.source_file}: repo.path: folder {root} does not exist")
    else:
        assert inst.repo.url
        root = checkout_dir(inst, layout)
        url = inst.repo.url
        auth = auth_env(inst)
        if not (root / ".git").exists():
            root.parent.mkdir(parents=True, exist_ok=True)
            args = ["clone", "--quiet", "--depth", "1"]
            if inst.repo.ref:
                args += ["--branch", inst.repo.ref]
            log.info("cloning %s", _redact(url))
            try:
                _git(root.parent, *args, url, str(root), auth=auth)
            except SourceError as e:
                raise SourceError(f"cannot clone {_redact(url)}: {_redact(str(e))}") from None
        elif fetch:
            ref = inst.repo.ref or "HEAD"
            try:
                _git(root, "fetch", "--quiet", "--depth", "1", "origin", ref, auth=auth)
            except SourceError as e:
                raise SourceError(f"cannot fetch {_redact(url)}: {_redact(str(e))}") from None
            _git(root, "checkout", "--quiet", "--force", "FETCH_HEAD")
    try:
        inside = _git(root, "rev-parse", "--is-inside-work-tree").strip() == "true"
    except SourceError:
        inside = False
    if not inside:
        return Checkout(root=root, commit=None)
    commit = _git(root, "rev-parse", "HEAD").strip() if _has_head(root) else None
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no").strip())
    return Checkout(root=root, commit=commit, dirty=dirty)


def _has_head(root: Path) -> bool:
    r = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "-q", "HEAD"],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


async def checkout(inst: Instance, layout: Layout, fetch: bool = True) -> Checkout:
    """The instance's work tree and commit; a ``url`` is cloned, or fetched unless ``fetch`` is
    False (a sync triggered by an issue event leaves the code where it is)."""
    return await asyncio.to_thread(_checkout_sync, inst, layout, fetch)


def list_files(co: Checkout) -> list[str]:
    """Every file of the checkout: a git work tree as a developer sees it, else every file."""
    if co.commit is not None or _is_git(co.root):
        # The work tree as a developer sees it: tracked files plus untracked, non-ignored ones.
        out = _git(co.root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        # A work tree inside another (e.g. a test repo under tmp) may list nested paths; keep
        # only entries that exist and are not folders (deleted-but-tracked files are gone from
        # the work tree; a FIFO or socket stays, for select_files to refuse and count).
        return sorted({p for p in out.split("\0") if p and _present(co.root / p)})
    files = []
    for dirpath, dirnames, filenames in os.walk(co.root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for f in filenames:
            files.append(os.path.relpath(os.path.join(dirpath, f), co.root).replace(os.sep, "/"))
    return sorted(files)


def _is_git(root: Path) -> bool:
    return (root / ".git").exists()


def _present(path: Path) -> bool:
    try:
        return not stat.S_ISDIR(path.lstat().st_mode) and (path.is_file() or not path.is_symlink())
    except OSError:
        return False


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file and not a symbolic link — checked on
    the open file, so a FIFO swapped in meanwhile cannot block the read (opened non-blocking,
    never read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path.name}: not a regular file")
    return os.fdopen(fd, "rb")


def _looks_binary(path: Path) -> bool:
    try:
        with open_regular(path) as fh:
            head = fh.read(8192)
    except OSError:
        return True
    return b"\0" in head


def select_files(inst: Instance, co: Checkout, trusted: Paths[str] = ()) -> Selection:
    """Assign each file to docs or code (docs win ties), applying every exclusion. ``trusted``
    files are unchanged since a build that already found them to be text: not sniffed again."""
    sel = Selection()
    user_ex = pathspec.GitIgnoreSpec.from_lines(inst.exclude)
    builtin = pathspec.GitIgnoreSpec.from_lines(BUILTIN_EXCLUDES if inst.builtin_excludes else [])
    docs = pathspec.GitIgnoreSpec.from_lines(inst.docs.include)
    code = pathspec.GitIgnoreSpec.from_lines(inst.code.include)
    skip = tuple(f"{d}/" for d in co.skip)
    for rel in list_files(co):
        if rel.startswith(skip):
            sel.skip("the data folder")
            continue
        if user_ex.match_file(rel):
            sel.skip("exclude patterns")
            continue
        if builtin.match_file(rel):
            sel.skip("built-in excludes (vendored, lock, minified, binary types)")
            continue
        coll: Collection | None = (
            "docs" if docs.match_file(rel) else "code" if code.match_file(rel) else None
        )
        if coll is None:
            sel.skip("not matched by docs/code include globs")
            continue
        p = co.root / rel
        try:
            st = p.lstat()
        except OSError:
            sel.skip("unreadable")
            continue
        if stat.S_ISLNK(st.st_mode):  # it may point outside the repository (a secret, .env)
            sel.skip("symbolic links")
            continue
        if not stat.S_ISREG(st.st_mode):  # reading a FIFO would wait forever
            sel.skip("not a regular file (a FIFO, socket or device)")
            continue
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            sel.skip("file name is not valid UTF-8")
            continue
        size = st.st_size
        if size > inst.max_file_bytes:
            sel.skip(f"larger than max_file_bytes ({inst.max_file_bytes})")
            continue
        if rel not in trusted and _looks_binary(p):
            sel.skip("binary content")
            continue
        sel.files[rel] = coll
    return sel


def read_text(root: Path, rel: str) -> tuple[str, str]:
    """The file's text (undecodable bytes replaced) and its content hash; OSError for anything
    but a regular file."""
    with open_regular(root / rel) as fh:
        data = fh.read()
    return data.decode("utf-8", errors="replace"), hashlib.sha256(data).hexdigest()


def permalink(web_url: str | None, commit: str | None, path: str, start: int, end: int) -> str:
    """``{web_url}/blob/{sha}/{path}#L{a}-L{b}``; without a web URL not a link but where it is,
    pinned: ``path:a-b @ <short sha>`` (``path:a-b`` outside git)."""
    if not web_url:
        lines = f"{start}" if start == end else f"{start}-{end}"
        return f"{path}:{lines}" + (f" @ {commit[:7]}" if commit else "")
    ref = commit or "HEAD"
    anchor = f"#L{start}" if start == end else f"#L{start}-L{end}"
    return f"{web_url}/blob/{ref}/{urllib.parse.quote(path)}{anchor}"
