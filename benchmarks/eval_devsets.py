"""The external dev sets (``benchmarks/devsets/*``): repositories nobody tuned for, scored at the
retrieval level (top k) and at the cited level (what ``ask --json`` cites), full system and
baselines, per split, route, language and kind.

    python benchmarks/eval_devsets.py [--sets marshmallow urfave-cli yargs]
        [--split report|tune|all] [--mirrors DIR] [--workdir DIR] [--out DIR] [-k 6]
        [--no-pr-files] [--set ranker=hybrid graph=false …]   # ablations

Each set's ``source.yaml`` pins a repository and a commit. Its tree at that commit is made into a
fresh git repository without history (``git archive``: the fix commits of ``localize.yaml`` are
not in the index), from a local mirror (``--mirrors``: ``{owner}+{name}`` folders holding a bare
clone, as the search tool's fetch leaves them) or, without one, a clone from GitHub. The
instance indexes the set's include globs and its ``issues.json``. Indexing runs once; the
embedding cache makes later runs cheap.

The question files are scored apart: ``questions.yaml`` (docs, code and issues routes) and
``localize.yaml`` (bug reports → the files their fix changed). Writes ``{out}/results.json``
(every set, split, file, level, system and question), ``{out}/{set}/{file}-{split}.md`` and
``{out}/summary.md``; prints the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.config import Settings  # noqa: E402
from core.eval import compare  # noqa: E402
from core.eval.metrics import EvalQuestion, Report, load_questions  # noqa: E402
from core.service import RepoExpert  # noqa: E402

SETS = ["marshmallow", "urfave-cli", "yargs"]
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
    if (dest / ".git").exists():
        return dest
    gitdir = _gitdir(mirrors, source["repo"])
    tmp_clone: Path | None = None
    if gitdir is None:
        tmp_clone = Path(tempfile.mkdtemp(prefix="devset-clone-"))
        _git("clone", "--bare", "--filter=blob:none", f"https://github.com/{source['repo']}.git",
             str(tmp_clone))  # fmt: skip
        gitdir = tmp_clone
    dest.mkdir(parents=True)
    archive = _git("--git-dir", str(gitdir), "archive", source["commit"]).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    _git("init", "-q", "-b", "main", cwd=dest)
    _git("add", "-A", cwd=dest)
    _git("commit", "-q", "-m", f"{source['repo']} at {source['commit'][:12]}", cwd=dest)
    if tmp_clone is not None:
        shutil.rmtree(tmp_clone, ignore_errors=True)
    return dest


def instance_file(
    name: str, setdir: Path, repo: Path, inst_dir: Path, pr_files: bool = True,
    retrieval: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    source = yaml.safe_load((setdir / "source.yaml").read_text())
    issues = setdir / "issues.json"
    if not pr_files:  # the tracker without pull requests' changed files (an ablation)
        data = json.loads(issues.read_text())
        for item in data:
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
    (inst_dir / f"{name}.yaml").write_text(yaml.safe_dump(inst, sort_keys=False))


def pick(questions: list[EvalQuestion], split: str) -> list[EvalQuestion]:
    return questions if split == "all" else [q for q in questions if q.split == split]


GROUPS = {"qa": "questions.yaml", "localize": "localize.yaml"}


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
            base = f"{best.mrr:.3f}" if best is not None else "-"
            rows.append(
                f"| {name} | {split} | {group} | {level} | {g} | {m.n} | {m.hit1:.3f} | "
                f"{m.hitk:.3f} | {m.mrr:.3f} | {fact} | {base} |"
            )
    return rows


async def run(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    inst_dir = work / "instances"
    out = Path(args.out)
    sets = args.sets
    for name in sets:
        setdir = ROOT / "benchmarks" / "devsets" / name
        source = yaml.safe_load((setdir / "source.yaml").read_text())
        repo = snapshot(source, work / "repos" / name, Path(args.mirrors))
        retrieval = dict(kv.split("=", 1) for kv in args.set or [])
        instance_file(name, setdir, repo, inst_dir, not args.no_pr_files,
                      {k: yaml.safe_load(v) for k, v in retrieval.items()})  # fmt: skip
    app = RepoExpert(Settings(inst_dir, work / "data"))
    table = [
        "| set | split | questions | level | group | n | hit@1 | hit | MRR | fact | "
        "best baseline MRR |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    results: dict[str, Any] = {}
    try:
        for name in sets:
            s = await app.index(name)
            print(f"{name}: {sum(s.chunks.values())} chunks, {s.seconds:.1f}s "
                  f"({s.chunks_embedded} embedded)", flush=True)  # fmt: skip
            setdir = ROOT / "benchmarks" / "devsets" / name
            for group, file in GROUPS.items():
                questions = load_questions(setdir / file)
                for split in args.split:
                    qs = pick(questions, split)
                    runs = {
                        "retrieval": await compare.compare(app, name, qs, args.k),
                        "cited": await compare.compare(app, name, qs, args.k, cited=True),
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
    text = "\n".join(table) + "\n"
    (out / "summary.md").write_text(text)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sets", nargs="+", default=SETS)
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
    ap.add_argument("--set", nargs="*", metavar="KEY=VALUE",
                    help="retrieval settings for every set, e.g. ranker=hybrid")  # fmt: skip
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
