"""``eval --compare``: the full system against baselines, side by side, on the same questions
and the same index.

- ``grep`` — what a developer does with grep: the question's distinctive words and identifiers
  (identifiers split the way code spells them), searched case-insensitively over every indexed
  file and issue; a file ranks by how many distinct terms it contains, rarer terms counting more
  (idf), then by the number of matches.
- ``bm25`` — SQLite FTS5 only (code-aware tokens), proportional fusion across collections.
- ``dense`` — vectors only, proportional fusion.
- ``rrf`` — dense + BM25 fused with reciprocal-rank fusion within and across collections: the
  round-robin failure mode.
- ``full`` — hybrid scores, exact symbol/issue/path hits, routing, issue→code hop, proportional
  fusion.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from core.eval.metrics import EvalQuestion, Report, RetrieveFn, run_cited, run_eval
from core.extras import need
from core.lexical import STOP, expand
from core.models import Answer, Collection, Retrieval, Source
from core.retrieve.analyse import analyse
from core.retrieve.options import MODES
from core.service import RepoExpert

SYSTEMS = ("grep", "bm25", "dense", "rrf", "full")


class GrepBaseline:
    """Case-insensitive term search over whole files and issues, as a developer would."""

    GREP_LINES = 40  # matching lines shown per file, as ``grep`` would print them

    def __init__(self, units: dict[str, tuple[Collection, str, Source]]):
        self.units = units  # key -> (collection, full text, a source to report)
        self.n = max(len(units), 1)

    @classmethod
    async def build(cls, app: RepoExpert, name: str) -> GrepBaseline:
        reader = await app.reader(name)
        texts: dict[str, list[str]] = defaultdict(list)
        first: dict[str, Source] = {}
        colls: dict[str, Collection] = {}
        for c in await reader.all_chunks():
            texts[c.doc_key].append(c.text)
            colls[c.doc_key] = c.collection
            if c.doc_key not in first:
                first[c.doc_key] = Source(
                    collection=c.collection, title=c.path or c.title, url=c.url, text="",
                    score=0.0, path=c.path, issue=c.issue,
                )  # fmt: skip
        return cls({k: (colls[k], "\n".join(v), first[k]) for k, v in texts.items()})

    def terms(self, question: str) -> list[str]:
        r = analyse(question)
        ts = [i.lower() for i in r.identifiers] + [p.lower() for p in r.paths]
        ts += [t for t in expand(question, keep_stop=False) if len(t) > 2 and t not in STOP]
        ts += [f"#{n}" for n in r.issues]
        return list(dict.fromkeys(ts))

    def search(self, question: str, k: int) -> Retrieval:
        terms = self.terms(question)
        lowered = {key: txt.lower() for key, (_c, txt, _s) in self.units.items()}
        df = {t: sum(1 for txt in lowered.values() if t in txt) for t in terms}
        scored = []
        for key, (_c, txt, src) in self.units.items():
            low = lowered[key]
            matched = [t for t in terms if df[t] and t in low]
            if not matched:
                continue
            idf = sum(math.log(1 + self.n / df[t]) for t in matched)
            count = sum(len(re.findall(re.escape(t), low)) for t in matched)
            scored.append((idf, count, src, txt, matched))
        scored.sort(key=lambda x: (x[0], x[1]), reverse=True)
        sources = []
        for idf, _, src, txt, matched in scored[:k]:
            # What grep prints: the file's lines that hold a term (an answerer quotes from them).
            lines = [ln for ln in txt.splitlines() if any(t in ln.lower() for t in matched)]
            text = "\n".join(lines[: self.GREP_LINES])
            sources.append(Source(**{**src.__dict__, "score": idf, "text": text}))
        return Retrieval(sources=sources)


async def compare(
    app: RepoExpert, name: str, questions: list[EvalQuestion], k: int, cited: bool = False,
    systems: Sequence[str] = SYSTEMS,
) -> dict[str, Report]:  # fmt: skip
    """Every system (of ``systems``) on the same questions and index. ``cited``: score what a
    person would see — each system's sources answered by the instance's answerer, its cited
    sources scored."""
    grep = await GrepBaseline.build(app, name) if "grep" in systems else None
    answerer = app.answerer_for(name)
    reports: dict[str, Report] = {}
    for system in (s for s in SYSTEMS if s in systems):

        async def fn(q: str, system: str = system) -> Retrieval:
            mode = next((m for m in MODES if m == system), None)
            if mode is None:  # grep
                assert grep is not None
                return grep.search(q, k)
            return await app.retrieve(name, q, k=k, mode=mode)

        async def ask(q: str, fn: RetrieveFn = fn) -> Answer:
            return await answerer.answer(q, await fn(q))

        if cited:
            reports[system] = await run_cited(questions, ask, k, system=system)
        else:
            reports[system] = await run_eval(questions, fn, k, system=system)
    return reports


def _groups(reports: dict[str, Report]) -> list[str]:
    keys: list[str] = []
    for r in reports.values():
        for g in r.groups():
            if g not in keys:
                keys.append(g)
    return keys


def markdown(reports: dict[str, Report], k: int) -> str:
    groups = _groups(reports)
    cited = any(r.level == "cited" for r in reports.values())
    hit = "hit" if cited else f"hit@{k}"
    cols = ["hit@1", hit, "MRR", *(["fact", "quoted"] if cited else [])]
    head = "| group | " + " | ".join(f"{s} {c}" for s in reports for c in cols) + " |"
    title = (
        f"### Cited: what the answer cites (top {k} retrieved, then the answerer), per system"
        if cited
        else f"### Retrieval: hit@1, hit@{k} and MRR per system (same questions, same index)"
    )
    lines = [title, "", head, "|" + "---|" * (1 + len(cols) * len(reports))]
    for g in groups:
        cells = []
        for r in reports.values():
            m = r.groups().get(g)
            if m is None:
                cells += [""] * len(cols)
                continue
            cells += [f"{m.hit1:.3f}", f"{m.hitk:.3f}", f"{m.mrr:.3f}"]
            if cited:
                cells.append(f"{m.fact:.3f}" if m.fact is not None else "")
                cells.append(f"{m.quoted:.3f}" if m.quoted is not None else "")
        n = next(r.groups()[g].n for r in reports.values() if g in r.groups())
        lines.append(f"| {g} (n={n}) | " + " | ".join(cells) + " |")
    lines += ["", "Share of result slots per collection:", "", "| system | docs | code | issues |"]
    lines.append("|---|---|---|---|")
    for s, r in reports.items():
        sh = r.slot_share()
        lines.append(
            f"| {s} | " + " | ".join(f"{sh.get(c, 0.0):.0%}" for c in ("docs", "code", "issues"))
            + " |"
        )  # fmt: skip
    lines += ["", "Median retrieval time per question (ms): " + ", ".join(
        f"{s} {r.to_json()['median_ms']:.1f}" for s, r in reports.items()
    )]  # fmt: skip
    return "\n".join(lines) + "\n"


def need_chart() -> ModuleType:
    """matplotlib, or the one line that names the extra (checked before a long comparison)."""
    return need("matplotlib", "eval", "the chart of eval --compare")


def chart(reports: dict[str, Report], k: int, path: Path) -> None:
    """Grouped bars: hit@k and MRR overall and per route, one bar per system."""
    matplotlib = need_chart()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g in _groups(reports) if g == "overall" or g.startswith("route:")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    width = 0.8 / len(reports)
    for ax, metric, label in ((axes[0], "hitk", f"hit@{k}"), (axes[1], "mrr", "MRR")):
        for i, (system, rep) in enumerate(reports.items()):
            g = rep.groups()
            vals = [getattr(g[x], metric) if x in g else 0.0 for x in groups]
            xs = [j + (i - (len(reports) - 1) / 2) * width for j in range(len(groups))]
            ax.bar(xs, vals, width, label=system)
        ax.set_xticks(range(len(groups)), groups)
        ax.set_title(label)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def to_json(reports: dict[str, Report]) -> dict[str, Any]:
    return {s: r.to_json() for s, r in reports.items()}
