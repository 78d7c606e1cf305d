"""The files of the local store's builds (``local.py``): reading a build's vector files with every
check a damaged build fails, and tidying the builds folder after a swap.

A build that cannot be read — a vector file missing, truncated or of the wrong shape, a
``meta.sqlite`` that is not SQLite — is an :class:`~core.errors.IndexError_` naming the file: the
indexer then rebuilds from scratch (``index/build.py``), a face says the index is unavailable.
After a swap only the new build and the one it replaced are kept; builds no link points to (a
writer killed between its rename and its swap), abandoned temporary folders and stray
``.current-*`` links of dead writers are removed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
from usearch.io import load_matrix

from core.errors import IndexError_
from core.models import COLLECTIONS


def unreadable(path: Path, why: object) -> IndexError_:
    return IndexError_(
        f"{path}: the index build cannot be read ({why}); `repo-expert index` rebuilds it"
    )


def load_vectors(build: Path, rows: dict[str, int], dim: int | None) -> dict[str, np.ndarray]:
    """The vector matrices of a build (memory-mapped), each checked against the number of chunks
    its collection has (``rows``) and the stamp's dimension."""
    vectors: dict[str, np.ndarray] = {}
    for c in COLLECTIONS:
        f = build / f"{c}.fbin"
        n = rows.get(c, 0)
        if not n:
            continue
        if not f.is_file():
            raise unreadable(f, f"missing; the build has {n} {c} chunks")
        try:
            mat = load_matrix(str(f), view=True)
        except (ValueError, OSError) as e:
            raise unreadable(f, e) from None
        if mat is None or mat.ndim != 2 or mat.shape[0] != n or (dim and mat.shape[1] != dim):
            shape = None if mat is None else tuple(mat.shape)
            raise unreadable(f, f"shape {shape}, expected ({n}, {dim or '?'})")
        vectors[c] = mat
    return vectors


def live_name(link: Path) -> str | None:
    """The build folder ``current`` points to (None: no link)."""
    try:
        return Path(os.readlink(link)).name
    except OSError:
        return None


def prune(root: Path, builds: Path, keep: set[str], me: int) -> None:
    """Remove every build but ``keep`` (the new live one and the one it replaced), temporary
    folders and ``.current-*`` links of dead writers (``me``: this process's pid)."""
    for p in builds.iterdir():
        if p.name.startswith(".tmp-"):
            if _dead_writer(p.name.removeprefix(".tmp-"), me):
                shutil.rmtree(p, ignore_errors=True)
        elif p.name not in keep:
            shutil.rmtree(p, ignore_errors=True)
    for link in root.glob(".current-*"):
        if _dead_writer(link.name.removeprefix(".current-"), me, mine_too=True):
            link.unlink(missing_ok=True)


def _dead_writer(build_id: str, me: int, mine_too: bool = False) -> bool:
    """Whether the writer of ``build_id`` (``{time}-{pid}-{n}``) is gone. This process's own
    temporary folders are live (committed or removed by their writer); its own leftover links
    are not (a swap replaces its link at once)."""
    try:
        pid = int(build_id.split("-")[1])
    except (IndexError, ValueError):
        return False
    if pid == me:
        return mine_too
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
