"""The external dev sets (``benchmarks/devsets/*``): repositories nobody tuned for, scored at the
retrieval level (top k) and at the cited level (what ``ask --json`` cites), full system and
baselines, per split, route, language and kind.

    python benchmarks/eval_devsets.py [--sets NAME ...]   # default: every benchmarks/devsets/*
                                                          # but the held-out ones (held_out:)
        [--split report|tune|all] [--mirrors DIR] [--workdir DIR] [--out DIR] [-k 6]
        [--no-pr-files] [--set ranker=hybrid graph=false …]   # ablations
        [--systems full …] [--globs source|init]   # init: as `repo-expert init` writes it
        [--loso]   # with --split tune: each set scored by models that never saw it

Each set's ``source.yaml`` pins a repository and a commit. Its tree at that commit is made into a
fresh git repository without history (``git archive``: the fix commits of ``localize.yaml`` are
not in the index), from a local mirror (``--mirrors``: ``{owner}+{name}`` folders holding a bare
clone, as the search tool's fetch leaves them) or, without one, a clone from GitHub. The
instance indexes the set's include globs and its ``issues.json``. Indexing runs once; the
embedding cache makes later runs cheap. ``--globs init`` indexes instead what ``repo-expert
init`` writes for the snapshot (``init.survey``: the default include globs that match, the
exclude suggestions that apply): the set's own globs leave tests out, a user's instance does
not. Use another ``--workdir`` for it (an instance's name is the set's either way).

The question files are scored apart: ``questions.yaml`` (docs, code and issues routes) and
``localize.yaml`` (bug reports → the files their fix changed). The localization pairs are scored
on a second instance, ``{set}-loc``, whose tracker leaves out the pull requests that merged the
pairs' fix commits (``fix_prs``): a new bug report has no fix yet, and the fix's own title and
changed files would answer it. Writes ``{out}/results.json``
(every set, split, file, level, system and question), ``{out}/{set}/{file}-{split}.md`` and
``{out}/summary.md``; prints the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.cli.init import survey  # noqa: E402
from core.config import Settings  # noqa: E402
from core.config.schema import DEFAULT_CODE_INCLUDE, DEFAULT_DOCS_INCLUDE  # noqa: E402
from core.eval import compare  # noqa: E402
from core.eval.metrics import EvalQuestion, Report, load_questions  # noqa: E402
from core.retrieve.rank import OBJECTIVES  # noqa: E402
from core.service import RepoExpert  # noqa: E402

DEVSETS = ROOT / "benchmarks" / "devsets"
# Every dev set is a folder with a source.yaml (a new set is a new folder, not a code change).
ALL_SETS = sorted(p.name for p in DEVSETS.iterdir() if (p / "source.yaml").exists())
# A set whose source.yaml says ``held_out: <why>`` is never tuned or trained on: it is left out
# of the default list (this script's, train_ranker's, the goal tables') and scored, both halves,
# only when named with --sets.
HELD_OUT = [
    n
    for n in ALL_SETS
    if (yaml.safe_load((DEVSETS / n / "source.yaml").read_text()) or {}).get("held_out")
]
SETS = [n for n in ALL_SETS if n not in HELD_OUT]
ENV = {"GIT_AUTHOR_NAME": "eval", "GIT_AUTHOR_EMAIL": "eval@localhost",
       "GIT_COMMITTER_NAME": "eval", "GIT_COMMITTER_EMAIL": "eval@localhost",
       "PATH": "/usr/bin:/bin"}  # fmt: skip


def _git(*args: str, cwd: Path | None = None, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, **kw)


def _gitdir(mirrors: Path, repo: str) -> Path | None:
    base = mirrors / repo.replace("/", "+")
    for cand in (base / "repo", base, base / ".git"):
        if (cand / "HEAD").exists() and (cand / "objects").exists():
            return cand
    return None


def snapshot(source: dict[str, Any], dest: Path, mirrors: Path) -> Path:
    """The pinned tree as a one-commit repository (made once)."""
    if (dest / ".git").exists() and _git_ok("-C", str(dest), "rev-parse", "-q", "--verify", "HEAD"):
        return dest  # made (a snapshot is done when its one commit is)
    gitdir = _gitdir(mirrors, source["repo"])
    tmp_clone: Path | None = None
    if gitdir is None:
        tmp_clone = Path(tempfile.mkdtemp(prefix="devset-clone-"))
        _git("clone", "--bare", "--filter=blob:none", f"https://github.com/{source['repo']}.git",
             str(tmp_clone))  # fmt: skip
        gitdir = tmp_clone
    if dest.exists():  # a snapshot an interrupted run left unfinished
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    # The tree's own .gitattributes `export-ignore` lines (guzzle's /docs/ and /tests/) must not
    # drop files from the snapshot: attributes are read from the (empty) work tree instead — the
    # new folder, never the caller's (a mirror without a config is not known to be bare).
    tree = ("-c", "core.bare=false", "--git-dir", str(gitdir), "--work-tree", str(dest))
    skip = [f":(exclude,literal){p}" for p in _absent(gitdir, source["commit"])]
    archive = _git(*tree, "archive", "--worktree-attributes", source["commit"], "--", ".", *skip,
                   cwd=dest).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    _git("init", "-q", "-b", "main", cwd=dest)
    _git("add", "-A", cwd=dest)
    _git("commit", "-q", "-m", f"{source['repo']} at {source['commit'][:12]}", cwd=dest)
    if tmp_clone is not None:
        shutil.rmtree(tmp_clone, ignore_errors=True)
    return dest


def _git_ok(*args: str) -> bool:
    return subprocess.run(["git", *args], env=ENV, capture_output=True).returncode == 0


def _absent(gitdir: Path, commit: str) -> list[str]:
    """The files of ``commit`` whose contents the mirror lacks (the fetch tool may leave a
    repository's largest blobs out: picocli's vendored gradle-1.12-bin.zip): left out of the
    snapshot, named on stderr."""
    g = ("--git-dir", str(gitdir))
    rows = os.fsdecode(_git(*g, "ls-tree", "-r", "-z", commit).stdout).split("\0")
    entries = [(meta.split(), path) for meta, path in (r.split("\t", 1) for r in rows if r)]
    blobs = [(sha, path) for (_mode, kind, sha), path in entries if kind == "blob"]
    shas = "\n".join(sha for sha, _ in blobs).encode()
    check = _git(*g, "cat-file", "--batch-check", input=shas).stdout.decode().splitlines()
    absent = [
        path for (_, path), line in zip(blobs, check, strict=True) if line.endswith(" missing")
    ]
    if absent:
        print(f"{commit[:12]}: {len(absent)} file(s) absent from the mirror, left out: "
              f"{', '.join(map(ascii, absent[:5]))}", file=sys.stderr)  # fmt: skip
    return absent


def fix_prs(setdir: Path, source: dict[str, Any], mirrors: Path) -> dict[str, int]:
    """The pull request that merged each fix commit of ``localize.yaml`` (its ``# fix SHA``
    lines): the fix commit's own subject (``… (#N)`` of a squash merge, ``Merge pull request
    #N``), else the merge commit on the pinned commit's first-parent line that brought the fix
    in, else a tracker entry whose title is the fix commit's subject. sha -> N."""
    gitdir = _gitdir(mirrors, source["repo"])
    shas = re.findall(r"^# fix ([0-9a-f]{7,40})", (setdir / "localize.yaml").read_text(), re.M)
    if gitdir is None or not shas:
        return {}
    titles = {
        _norm(i["title"]): i["number"] for i in json.loads((setdir / "issues.json").read_text())
    }
    pr = re.compile(r"\(#(\d+)\)\s*$|^Merge pull request #(\d+)")
    g = ("--git-dir", str(gitdir))
    out: dict[str, int] = {}
    for sha in dict.fromkeys(shas):
        subject = _git(*g, "log", "-1", "--format=%s", sha).stdout.decode().strip()
        merges = _git(*g, "log", "--merges", "--first-parent", "--ancestry-path", "--format=%s",
                      f"{sha}..{source['commit']}").stdout.decode().splitlines()  # fmt: skip
        m = pr.search(subject) or (pr.search(merges[-1]) if merges else None)
        if m is not None:
            out[sha] = int(m.group(1) or m.group(2))
        elif _norm(subject) in titles:
            out[sha] = titles[_norm(subject)]
    return out


