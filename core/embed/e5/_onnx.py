"""int8 engine: the same bundled weights as an onnxruntime graph with int8 linear layers.

The 12 encoder layers are written as an ONNX graph (``onnx.helper``) from the dequantised
4-bit weights. Every linear layer (Q/K/V, attention output, FFN up and FFN down) runs in
int8: weights quantised per output channel (symmetric, max-abs), activations quantised *per
token* at run time (``QuantizeLinear`` with one scale per row, ``amax / 127``, zero point
128) and multiplied with onnxruntime's u8 x s8 GEMM (``MatMulIntegerToFloat``: int32
accumulation, AVX-512 VNNI, ~190 GMAC/s per core here against ~53 for float32), then
rescaled per row. Attention (``MultiHeadAttention``), residual + LayerNorm
(``SkipLayerNormalization``, which also adds the output biases) and the exact erf GELU
(``BiasGelu``) stay float32. Before quantising, activation outliers are moved into the
weights per input channel (SmoothQuant, ``smooth_scales``: exact in real arithmetic, scales
from a built-in calibration batch; migration strength per layer kind in ``SMOOTH_ALPHA``).

Each forward pass takes rows of one length and no padding (``OnnxEncoder.forward_mean``
groups a batch by length), so the graph needs no attention mask: onnxruntime then takes its
faster unmasked attention path (~30% faster attention at 256 tokens), and since activations
are quantised per token, a text's vector does not depend on which texts share its batch.

Word embeddings (the 250k-row 4-bit table), position rows and the embedding LayerNorm are
computed in numpy (as in ``_encoder.py``), and the graph returns the last hidden states,
mean-pooled over each row's tokens here. The quantised graph (~22 MB) is built once (a few
seconds) and cached as ``<cache>/repo-expert/e5int8-<model sha256>-v<N>.onnx``.

``onnx`` is needed only to build the graph; ``onnxruntime`` to run it.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._encoder import layer_norm_
from ._format import E5File, dequantize_q4
from ._tokenizer import Tokenizer

_F32 = np.float32
GRAPH_VERSION = 4  # bump when the graph or its quantisation changes


def onnx_available() -> bool:
    """True when onnxruntime can be imported (``onnx`` is only needed for a first build)."""
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "repo-expert")


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cached_graph_path(model_path: str) -> str:
    digest = file_sha256(model_path)[:16]
    return os.path.join(cache_dir(), f"e5int8-{digest}-v{GRAPH_VERSION}.onnx")


# SmoothQuant migration strength per layer kind, measured one kind at a time (the others
# float32) on 168 passages + 90 queries against the exact engine: Q/K/V inputs (LayerNorm
# outputs) quantise best at 0.8-0.85 (min cosine 0.9998-0.9999 vs 0.9997 at 0.3), the
# FFN-down input (GELU outputs) at 0.5 (0.99977 vs 0.99939 at 0.3 and 0.99955 at 0.7)
SMOOTH_ALPHA = {"qkv": 0.8, "ao": 0.5, "fi": 0.5, "fo": 0.5}

# calibration texts for the SmoothQuant scales: code, English, Spanish and other scripts
CALIBRATION_TEXTS = [
    "def load_config(path: str) -> dict[str, Any]:\n    with open(path) as fh:\n        "
    "return yaml.safe_load(fh) or {}\n\n\nclass Index:\n    def __init__(self, root):\n"
    "        self.root = Path(root)\n        self.chunks: list[Chunk] = []\n",
    "#include <stdio.h>\nstatic int parse(const char *s, size_t n) {\n  for (size_t i = 0; i < n;"
    " i++) {\n    if (s[i] == '\\n') return (int)i;\n  }\n  return -1;\n}\n",
    "function debounce(fn, ms) { let t; return (...args) => { clearTimeout(t); "
    "t = setTimeout(() => fn(...args), ms); }; }",
    "The indexer splits source files at function and class boundaries, embeds each chunk and "
    "stores the vectors with the file path and line numbers, so that answers can cite them.",
    "how much protein should an adult eat per day",
    "To reset your password, open the account settings and choose 'forgot password'. A link "
    "valid for one hour is sent to the e-mail address on file.",
    "El servidor carga la configuración desde un archivo YAML y valida cada campo antes de "
    "arrancar. Si falta una clave obligatoria, se detiene con un mensaje claro.",
    "¿Dónde se definen las reglas para ignorar archivos binarios en el índice?",
    "Die Funktion teilt lange Dokumente in überlappende Abschnitte auf, damit jeder Abschnitt "
    "in das Kontextfenster des Modells passt.",
    "配置文件中的每个仓库都有自己的分支和忽略规则。リポジトリの更新を検知すると再インデックスします。",
    "Поиск возвращает фрагменты кода вместе с путями к файлам и номерами строк.",
    "Fix: segfault in the mmap loader when the file is truncated (#482). Steps to reproduce: "
    "run `index --full` on a repository with a 0-byte .bin file; expected an error message.",
]


class _Graph:
    """Nodes and initializers of an encoder graph being written."""

    def __init__(self, f: E5File) -> None:
        self.f = f
        self.inits: list[Any] = []
        self.nodes: list[Any] = []

    def init(self, name: str, arr: np.ndarray, dtype: Any = _F32) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attrs: Any) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attrs))
        return output

    def skip_ln(self, p: str, which: str, inp: str, skip: str, bias: str, out: str) -> str:
        """``LayerNorm(inp + skip + bias)`` with layer ``p``'s ``{which}.w`` / ``{which}.b``."""
        f = self.f
        w, b = f"{p}{which}.w", f"{p}{which}.b"
        return self.node(
            "SkipLayerNormalization",
            [inp, skip, self.init(w, f.f32(w)), self.init(b, f.f32(b)), bias],
            out,
            domain="com.microsoft",
            epsilon=float(f.eps),
        )

    def model(self, name: str, inputs: list[Any], outputs: list[Any]) -> Any:
        import onnx
        from onnx import helper

        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
            producer_name="repo-expert.e5fast",
        )
        model.ir_version = min(model.ir_version, 9)
        onnx.checker.check_model(model)
        return model


