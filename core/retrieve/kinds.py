"""What kind of question it is — how-to, code, issues, bug report — from the question's vector,
in any language the embedder knows.

Two models, the same output (kind -> probability), evidence for the ranker (``rank.py``), not a
hard route:

- a *classifier* (multinomial logistic regression on the question's e5 vector and, beside it,
  its asking sentence's: :func:`kind_vector`), fitted on the example questions of
  ``kinds.yaml`` and the tuning halves of the dev sets (``benchmarks/train_ranker.py`` writes
  ``kinds.json``). It applies to the bundled e5 model only. Leave one set out on the eighteen
  sets' tuning questions (1,017, bug reports included) the question's vector alone names 0.841
  of the kinds (English 0.877, Spanish 0.782), with the asking sentence 0.855 (0.892 / 0.795;
  issues 0.762 → 0.798, code 0.714 → 0.763), and the ranker fitted on those kinds ranks better
  (PLAN-s55.md, KL). A classifier of the question's vector alone (``kinds.json`` of dim rows)
  still loads and reads as before;
- for any other embedder, the *centroids* of the examples' vectors (softmax of the cosines):
  0.68 on the first three sets' questions (the old phrase rules: 0.51).

The phrase rules of ``analyse.py`` stay for what is exact (issue numbers, identifiers, paths,
traces).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from core.embed import EmbedService
from core.retrieve import align

KINDS: tuple[str, ...] = ("howto", "code", "issues", "bug")
EXAMPLES = Path(__file__).with_name("kinds.yaml")
CLASSIFIER = Path(__file__).with_name("kinds.json")
# Centroid cosines of one question differ by a few hundredths: the softmax spreads them.
TEMPERATURE = 0.02
# The classifier's vectors: any engine of the bundled model (their vectors agree to a cosine of
# 0.999); another model's vectors mean nothing to it.
E5 = "multilingual-e5-small"


# A sentence ends at . ? ! followed by space and what starts a sentence (in Spanish ¿ ¡ too).
_SENTENCE = re.compile(r"(?<=[.?!])\s+(?=[¿¡\"`(\[A-ZÁÉÍÓÚÑ])")
# A `?` in a code span (`a?.b`, `re.compile("x?")`) or a URL's query asks nothing.
# (A URL ends before the punctuation that ends its sentence: "… at https://x.io/docs?".)
_CODE_OR_URL = re.compile(r"`[^`]*`|\b[a-z][a-z0-9+.-]*://\S*[^\s?.!,;:)\]]", re.I)


def asking(question: str) -> str:
    """The sentence that asks: the last one with a question mark, else the last one (the whole
    question when it is one sentence). A long question describes its topic first and says what it
    wants last ("… Is there any plan to allow it?", "… ¿Alguien lo ha pedido?"); the question's
    vector is mostly its topic, so the classifier also reads this sentence's."""
    sentences = [s.strip() for s in _SENTENCE.split(question.strip()) if s.strip()]
    if not sentences:
        return question
    asks = [s for s in sentences if "?" in _CODE_OR_URL.sub("", s)]
    return asks[-1] if asks else sentences[-1]


async def kind_vector(embedder: EmbedService, question: str, vector: np.ndarray | None = None
                      ) -> np.ndarray:  # fmt: skip
    """What the classifier reads: the question's vector (``vector``, when already embedded) and
    its asking sentence's (:func:`asking`; the same vector when the question is one sentence)."""
    v = await embedder.embed_query(question) if vector is None else vector
    ask = asking(question)
    a = v if ask == question.strip() else await embedder.embed_query(ask)
    return np.concatenate([v, a]).astype(np.float32)


async def kind_vectors(embedder: EmbedService, questions: Sequence[str]) -> np.ndarray:
    """:func:`kind_vector` of many fixed questions (the examples), cached like passages."""
    v = await embedder.embed_queries(list(questions))
    a = await embedder.embed_queries([asking(q) for q in questions])
    return np.concatenate([v, a], axis=1).astype(np.float32)


