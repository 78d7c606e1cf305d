"""The documents of a checkout, read incrementally against the live build.

When the live build came from a clean work tree at a commit still in the repository, ``git diff``
names the changed files (``git_diff.py``) and only those are read at all: a file git reports
unchanged keeps the live build's content hash, so its chunks are reused — unless the
configuration moved it to another collection, which needs it re-chunked. Otherwise every file is
read and hashed (content hashes are the safety net for whatever git cannot vouch for).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.config import Instance
from core.ingest.git_diff import ChangeSet, changes_between
from core.ingest.repo import Checkout, read_text, select_files
from core.models import Document
from core.store.base import Unit

log = logging.getLogger(__name__)


@dataclass
class Read:
    """The documents read, and what selection left out (reason -> count)."""

    documents: list[Document]
    excluded: dict[str, int] = field(default_factory=dict)
    files_read: int = 0  # read from disk; the others were unchanged according to git


def change_set(
    co: Checkout, live: Mapping[str, Any] | None, full: bool
) -> tuple[ChangeSet | None, str]:
    """The files changed since the live build (``live``: its meta), and how that was decided."""
    if live is None:
        return None, "content hashes (no previous build)" if not full else "full rebuild"
    base = live.get("commit")
    if not live.get("tree_clean"):
        return None, "content hashes (the previous build was not of a clean commit)"
    if co.commit is None or co.dirty:
        return None, "content hashes (the work tree has uncommitted changes)"
    changes = changes_between(co.root, base, co.commit)
    if changes is None:
        return None, f"content hashes (commit {str(base)[:12]} is not in the clone)"
    return changes, (
        f"git diff {str(base)[:12]}..{co.commit[:12]}: {len(changes.changed)} changed, "
        f"{len(changes.deleted)} deleted ({len(changes.renamed)} renamed)"
    )


async def read_documents(
    inst: Instance, co: Checkout, units: Mapping[str, Unit], changes: ChangeSet | None
) -> Read:
    """The repository's documents (see the module docstring); ``units``: the live build's."""
    trusted = {k for k in units if changes.unchanged(k)} if changes is not None else set[str]()
    sel = await asyncio.to_thread(select_files, inst, co, trusted)
    out = Read([], dict(sel.excluded))

    def read_all() -> None:
        for rel, coll in sel.files.items():
            old = units.get(rel)
            if rel in trusted and old is not None and old.collection == coll:
                out.documents.append(Document(coll, rel, "", old.content_hash, path=rel, title=rel))
                continue
            try:
                text, h = read_text(co.root, rel)
            except OSError as e:  # vanished, replaced by a FIFO or a link, permissions
                log.warning("skipping unreadable file %s: %s", rel, e)
                out.excluded["unreadable"] = out.excluded.get("unreadable", 0) + 1
                continue
            out.files_read += 1
            if not text.strip():
                continue
            out.documents.append(Document(coll, rel, text, h, path=rel, title=rel))

    await asyncio.to_thread(read_all)
    return out
