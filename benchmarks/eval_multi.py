"""One instance over several repositories against each repository's own instance (issue 13).

    python benchmarks/eval_multi.py --repos /work/evalwork/devsets/repos --workdir DIR
        [--sets marshmallow urfave-cli yargs] [--cache FILE] [-k 6] [--split all|tune|report]

``--repos``: a folder with one checkout per dev set (``eval_devsets.py`` makes them: the set's
tree at its pinned commit, no history). In ``--workdir`` it writes an instance file per set (as
``eval_devsets.py`` does) and one instance, ``devsets``, whose ``repos:`` are all of them, each
with its own include globs, excludes and issues; ``--cache`` (an ``embeddings.sqlite``) is copied
into the data folder first so texts embedded before are not embedded again. It indexes every
instance (timed), then scores each set's ``questions.yaml`` twice at the retrieval level — on the
set's own instance and on ``devsets``, the gold given as ``repo:path`` / ``repo#N`` — and writes
``{workdir}/multi.json`` and ``{workdir}/multi.md`` (hit@1, hit@k, MRR per set and overall).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.config import Settings  # noqa: E402
from core.eval.metrics import EvalQuestion, Metrics, load_questions, run_eval  # noqa: E402
from core.service import RepoExpert  # noqa: E402

SETS = ["marshmallow", "urfave-cli", "yargs"]
MULTI = "devsets"


def entry(name: str, repos: Path) -> dict[str, Any]:
    """A set's repository as the instance files give it (``eval_devsets.instance_file``)."""
    setdir = ROOT / "benchmarks" / "devsets" / name
    source = yaml.safe_load((setdir / "source.yaml").read_text())
    return {
        "repo": {"path": str(repos / name)},
        "docs": {"include": source["docs"]},
        "code": {"include": source["code"]},
        "exclude": source.get("exclude") or [],
        "issues": {"file": str(setdir / "issues.json")},
    }


def write_instances(sets: list[str], repos: Path, inst_dir: Path) -> None:
    inst_dir.mkdir(parents=True, exist_ok=True)
    multi: list[dict[str, Any]] = []
    for name in sets:
        e = entry(name, repos)
        (inst_dir / f"{name}.yaml").write_text(yaml.safe_dump(e, sort_keys=False))
        multi.append({"name": name, **e.pop("repo"), **e})
    text = yaml.safe_dump({"description": "every dev set", "repos": multi}, sort_keys=False)
    (inst_dir / f"{MULTI}.yaml").write_text(text)


def in_repo(q: EvalQuestion, repo: str) -> EvalQuestion:
    """The question with its gold pinned to ``repo`` (``repo:path``, ``repo#N``)."""
    gold = q.gold.model_copy(
        update={
            "paths": [f"{repo}:{p}" for p in q.gold.paths],
            "issues": [f"{repo}#{n}" for n in q.gold.issues],
        }
    )
    return q.model_copy(update={"gold": gold})


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repos", type=Path, required=True)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--sets", nargs="+", default=SETS, choices=SETS)
    ap.add_argument("--cache", type=Path, help="an embeddings.sqlite to start from")
    ap.add_argument("-k", type=int, default=6)
    ap.add_argument("--split", choices=["all", "tune", "report"], default="all")
    args = ap.parse_args()
    work: Path = args.workdir
    inst_dir, data = work / "instances", work / "data"
    write_instances(args.sets, args.repos, inst_dir)
    cache = data / "cache" / "embeddings.sqlite"
    if args.cache and not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(args.cache, cache)
    app = RepoExpert(Settings(inst_dir, data))
    out: dict[str, Any] = {"k": args.k, "split": args.split, "index": {}, "sets": {}}
    try:
        for name in [*args.sets, MULTI]:
            t = time.perf_counter()
            s = await app.index(name, full=True)
            out["index"][name] = {
                "seconds": round(time.perf_counter() - t, 1),
                "embed_seconds": round(s.embed_seconds, 1),
                "chunks": sum(s.chunks.values()),
                "chunks_embedded": s.chunks_embedded,
            }
            print(f"indexed {name}: {out['index'][name]}", flush=True)
        single_all, multi_all = [], []
        for name in args.sets:
            qs = load_questions(ROOT / "benchmarks" / "devsets" / name / "questions.yaml")
            if args.split != "all":
                qs = [q for q in qs if q.split == args.split]
            qs = [in_repo(q, name) for q in qs]

            async def ask(inst: str, q: str) -> Any:
                return await app.retrieve(inst, q, k=args.k)

            single = await run_eval(qs, lambda q, n=name: ask(n, q), args.k, "single")
            multi = await run_eval(qs, lambda q: ask(MULTI, q), args.k, "multi")
            single_all += single.results
            multi_all += multi.results
            out["sets"][name] = {
                "single": Metrics.of(single.results).to_json(),
                "multi": Metrics.of(multi.results).to_json(),
            }
            print(f"{name}: {out['sets'][name]}", flush=True)
        out["overall"] = {
            "single": Metrics.of(single_all).to_json(),
            "multi": Metrics.of(multi_all).to_json(),
        }
    finally:
        await app.close()
    (work / "multi.json").write_text(json.dumps(out, indent=2))
    (work / "multi.md").write_text(markdown(out))
    print(markdown(out))
    return 0


def markdown(out: dict[str, Any]) -> str:
    k = out["k"]
    lines = [
        f"| set | n | single hit@1 | multi hit@1 | single hit@{k} | multi hit@{k} | single MRR | "
        "multi MRR |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [*out["sets"].items(), ("overall", out["overall"])]
    for name, r in rows:
        s, m = r["single"], r["multi"]
        lines.append(
            f"| {name} | {s['n']} | {s['hit@1']:.3f} | {m['hit@1']:.3f} | {s['hit@k']:.3f} | "
            f"{m['hit@k']:.3f} | {s['mrr']:.3f} | {m['mrr']:.3f} |"
        )
    lines += ["", "| instance | index seconds | embedding seconds | chunks | embedded |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name, r in out["index"].items():
        lines.append(f"| {name} | {r['seconds']} | {r['embed_seconds']} | {r['chunks']} | "
                     f"{r['chunks_embedded']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