def examples(path: Path = EXAMPLES) -> dict[str, list[str]]:
    """Kind -> example questions (every language's)."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {k: [q for qs in raw[k].values() for q in qs] for k in KINDS}


def _read(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _softmax(s: np.ndarray) -> np.ndarray:
    p = np.exp(s - s.max())
    return p / p.sum()


@dataclass(frozen=True)
class KindModel:
    """What the example questions tell about a question: its kind, and (``align.py``) where its
    language's questions sit against the corpus language's."""

    centroids: np.ndarray  # one unit row per kind, in KINDS order
    weights: np.ndarray | None = None  # classifier: (dim or 2·dim: kind_vector) × kinds
    bias: np.ndarray | None = None
    means: dict[str, np.ndarray] = field(default_factory=dict)  # language -> mean (align.py)

    @classmethod
    async def build(
        cls, embedder: EmbedService, path: Path = EXAMPLES, classifier: Path = CLASSIFIER
    ) -> KindModel:
        rows = []
        for qs in (await asyncio.to_thread(examples, path)).values():
            c = (await embedder.embed_queries(qs)).mean(axis=0)
            rows.append(c / max(float(np.linalg.norm(c)), 1e-9))
        centroids = np.stack(rows)
        means = await align.means(embedder)
        name, dim, _ = await embedder.info()
        data = await asyncio.to_thread(_read, classifier) if name.startswith(E5) else None
        if data is not None:
            w = np.array(data["weights"], np.float32)
            # dim × kinds: the question's vector alone (before 2026-12-06); 2·dim: and its
            # asking sentence's (kind_vector)
            if (
                w.shape in ((dim, len(KINDS)), (2 * dim, len(KINDS)))
                and tuple(data["kinds"]) == KINDS
            ):
                return cls(centroids, w, np.array(data["bias"], np.float32), means)
        return cls(centroids, means=means)

    def aligned(self, q: np.ndarray, lang: str | None, target: str | None) -> np.ndarray:
        """The question's vector moved from its language to ``target``'s (``align.shift``)."""
        return align.shift(q, lang, target, self.means)

    @property
    def reads_asking(self) -> bool:
        """Whether the classifier reads the asking sentence too (:func:`kind_vector`)."""
        return self.weights is not None and self.weights.shape[0] == 2 * self.centroids.shape[1]

    def probs(self, q: np.ndarray) -> dict[str, float]:
        """Kind -> probability for a question vector (:func:`kind_vector`'s, for a classifier
        that reads the asking sentence too; its first half is the question's own)."""
        if self.weights is not None and self.bias is not None:
            rows = self.weights.shape[0]
            if 2 * len(q) == rows:  # the question's vector alone: a one-sentence kind vector
                q = np.concatenate([q, q])
            p = _softmax(q[:rows] @ self.weights + self.bias)  # a kind vector, or its half
        else:
            p = _softmax(self.centroids @ q[: self.centroids.shape[1]] / TEMPERATURE)
        return {k: float(v) for k, v in zip(KINDS, p, strict=True)}


def fit_classifier(
    x: np.ndarray, y: Sequence[int], l2: float = 1e-4, steps: int = 4000, lr: float = 2.0
) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression by gradient descent: (weights dim × kinds, bias)."""
    labels = np.asarray(y)
    w = np.zeros((x.shape[1], len(KINDS)))
    b = np.zeros(len(KINDS))
    for _ in range(steps):
        z = x @ w + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(labels)), labels] -= 1
        p /= len(labels)
        w -= lr * (x.T @ p + l2 * w)
        b -= lr * p.sum(axis=0)
    return w.astype(np.float32), b.astype(np.float32)


def classifier_json(w: np.ndarray, b: np.ndarray, info: dict[str, Any]) -> dict[str, Any]:
    return {
        "kinds": list(KINDS),
        "weights": [[round(float(v), 5) for v in row] for row in w],
        "bias": [round(float(v), 5) for v in b],
        "info": info,
    }
