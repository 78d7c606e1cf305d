"""What kind of question it is — how-to, code, issues, bug report — by similarity to example
questions, in any language the embedder knows (``kinds.yaml``).

Each kind is the centroid of its examples' query vectors; a question's kind probabilities are a
softmax of its cosine to each centroid. They are *evidence* for the ranker (``rank.py``), not a
hard route: measured on the dev sets' tuning questions, the nearest centroid names the kind of
0.68 of them (the old phrase rules: 0.51); the ranker learns how far to trust it. The phrase
rules of ``analyse.py`` stay for what is exact (issue numbers, identifiers, paths, traces).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from core.embed import EmbedService

KINDS: tuple[str, ...] = ("howto", "code", "issues", "bug")
EXAMPLES = Path(__file__).with_name("kinds.yaml")
# Centroid cosines of one question differ by a few hundredths: the softmax spreads them.
TEMPERATURE = 0.02


def examples(path: Path = EXAMPLES) -> dict[str, list[str]]:
    """Kind -> example questions (every language's)."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {k: [q for qs in raw[k].values() for q in qs] for k in KINDS}


@dataclass(frozen=True)
class KindModel:
    centroids: np.ndarray  # one unit row per kind, in KINDS order

    @classmethod
    async def build(cls, embedder: EmbedService, path: Path = EXAMPLES) -> KindModel:
        rows = []
        for qs in examples(path).values():
            c = (await embedder.embed_queries(qs)).mean(axis=0)
            rows.append(c / max(float(np.linalg.norm(c)), 1e-9))
        return cls(np.stack(rows))

    def probs(self, q: np.ndarray) -> dict[str, float]:
        """Kind -> probability for a question vector."""
        s = self.centroids @ q / TEMPERATURE
        p = np.exp(s - s.max())
        p /= p.sum()
        return {k: float(v) for k, v in zip(KINDS, p, strict=True)}
