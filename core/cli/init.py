"""``repo-expert init NAME PATH|URL``: a new instance file in one command.

From a local folder or a git URL (cloned, shallow, where ``index`` will use it: under the data
folder) it writes ``NAME.yaml`` into the instances folder:

- ``repo``: the path (relative to the instances folder) or the URL;
- ``web_url`` and ``issues.github`` from a GitHub ``origin`` remote (or URL) — other hosts get
  no ``web_url`` (the permalinks are GitHub's form) and sources show ``path:lines @ <short sha>``;
- ``docs`` / ``code`` include globs: those of the defaults that match a file of the repository;
- ``exclude``: suggestions for trees found there that are seldom worth citing (fixtures,
  snapshots, build output), each with the number of files it leaves out;

then loads it as every command will (so it is valid) and prints the next command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from core.config import BUILTIN_EXCLUDES, Instance, RepoConfig, load_instance
from core.config.load import DEFAULT_INSTANCES_DIR
from core.config.schema import DEFAULT_CODE_INCLUDE, DEFAULT_DOCS_INCLUDE
from core.errors import ConfigError
from core.ingest.repo import Checkout, checkout, github_repo, inside, list_files, origin_url
from core.service import RepoExpert

# Trees found in many repositories and seldom what a question is about.
EXCLUDE_SUGGESTIONS = [
    ("**/testdata/**", "test data"),
    ("**/fixtures/**", "test fixtures"),
    ("**/__snapshots__/**", "test snapshots"),
    ("**/*.snap", "test snapshots"),
    ("docs/_build/", "built docs"),
    ("site/", "built docs"),
    ("htmlcov/", "a coverage report"),
    ("coverage/", "a coverage report"),
    ("target/", "build output"),
    ("out/", "build output"),
    (".next/", "build output"),
]

# A git URL (https, ssh, git, file) or scp-like user@host:path; anything else is a local path.
_URL = re.compile(r"^(?:https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:")


@dataclass
class Found:
    """What the repository holds: the include globs that match, and the excludes worth it."""

    files: int = 0
    docs: dict[str, int] = field(default_factory=dict)  # glob -> files
    code: dict[str, int] = field(default_factory=dict)
    exclude: list[tuple[str, str, int]] = field(default_factory=list)  # (glob, why, files)


def _matching(pattern: str, files: list[str]) -> list[str]:
    spec = pathspec.GitIgnoreSpec.from_lines([pattern])
    return [f for f in files if spec.match_file(f)]


def survey(files: list[str]) -> Found:
    """Which default include globs match a file, and which exclude suggestions apply (both
    after the built-in excludes: vendored trees and lock files are never counted)."""
    builtin = pathspec.GitIgnoreSpec.from_lines(BUILTIN_EXCLUDES)
    kept = [f for f in files if not builtin.match_file(f)]
    found = Found(files=len(kept))
    for pattern, why in EXCLUDE_SUGGESTIONS:
        if n := len(_matching(pattern, kept)):
            found.exclude.append((pattern, why, n))
    excluded = pathspec.GitIgnoreSpec.from_lines([p for p, _, _ in found.exclude])
    kept = [f for f in kept if not excluded.match_file(f)]
    docs: set[str] = set()
    for glob in DEFAULT_DOCS_INCLUDE:
        if hits := _matching(glob, kept):
            found.docs[glob] = len(hits)
            docs.update(hits)
    for glob in DEFAULT_CODE_INCLUDE:  # docs win ties, as in the index
        if n := len([f for f in _matching(glob, kept) if f not in docs]):
            found.code[glob] = n
    return found


def _q(s: str) -> str:
    """A YAML scalar: JSON's quoted string is valid YAML."""
    return json.dumps(s, ensure_ascii=False)


def _globs(found: dict[str, int], default: list[str]) -> str:
    globs = list(found) or default
    return "[" + ", ".join(_q(g) for g in globs) + "]"