def _weights(f: E5File, i: int, kind: str) -> np.ndarray:
    """Layer ``i``'s dequantised weight of linear ``kind`` as [in, out] (qkv concatenated)."""
    p, h = f"l{i}.", f.hidden
    if kind == "qkv":
        return np.concatenate([f.q4_dequant(p + n, h) for n in ("q.w", "k.w", "v.w")]).T
    n_in = f.ffn if kind == "fo" else h
    return f.q4_dequant(f"{p}{kind}.w", n_in).T


def build_fp32_graph(f: E5File) -> Any:
    """The encoder layers as an fp32 ``onnx.ModelProto`` that also outputs every linear
    layer's input (``in{layer}.{kind}``), for calibration.

    Inputs ``x`` [B, L, H] (embedded and LayerNormed) and ``mask_index`` int32 [B] (valid
    tokens per row, right padding); output ``y`` [B, L, H].
    """
    from onnx import TensorProto, helper

    h, ffn, nh = f.hidden, f.ffn, f.n_heads
    g = _Graph(f)
    extra: list[Any] = []

    def tap(key: str, src: str, width: int) -> str:
        extra.append(
            helper.make_tensor_value_info(f"in{key}", TensorProto.FLOAT, ["B", "L", width])
        )
        g.node("Identity", [src], f"in{key}")
        return src

    x = "x"
    for i in range(f.n_layers):
        p = f"l{i}."
        bqkv = np.concatenate([f.f32(p + n) for n in ("q.b", "k.b", "v.b")])
        ctx = g.node(
            "Attention",
            [
                tap(f"{i}.qkv", x, h),
                g.init(p + "wqkv", _weights(f, i, "qkv")),
                g.init(p + "bqkv", bqkv),
                "mask_index",
            ],
            f"ctx{i}",
            domain="com.microsoft",
            num_heads=nh,
        )
        ao = g.node(
            "MatMul", [tap(f"{i}.ao", ctx, h), g.init(p + "wo", _weights(f, i, "ao"))], f"ao{i}"
        )
        x1 = g.skip_ln(p, "aln", ao, x, g.init(p + "bo", f.f32(p + "ao.b")), f"x{i}a")
        m = g.node(
            "MatMul", [tap(f"{i}.fi", x1, h), g.init(p + "w1", _weights(f, i, "fi"))], f"m{i}"
        )
        gl = g.node(
            "BiasGelu", [m, g.init(p + "b1", f.f32(p + "fi.b"))], f"g{i}", domain="com.microsoft"
        )
        fo = g.node(
            "MatMul", [tap(f"{i}.fo", gl, ffn), g.init(p + "w2", _weights(f, i, "fo"))], f"fo{i}"
        )
        x = g.skip_ln(
            p,
            "oln",
            fo,
            x1,
            g.init(p + "b2", f.f32(p + "fo.b")),
            "y" if i == f.n_layers - 1 else f"x{i}b",
        )
    return g.model(
        "e5_encoder_fp32",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", h]),
            helper.make_tensor_value_info("mask_index", TensorProto.INT32, ["B"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "L", h]), *extra],
    )