def _norm(title: str) -> str:
    return re.sub(r"\W+", " ", title.lower()).strip()


def init_globs(repo: Path) -> dict[str, Any]:
    """The docs and code include globs and the excludes ``repo-expert init`` writes for the tree
    of ``repo`` (a snapshot: every file is tracked)."""
    files = [f for f in _git("ls-files", "-z", cwd=repo).stdout.decode().split("\0") if f]
    found = survey(files)
    return {"docs": list(found.docs) or DEFAULT_DOCS_INCLUDE,
            "code": list(found.code) or DEFAULT_CODE_INCLUDE,
            "exclude": [p for p, _, _ in found.exclude]}  # fmt: skip


def instance_file(
    name: str, setdir: Path, repo: Path, inst_dir: Path, pr_files: bool = True,
    retrieval: dict[str, Any] | None = None, drop: frozenset[int] = frozenset(),
    globs: dict[str, Any] | None = None,
) -> str:  # fmt: skip
    """``drop``: issue numbers left out of the tracker (the localization instance leaves out the
    pull requests that fixed its bug reports: a new bug report has no fix yet). ``globs``: the
    include globs and excludes to index instead of the set's (``init_globs``). Returns the text
    written."""
    source = {**yaml.safe_load((setdir / "source.yaml").read_text()), **(globs or {})}
    issues = setdir / "issues.json"
    if not pr_files or drop:  # the tracker without pull requests' changed files (an ablation)
        data = [i for i in json.loads(issues.read_text()) if i["number"] not in drop]
        for item in data if not pr_files else []:
            item.pop("files", None)
        issues = inst_dir / f"{name}.issues.json"
        inst_dir.mkdir(parents=True, exist_ok=True)
        issues.write_text(json.dumps(data))
    inst = {
        "description": source.get("description", name),
        "repo": {"path": str(repo)},
        "docs": {"include": source["docs"]},
        "code": {"include": source["code"]},
        "exclude": source.get("exclude") or [],
        "issues": {"file": str(issues)},
        **({"retrieval": retrieval} if retrieval else {}),
    }
    inst_dir.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(inst, sort_keys=False)
    (inst_dir / f"{name}.yaml").write_text(text)
    return text


