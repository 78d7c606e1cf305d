"""An instance over several repositories (``repos:``): one view per repository, and the checks
that need the instance file's folder.

A *view* is the instance as one repository sees it: ``repo``, ``web_url``, ``docs``, ``code``,
``exclude`` and ``issues`` are the entry's own (the instance's where the entry gives none), and
``repo_name`` is the entry's name. Everything that works on one repository — the checkout, the
file selection, permalinks, the issues mirror — is given a view, so it needs no notion of
several. The one-repository form (``repo:``, or ``repos:`` with one entry) has one view: the
instance itself, with ``repo_name`` "" (its units keep their keys, its sources show no
repository).

``scopes:`` names groups of the repositories; :func:`scopes` is every name a filter may use — a
repository's names, a scope's, and ``all`` — with the repositories it keeps.
"""

from __future__ import annotations

import re

from core.config.schema import NAME, NAME_RULE, Instance, RepoConfig


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


EVERY = "all"  # ``repo:all``: every repository (lifts a channel's default)


def scopes(inst: Instance) -> dict[str, tuple[str, ...]]:
    """Every name a filter may use (lower case) -> the repositories it keeps, in ``repos``
    order: a repository's name or alias keeps it, a scope its members, ``all`` every one."""
    names = aliases(inst)
    if not names:
        return {}
    order = [e.name for e in inst.repos]
    out: dict[str, tuple[str, ...]] = {a: (r,) for a, r in names.items()}
    for scope, members in inst.scopes.items():
        kept = {names[m.lower()] for m in members if m.lower() in names}
        out.setdefault(scope.lower(), tuple(r for r in order if r in kept))
    out.setdefault(EVERY, tuple(order))
    return out


def scope_problems(inst: Instance) -> list[str]:
    """What is wrong with ``scopes`` and the channels' default repositories, one line each
    naming the key: a scope without repositories or with an unknown one, a scope named like a
    repository (or ``all``), a channel default that is no repository or scope."""
    problems: list[str] = []
    names = aliases(inst)
    for i, e in enumerate(inst.repos if names else []):
        for a in [e.name, *e.aliases]:
            if a.lower() == EVERY:
                problems.append(f"  repos[{i}]: '{a}' is reserved (repo:{EVERY} searches "
                                "every repository): give it another name or alias")  # fmt: skip
    seen: dict[str, str] = {}
    for scope in inst.scopes:
        other = seen.setdefault(scope.lower(), scope)
        if other != scope:
            problems.append(f"  scopes.{scope}: the same name as scopes.{other} (names ignore "
                            "case)")  # fmt: skip
    if not names and inst.scopes:
        problems.append("  scopes: only an instance over several repositories (repos:) has "
                        "scopes")  # fmt: skip
    for scope, members in inst.scopes.items():
        if not NAME.fullmatch(scope):
            problems.append(f"  scopes.{scope}: {NAME_RULE}")
        if names and scope.lower() in names:
            problems.append(f"  scopes.{scope}: '{scope}' is already a repository's name or alias "
                            "(a scope needs its own name)")  # fmt: skip
        if scope.lower() == EVERY:
            problems.append(f"  scopes.{scope}: '{EVERY}' is reserved (repo:{EVERY} searches every "
                            "repository)")  # fmt: skip
        if not members:
            problems.append(f"  scopes.{scope}: expected a list of repository names, got none")
        for i, m in enumerate(members):
            if names and m.lower() not in names:
                problems.append(f"  scopes.{scope}[{i}]: '{m}' is no repository of this instance "
                                f"(known: {', '.join(e.name for e in inst.repos)})")  # fmt: skip
    known = {s.lower() for s in inst.scopes} | set(names) | ({EVERY} if names else set())
    for platform, side in (("slack", inst.access.slack), ("discord", inst.access.discord)):
        for ch, name in side.channel_repos.items():
            key = f"access.{platform}.channel_repos.{ch}"
            if not names:
                problems.append(f"  {key}: only an instance over several repositories (repos:) "
                                "has a channel's default repository")  # fmt: skip
            elif name.lower() == EVERY:
                problems.append(f"  {key}: '{name}' is what a channel without a default searches "
                                "(every repository): leave the channel out")  # fmt: skip
            elif name.lower() not in known:
                problems.append(f"  {key}: '{name}' is no repository or scope of this instance "
                                f"(known: {', '.join(sorted(known - {EVERY}))})")  # fmt: skip
    return problems


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