def smooth_scales(
    f: E5File, x: np.ndarray, lengths: np.ndarray, alpha: Mapping[str, float] = SMOOTH_ALPHA
) -> dict[str, np.ndarray]:
    """SmoothQuant scales ``max|X_j|^a / max|W_j|^(1-a)`` per input channel of every linear
    layer (``a = alpha[kind]``), from an fp32 run over a calibration batch (``x`` embedded,
    ``lengths`` valid tokens per row)."""
    import onnxruntime as ort

    model = build_fp32_graph(f)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()][1:]
    outs = sess.run(names, {"x": x, "mask_index": lengths.astype(np.int32)})
    valid = np.arange(x.shape[1])[None, :] < lengths[:, None]
    scales: dict[str, np.ndarray] = {}
    for name, act in zip(names, outs, strict=True):
        key = name[2:]
        layer, kind = key.split(".")
        a = alpha[kind]
        amax = np.maximum(np.abs(act[valid]).max(axis=0), 1e-5)
        wmax = np.maximum(np.abs(_weights(f, int(layer), kind)).max(axis=1), 1e-5)
        scales[key] = np.clip(amax**a / wmax ** (1.0 - a), 1e-2, 1e3).astype(_F32)
    return scales


def quantize_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``w`` [in, out] as int8 per output channel (symmetric, max-abs): ``(q, scale)`` with
    ``w ~= q * scale`` (searching clipped ranges measured no better)."""
    scale = (np.maximum(np.abs(w).max(axis=0), 1e-8) / 127.0).astype(_F32)
    return np.clip(np.rint(w / scale), -127, 127).astype(np.int8), scale


def build_int8_model(f: E5File, smooth: Mapping[str, np.ndarray] | None = None) -> Any:
    """The encoder with every linear layer in int8 (per-channel weights, per-token
    activations; see the module docstring) as an ``onnx.ModelProto``.

    Input ``x`` [B, L, H] (embedded and LayerNormed; every row ``L`` real tokens, no
    padding); output ``y`` [B, L, H]. ``smooth``: SmoothQuant scales by ``"{layer}.{kind}"``.
    """
    from onnx import TensorProto, helper

    h, nh = f.hidden, f.n_heads
    g = _Graph(f)
    one = g.init("one", np.array(1.0))
    inv127 = g.init("inv127", np.array(1.0 / 127.0))
    eps = g.init("eps", np.array(1e-6))
    zp = g.init("zp128", np.array(128), np.uint8)
    axes1 = g.init("axes1", np.array([1]), np.int64)
    flat = g.init("flat", np.array([-1, h]), np.int64)
    # [B, L, H] shape for MultiHeadAttention; [M] zero points for the per-row quantisers
    shape = g.node("Shape", ["x"], "xshape")
    g.node(
        "Slice",
        [shape, g.init("at0", np.array([0]), np.int64), g.init("at2", np.array([2]), np.int64)],
        "BL",
    )
    blh = g.node("Concat", ["BL", g.init("hdim", np.array([h]), np.int64)], "BLH", axis=0)
    x = g.node("Reshape", ["x", flat], "x2d")
    rows = g.node(
        "Slice",
        [g.node("Shape", [x], "x2dshape"), "at0", g.init("at1", np.array([1]), np.int64)],
        "M",
    )
    zps = g.node("Expand", [zp, rows], "zps")

    def linear(key: str, src: str, weights: list[np.ndarray], outs: list[str]) -> None:
        """``outs[j] = src @ weights[j]`` (no bias) in int8, the input quantised per row."""
        if smooth is not None and key in smooth:
            sm = smooth[key]
            src = g.node("Mul", [src, g.init(f"sinv{key}", 1.0 / sm)], f"sm{key}")
            weights = [w * sm[:, None] for w in weights]
        amax = g.node(
            "ReduceMax", [g.node("Abs", [src], f"abs{key}")], f"amax{key}", axes=[1], keepdims=0
        )
        scale = g.node("Mul", [g.node("Max", [amax, eps], f"amaxe{key}"), inv127], f"s{key}")
        xq = g.node("QuantizeLinear", [src, scale, zps], f"xq{key}", axis=0)
        col = g.node("Unsqueeze", [scale, axes1], f"scol{key}")
        for j, (w, out) in enumerate(zip(weights, outs, strict=True)):
            q, wscale = quantize_weight(w)
            acc = g.node(
                "MatMulIntegerToFloat",
                [xq, g.init(f"wq{key}.{j}", q, np.int8), one, g.init(f"ws{key}.{j}", wscale), zp],
                f"acc{key}.{j}",
                domain="com.microsoft",
            )
            g.node("Mul", [acc, col], out)

    for i in range(f.n_layers):
        p = f"l{i}."
        wqkv = _weights(f, i, "qkv")
        linear(
            f"{i}.qkv",
            x,
            [wqkv[:, k * h : (k + 1) * h] for k in range(3)],
            [f"q{i}", f"k{i}", f"v{i}"],
        )
        q, k, v = (g.node("Reshape", [f"{n}{i}", blh], f"{n}3d{i}") for n in "qkv")
        bqkv = np.concatenate([f.f32(p + n) for n in ("q.b", "k.b", "v.b")])
        ctx = g.node(
            "MultiHeadAttention",
            [q, k, v, g.init(p + "bqkv", bqkv)],
            f"ctx3d{i}",
            domain="com.microsoft",
            num_heads=nh,
        )
        linear(
            f"{i}.ao", g.node("Reshape", [ctx, flat], f"ctx{i}"), [_weights(f, i, "ao")], [f"ao{i}"]
        )
        x1 = g.skip_ln(p, "aln", f"ao{i}", x, g.init(p + "bo", f.f32(p + "ao.b")), f"x{i}a")
        linear(f"{i}.fi", x1, [_weights(f, i, "fi")], [f"m{i}"])
        gl = g.node(
            "BiasGelu",
            [f"m{i}", g.init(p + "b1", f.f32(p + "fi.b"))],
            f"g{i}",
            domain="com.microsoft",
        )
        linear(f"{i}.fo", gl, [_weights(f, i, "fo")], [f"fo{i}"])
        x = g.skip_ln(p, "oln", f"fo{i}", x1, g.init(p + "b2", f.f32(p + "fo.b")), f"x{i}b")
    g.node("Reshape", [x, blh], "y")
    return g.model(
        "e5_encoder_int8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "L", h])],
    )


def build_int8_graph(
    f: E5File, out_path: str, calibration: tuple[np.ndarray, np.ndarray] | None = None
) -> None:
    """Write the int8 graph (SmoothQuant-scaled from ``calibration`` = (x, lengths) when
    given) to ``out_path`` atomically."""
    import onnx

    folder = os.path.dirname(out_path) or "."
    os.makedirs(folder, exist_ok=True)
    smooth = smooth_scales(f, *calibration) if calibration is not None else None
    model = build_int8_model(f, smooth)
    # a name of this process and thread; written with the umask's permissions (a shared cache)
    tmp = f"{out_path}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        onnx.save(model, tmp)
        os.replace(tmp, out_path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


class OnnxEncoder:
    """``forward_mean(ids, lengths)`` like ``_encoder.Encoder``, on the int8 onnxruntime graph.

    ``intra_threads``: onnxruntime intra-op threads per call. ``Run`` is thread safe, so with
    1 intra-op thread several callers (FastE5's workers) run batches in parallel on one session.
    """

    def __init__(
        self, f: E5File, model_path: str, tokenizer: Tokenizer, intra_threads: int = 1
    ) -> None:
        import onnxruntime as ort

        self.hidden = h = f.hidden
        self.max_positions = f.max_positions
        self.eps = f.eps
        self._word = f.q4_blocks("emb.word", h)
        pos = f.f32("emb.pos").reshape(f.max_positions, h)
        self._pos_type = (pos + f.f32("emb.type")[:h]).astype(_F32)
        self._eln_w = f.f32("emb.ln.w").copy()
        self._eln_b = f.f32("emb.ln.b").copy()
        path = cached_graph_path(model_path)
        if not os.path.isfile(path):
            build_int8_graph(f, path, self._calibration_batch(f, tokenizer))
            stem = os.path.basename(path).rsplit("-v", 1)[0]
            for old in glob.glob(os.path.join(os.path.dirname(path), stem + "-v*.onnx")):
                if old != path:  # graphs of older versions of this code
                    with contextlib.suppress(OSError):
                        os.remove(old)
        self.graph_path = path
        self._lock = threading.Lock()
        self._sessions: dict[int, Any] = {}
        self._ort = ort
        self.intra_threads = max(1, int(intra_threads))
        self.max_threads = max(2, min(8, os.cpu_count() or 2))
        self.session(self.intra_threads)

    def session(self, threads: int) -> Any:
        """The inference session with ``threads`` intra-op threads (created on first use).

        Only two sizes exist — one thread, or all the engine's — so a thread count that follows
        the machine's load cannot pile up sessions (each holds the ~22 MB graph)."""
        threads = 1 if threads <= 1 else max(2, self.max_threads)
        with self._lock:
            s = self._sessions.get(threads)
            if s is None:
                ort = self._ort
                so = ort.SessionOptions()
                so.intra_op_num_threads = threads
                so.inter_op_num_threads = 1
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                if threads > 1:
                    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
                # ConstantSharing is off: with usearch imported first (as the app does) it
                # merged a float32 and an int64 initializer of this graph into one
                # ("Type parameter (T) of Optype (Max) bound to different types")
                s = ort.InferenceSession(
                    self.graph_path,
                    so,
                    providers=["CPUExecutionProvider"],
                    disabled_optimizers=["ConstantSharing"],
                )
                self._sessions[threads] = s
            return s

    def _calibration_batch(self, f: E5File, tok: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
        rows = [
            [f.bos, *tok.encode("passage: " + t)[: f.max_positions - 2], f.eos]
            for t in CALIBRATION_TEXTS
        ]
        ids = np.full((len(rows), max(map(len, rows))), f.pad, dtype=np.int64)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = row
        return self.embed(ids), np.array([len(r) for r in rows], dtype=np.int64)

    def embed(self, ids: np.ndarray) -> np.ndarray:
        bsz, seq = ids.shape
        x = dequantize_q4(self._word[ids.reshape(-1)])
        x.reshape(bsz, seq, self.hidden)[...] += self._pos_type[:seq]
        layer_norm_(x, self._eln_w, self._eln_b, self.eps)
        return x.reshape(bsz, seq, self.hidden)

    def forward_mean(
        self, ids: np.ndarray, lengths: np.ndarray, threads: int | None = None
    ) -> np.ndarray:
        """Mean of the last hidden states over each row's ``lengths[r]`` tokens. Rows are
        run in groups of equal length without their padding (the graph has no mask)."""
        sess = self.session(threads or self.intra_threads)
        pooled = np.empty((ids.shape[0], self.hidden), dtype=_F32)
        by_length: dict[int, list[int]] = {}
        for r, ln in enumerate(lengths.tolist()):
            by_length.setdefault(int(ln), []).append(r)
        for ln, rows in by_length.items():
            x = self.embed(np.ascontiguousarray(ids[rows, :ln]))
            (y,) = sess.run(["y"], {"x": x})
            pooled[rows] = y.mean(axis=1)
        return pooled