def written(inst_dir: Path, sets: list[str]) -> dict[str, str]:
    """The instance files of ``sets`` (and their ``-loc`` twins) as they are now."""
    names = [n for s in sets for n in (s, f"{s}{LOC}")]
    return {n: (inst_dir / f"{n}.yaml").read_text() for n in names
            if (inst_dir / f"{n}.yaml").exists()}  # fmt: skip


def setting(kv: str) -> tuple[str, Any]:
    """One ``--set KEY=VALUE``: the key, and the value read as YAML (``true``, ``0.5``)."""
    key, eq, value = kv.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"--set wants KEY=VALUE (e.g. reader=true), got {kv!r}")
    return key, yaml.safe_load(value)


def shipped_sets() -> list[str]:
    """The sets whose tuning halves the shipped ranker was fitted on (its ``fitted_on``)."""
    info = json.loads((ROOT / "core" / "retrieve" / "ranker.json").read_text())["info"]
    return list(info["fitted_on"]["sets"])


def shipped_objective(ranker: Path = ROOT / "core" / "retrieve" / "ranker.json") -> str:
    """What the shipped ranker was fitted to maximise (``train_ranker.py --objective``): a
    ranker written before the objective was recorded was fitted on chunks; a text no objective
    has is refused (a reworded objective must not make ``--loso`` fit another way)."""
    info = json.loads(ranker.read_text())["info"]
    if "objective" not in info:
        return "chunks"
    by_text = {text: key for key, text in OBJECTIVES.items()}
    if info["objective"] not in by_text:
        raise SystemExit(f"{ranker}: info.objective {info['objective']!r} is none of "
                         f"rank.OBJECTIVES ({', '.join(OBJECTIVES)})")  # fmt: skip
    return by_text[info["objective"]]


