"""Retrieval evaluation on a question file.

File format (YAML list)::

    - id: timeout-1
      lang: en                 # any language tag
      route: docs              # docs | code | issues: where the answer lives
      question: What is the default request timeout?
      gold: {paths: [docs/config.md, src/client.py], issues: []}
      answer_facts: [30 seconds]
      split: tune              # optional: tune | report (fixed before any tuning)
      kind: bug                # optional: a group of its own (bug = localize a fix)

A source is a hit when its path is in ``gold.paths`` or its issue number is in ``gold.issues``.
For an instance over several repositories gold may name the repository: ``server:src/app.py``,
``client#42`` (a bare path or number then matches it in any repository). A one-repository
instance's sources name no repository: there the repository part of the gold is not compared, so
one question file scores a multi-repository instance and each repository's own instance alike.

Two levels are scored. *Retrieval* (:func:`run_eval`): the top k sources retrieval returns —
hit@1, hit@k and MRR (reciprocal rank of the first hit within k). *Cited* (:func:`run_cited`):
what a person sees — the sources the answer cites, in their citation order, as ``ask --json``
returns them — hit@1 (the first cited source is gold), hit (any cited source is), MRR over the
citations, and *fact*: the share of the question's ``answer_facts`` found (case-insensitively) in
the answer's text or its cited sources' text, and *quoted*: the share found in the answer's own
text — what a person reads before opening a source. Both report overall, per route, per language
and per kind, and the share of slots each collection took.

With ``--judge`` (:func:`run_judged`) each question is also answered through the service and the
answer judged for faithfulness and ``answer_facts`` coverage (``judge.py``).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import ConfigError
from core.eval.judge import Judge, JudgedQuestion, JudgeReport
from core.models import Answer, Retrieval, Source, is_test_path


class Gold(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(default_factory=list)  # "path" or "repo:path"
    issues: list[int | str] = Field(default_factory=list)  # 42 or "repo#42"

    @field_validator("issues")
    @classmethod
    def _issue_ok(cls, v: list[int | str]) -> list[int | str]:
        for g in v:
            if isinstance(g, str) and not _REPO_ISSUE.fullmatch(g):
                raise ValueError(f"{g!r}: expected an issue number or REPO#NUMBER")
        return v


class EvalQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    lang: str = "en"
    route: Literal["docs", "code", "issues"]
    question: str
    gold: Gold
    answer_facts: list[str] = Field(default_factory=list)
    split: Literal["tune", "report"] | None = None
    kind: str | None = None


def load_questions(path: Path) -> list[EvalQuestion]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read question file: {e}") from None
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: expected a YAML list of questions")
    out = []
    for i, q in enumerate(raw):
        try:
            out.append(EvalQuestion.model_validate(q))
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ConfigError(f"{path}: question [{i}] {loc}: {first['msg']}") from None
    empty = [q.id for q in out if not q.gold.paths and not q.gold.issues]
    if empty:  # e.g. a skeleton from `feedback --export-eval` not filled in yet
        more = f" and {len(empty) - 5} more" if len(empty) > 5 else ""
        raise ConfigError(
            f"{path}: gold is empty for {', '.join(empty[:5])}{more}: expected gold.paths or "
            "gold.issues naming where the answer lives (fill them in, or delete the question)"
        )
    return out


_REPO_ISSUE = re.compile(r"[A-Za-z0-9][\w.-]*#\d+")
_REPO_PATH = re.compile(r"([A-Za-z0-9][\w.-]*):(.+)")


def _in_repo(src: Source, repo: str) -> bool:
    return not src.repo or src.repo == repo  # a one-repository instance names none


def is_hit(src: Source, gold: Gold) -> bool:
    if src.issue is not None:
        for g in gold.issues:
            if isinstance(g, int):
                if g == src.issue:
                    return True
                continue
            repo, _, n = g.partition("#")
            if int(n) == src.issue and _in_repo(src, repo):
                return True
    if src.path is None:
        return False
    for p in gold.paths:
        m = _REPO_PATH.fullmatch(p)
        if p == src.path or (m and m.group(2) == src.path and _in_repo(src, m.group(1))):
            return True
    return False


@dataclass
class QuestionResult:
    id: str
    lang: str
    route: str
    rank: int | None  # 1-based rank of the first hit within k (or among the cited sources)
    collections: list[str]
    ms: float
    kind: str | None = None
    facts: float | None = None  # share of answer_facts found (cited level; None: none given)
    quoted: float | None = None  # share of them in the answer's own text (cited level)
    tests: int = 0  # how many of the sources are in test files (tests/…, *_test.go, …)


@dataclass
class Metrics:
    n: int = 0
    hit1: float = 0.0
    hitk: float = 0.0
    mrr: float = 0.0
    fact: float | None = None  # mean share of answer_facts found, over questions that have some
    quoted: float | None = None  # the same, in the answer's own text only

    @classmethod
    def of(cls, results: list[QuestionResult]) -> Metrics:
        n = len(results)
        if not n:
            return cls()
        facts = [r.facts for r in results if r.facts is not None]
        quoted = [r.quoted for r in results if r.quoted is not None]
        return cls(
            n=n,
            hit1=sum(r.rank == 1 for r in results) / n,
            hitk=sum(r.rank is not None for r in results) / n,
            mrr=sum(1.0 / r.rank for r in results if r.rank) / n,
            fact=sum(facts) / len(facts) if facts else None,
            quoted=sum(quoted) / len(quoted) if quoted else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n, "hit@1": round(self.hit1, 4),
                               "hit@k": round(self.hitk, 4), "mrr": round(self.mrr, 4)}  # fmt: skip
        if self.fact is not None:
            out["fact"] = round(self.fact, 4)
        if self.quoted is not None:
            out["quoted"] = round(self.quoted, 4)
        return out


@dataclass
class Report:
    k: int
    system: str
    results: list[QuestionResult] = field(default_factory=list)
    level: Literal["retrieval", "cited"] = "retrieval"

    def groups(self) -> dict[str, Metrics]:
        out = {"overall": Metrics.of(self.results)}
        by: dict[str, list[QuestionResult]] = defaultdict(list)
        for r in self.results:
            by[f"route:{r.route}"].append(r)
            by[f"lang:{r.lang}"].append(r)
            if r.kind:
                by[f"kind:{r.kind}"].append(r)
        for key in sorted(by):
            out[key] = Metrics.of(by[key])
        return out

    def slot_share(self) -> dict[str, float]:
        counts: dict[str, int] = defaultdict(int)
        for r in self.results:
            for c in r.collections:
                counts[c] += 1
        total = sum(counts.values()) or 1
        return {c: round(counts[c] / total, 4) for c in sorted(counts)}

    def to_json(self) -> dict[str, Any]:
        ms = sorted(r.ms for r in self.results) or [0.0]
        return {
            "system": self.system,
            "level": self.level,
            "k": self.k,
            "metrics": {g: m.to_json() for g, m in self.groups().items()},
            "slot_share": self.slot_share(),
            "median_ms": round(ms[len(ms) // 2], 2),
            "questions": [r.__dict__ for r in self.results],
        }

    def table(self) -> str:
        hit = "hit" if self.level == "cited" else f"hit@{self.k}"
        lines = [
            f"system: {self.system}   level: {self.level}   k={self.k}   "
            f"questions={len(self.results)}",
            f"{'group':<16}{'n':>5}{'hit@1':>9}{hit:>9}{'MRR':>9}{'fact':>9}{'quoted':>9}",
        ]
        for g, m in self.groups().items():
            fact = f"{m.fact:>9.3f}" if m.fact is not None else f"{'-':>9}"
            quoted = f"{m.quoted:>9.3f}" if m.quoted is not None else f"{'-':>9}"
            lines.append(f"{g:<16}{m.n:>5}{m.hit1:>9.3f}{m.hitk:>9.3f}{m.mrr:>9.3f}{fact}{quoted}")
        share = ", ".join(f"{c} {v:.0%}" for c, v in self.slot_share().items())
        lines.append(f"slot share: {share}")
        return "\n".join(lines)


RetrieveFn = Callable[[str], Awaitable[Retrieval]]
AskFn = Callable[[str], Awaitable[Answer]]


async def run_eval(
    questions: list[EvalQuestion], retrieve_fn: RetrieveFn, k: int, system: str = "full"
) -> Report:
    rep = Report(k=k, system=system)
    for q in questions:
        t = time.perf_counter()
        r = await retrieve_fn(q.question)
        ms = (time.perf_counter() - t) * 1000
        rank = next((i + 1 for i, s in enumerate(r.sources[:k]) if is_hit(s, q.gold)), None)
        rep.results.append(
            QuestionResult(
                q.id,
                q.lang,
                q.route,
                rank,
                [s.collection for s in r.sources[:k]],
                ms,
                q.kind,
                tests=_tests(r.sources[:k]),
            )
        )
    return rep


def _tests(sources: Sequence[Source]) -> int:
    """How many of ``sources`` are code in test files (``models.is_test_path``)."""
    return sum(s.collection == "code" and is_test_path(s.path) for s in sources)


def facts_found(facts: list[str], answer: Answer, quoted: bool = False) -> float | None:
    """Share of ``facts`` in the answer's text or its cited sources' text, their passages'
    included (case-insensitive);
    ``quoted``: in the answer's own text only."""
    if not facts:
        return None
    shown = (
        [answer.text] if quoted else [answer.text, *(t for s in answer.sources for t in s.texts())]
    )
    seen = "\n".join(shown).lower()
    return sum(f.lower() in seen for f in facts) / len(facts)


