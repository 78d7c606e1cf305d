"""Support-channel mode's confidence threshold, measured on the external dev sets.

In support-channel mode (``support:`` in the serve settings; ``bot/support.py``) the bot answers
a new question nobody addressed to it only when retrieval is confident: the top source's fused
score (the learned ranker's, as ``ask --json`` reports it in ``sources[0].score``) is at least
``min_score``. This script measures, for a sweep of thresholds, the share of questions that
would be answered and, of those, the share whose *cited* sources hold the gold (``eval
--cited``'s hit: any cited source is a gold path or issue), and whether the answerer itself said
"no answer" (never posted in support mode either).

    python benchmarks/support_sweep.py --workdir /work/evalwork/devsets \
        --out /work/evalwork/support-sweep [--sets marshmallow urfave-cli yargs]

The workdir's instances and data (built by ``eval_devsets.py``) are copied under ``--out`` and
read there, so the dev sets' own folder is never written. Questions: every set's
``questions.yaml`` (on ``{set}``) and ``localize.yaml`` (bug reports, on ``{set}-loc``), both
splits. The default threshold is chosen on the ``tune`` split only — the lowest threshold whose
answered questions are at least ``--target`` precise — and the ``report`` split's numbers at
that threshold are the honest figure. Writes ``{out}/questions.json`` and ``{out}/sweep.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from core.config import Settings  # noqa: E402
from core.eval.metrics import is_hit, load_questions  # noqa: E402
from core.models import Answer  # noqa: E402
from core.service import RepoExpert  # noqa: E402

SETS = ["marshmallow", "urfave-cli", "yargs"]
GROUPS = {"qa": ("questions.yaml", ""), "localize": ("localize.yaml", "-loc")}


def copy_workdir(src: Path, dest: Path, sets: list[str]) -> None:
    """The dev sets' instances and data under ``dest`` (once), and ``instances-tune``: the same
    instances retrieving with the ranker and kind classifier fitted without their own set (the
    ``loso`` models of ``eval_devsets.py --loso``) — the shipped ranker learned on the tuning
    halves, so scoring them with it would flatter every threshold."""
    for part in ("instances", "data"):
        if not (dest / part).exists():
            shutil.copytree(src / part, dest / part, symlinks=True)
    tune = dest / "instances-tune"
    if tune.exists():
        shutil.rmtree(tune)
    shutil.copytree(dest / "instances", tune)
    for f in tune.glob("*.yaml"):
        name = f.stem.removesuffix("-loc")
        if name not in sets:
            continue
        raw = yaml.safe_load(f.read_text())
        raw.setdefault("retrieval", {}).update(
            ranker_file=str(src / "loso" / f"ranker-without-{name}.json"),
            kinds_file=str(src / "loso" / f"kinds-without-{name}.json"),
        )
        f.write_text(yaml.safe_dump(raw, sort_keys=False))


async def ask_one(app: RepoExpert, inst: str, question: str) -> tuple[float, Answer]:
    found = await app.retrieve(inst, question)
    top = found.top_score()  # what bot/support.py compares with min_score
    return top, await app.ask(inst, question)


async def measure(app: RepoExpert, sets: list[str], split: str) -> list[dict[str, Any]]:
    """Every question of ``split``: on-topic (asked of its own set) and, for the qa files,
    off-topic (asked of each other set's instance: nothing there answers it)."""
    rows = []
    for name in sets:
        setdir = ROOT / "benchmarks" / "devsets" / name
        for group, (file, suffix) in GROUPS.items():
            inst = name + suffix
            for q in load_questions(setdir / file):
                if q.split != split:
                    continue
                top, answer = await ask_one(app, inst, q.question)
                hit = any(is_hit(s, q.gold) for s in answer.sources)
                rows.append({"set": name, "group": group, "id": q.id, "split": q.split,
                             "top": top, "no_answer": answer.no_answer, "hit": hit})  # fmt: skip
                if group != "qa":
                    continue
                for other in sets:
                    if other == name:
                        continue
                    top, answer = await ask_one(app, other, q.question)
                    rows.append({"set": other, "group": "offtopic", "id": q.id,
                                 "split": q.split, "top": top, "no_answer": answer.no_answer,
                                 "hit": False})  # fmt: skip
            print(f"{inst}: {file} ({split}) done", flush=True)
    return rows


def at(rows: list[dict[str, Any]], t: float, gate: bool = True) -> dict[str, float]:
    """At threshold ``t``: the share of on-topic questions answered, of off-topic ones answered
    (wrongly: nothing there holds the answer), and the precision of all answers (on-topic
    answers whose cited sources hold the gold, over every answer given). With ``gate`` an
    answer the answerer itself called "no answer" is not posted either."""

    def posted(r: dict[str, Any]) -> bool:
        return bool(r["top"] >= t and not (gate and r["no_answer"]))

    on = [r for r in rows if r["group"] != "offtopic"]
    off = [r for r in rows if r["group"] == "offtopic"]
    on_ans, off_ans = [r for r in on if posted(r)], [r for r in off if posted(r)]
    given = len(on_ans) + len(off_ans)
    return {
        "on": len(on_ans) / len(on) if on else 0.0,
        "on_prec": sum(r["hit"] for r in on_ans) / len(on_ans) if on_ans else 0.0,
        "off": len(off_ans) / len(off) if off else 0.0,
        "prec": sum(r["hit"] for r in on_ans) / given if given else 0.0,
        "n_on": len(on), "n_off": len(off),
    }  # fmt: skip


def sweep_table(tune: list[dict[str, Any]], report: list[dict[str, Any]], grid: list[float],
                chosen: float) -> str:  # fmt: skip
    out = ["| min_score | tune: on-topic answered | of those, cite gold | off-topic answered | "
           "precision of all answers | report: on-topic answered | of those, cite gold | "
           "off-topic answered | precision of all answers |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for t in grid:
        a, b = at(tune, t), at(report, t)
        mark = " **(default)**" if t == chosen else ""
        out.append(f"| {t:g}{mark} | {a['on']:.0%} | {a['on_prec']:.0%} | {a['off']:.0%} | "
                   f"{a['prec']:.0%} | {b['on']:.0%} | {b['on_prec']:.0%} | {b['off']:.0%} | "
                   f"{b['prec']:.0%} |")  # fmt: skip
    return "\n".join(out)


def choose(tune: list[dict[str, Any]], grid: list[float], target: float) -> float:
    """The lowest threshold whose answers (tune) are at least ``target`` precise."""
    for t in sorted(grid):
        if at(tune, t)["prec"] >= target:
            return t
    return max(grid)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default="/work/evalwork/devsets")
    p.add_argument("--out", default="/work/evalwork/support-sweep")
    p.add_argument("--sets", nargs="+", default=SETS)
    p.add_argument("--target", type=float, default=0.8, help="precision to reach on tune")
    p.add_argument("--reuse", action="store_true", help="re-read questions.json (no asking)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "questions.json"
    if args.reuse and cache.exists():
        rows = json.loads(cache.read_text())
    else:
        work = out / "work"
        copy_workdir(Path(args.workdir), work, args.sets)

        async def go(instances: Path, split: str) -> list[dict[str, Any]]:
            app = RepoExpert(Settings(instances, work / "data"))
            try:
                return await measure(app, args.sets, split)
            finally:
                await app.close()

        rows = asyncio.run(go(work / "instances-tune", "tune"))
        rows += asyncio.run(go(work / "instances", "report"))
        cache.write_text(json.dumps(rows, indent=0))
    tune = [r for r in rows if r["split"] == "tune"]
    report = [r for r in rows if r["split"] == "report"]
    grid = sorted({-float("inf"), *(x / 2 for x in range(0, 19))})
    chosen = choose(tune, grid, args.target)
    a, b = at(tune, -float("inf")), at(report, -float("inf"))
    text = [
        "# Support-channel mode: answered vs precise", "",
        f"Tune: {a['n_on']} on-topic + {a['n_off']} off-topic questions (scored with the "
        f"rankers fitted without their own set); report: {b['n_on']} + {b['n_off']} (the "
        "shipped ranker, which never saw them). On-topic: a dev-set question asked of its own "
        "repository (qa and localize); off-topic: a qa question asked of another set's "
        "repository, where nothing holds the answer. *Precision of answers*: the answers whose "
        "cited sources hold the gold, over every answer posted (on- and off-topic). Answers "
        "the answerer itself called \"no answer\" are never posted.", "",
        f"Default chosen on tune: the lowest min_score with precision >= {args.target:.0%} → "
        f"**{chosen:g}**.", "", sweep_table(tune, report, grid, chosen),
    ]  # fmt: skip
    for group in ("qa", "localize"):
        sub = [r for r in rows if r["group"] in (group, "offtopic")]
        text += ["", f"## {group} (with the off-topic questions)", "",
                 sweep_table([r for r in sub if r["split"] == "tune"],
                             [r for r in sub if r["split"] == "report"], grid, chosen)]  # fmt: skip
    (out / "sweep.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
