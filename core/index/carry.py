"""Which collections an update carries whole from the live build (``store.base.Carry``), and
the counts a carried collection's summary takes from the live build's instead of reading it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.models import COLLECTIONS, Collection, Document
from core.store.base import BuildReader, Carry, Unit


def carry_of(
    old: BuildReader | None,
    docs: list[Document],
    changed: list[Document],
    old_units: dict[str, Unit],
    pins: dict[str, list[Any]],
) -> Carry | None:
    """The live build a new build is written from, and the collections it can take as the live
    build holds them (possibly none): every repository read at the live build's pins (so each
    reused chunk keeps its commit and permalink) and none of the collection's units changed,
    came, went or moved to another collection — its rows are then the live build's, in their
    order (``BuildReader.carried``). None: no live build was read."""
    if old is None:
        return None
    if old.meta.get("pins") != pins:
        return Carry(old.build_id, frozenset())
    keys = {d.key for d in docs}
    touched = {d.collection for d in changed}
    touched |= {u.collection for k, u in old_units.items() if k not in keys}  # went, or failed
    touched |= {old_units[d.key].collection for d in changed if d.key in old_units}  # moved
    return Carry(old.build_id, frozenset(c for c in COLLECTIONS if c not in touched))


def unread(
    carry: Carry | None, before: dict[str, Any], repos: Iterable[str], reader: bool
) -> frozenset[Collection]:
    """The carried collections whose chunks need not be read at all: the live build's summary
    gives their counts (per collection, and per repository of several), and the tuned reader,
    which reads ahead every chunk its cache lacks, is off."""
    if carry is None or reader:
        return frozenset()
    tokens = before.get("collection_tokens") or {}
    had = before.get("repos") or {}
    if any(c not in tokens for c in carry.collections) or any(n not in had for n in repos):
        return frozenset()
    return carry.collections


def as_before(
    before: dict[str, Any], coll: Collection, repos: Iterable[str]
) -> tuple[list[int], dict[str, int]]:
    """A carried collection's largest chunk and chunks over the window, and its chunks per
    repository (of several), as the live build's summary has them."""
    per = {n: ((before["repos"][n] or {}).get("chunks") or {}).get(coll, 0) for n in repos}
    return list(before["collection_tokens"][coll]), {n: k for n, k in per.items() if k}
