"""Repositories in a question, for an instance over several (``repos:``).

- ``repo:NAME`` anywhere in a question (the bots' question syntax) keeps only that repository's
  sources: a hard filter, like ``--repo NAME`` on the command line (:func:`split_filter`).
- A question that names a repository, by its name or an alias the configuration gives ("how does
  the *client* retry?"), tilts retrieval toward it (:func:`named`, applied in ``search.py``):
  never a filter — another repository that fits better still takes slots.
- Issue references resolve per repository: ``client#42``, ``issue 42 in client`` name the
  client's #42; a bare ``#42`` names every repository's #42 (:func:`issue_refs`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from core.config import Instance, aliases
from core.errors import BadQuestion
from core.retrieve.options import Options

_FILTER = re.compile(r"(?<![\w/])repo:([A-Za-z0-9][\w.-]*)", re.IGNORECASE)
_QUALIFIED = re.compile(r"(?<![\w/])([A-Za-z0-9][\w.-]*)#(\d{1,7})\b")
_IN_REPO = re.compile(
    r"(?:#|\b(?:issues?|bugs?|tickets?|prs?|pull\s+requests?|incidencias?)\s*#?)(\d{1,7})\s+"
    r"(?:in|of|from|en|de|del)\s+(?:the\s+|el\s+|la\s+)?([A-Za-z0-9][\w.-]*)",
    re.IGNORECASE,
)


def split_filter(question: str, aliases: Mapping[str, str]) -> tuple[str, str | None]:
    """The question without its ``repo:NAME``, and the repository it names (None without one);
    a name that is no repository of the instance is :class:`BadQuestion`, one line."""
    m = _FILTER.search(question)
    if m is None or not aliases:
        return question, None
    repo = check_repo(m.group(1), aliases)
    rest = (question[: m.start()] + question[m.end() :]).strip()
    return " ".join(rest.split()) or question, repo


def check_repo(name: str, aliases: Mapping[str, str]) -> str:
    """The repository ``name`` (or an alias) stands for, else :class:`BadQuestion`."""
    got = aliases.get(name.lower())
    if got is None:
        known = ", ".join(sorted(set(aliases.values())))
        raise BadQuestion(f"repo {name!r}: no such repository in this instance (known: {known})")
    return got


def named(question: str, aliases: Mapping[str, str]) -> list[str]:
    """The repositories a question names by name or alias (as whole words), first named first."""
    low = question.lower()
    hits: list[tuple[int, str]] = []
    for alias, repo in aliases.items():
        m = re.search(rf"(?<![\w-]){re.escape(alias)}(?![\w-])", low)
        if m is not None:
            hits.append((m.start(), repo))
    return list(dict.fromkeys(r for _, r in sorted(hits)))


def issue_refs(question: str, aliases: Mapping[str, str]) -> list[tuple[str, int]]:
    """Issue references that name their repository: (repository, number)."""
    out: list[tuple[str, int]] = []
    for m in _QUALIFIED.finditer(question):
        repo = aliases.get(m.group(1).lower())
        if repo is not None:
            out.append((repo, int(m.group(2))))
    for m in _IN_REPO.finditer(question):
        repo = aliases.get(m.group(2).lower())
        if repo is not None:
            out.append((repo, int(m.group(1))))
    return list(dict.fromkeys(out))


def repo_options(inst: Instance, opt: Options, repo: str | None) -> Options:
    """``opt`` knowing the instance's repositories (when it has several) and the one to keep;
    with one kept, each collection's candidates are taken from as many times more rows as there
    are repositories, so the filter leaves as many as a one-repository instance has. (Taking
    that many without a filter changed no dev-set score: benchmarks/eval_multi.py.)"""
    names = aliases(inst)
    if not names:
        if repo is not None:
            raise BadQuestion(f"repo {repo!r}: instance '{inst.name}' has one repository; "
                              "leave the repository out")  # fmt: skip
        return opt
    opt = dataclasses.replace(opt, aliases=names)
    return with_repo(opt, check_repo(repo, names)) if repo is not None else opt


def with_repo(opt: Options, repo: str) -> Options:
    return dataclasses.replace(opt.deeper(), repo=repo)


def split_repo(question: str, opt: Options) -> tuple[str, Options]:
    """``repo:NAME`` taken out of the question, as the filter it asks for."""
    rest, repo = split_filter(question, opt.aliases)
    if repo is None:
        return question, opt
    return rest, with_repo(opt, repo) if opt.repo is None else opt


def strip_repo(question: str) -> str:
    return " ".join(_FILTER.sub(" ", question).split()) or question
