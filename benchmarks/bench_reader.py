"""What the reader stage (``retrieval.reader``) costs a question, against retrieval without it,
and what reading every chunk ahead costs the build.

    python benchmarks/bench_reader.py --instances DIR --data DIR --instance NAME \
        --questions FILE.yaml [--limit 60] [--store postgresql://…]

Asks every question of the file (an eval question file, e.g. a dev set's ``questions.yaml``) of a
real, already indexed instance three times: reader off; reader on with no passage vector known
(neither remembered nor in the embedding cache: every question's top 12 read, the cold cost);
reader on after a build read every chunk ahead (``core/embed/reading.py``; memory emptied before
each question, so the vectors come from the cache file: what a question costs after a restart).
With ``--store`` a PostgreSQL URL (the instance indexed there), the third arm is kept off the
database's shared vectors (``rx_vectors``: the vectors come from the cache file, as above), and a
fourth arm runs: reader on with the data folder's cache emptied before each question but the
database's shared vectors full — what a server on another machine than the builder pays. It
deletes every reader vector from that database first (use a database of its own). The build's
reading time is printed too. Also the first source's score, which a support channel's
``min_score`` is measured against: the reader's ranker scores on its own scale. Prints the median
and p95 of the retrieval time and of the reader's own share, and the ratios against "off", run in
the same process. Run it on an otherwise idle machine: the reader's forward pass takes whatever
cores are free. It deletes the reader's vectors from the data folder's embedding cache first (the
next build, or the questions, read them again).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_retrieval import pct

from core.config import Settings
from core.embed import reading
from core.eval.metrics import load_questions
from core.models import SyncRequest
from core.service import RepoExpert


def forget(cache: Path) -> None:
    """The reader's vectors out of the embedding cache (``Reader.name``: ``reader-e5-…``)."""
    db = sqlite3.connect(str(cache))
    try:
        with db:
            db.execute("DELETE FROM vectors WHERE model LIKE 'reader-e5-%'")
    finally:
        db.close()


async def forget_shared(app: RepoExpert) -> None:
    """The reader's vectors out of a PostgreSQL store's shared vectors."""
    db = app.backend._db
    await (await db.pool()).execute("DELETE FROM rx_vectors WHERE model LIKE 'reader-e5-%'")


async def run(args: argparse.Namespace) -> int:
    app = RepoExpert(Settings(Path(args.instances), Path(args.data), args.store))
    shared = app.store.shared_vectors is not None
    qs = [q.question for q in load_questions(Path(args.questions))][: args.limit]
    inst = app.instance(args.instance)
    rows: dict[str, tuple[list[float], list[float], list[float]]] = {}
    cache = app.layout.embeddings_cache
    try:
        inst.retrieval.reader = True  # load the index, the embedder and the reader
        await app.preload()
        await app.retrieve(args.instance, qs[0])
        forget(cache)
        arms = [("off", False), ("on, nothing read before", True),
                ("on, every chunk read ahead", True)]  # fmt: skip
        if shared:
            arms.append(("on, from the shared vectors (PostgreSQL)", True))
        for label, on in arms:
            inst.retrieval.reader = on
            if shared and label.endswith("before"):
                await forget_shared(app)  # nothing known anywhere
            if label.endswith("ahead"):
                forget(cache)  # the build reads every chunk (the cold arm kept some)
                if shared:
                    await forget_shared(app)
                # the files and issues as they are (nothing fetched: the index does not change)
                report = await app.sync(args.instance, SyncRequest(repo=False, issues=False))
                assert report.summary is not None
                built = report.summary
                rate = built.chunks_read / max(built.read_seconds, 1e-9)
                print(f"the build read {built.chunks_read} chunks ahead in "
                      f"{built.read_seconds:.0f} s ({rate:.1f} chunks/s)")  # fmt: skip
            from_db = label.endswith("(PostgreSQL)")  # only this arm reads the shared vectors
            live = await app.reader(args.instance)  # the build the arm reads
            live.shared_vectors = app.store.shared_vectors if from_db else None
            total, reader, top = [], [], []
            for q in qs:
                reading.MEMO.vectors.clear()
                if label.endswith("before") or from_db:
                    forget(cache)
                t = time.perf_counter()
                r = await app.retrieve(args.instance, q)
                total.append((time.perf_counter() - t) * 1000)
                reader.append(r.timings_ms.get("reader", 0.0))
                if r.sources:
                    top.append(r.sources[0].score)
            rows[label] = (total, reader, top)
    finally:
        await app.close()
    base = statistics.median(rows["off"][0])
    print(f"{args.instance}: {len(qs)} questions, retrieval time per question (ms)")
    print("| reader | median | p95 | reader median | reader p95 | median / off | first source's "
          "score: median, p10 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for label, (total, reader, top) in rows.items():
        med = statistics.median(total)
        print(f"| {label} | {med:.0f} | {pct(total, 95):.0f} | {statistics.median(reader):.0f} | "
              f"{pct(reader, 95):.0f} | {med / base:.2f} | {statistics.median(top):.2f}, "
              f"{pct(top, 10):.2f} |")  # fmt: skip
    print("(the first source's score is what a support channel's min_score is compared with)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--instances", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--instance", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--store", default=None, help="a postgresql:// URL: the shared-vectors arm")
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
