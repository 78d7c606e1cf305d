"""A question that names one repository of an instance over several, answered from it alone
(and the notes an answer over several repositories carries).

A question naming a repository ("how does *gson* pick a type adapter?") tilts retrieval toward it
(``search.tilt``), but the pool is the whole instance's: its candidate lists are cut over every
repository and its lexical statistics are the instance's, so the named repository's own sources
come in a worse order than in its own index. When the named repository also leads — the first
source of the whole instance's retrieval is its — the question is retrieved again as
``repo:NAME`` would (the repository's own lists and statistics, ``repos.with_repo``), and that
retrieval is the answer's; its route says so (``narrowed``). When another repository leads, the
first retrieval stands: naming is a tilt, never a filter (and *just*, the adverb, does not pull
a question into casey/just unless casey/just leads anyway). ``repo:all`` searches every
repository as asked (with a caller's own filter kept, ``--repo``/the API's ``repo``: all of it,
``Options.narrow``). Measured in ``variants/prompts-2026-12-07i/PLAN-s65.md``.
"""

from __future__ import annotations

from typing import Any

from core.config import EVERY
from core.embed import EmbedService
from core.models import Retrieval
from core.retrieve.kinds import KindModel
from core.retrieve.options import Options
from core.retrieve.repos import named, with_repo
from core.retrieve.search import retrieve
from core.retrieve.translate import Translator
from core.store.base import BuildReader


def leader(found: Retrieval, opt: Options, asked: str | None = None) -> str | None:
    """The repository to answer from alone: the one the question names, when it is the only one
    named, the first source is its, and the filter asked for (if any) keeps it among others;
    ``asked``: a follow-up as asked, searched joined to the turn it follows — the repositories it
    names itself, if any, are the ones that count ("and in the client?"). None: the retrieval
    stands."""
    if opt.mode != "full" or not opt.config.named_repo_alone or not opt.aliases or not opt.narrow:
        return None
    if opt.repo == EVERY or len(opt.keep) == 1:  # every repository asked for; or one already
        return None
    repos = (named(asked, opt.aliases) if asked else []) or (
        found.route.get("signals", {}).get("repos") or [])  # fmt: skip
    if len(repos) != 1 or not found.sources:
        return None
    # With a scope kept, only its repositories' sources are found: one that leads is in it.
    return repos[0] if found.sources[0].repo == repos[0] else None


async def retrieve_named(
    reader: BuildReader,
    embedder: EmbedService,
    question: str,
    opt: Options,
    kinds: KindModel | None = None,
    translator: Translator | None = None,
    asked: str | None = None,
) -> Retrieval:
    """``search.retrieve``, then, where :func:`leader` names a repository, again with it as the
    filter; the route keeps the filter that was asked for and says which repository and why."""
    found = await retrieve(reader, embedder, question, opt, kinds=kinds, translator=translator)
    repo = leader(found, opt, asked)
    if repo is None:
        return found
    alone = await retrieve(reader, embedder, question, with_repo(opt, repo.lower()), kinds=kinds,
                           translator=translator)  # fmt: skip
    alone.route.pop("filter", None)
    if "filter" in found.route:  # a channel's scope, still what was asked for
        alone.route["filter"] = found.route["filter"]
    signals = found.route.get("signals", {})
    if signals.get("issues_in_several"):  # a bare #N of several repositories: the note still
        for key in ("issues_in_several", "repo_issues"):  # names them all, as the first pass did
            if key in signals:
                alone.route.setdefault("signals", {})[key] = signals[key]
    alone.route["narrowed"] = {
        "repo": repo,
        "why": f"the question names {repo} and its source ranked first across the instance",
        # that source's score, as the whole instance ranked it (a support channel's min_score)
        "first_score": found.sources[0].score,
    }
    for src in alone.route.get("sources", []):
        src["why"] = [*src.get("why", []), f"repository {repo} named: answered from it alone"]
    alone.timings_ms = {"first_pass": sum(found.timings_ms.values()), **alone.timings_ms}
    return alone


def narrowed_note(route: dict[str, Any]) -> str:
    """The answer's note for a narrowed retrieval (every face's answer; the search calls return
    ``narrowed``): which repository, and how to search beyond it."""
    repo = (route.get("narrowed") or {}).get("repo")
    if not repo:
        return ""
    return (f"searched {repo} alone, the repository the question names: add repo:all to search "
            "beyond it")  # fmt: skip


def several_note(signals: dict[str, Any], alone: str | None = None) -> str:
    """What to tell a person whose bare #N is in several repositories: which one the answer
    took first (the one whose thread fits the question best) and how to ask for another;
    ``alone``: the one repository searched (``narrow.py``), whose #N is the only one shown."""
    several: dict[str, list[str]] = signals.get("issues_in_several") or {}
    taken: dict[str, str] = signals.get("repo_issues") or {}
    notes = []
    for n, repos in several.items():
        where = " and ".join([", ".join(repos[:-1]), repos[-1]] if len(repos) > 1 else repos)
        if alone in repos:
            other = next(r for r in repos if r != alone)
            notes.append(f"#{n} is in {where}: {alone}#{n} is shown (ask about {other}#{n} for "
                         "another)")  # fmt: skip
            continue
        first = taken.get(n)
        if first is None:
            notes.append(f"#{n} is in {where}: all are shown")
            continue
        other = next(r for r in repos if r != first)
        notes.append(f"#{n} is in {where}: {first}#{n} fits the question best and comes first "
                     f"(ask about {other}#{n} for another)")  # fmt: skip
    return "; ".join(notes)