async def run_cited(
    questions: list[EvalQuestion], ask_fn: AskFn, k: int, system: str = "full"
) -> Report:
    """Score what a person sees: the answer's cited sources, in citation order (``ask --json``)."""
    rep = Report(k=k, system=system, level="cited")
    for q in questions:
        t = time.perf_counter()
        a = await ask_fn(q.question)
        ms = (time.perf_counter() - t) * 1000
        rank = next((i + 1 for i, s in enumerate(a.sources) if is_hit(s, q.gold)), None)
        rep.results.append(
            QuestionResult(
                q.id,
                q.lang,
                q.route,
                rank,
                [s.collection for s in a.sources],
                ms,
                q.kind,
                facts_found(q.answer_facts, a),
                facts_found(q.answer_facts, a, quoted=True),
                _tests(a.sources),
            )
        )
    return rep


async def run_judged(questions: list[EvalQuestion], ask_fn: AskFn, judge: Judge) -> JudgeReport:
    """Answer every question through the service and judge the answer on its own evidence."""
    rep = JudgeReport(method=judge.method)
    for q in questions:
        answer = await ask_fn(q.question)
        verdict = await judge.judge(q.question, answer, q.answer_facts)
        rep.results.append(
            JudgedQuestion(
                q.id, q.lang, q.route, answer.backend, answer.no_answer, verdict, answer.note
            )
        )
    return rep
