"""Indexing speed: a full index from a cold embedding cache, then an incremental re-index after a
one-file change, then an issue event (one thread edited: the docs and code collections are
carried from the live build, not written again), then an update that finds nothing changed (the
live build is kept), on this repository and on a larger real source tree (an installed package's
source, made into a git repository). The issues are real threads of another project (the
marshmallow dev set's): the timing needs threads, not their relevance.

    python benchmarks/bench_index.py [--trees self httpx pydantic] [--backend auto]

Prints wall time, chunks, chunks/s and tokens/s for the full index, the incremental time as a
ratio of the full one, and the issue event's and the no-change update's times as ratios of the
incremental one (which writes every collection).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.config import Settings  # noqa: E402
from core.service import RepoExpert  # noqa: E402

ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@localhost", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@localhost", "PATH": "/usr/bin:/bin"}  # fmt: skip


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=ENV, capture_output=True)


def tree(name: str, work: Path) -> tuple[Path, str]:
    """A git repository to index and a file in it to change."""
    if name == "self":
        repo = work / "self"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
        return repo, "core/retrieve/search.py"
    pkg = Path(importlib.import_module(name).__file__ or "").parent
    repo = work / name
    shutil.copytree(pkg, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "snapshot")
    first = sorted((repo / name).glob("*.py"), key=lambda p: -p.stat().st_size)[0]
    return repo, str(first.relative_to(repo))


async def bench(name: str, backend: str, work: Path) -> str:
    repo, changed = tree(name, work)
    inst = work / f"inst-{name}"
    inst.mkdir()
    issues = work / f"issues-{name}.json"
    threads = json.loads((ROOT / "benchmarks/devsets/marshmallow/issues.json").read_text())
    issues.write_text(json.dumps(threads))
    (inst / f"{name}.yaml").write_text(
        f"repo: {{path: {repo}}}\nembedding: {{backend: {backend}}}\n"
        "exclude: ['tests/eval/**', 'benchmarks/results/**']\n"
        f"issues: {{file: {issues}}}\n"
    )
    app = RepoExpert(Settings(inst, work / f"data-{name}"))
    full = await app.index(name)
    reader = await app.reader(name)
    tokens = sum(c.tokens for c in await reader.all_chunks())
    p = repo / changed
    p.write_text(p.read_text() + "\n\ndef _bench_added():\n    return 'one more function'\n")
    git(repo, "commit", "-qam", "one-file change")
    inc = await app.index(name)
    threads[0]["body"] += "\n\nEdited: one more line of the thread."
    issues.write_text(json.dumps(threads))
    event = await app.index(name)
    assert event.carried == ["code", "docs"], f"an issue event carried {event.carried}"
    same = await app.index(name)
    assert same.kept_live, "an update that found nothing changed wrote a new build"
    await app.close()
    n = sum(full.chunks.values())
    return (
        f"| {name} | {full.files} | {n} | {full.seconds:.1f} | {n / full.seconds:.1f} | "
        f"{tokens / max(full.embed_seconds, 1e-9):.0f} | {inc.seconds:.2f} "
        f"({inc.chunks_embedded} re-embedded) | {inc.seconds / full.seconds:.3f} | "
        f"{event.seconds:.2f} | {event.seconds / inc.seconds:.2f} | "
        f"{same.seconds:.2f} | {same.seconds / inc.seconds:.2f} |"
    )


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", nargs="+", default=["self", "httpx"])
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-index-"))
    print(
        "| tree | files | chunks | full s | chunks/s | tokens/s (embed) | incremental s | ratio | "
        "issue event s | ratio to incremental | nothing changed s | ratio to incremental |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.trees:
        print(await bench(name, args.backend, work), flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