def render(
    name: str, repo: str, is_url: bool, ref: str | None, remote: str | None, found: Found
) -> str:
    """The text of ``NAME.yaml``: settings with a comment on where each came from."""
    gh = github_repo(remote)
    lines = [
        f'# Written by `repo-expert init {name}`; every key: README, "Configuration reference".',
        f"description: {_q(f'{name} (docs, code' + (' and GitHub issues)' if gh else ')'))}",
        "repo:",
        f"  {'url' if is_url else 'path'}: {_q(repo)}"
        + ("" if is_url else "  # relative to this file's folder"),
    ]
    if ref:
        lines.append(f"  ref: {_q(ref)}")
    if gh:
        lines.append(f"web_url: {_q(f'https://github.com/{gh}')}  # permalinks, from {remote}")
    else:
        why = f"{remote} is not on GitHub" if remote else "no origin remote"
        lines.append(f"# web_url: https://…   ({why}: sources show path:lines @ <short sha>)")
    counts = ", ".join(f"{g} {n}" for g, n in {**found.docs, **found.code}.items()) or "none"
    lines += [
        f"# files found, by include glob: {counts}",
        "docs:",
        f"  include: {_globs(found.docs, DEFAULT_DOCS_INCLUDE)}",
        "code:",
        f"  include: {_globs(found.code, DEFAULT_CODE_INCLUDE)}",
    ]
    if found.exclude:
        lines.append("exclude:  # suggested: found in this repository; delete a line to index it")
        lines += [f"  - {_q(p)}  # {why}: {n} files" for p, why, n in found.exclude]
    else:
        lines.append("exclude: []  # gitignore-style; vendored trees and lock files are built in")
    if gh:
        lines += [
            "issues:",
            f"  github: {_q(gh)}  # issues and pull requests through the GitHub API",
            "  token: ${GITHUB_TOKEN:-}  # needed for a private repository; optional otherwise",
        ]
    else:
        lines.append("# issues: {file: issues.json}  # from: gh issue list --state all --json …")
    return "\n".join(lines) + "\n"


async def cmd_init(app: RepoExpert, args: argparse.Namespace) -> int:
    app.layout.instance(args.name)  # a name that is not one safe path component fails here
    clone = None
    if _URL.match(args.source):
        draft = Instance(name=args.name, repo=RepoConfig(url=args.source, ref=args.ref))
        clone = await checkout(draft, app.layout, fetch=False)  # the clone `index` will use
    elif args.ref:
        raise ConfigError("--ref goes with a URL; a local checkout is indexed as it is")
    print(await asyncio.to_thread(_init, app, args, clone))
    return 0


def _init(app: RepoExpert, args: argparse.Namespace, clone: Checkout | None) -> str:
    """Write the file (``clone``: the checkout of a URL; None: ``args.source`` is a folder);
    what to print."""
    name: str = args.name
    folder = app.settings.instances_dir
    target = folder / f"{name}.yaml"
    if target.exists() and not args.force:
        raise ConfigError(f"{target} already exists: choose another name, or add --force")
    if clone is not None:
        co, remote, repo = clone, args.source, args.source
    else:
        root = Path(os.path.expanduser(args.source))
        if not root.is_dir():
            raise ConfigError(f"{args.source}: no such folder (give a local folder or a git URL)")
        co, remote = Checkout(root=root, commit=None), origin_url(root)
        rel = os.path.relpath(root.resolve(), folder.resolve())
        # relative when it is near (inside, or beside the instances folder), else absolute
        repo = rel if not rel.startswith(os.path.join("..", "..")) else str(root.resolve())
    data = inside(co.root, app.layout.data)  # never indexed: not counted either
    found = survey([f for f in list_files(co) if not (data and f.startswith(f"{data}/"))])
    folder.mkdir(parents=True, exist_ok=True)
    target.write_text(render(name, repo, clone is not None, args.ref, remote, found), "utf-8")
    try:
        inst = load_instance(target)  # as every command will read it
    except ConfigError:
        target.unlink()
        raise
    out = [
        f"wrote {target}",
        f"  repository: {repo}" + (f" @ {args.ref}" if args.ref else ""),
        f"  files:      {found.files} ({sum(found.docs.values())} docs, "
        f"{sum(found.code.values())} code)",
        f"  web_url:    {inst.web_url or '(none: sources show path:lines @ <short sha>)'}",
        f"  issues:     {inst.issues.github or '(none)'}",
        *(f"  excluding:  {p} ({why}, {n} files)" for p, why, n in found.exclude),
    ]
    flags = "" if folder == Path(DEFAULT_INSTANCES_DIR) else f" --instances {folder}"
    out.append(f"next: repo-expert{flags} index {name}")
    out.append(f'then: repo-expert{flags} ask {name} "…your question…"')
    return "\n".join(out)
