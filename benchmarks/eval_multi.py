"""One instance over many repositories against each repository's own instance — what an
organisation that points one instance at all its repositories sees (issues 12 and 13).

    python benchmarks/eval_multi.py --repos DIR --workdir DIR [--sets A B …] [--cache FILE]
        [-k 6] [--split all|tune|report] [--cited] [--localize] [--mirrors DIR]
        [--channel none|team|own] [--single FILE] [--set KEY=VALUE …]

``--repos``: a folder with one checkout per dev set (``eval_devsets.py`` makes them: the set's
tree at its pinned commit, no history; a missing one is made from ``--mirrors``). In
``--workdir`` it writes each set's own instance exactly as ``eval_devsets.py`` does and one
instance, ``devsets``, whose ``repos:`` are all of them (each repository named as its set, with
its own include globs, excludes and issues); ``--cache`` (an ``embeddings.sqlite``) is copied
into the data folder first so texts embedded before are not embedded again. Every question of
``questions.yaml`` (the chosen halves) is scored on the set's own instance and on ``devsets``,
its gold pinned to its repository (``repo:path`` / ``repo#N``), at the retrieval level (top k)
and, with ``--cited``, at the level a person sees (the answer's cited sources, as ``ask --json``
returns them). ``--localize`` also scores ``localize.yaml`` (bug reports → the files their fix
changed) on ``devsets-loc`` against each set's ``-loc`` instance: the same repositories, every
tracker without the pull requests that fixed its set's bug reports (as ``eval_devsets.py``).

``--sets``: the dev sets to put in it (default: every one but the held-out sets, which are
scored only when named, for a fresh check; they belong to no team).

``devsets`` has one scope per language team (:data:`TEAMS`: the repositories of one language).
``--channel team`` asks each of its questions as in a chat channel whose default is the
question's team (``access.*.channel_repos``: the service's ``repo`` = the team's scope);
``--channel own`` as in one whose default is the question's own repository. ``--single``: the
single instances' results of an earlier run (its ``single.json``, same halves and options),
read instead of scored again.

Written to ``--workdir``: ``single.json`` and ``org.json`` in ``eval_devsets.py``'s shape (so
``compare_devsets.py single.json org.json --split S --level L --per-set`` pairs them question by
question), each question with the repository of its first source (``first_repo``), and
``multi.md``: per set and pooled, single → org, and how often the org instance's first source
is from the question's own repository.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_devsets import DEVSETS, HELD_OUT, LOC, fix_prs, instance_file, setting, snapshot  # noqa: E402
from eval_devsets import SETS as DEFAULT_SETS  # noqa: E402

from core.config import Settings  # noqa: E402
from core.eval.metrics import (  # noqa: E402
    EvalQuestion,
    Metrics,
    QuestionResult,
    load_questions,
    run_cited,
    run_eval,
)
from core.models import Answer, Retrieval  # noqa: E402
from core.service import RepoExpert  # noqa: E402

# The sets eval_devsets scores by default: never a held-out one (they have no team either).
SETS = [n for n in DEFAULT_SETS if (DEVSETS / n / "questions.yaml").exists()]
# The held-out sets (source.yaml ``held_out``): scored only when named with --sets, for a fresh
# check; they belong to no team.
HELD = [n for n in HELD_OUT if (DEVSETS / n / "questions.yaml").exists()]
MULTI = "devsets"
GROUPS = {"qa": "questions.yaml", "localize": "localize.yaml"}
# An organisation's teams, by the language of their repositories (fixed in PLAN-s46.md before
# any run): the org instance's scopes, and the channels of ``--channel team``.
TEAMS = {
    "python": ["marshmallow", "structlog", "tenacity", "uvicorn"],
    "js": ["axios", "commander", "ky", "yargs"],
    "go": ["burntsushi-toml", "chi", "urfave-cli"],
    "rust": ["bat", "fd", "just"],
    "ruby": ["rack", "thor"],
    "java": ["gson", "jsoup"],
    "c": ["cli11", "curl"],  # C and C++ (added 2026-12-06 with those sets; org runs before: 18)
}


def channel_repo(name: str, channel: str) -> str | None:
    """What a question of set ``name`` is filtered to on the org instance under ``--channel``."""
    if channel == "own":
        return name
    if channel == "team":
        return next(t for t, members in TEAMS.items() if name in members)
    return None


def repo_entry(name: str, repos: Path, issues: Path) -> dict[str, Any]:
    """A set's repository as an entry of ``repos:`` (what ``instance_file`` gives its own)."""
    source = yaml.safe_load((DEVSETS / name / "source.yaml").read_text())
    return {
        "name": name,
        "path": str(repos / name),
        "docs": {"include": source["docs"]},
        "code": {"include": source["code"]},
        "exclude": source.get("exclude") or [],
        "issues": {"file": str(issues)},
    }


