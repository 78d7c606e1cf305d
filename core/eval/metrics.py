"""Retrieval evaluation on a question file.

File format (YAML list)::

    - id: timeout-1
      lang: en                 # any language tag
      route: docs              # docs | code | issues: where the answer lives
      question: What is the default request timeout?
      gold: {paths: [docs/config.md, src/client.py], issues: []}
      answer_facts: [30 seconds]

A retrieved source is a hit when its path is in ``gold.paths`` or its issue number is in
``gold.issues``. Reported: hit@1, hit@k and MRR (reciprocal rank of the first hit within k),
overall, per route and per language, and the share of result slots each collection took.

With ``--judge`` (:func:`run_judged`) each question is also answered through the service and the
answer judged for faithfulness and ``answer_facts`` coverage (``judge.py``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import ConfigError
from core.eval.judge import Judge, JudgedQuestion, JudgeReport
from core.models import Answer, Retrieval, Source


class Gold(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(default_factory=list)
    issues: list[int] = Field(default_factory=list)


class EvalQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    lang: str = "en"
    route: Literal["docs", "code", "issues"]
    question: str
    gold: Gold
    answer_facts: list[str] = Field(default_factory=list)


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
    return out


def is_hit(src: Source, gold: Gold) -> bool:
    if src.issue is not None and src.issue in gold.issues:
        return True
    return src.path is not None and src.path in gold.paths


@dataclass
class QuestionResult:
    id: str
    lang: str
    route: str
    rank: int | None  # 1-based rank of the first hit within k
    collections: list[str]
    ms: float


@dataclass
class Metrics:
    n: int = 0
    hit1: float = 0.0
    hitk: float = 0.0
    mrr: float = 0.0

    @classmethod
    def of(cls, results: list[QuestionResult]) -> Metrics:
        n = len(results)
        if not n:
            return cls()
        return cls(
            n=n,
            hit1=sum(r.rank == 1 for r in results) / n,
            hitk=sum(r.rank is not None for r in results) / n,
            mrr=sum(1.0 / r.rank for r in results if r.rank) / n,
        )

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "hit@1": round(self.hit1, 4), "hit@k": round(self.hitk, 4),
                "mrr": round(self.mrr, 4)}  # fmt: skip


@dataclass
class Report:
    k: int
    system: str
    results: list[QuestionResult] = field(default_factory=list)

    def groups(self) -> dict[str, Metrics]:
        out = {"overall": Metrics.of(self.results)}
        by: dict[str, list[QuestionResult]] = defaultdict(list)
        for r in self.results:
            by[f"route:{r.route}"].append(r)
            by[f"lang:{r.lang}"].append(r)
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
            "k": self.k,
            "metrics": {g: m.to_json() for g, m in self.groups().items()},
            "slot_share": self.slot_share(),
            "median_ms": round(ms[len(ms) // 2], 2),
            "questions": [r.__dict__ for r in self.results],
        }

    def table(self) -> str:
        lines = [
            f"system: {self.system}   k={self.k}   questions={len(self.results)}",
            f"{'group':<16}{'n':>5}{'hit@1':>9}{f'hit@{self.k}':>9}{'MRR':>9}",
        ]
        for g, m in self.groups().items():
            lines.append(f"{g:<16}{m.n:>5}{m.hit1:>9.3f}{m.hitk:>9.3f}{m.mrr:>9.3f}")
        share = ", ".join(f"{c} {v:.0%}" for c, v in self.slot_share().items())
        lines.append(f"slot share: {share}")
        return "\n".join(lines)


RetrieveFn = Callable[[str], Awaitable[Retrieval]]


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
            QuestionResult(q.id, q.lang, q.route, rank, [s.collection for s in r.sources[:k]], ms)
        )
    return rep


AskFn = Callable[[str], Awaitable[Answer]]


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
