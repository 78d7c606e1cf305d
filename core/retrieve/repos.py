"""Repositories in a question, for an instance over several (``repos:``).

- ``repo:NAME`` anywhere in a question (the bots' question syntax) keeps only that repository's
  sources: a hard filter, like ``--repo NAME`` on the command line (:func:`split_filter`). NAME
  may be a scope (``scopes:``, a named group of the repositories: keeps its members) or ``all``
  (keeps every one: lifts a channel's default, ``access.*.channel_repos``).
- A question that names a repository, by its name or an alias the configuration gives ("how does
  the *client* retry?"), tilts retrieval toward it (:func:`named`, applied in ``search.py``),
  and when that repository then leads it is searched alone (``narrow.py``): never a filter —
  another repository that fits better still comes first and takes slots.
- Issue references resolve per repository: ``client#42``, ``issue 42 in client`` name the
  client's #42; a bare ``#42`` names every repository's #42 (:func:`issue_refs`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from core.config import EVERY, Instance, aliases, scopes
from core.errors import BadQuestion
from core.models import Turn
from core.retrieve.followup import resolve_followup
from core.retrieve.options import Options

# A name ends in a letter, digit, "_" or "-": "… search repo:all." names "all".
_FILTER = re.compile(r"(?<![\w/])repo:([A-Za-z0-9](?:[\w.-]*[\w-])?)", re.IGNORECASE)
_QUALIFIED = re.compile(r"(?<![\w/])([A-Za-z0-9][\w.-]*)#(\d{1,7})\b")
_IN_REPO = re.compile(
    r"(?:#|\b(?:issues?|bugs?|tickets?|prs?|pull\s+requests?|incidencias?)\s*#?)(\d{1,7})\s+"
    r"(?:in|of|from|en|de|del)\s+(?:the\s+|el\s+|la\s+)?([A-Za-z0-9][\w.-]*)",
    re.IGNORECASE,
)


def split_filter(question: str, opt: Options) -> tuple[str, str | None]:
    """The question without its ``repo:NAME``, and the filter it names (its lower-case key in
    ``opt.scopes``; None without one): the last one written — a follow-up searched together with
    the turn it follows ("and repo:client?") says it after that turn's. A name that is no
    repository or scope of the instance is :class:`BadQuestion`, one line."""
    found = list(_FILTER.finditer(question))
    if not found or not opt.scopes:
        return question, None
    key = check_repo(found[-1].group(1), opt)
    return strip_repo(question), key


def has_filter(question: str) -> bool:
    """Whether the question says ``repo:NAME`` itself."""
    return _FILTER.search(question) is not None


def says_repo(question: str, earlier: list[Turn] | None) -> bool:
    """Whether the question, or the turn it follows up (searched together with it), says
    ``repo:NAME`` itself: then a default filter — a chat channel's, the web page's *Search
    in* — does not apply."""
    return has_filter(resolve_followup(question, earlier or None))


def check_repo(name: str, opt: Options) -> str:
    """The key of ``opt.scopes`` that ``name`` (a repository, an alias, a scope or ``all``) is,
    else :class:`BadQuestion`."""
    key = name.lower()
    if key not in opt.scopes:
        known = ", ".join(sorted(set(opt.aliases.values())))
        groups = sorted(k for k in opt.scopes if k not in opt.aliases and k != EVERY)
        also = f"; scopes: {', '.join(groups)}" if groups else ""
        raise BadQuestion(f"repo {name!r}: no such repository in this instance (known: {known}"
                          f"{also}; all: every one)")  # fmt: skip
    return key


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
    """``opt`` knowing the instance's repositories and scopes (when it has several) and the
    filter to apply (``repo``: a repository, a scope or ``all``; None: none)."""
    names = aliases(inst)
    if not names:
        if repo is not None:
            raise BadQuestion(f"repo {repo!r}: instance '{inst.name}' has one repository; "
                              "leave the repository out")  # fmt: skip
        return opt
    opt = dataclasses.replace(opt, aliases=names, scopes=scopes(inst))
    return with_repo(opt, check_repo(repo, opt)) if repo is not None else opt


def with_repo(opt: Options, key: str) -> Options:
    """``opt`` keeping the repositories of ``key`` (a key of ``opt.scopes``): named as the
    repository (an alias: its repository's name) or the scope; ``all`` keeps no filter (the
    store searches the kept repositories' rows only: ``BuildReader.dense``/``lexical``)."""
    if key == EVERY:  # no repository may be named so (config.repos.scope_problems)
        return dataclasses.replace(opt, repo=EVERY, keep=())
    name = opt.aliases.get(key, key)
    return dataclasses.replace(opt, repo=name, keep=opt.scopes[key])


def split_repo(question: str, opt: Options) -> tuple[str, Options]:
    """``repo:NAME`` taken out of the question, as the filter it asks for (a filter the caller
    gave wins: ``--repo``, the API's ``repo``)."""
    rest, key = split_filter(question, opt)
    if key is None:
        return question, opt
    if opt.repo is None:
        return rest, with_repo(opt, key)
    # The caller's filter is kept; repo:all still asks for it whole: nothing narrowed inside it.
    return rest, dataclasses.replace(opt, narrow=False) if key == EVERY else opt


def strip_repo(question: str) -> str:
    return " ".join(_FILTER.sub(" ", question).split()) or question
