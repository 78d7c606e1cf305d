"""Retrieval comparison on a repository we did not write: the httpx source as installed from
PyPI, with its README (the package METADATA's description), made into a git repository.

    python benchmarks/eval_external.py [--workdir DIR] [-k 6]

Runs ``repo-expert eval httpx --questions tests/eval/httpx.yaml --compare`` against it (grep,
bm25, dense, rrf and the full system side by side) and writes the table and chart to
``benchmarks/results/httpx/``. The first run indexes (embedding dominates); later runs reuse it.
"""

from __future__ import annotations

import argparse
import email
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_repo(work: Path) -> Path:
    import httpx

    pkg = Path(httpx.__file__).parent
    repo = work / "httpx-repo"
    if (repo / ".git").exists():
        return repo
    repo.mkdir(parents=True)
    shutil.copytree(pkg, repo / "httpx", ignore=shutil.ignore_patterns("__pycache__"))
    dist = next(pkg.parent.glob("httpx-*.dist-info"))
    meta = email.message_from_string((dist / "METADATA").read_text())
    body = meta.get_payload()
    (repo / "README.md").write_text(body if isinstance(body, str) else "")
    env = {"GIT_AUTHOR_NAME": "eval", "GIT_AUTHOR_EMAIL": "eval@localhost",
           "GIT_COMMITTER_NAME": "eval", "GIT_COMMITTER_EMAIL": "eval@localhost",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", f"httpx {meta['Version']}"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env)
    return repo


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default=str(ROOT / ".repo-expert" / "external"))
    ap.add_argument("-k", default="6")
    args = ap.parse_args()
    work = Path(args.workdir)
    repo = make_repo(work)
    inst = work / "instances"
    inst.mkdir(parents=True, exist_ok=True)
    (inst / "httpx.yaml").write_text(
        f"description: httpx {repo.name}\nrepo: {{path: {repo}}}\n"
        "docs: {include: ['README.md']}\ncode: {include: ['**/*.py']}\n"
    )
    out = ROOT / "benchmarks" / "results" / "httpx"
    data = str(work / "data")
    base = [sys.executable, "-m", "core.cli", "--instances", str(inst), "--data", data]
    subprocess.run([*base, "index", "httpx"], check=True, cwd=ROOT)
    r = subprocess.run(
        [*base, "eval", "httpx", "--questions", str(ROOT / "tests/eval/httpx.yaml"),
         "--compare", "-k", args.k, "--report", str(out)],
        cwd=ROOT, check=False,
    )  # fmt: skip
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
