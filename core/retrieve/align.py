"""Language offsets: a non-English question's vector moved to where the same question in the
corpus's language would sit.

A multilingual embedder puts a Spanish question near its English translation, but not on it:
every language's vectors share an offset from English's (the language-specific mean; Libovický et
al. 2020, "On the Language Neutrality of Pre-trained Multilingual Representations"). Against
English passages that offset costs a Spanish question the nearest chunks an English one finds:
on the dev sets' tuning questions, dense retrieval alone, file-level MRR@6 English 0.726, Spanish
0.622. The offset is the mean of the corpus language's questions less the mean of the question
language's, both taken over the *same* questions (``parallel.yaml``: generic developer
questions, each in several languages, written for the file), embedded by the instance's own
embedder when it loads — so it holds for any embedder, and content cancels out. Added to the
question's vector (then normalised), it moves the question, not the passages; questions in the
corpus's language, or in a language the file lacks, are searched as asked.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import yaml

from core.embed import EmbedService

PARALLEL = Path(__file__).with_name("parallel.yaml")


def parallel(path: Path = PARALLEL) -> dict[str, list[str]]:
    """Language -> its questions, aligned: item i of every language is the same question. Only
    entries that have every language the file uses count (a half-translated entry would bring
    its content into one language's mean). No file: no languages."""
    if not path.exists():
        return {}
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise ValueError(f"{path}: expected a list of {{language: question}} mappings")
    langs = sorted({str(k) for e in raw for k in e})
    full = [e for e in raw if all(isinstance(e.get(lang), str) and e[lang].strip()
                                  for lang in langs)]  # fmt: skip
    return {lang: [str(e[lang]) for e in full] for lang in langs}


async def means(embedder: EmbedService, path: Path = PARALLEL) -> dict[str, np.ndarray]:
    """Language -> the mean vector of its questions in ``path`` (none when there is no file)."""
    texts = await asyncio.to_thread(parallel, path)
    return {lang: (await embedder.embed_queries(qs)).mean(axis=0).astype(np.float32)
            for lang, qs in texts.items() if qs}  # fmt: skip


def shift(
    q: np.ndarray, lang: str | None, target: str | None, means: dict[str, np.ndarray]
) -> np.ndarray:
    """``q``, a question in ``lang``, moved by ``target``'s mean less ``lang``'s and normalised;
    ``q`` itself when either language is unknown, they are the same, or the file lacks one."""
    if lang is None or target is None or lang == target:
        return q
    a, b = means.get(target), means.get(lang)
    if a is None or b is None:
        return q
    moved = q + (a - b)
    return (moved / max(float(np.linalg.norm(moved)), 1e-9)).astype(q.dtype)