def loso_models(split: list[str], work: Path) -> dict[str, dict[str, str]]:
    """For every set the shipped models were fitted on, a ranker and a kind classifier fitted
    the same way on the tuning halves of the others of those sets (``train_ranker.py
    --held-out``: the candidates collected once, one fit per set), so its tuning half is scored
    by models that never saw it. A set the shipped models were not fitted on is held out from
    them already: it keeps them. Set -> its retrieval settings."""
    if split != ["tune"]:
        raise SystemExit("--loso scores tuning halves: use it with --split tune")
    d, fitted = work / "loso", shipped_sets()
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_ranker.py"), "--workdir",
                    str(work), "--sets", *fitted, "--split", "tune", "--l2", str(L2),
                    "--held-out", str(d), "--as-configured", "--objective", shipped_objective()],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    return {s: {"ranker_file": str(d / f"ranker-without-{s}.json"),
                "kinds_file": str(d / f"kinds-without-{s}.json")} for s in fitted}  # fmt: skip


def pick(questions: list[EvalQuestion], split: str) -> list[EvalQuestion]:
    return questions if split == "all" else [q for q in questions if q.split == split]


GROUPS = {"qa": "questions.yaml", "localize": "localize.yaml"}
LOC = "-loc"  # the instance localize.yaml is scored on
L2 = 0.1  # the shipped ranker's (train_ranker.py --cv chose it on the eleven sets' tuning halves)


def summary_rows(
    name: str, split: str, group: str, runs: dict[str, dict[str, Report]]
) -> list[str]:
    rows = []
    for level, reports in runs.items():
        full = reports["full"].groups()
        for g, m in full.items():
            if g.startswith("kind:"):
                continue  # a localize file is its own group
            best = max(
                (r.groups()[g] for s, r in reports.items() if s != "full" and g in r.groups()),
                key=lambda x: x.mrr,
                default=None,
            )
            fact = f"{m.fact:.3f}" if m.fact is not None else "-"
            quoted = f"{m.quoted:.3f}" if m.quoted is not None else "-"
            base = f"{best.mrr:.3f}" if best is not None else "-"
            rows.append(
                f"| {name} | {split} | {group} | {level} | {g} | {m.n} | {m.hit1:.3f} | "
                f"{m.hitk:.3f} | {m.mrr:.3f} | {fact} | {quoted} | {base} |"
            )
    return rows


