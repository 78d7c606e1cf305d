"""An instance over several repositories (``repos:``): one view per repository, and the checks
that need the instance file's folder.

A *view* is the instance as one repository sees it: ``repo``, ``web_url``, ``docs``, ``code``,
``exclude`` and ``issues`` are the entry's own (the instance's where the entry gives none), and
``repo_name`` is the entry's name. Everything that works on one repository — the checkout, the
file selection, permalinks, the issues mirror — is given a view, so it needs no notion of
several. The one-repository form (``repo:``, or ``repos:`` with one entry) has one view: the
instance itself, with ``repo_name`` "" (its units keep their keys, its sources show no
repository).
"""

from __future__ import annotations

import re

from core.config.schema import Instance, RepoConfig


def is_multi(inst: Instance) -> bool:
    """Whether the instance has more than one repository (then every unit records its own)."""
    return len(inst.repos) > 1


def repo_names(inst: Instance) -> list[str]:
    return [e.name for e in inst.repos] if is_multi(inst) else []


def repo_views(inst: Instance) -> list[Instance]:
    """One view per repository (see the module docstring), in the order of ``repos``."""
    if not inst.repos:
        return [inst]
    out = []
    for e in inst.repos:
        view = inst.model_copy(
            update={
                "repo": RepoConfig(path=e.path, url=e.url, ref=e.ref, token=e.token),
                "web_url": e.web_url,
                "docs": e.docs or inst.docs,
                "code": e.code or inst.code,
                "exclude": e.exclude if e.exclude is not None else inst.exclude,
                "issues": e.issues or inst.issues,
                "repos": [],
                "repo_name": e.name if is_multi(inst) else "",
            }
        )
        out.append(view)
    return out


def aliases(inst: Instance) -> dict[str, str]:
    """Every name a question may use for a repository (lower case) -> the repository's name."""
    out: dict[str, str] = {}
    if not is_multi(inst):
        return out
    for e in inst.repos:
        for a in [e.name, *e.aliases]:
            out.setdefault(a.lower(), e.name)
    return out


def _same_url(url: str) -> str:
    u = re.sub(r"//[^/@]+@", "//", url.strip().rstrip("/"))
    return u.removesuffix(".git").lower()


def repo_problems(inst: Instance) -> list[str]:
    """What is wrong with ``repos`` as a whole, one line each naming the entry: two entries with
    one name (or alias), or two that resolve to the same checkout."""
    problems: list[str] = []
    names: dict[str, int] = {}
    places: dict[tuple[str, str | None], int] = {}
    for i, e in enumerate(inst.repos):
        for j, a in enumerate([e.name, *e.aliases]):
            key = f"repos[{i}].name" if j == 0 else f"repos[{i}].aliases[{j - 1}]"
            prev = names.get(a.lower())
            if prev is not None and prev != i:
                problems.append(f"  {key}: '{a}' is already the name or an alias of repos[{prev}]"
                                " (each repository needs its own name)")  # fmt: skip
            names.setdefault(a.lower(), i)
        if e.path:
            place: tuple[str, str | None] = ("path", str(inst.resolve(e.path)))
        else:
            place = ("url", f"{_same_url(e.url or '')}@{e.ref or 'HEAD'}")
        prev = places.get(place)
        if prev is not None:
            what = f"path {place[1]}" if place[0] == "path" else f"url {e.url} (ref {e.ref})"
            problems.append(f"  repos[{i}]: same checkout as repos[{prev}] ({what}); list each "
                            "repository once")  # fmt: skip
        places.setdefault(place, i)
    return problems
