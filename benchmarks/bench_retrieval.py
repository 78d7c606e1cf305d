"""Retrieval latency at repository scale, without an LLM.

Builds synthetic indexes of N chunks (default 5k and 50k, split docs 20% / code 60% / issues
20%; text drawn from a real word list so BM25 has realistic postings; random unit vectors),
then times the full retrieval path — query analysis, query embedding with the real default
embedder, exact vector search, FTS5 BM25, symbol lookups, fusion, fetching the sources — and the
whole extractive ``ask``. Also runs N concurrent asks (1, 8, 32) and reports throughput.

    python benchmarks/bench_retrieval.py [--sizes 5000 50000] [--queries 40] [--repos 10]
        [--set test_candidates=true …]   # retrieval settings (a before/after pair of runs)

Prints p50/p95 per size and the ratio 50k/5k (exact search grows linearly; the rest should not).
With ``--repos R`` the chunks belong to R repositories, and each question is also asked naming
one of them ("… (r0)": the service's path, a tilt and, when r0 leads, r0 searched alone) and
filtered to it (``repo:r0``: its vector and lexical search over that repository's rows, with its
statistics), alternating with the unfiltered one in the same run; and r0's rows are built alone,
as that repository's own instance, to count the filtered questions whose sources equal its own.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.answer import ExtractiveAnswerer
from core.config import EmbeddingConfig, RetrievalConfig
from core.embed import embed_service
from core.layout import Layout
from core.models import Chunk, Retrieval, Symbol
from core.retrieve import Options, retrieve
from core.retrieve.narrow import retrieve_named
from core.retrieve.repos import with_repo
from core.retrieve.translate import Apertium
from core.store.local import LocalStore

QUESTIONS = [
    "How do I configure the request timeout?",
    "what does parse_config return?",
    "where is the bug from issue #42?",
    "¿Cómo configuro el tiempo de espera?",
    "Is there a known bug with retries on 502?",
    "who calls render_chart?",
    "What is the default of max_connections?",
    "How are plugins loaded at startup?",
]


def _words() -> list[str]:
    import keyword
    import string

    src = Path(string.__file__).read_text() + Path(keyword.__file__).read_text()
    src += Path(argparse.__file__).read_text()
    ws = sorted({w.lower() for w in src.split() if w.isalpha() and 2 < len(w) < 14})
    return ws


async def build(
    store: LocalStore, n: int, dim: int, seed: int = 0, repos: int = 1, only: str | None = None
) -> None:
    """The synthetic build (``only``: the same build's rows of that repository alone)."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    words = _words()
    split = {"docs": int(n * 0.2), "code": int(n * 0.6)}
    split["issues"] = n - split["docs"] - split["code"]
    async with store.writer("bench") as w:
        syms: list[Symbol] = []
        for coll, count in split.items():
            chunks = []
            for i in range(count):
                body = " ".join(rng.choices(words, k=120))
                name = f"{rng.choice(words)}_{rng.choice(words)}"
                path = f"src/{rng.choice(words)}/{rng.choice(words)}.py"
                text = f"{path} › {name}\ndef {name}(x):\n    {body}"
                c = Chunk(coll, f"{coll}:{i}", text, name, 200, path=path,  # type: ignore[arg-type]
                          issue=i if coll == "issues" else None, start_line=1, end_line=30,
                          symbol=name if coll == "code" else None, url=f"u/{i}",
                          repo=f"r{i % repos}" if repos > 1 else "")  # fmt: skip
                chunks.append(c)
                if coll == "code":
                    syms.append(Symbol(name, name, "function", path, 1, 30, (), c.repo))
            v = nrng.standard_normal((count, dim)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            if only is not None:
                v = v[[i for i, c in enumerate(chunks) if c.repo == only]]
                chunks = [c for c in chunks if c.repo == only]
            await w.add_chunks(coll, chunks, v)  # type: ignore[arg-type]
        await w.add_symbols([s for s in syms if only is None or s.repo == only])
        await w.set_meta("stamp", {"bench": True})
        await w.commit()


def _cited(r: Retrieval) -> list[tuple[str, str, int]]:
    """A retrieval's sources: which chunk (its collection and number), and the score (1e-4)."""
    return [(s.collection, s.url, round(s.score * 1e4)) for s in r.sources]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--repos", type=int, default=1, help="repositories the chunks belong to")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="retrieval settings, e.g. test_candidates=true (YAML values)")
    args = ap.parse_args()
    settings = {k: yaml.safe_load(v) for k, _, v in (kv.partition("=") for kv in args.set)}
    tmp = Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    svc = embed_service(EmbeddingConfig(), Layout(tmp))
    # The questions repeat: every repetition is embedded anew, as a new question would be (the
    # service remembers its recent questions' vectors otherwise).
    svc.recent_queries = 0
    name, dim, _ = await svc.info()
    print(f"query embedder: {name}")
    await svc.embed_query("warm up")
    results = {}
    for n in args.sizes:
        t = time.perf_counter()
        store = LocalStore(Layout(tmp / str(n)))
        await build(store, n, dim, repos=args.repos)
        built = time.perf_counter() - t
        reader = await store.open_live("bench")
        assert reader is not None
        opt = Options.of(RetrievalConfig(**settings))
        answerer = ExtractiveAnswerer()
        # The Spanish question is translated as in the product where Apertium is installed
        # (its kept pipeline), uncached (cache_size 0): every repetition is translated again.
        tr = Apertium(cache_size=0)
        ret, ask, emb, trans, kept = [], [], [], [], []
        # filtered to one repository, as a channel's default or repo:r0 does; and r0's rows
        # alone as a build of their own, whose sources the filtered question should give
        names = {f"r{i}": f"r{i}" for i in range(args.repos)}
        several = dataclasses.replace(opt, aliases=names, scopes={k: (k,) for k in names})
        to_r0 = with_repo(several, "r0")
        alone: list[bool] = []
        # … and naming r0 ("… (r0)"): a tilt, then r0 alone if it leads (narrow.py)
        named_ms: list[float] = []
        narrowed: list[bool] = []
        if args.repos > 1:
            store_r0 = LocalStore(Layout(tmp / f"{n}-r0"))
            await build(store_r0, n, dim, repos=args.repos, only="r0")
            reader_r0 = await store_r0.open_live("bench")
            assert reader_r0 is not None
        for i in range(args.queries):
            qtext = QUESTIONS[i % len(QUESTIONS)]
            if args.repos > 1:
                t0 = time.perf_counter()
                got = await retrieve(reader, svc, qtext, to_r0, translator=tr)
                kept.append((time.perf_counter() - t0) * 1000)
                own = await retrieve(reader_r0, svc, qtext, opt, translator=tr)
                alone.append(_cited(got) == _cited(own))
                await svc.embed_query(f"{qtext} (r0)")  # its vector cached, as the others'
                t0 = time.perf_counter()
                nm = await retrieve_named(reader, svc, f"{qtext} (r0)", several, translator=tr)
                named_ms.append((time.perf_counter() - t0) * 1000)
                narrowed.append("narrowed" in nm.route)
            t0 = time.perf_counter()
            r = await retrieve(reader, svc, qtext, opt, translator=tr)
            t1 = time.perf_counter()
            if "translate" in r.timings_ms:
                trans.append(r.timings_ms["translate"])
            await answerer.answer(qtext, r)
            t2 = time.perf_counter()
            ret.append((t1 - t0) * 1000)
            ask.append((t2 - t0) * 1000)
            emb.append(r.timings_ms["embed_query"])
        conc = {}
        for c in (1, 8, 32):
            t0 = time.perf_counter()

            async def one(i: int) -> None:
                q = QUESTIONS[i % len(QUESTIONS)]
                r = await retrieve(reader, svc, q, opt, translator=tr)  # noqa: B023
                await answerer.answer(q, r)  # noqa: B023

            await asyncio.gather(*(one(i) for i in range(c * 2)))
            conc[c] = c * 2 / (time.perf_counter() - t0)
        await reader.close()
        await tr.aclose()
        results[n] = (ret, ask, emb, conc, built)
        print(
            f"{n:>7} chunks (built in {built:.1f}s): retrieve p50 {statistics.median(ret):6.1f} ms"
            f"  p95 {pct(ret, 95):6.1f} ms | query embedding p50 {statistics.median(emb):5.1f} ms"
            f" | ask p50 {statistics.median(ask):6.1f} ms  p95 {pct(ask, 95):6.1f} ms | "
            + (
                f"translation p50 {statistics.median(trans):5.1f} ms (n={len(trans)}) | "
                if trans
                else "no translator | "
            )
            + "  ".join(f"{c} concurrent: {qps:5.1f} asks/s" for c, qps in conc.items())
        )
        if kept:
            await reader_r0.close()
            print(f"{n:>7} chunks over {args.repos} repositories, filtered to one: retrieve p50 "
                  f"{statistics.median(kept):6.1f} ms  p95 {pct(kept, 95):6.1f} ms "
                  f"({statistics.median(kept) / statistics.median(ret):.2f}x unfiltered); "
                  f"sources as that repository's own build: {sum(alone)}/{len(alone)}")
            print(f"{n:>7} chunks over {args.repos} repositories, naming one: retrieve p50 "
                  f"{statistics.median(named_ms):6.1f} ms  p95 {pct(named_ms, 95):6.1f} ms "
                  f"({statistics.median(named_ms) / statistics.median(ret):.2f}x unnamed); "
                  f"searched that repository alone: {sum(narrowed)}/{len(narrowed)}")
    if len(args.sizes) > 1:
        a, b = args.sizes[0], args.sizes[-1]
        ra = statistics.median(results[a][0])
        rb = statistics.median(results[b][0])
        print(f"ratio retrieve p50 {b}/{a}: {rb / ra:.2f}x for {b / a:.0f}x the chunks")
    if args.json:
        out = {
            str(n): {"retrieve_p50": statistics.median(r), "retrieve_p95": pct(r, 95),
                     "ask_p50": statistics.median(a), "ask_p95": pct(a, 95),
                     "query_embed_p50": statistics.median(e),
                     "asks_per_s": {str(c): q for c, q in conc.items()}}
            for n, (r, a, e, conc, _) in results.items()
        }  # fmt: skip
        await asyncio.to_thread(
            Path(args.json).write_text, json.dumps({"embedder": name, "sizes": out}, indent=2)
        )
    svc.close()
    await bench_translation()


async def bench_translation(n: int = 20) -> None:
    """A Spanish question's translation by the kept pipeline against the baseline, one
    ``apertium`` process per question (``keep=False``), in the same run."""
    kept, single = Apertium(cache_size=0), Apertium(cache_size=0, keep=False)
    if await kept.direction("es", "en") is None:
        print("translation: Apertium's spa-eng is not installed")
        return
    q = next(x for x in QUESTIONS if x.startswith("¿"))
    await kept.translate(q, "es", "en")  # the pipeline starts (not counted)
    times: dict[str, list[float]] = {"kept": [], "single": []}
    for _ in range(n):
        for name, tr in (("kept", kept), ("single", single)):
            t = time.perf_counter()
            await tr.translate(q, "es", "en")
            times[name].append((time.perf_counter() - t) * 1000)
    await kept.aclose()
    k, s1 = statistics.median(times["kept"]), statistics.median(times["single"])
    print(f"translation p50 (n={n}): kept pipeline {k:.1f} ms (p95 {pct(times['kept'], 95):.1f})"
          f", one process per question {s1:.1f} ms: {s1 / k:.0f}x")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