async def run(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    inst_dir = work / "instances"
    out = Path(args.out)
    sets = args.sets
    fixes: dict[str, dict[str, int]] = {}
    mine: dict[str, str] = {}  # instance file -> the text this run wrote (last write wins)
    settings = dict(args.set or [])
    # Every instance first (the leave-one-set-out fits read the other sets' instances), then the
    # held-out models, written into each set's own instances.
    for loso in (False, True) if args.loso else (False,):
        held = loso_models(args.split, work) if loso else {}
        for name in SETS if args.loso and not loso else sets:
            setdir = DEVSETS / name
            source = yaml.safe_load((setdir / "source.yaml").read_text())
            repo = snapshot(source, work / "repos" / name, Path(args.mirrors))
            retrieval = {**held.get(name, {}), **settings} if loso else settings
            globs = init_globs(repo) if args.globs == "init" else None
            pr_files = not args.no_pr_files
            mine[name] = instance_file(name, setdir, repo, inst_dir, pr_files, retrieval,
                                       globs=globs)  # fmt: skip
            fixes[name] = fix_prs(setdir, source, Path(args.mirrors))
            mine[f"{name}{LOC}"] = instance_file(f"{name}{LOC}", setdir, repo, inst_dir, pr_files,
                                                 retrieval, frozenset(fixes[name].values()),
                                                 globs)  # fmt: skip
    app = RepoExpert(Settings(inst_dir, work / "data"))
    table = [
        "| set | split | questions | level | group | n | hit@1 | hit | MRR | fact | quoted | "
        "best baseline MRR |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    results: dict[str, Any] = {}
    try:
        for name in sets:
            for inst in (name, f"{name}{LOC}"):
                s = await app.index(inst)
                print(f"{inst}: {sum(s.chunks.values())} chunks, {s.seconds:.1f}s "
                      f"({s.chunks_embedded} embedded)", flush=True)  # fmt: skip
            print(f"{name}: localization without the fix pull requests "
                  f"{sorted(set(fixes[name].values()))}", flush=True)  # fmt: skip
            results.setdefault(name, {})["fix_prs_left_out"] = fixes[name]
            results[name]["globs"] = args.globs
            setdir = DEVSETS / name
            for group, file in GROUPS.items():
                inst = f"{name}{LOC}" if group == "localize" else name
                questions = load_questions(setdir / file)
                for split in args.split:
                    qs = pick(questions, split)
                    runs = {
                        "retrieval": await compare.compare(
                            app, inst, qs, args.k, systems=args.systems
                        ),
                        "cited": await compare.compare(
                            app, inst, qs, args.k, cited=True, systems=args.systems
                        ),
                    }
                    results.setdefault(name, {}).setdefault(split, {})[group] = {
                        lvl: compare.to_json(r) for lvl, r in runs.items()
                    }
                    (out / name).mkdir(parents=True, exist_ok=True)
                    (out / name / f"{group}-{split}.md").write_text(
                        "\n".join(compare.markdown(r, args.k) for r in runs.values())
                    )
                    table += summary_rows(name, split, group, runs)
    finally:
        await app.close()
    rewritten = sorted(n for n, t in written(inst_dir, sets).items() if t != mine.get(n))
    if rewritten:  # another run in this workdir wrote its settings over ours while we ran
        raise SystemExit(f"{inst_dir}: {', '.join(rewritten)} rewritten by another run while this "
                         "one ran (its settings may have been used): run again, one run per "
                         "workdir at a time or the same settings")  # fmt: skip
    text = "\n".join(table) + "\n"
    (out / "summary.md").write_text(text)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=SETS, choices=ALL_SETS)
    ap.add_argument("--split", nargs="+", default=["tune", "report"],
                    choices=["tune", "report", "all"])  # fmt: skip
    ap.add_argument("--mirrors", default="/work/.mirror")
    ap.add_argument("--workdir", default=str(ROOT / ".repo-expert" / "devsets"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "devsets"))
    ap.add_argument("-k", type=int, default=6)
    ap.add_argument(
        "--no-pr-files",
        action="store_true",
        help="index the issues without pull requests' changed files (ablation)",
    )
    ap.add_argument("--loso", action="store_true",
                    help="score each tuning half with models that never saw it: fitted on the "
                    "shipped ranker's other sets (leave one set out), or the shipped ones for a "
                    "set they were not fitted on")  # fmt: skip
    ap.add_argument(
        "--systems",
        nargs="+",
        choices=compare.SYSTEMS,
        default=compare.SYSTEMS,
        help="the systems scored (default: the full system and every baseline)",
    )
    ap.add_argument("--globs", choices=["source", "init"], default="source",
                    help="source: each set's own include globs and excludes (no tests); init: "
                    "what `repo-expert init` writes for the snapshot (tests indexed)")  # fmt: skip
    ap.add_argument("--set", nargs="*", metavar="KEY=VALUE", type=setting,
                    help="retrieval settings for every set, e.g. ranker=hybrid")  # fmt: skip
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