def write_instances(
    sets: list[str], repos: Path, inst_dir: Path, drops: dict[str, frozenset[int]] | None = None,
    retrieval: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """Each set's own instance and ``devsets``; with ``drops`` (set → the fix pull requests its
    bug reports must not see) also each ``-loc`` instance and ``devsets-loc``; ``retrieval``:
    settings every one of them gets (``--set``)."""
    inst_dir.mkdir(parents=True, exist_ok=True)
    org: list[dict[str, Any]] = []
    org_loc: list[dict[str, Any]] = []
    for name in sets:
        setdir = DEVSETS / name
        instance_file(name, setdir, repos / name, inst_dir, retrieval=retrieval)
        org.append(repo_entry(name, repos, setdir / "issues.json"))
        if drops is not None:
            instance_file(f"{name}{LOC}", setdir, repos / name, inst_dir, drop=drops[name],
                          retrieval=retrieval)  # fmt: skip
            # instance_file wrote the tracker without those pull requests beside the instance
            org_loc.append(repo_entry(name, repos, inst_dir / f"{name}{LOC}.issues.json"))
    desc = f"the {len(sets)} dev sets' repositories in one instance"
    teams = {t: [m for m in ms if m in sets] for t, ms in TEAMS.items()}
    scopes = {t: ms for t, ms in teams.items() if ms and t not in sets}
    for inst, entries in ((MULTI, org), (f"{MULTI}{LOC}", org_loc)):
        if entries:
            conf: dict[str, Any] = {"description": desc, "repos": entries}
            if len(entries) > 1 and scopes:
                conf["scopes"] = scopes
            if retrieval:
                conf["retrieval"] = retrieval
            text = yaml.safe_dump(conf, sort_keys=False)
            (inst_dir / f"{inst}.yaml").write_text(text)


def in_repo(q: EvalQuestion, repo: str) -> EvalQuestion:
    """The question with its gold pinned to ``repo`` (``repo:path``, ``repo#N``)."""
    gold = q.gold.model_copy(
        update={
            "paths": [f"{repo}:{p}" for p in q.gold.paths],
            "issues": [f"{repo}#{n}" for n in q.gold.issues],
        }
    )
    return q.model_copy(update={"gold": gold})


async def score(
    app: RepoExpert, inst: str, questions: list[EvalQuestion], k: int, cited: bool,
    repo: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One instance's report on ``questions`` (``Report.to_json``), each question with the
    repository of its first source (the instance's only one for a one-repository instance);
    ``repo``: the filter every question is asked with (a channel's default)."""
    first: dict[str, str] = {}
    answerer = app.answerer_for(inst)

    async def retrieve(q: str) -> Retrieval:
        r = await app.retrieve(inst, q, k=k, repo=repo)
        if not cited:
            first[q] = r.sources[0].repo if r.sources else ""
        return r

    async def ask(q: str) -> Answer:
        a = await answerer.answer(q, await retrieve(q))
        first[q] = a.sources[0].repo if a.sources else ""
        return a

    if cited:
        report = await run_cited(questions, ask, k)
    else:
        report = await run_eval(questions, retrieve, k)
    out = report.to_json()
    for row, q in zip(out["questions"], questions, strict=True):
        row["first_repo"] = first.get(q.question, "")
    return out


def own_first(rows: list[dict[str, Any]]) -> float:
    """The share of questions (``pooled``'s rows) whose first source is from their own set's
    repository."""
    return sum(r["first_repo"] == r["set"] for r in rows) / max(len(rows), 1)


def pooled(
    results: dict[str, Any], split: str, group: str, level: str
) -> tuple[Metrics, list[dict[str, Any]]]:
    """Every set's questions of one group and level as one pool (each question once)."""
    rows: list[dict[str, Any]] = []
    for name, run in results.items():
        rep = run.get(split, {}).get(group, {}).get(level)
        if rep:
            rows += [{**q, "set": name} for q in rep["full"]["questions"]]
    fields = QuestionResult.__dataclass_fields__
    qr = [QuestionResult(**{k: v for k, v in r.items() if k in fields}) for r in rows]
    return Metrics.of(qr), rows


def markdown(
    single: dict[str, Any], org: dict[str, Any], index: dict[str, Any], split: str, k: int
) -> str:
    lines = [
        f"k = {k}, {split} halves. Single = each set's own instance; org = `{MULTI}` "
        f"(`{MULTI}{LOC}` for bug reports). Own first: the org instance's first source is from "
        "the question's own repository.",
        "",
        "| set | questions | level | n | hit@1 single → org | hit single → org | "
        "MRR single → org | fact single → org | own first |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def row(label: str, group: str, level: str, s: Metrics, o: Metrics, own: float) -> str:
        def f(a: float | None, b: float | None) -> str:
            return "-" if a is None or b is None else f"{a:.3f} → {b:.3f}"

        return (
            f"| {label} | {group} | {level} | {s.n} | {f(s.hit1, o.hit1)} | {f(s.hitk, o.hitk)} "
            f"| {f(s.mrr, o.mrr)} | {f(s.fact, o.fact)} | {own:.3f} |"
        )

    groups = [(g, lv) for g in GROUPS for lv in ("retrieval", "cited")]
    for group, level in groups:
        for name in org:
            one = {name: org[name]}
            s_m, _ = pooled({name: single[name]}, split, group, level)
            o_m, rows = pooled(one, split, group, level)
            if rows:
                lines.append(row(name, group, level, s_m, o_m, own_first(rows)))
        s_m, _ = pooled(single, split, group, level)
        o_m, rows = pooled(org, split, group, level)
        if rows:
            own = own_first(rows)
            lines.append(row("**pooled**", group, level, s_m, o_m, own))
    lines += ["", "| instance | index seconds | chunks | embedded |", "|---|---|---|---|"]
    for name, r in index.items():
        lines.append(f"| {name} | {r['seconds']} | {r['chunks']} | {r['chunks_embedded']} |")
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> int:
    work: Path = args.workdir.resolve()
    inst_dir, data = work / "instances", work / "data"
    repos: Path = args.repos.resolve()
    drops: dict[str, frozenset[int]] = {}
    for name in args.sets:
        source = yaml.safe_load((DEVSETS / name / "source.yaml").read_text())
        snapshot(source, repos / name, args.mirrors)
        if args.localize:
            drops[name] = frozenset(fix_prs(DEVSETS / name, source, args.mirrors).values())
    settings = dict(args.set or [])
    write_instances(args.sets, repos, inst_dir, drops if args.localize else None, settings)
    cache = data / "cache" / "embeddings.sqlite"
    if args.cache and not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(args.cache, cache)
    app = RepoExpert(Settings(inst_dir, data))
    earlier = json.loads(args.single.read_text()) if args.single else None
    index: dict[str, Any] = {}
    single: dict[str, Any] = {}
    org: dict[str, Any] = {}
    levels = ["retrieval", *(["cited"] if args.cited else [])]
    groups = ["qa", *(["localize"] if args.localize else [])]
    try:
        suffixes = ["", *([LOC] if args.localize else [])]
        built = [MULTI] if earlier is not None else [*args.sets, MULTI]
        for inst in [f"{n}{s}" for n in built for s in suffixes]:
            t = time.perf_counter()
            s = await app.index(inst)
            index[inst] = {"seconds": round(time.perf_counter() - t, 1),
                           "chunks": sum(s.chunks.values()),
                           "chunks_embedded": s.chunks_embedded}  # fmt: skip
            print(f"indexed {inst}: {index[inst]}", flush=True)
        for name in args.sets:
            for group in groups:
                qs = load_questions(DEVSETS / name / GROUPS[group])
                if args.split != "all":
                    qs = [q for q in qs if q.split == args.split]
                pinned = [in_repo(q, name) for q in qs]
                suffix = LOC if group == "localize" else ""
                for level in levels:
                    cited = level == "cited"
                    if earlier is not None:
                        s_rep = earlier[name][args.split][group][level]["full"]
                    else:
                        s_rep = await score(app, f"{name}{suffix}", qs, args.k, cited)
                        for q in s_rep["questions"]:
                            q["first_repo"] = name  # a one-repository instance: its own
                    o_rep = await score(app, f"{MULTI}{suffix}", pinned, args.k, cited,
                                        channel_repo(name, args.channel))  # fmt: skip
                    for out, rep in ((single, s_rep), (org, o_rep)):
                        groups_of = out.setdefault(name, {}).setdefault(args.split, {})
                        groups_of.setdefault(group, {})[level] = {"full": rep}
                    print(f"{name} {group} {level}: single {s_rep['metrics']['overall']} "
                          f"org {o_rep['metrics']['overall']}", flush=True)  # fmt: skip
    finally:
        await app.close()
    for file, res in (("single.json", single), ("org.json", org)):
        (work / file).write_text(json.dumps(res, indent=1, ensure_ascii=False))
    text = markdown(single, org, index, args.split, args.k)
    (work / "multi.md").write_text(text)
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repos", type=Path, required=True)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--sets", nargs="+", default=SETS, choices=[*SETS, *HELD],
                    help="default: every set but the held-out ones (those only when named)")
    ap.add_argument("--cache", type=Path, help="an embeddings.sqlite to start from")
    ap.add_argument("-k", type=int, default=6)
    ap.add_argument("--split", choices=["all", "tune", "report"], default="all")
    ap.add_argument("--cited", action="store_true", help="also score the answer's cited sources")
    ap.add_argument("--localize", action="store_true", help="also score localize.yaml")
    ap.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    ap.add_argument("--channel", choices=["none", "team", "own"], default="none",
                    help="ask the org instance's questions as in a channel whose default is the "
                    "question's language team (a scope) or its own repository")  # fmt: skip
    ap.add_argument("--single", type=Path, help="single.json of an earlier run: not scored again")
    ap.add_argument("--set", nargs="*", metavar="KEY=VALUE", type=setting,
                    help="retrieval settings of every instance (e.g. reader=true)")
    args = ap.parse_args(argv)
    teamless = [n for n in args.sets if args.channel == "team" and n in HELD]
    if teamless:
        ap.error(f"--channel team: {', '.join(teamless)} belong to no team (held-out sets)")
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
