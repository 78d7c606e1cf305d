"""How one retrieval runs: an instance's ``retrieval:`` settings plus the choices of one call.

Every default lives once, in :class:`~core.config.RetrievalConfig` (with the measurement that
chose it); :meth:`Options.of` is the one place a config becomes options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from core.config import RetrievalConfig
from core.models import COLLECTIONS, Collection

# full: the system; dense, bm25, rrf: the baselines of ``eval --compare`` on the same index
Mode = Literal["full", "dense", "bm25", "rrf"]
MODES: tuple[Mode, ...] = ("full", "dense", "bm25", "rrf")


@dataclass(frozen=True)
class Options:
    config: RetrievalConfig
    k: int
    mode: Mode = "full"
    # Static per-collection multipliers of the route's weights: the config's, with per-call
    # overrides (missing: 1).
    weights: Mapping[Collection, float] = field(default_factory=dict)
    # Spanish software words' English terms join the lexical query, and are appended to the
    # embedded question ("¿cómo ejecuto las pruebas? (run execute test tests)"): on the self eval
    # Spanish hit@6 went 0.911 → 0.933, on httpx 0.952 → 1.000, with English unchanged.
    glossary: bool = True
    glossary_dense: bool = True
    # A non-English question's machine translation joins the glossary's terms (translate.py).
    translate: bool = True
    # A translated question's dense query is its translation's vector.
    translate_dense: bool = False
    collections: tuple[Collection, ...] = COLLECTIONS
    # An instance over several repositories: every name of each (lower case) -> the repository;
    # every name a filter may use (a repository's, a scope's, "all") -> the repositories kept;
    # and the filter asked for (``--repo``, ``repo:NAME``, a channel's default): its name and
    # the repositories it keeps (empty: every one).
    aliases: Mapping[str, str] = field(default_factory=dict)
    scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    repo: str | None = None
    keep: tuple[str, ...] = ()
    # A repository the question names may be searched alone (core/retrieve/narrow.py); off when
    # the question says repo:all and the caller's own filter is kept.
    narrow: bool = True

    @classmethod
    def of(
        cls,
        config: RetrievalConfig,
        *,
        k: int | None = None,
        weights: Mapping[Collection, float] | None = None,
        mode: Mode = "full",
    ) -> Options:
        return cls(
            config,
            k or config.k,
            mode,
            {**config.weights, **(weights or {})},
            glossary=config.glossary,
            glossary_dense=config.glossary,
            translate=config.translate,
            translate_dense=config.translate_dense,
        )

    def weights_for(self, route_weights: Mapping[Collection, float]) -> dict[Collection, float]:
        """Per-collection weights for fusion: the route's times the static ones (the baselines
        see no route)."""
        if self.mode == "full":
            return {c: route_weights.get(c, 1.0) * self.weights.get(c, 1.0) for c in COLLECTIONS}
        return {c: self.weights.get(c, 1.0) for c in COLLECTIONS}
