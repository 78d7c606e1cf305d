from __future__ import annotations

from pathlib import Path

import pytest

from core.eval.compare import SYSTEMS, GrepBaseline, chart, compare, markdown
from core.eval.metrics import EvalQuestion, Gold


def q(i: str, route: str, text: str, paths=(), issues=(), lang="en") -> EvalQuestion:  # type: ignore[no-untyped-def]
    return EvalQuestion(id=i, lang=lang, route=route, question=text,  # type: ignore[arg-type]
                        gold=Gold(paths=list(paths), issues=list(issues)))  # fmt: skip


QUESTIONS = [
    q("themes", "docs", "Which themes change chart colours?", paths=["docs/guide.md"]),
    q("timeout", "docs", "What is the default timeout?", paths=["README.md"]),
    q("parse", "code", "What does parse_config return?", paths=["src/widget/config.py"]),
    q("bug", "issues", "where is the bug from issue #42?", issues=[42]),
    q("dim", "issues", "Is there a bug about dim dark theme colours?", issues=[7]),
]


@pytest.mark.asyncio
async def test_grep_baseline_ranks_files_by_distinct_terms(sample) -> None:
    app = sample["app"]
    await app.index("widget")
    g = await GrepBaseline.build(app, "widget")
    assert "parse_config" in g.terms("What does parse_config return?")
    r = g.search("What does parse_config return?", 6)
    assert r.sources[0].path == "src/widget/config.py"
    r = g.search("issue #42", 6)
    assert r.sources[0].issue == 42
    await app.close()


@pytest.mark.asyncio
async def test_compare_runs_every_system_and_writes_reports(sample, tmp_path: Path) -> None:
    app = sample["app"]
    await app.index("widget")
    reports = await compare(app, "widget", QUESTIONS, 6)
    assert list(reports) == list(SYSTEMS)
    for rep in reports.values():
        assert rep.groups()["overall"].n == len(QUESTIONS)
    full = reports["full"].groups()
    assert full["overall"].hitk == 1.0
    assert full["route:issues"].hit1 == 1.0
    md = markdown(reports, 6)
    assert "| overall (n=5) |" in md and "full hit@6" in md
    chart(reports, 6, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    await app.close()


@pytest.mark.asyncio
async def test_cited_level_scores_what_the_answer_cites(sample, tmp_path: Path) -> None:
    from core.eval.metrics import run_cited

    app = sample["app"]
    await app.index("widget")
    qs = [
        q("timeout", "docs", "What is the default timeout?", paths=["README.md"]),
        q("nothing", "docs", "What is the default timeout?", paths=["no/such/file.md"]),
    ]
    qs[0].answer_facts = ["thirty seconds", "not in any source"]
    rep = await run_cited(qs, lambda text: app.ask("widget", text), 6)
    first, second = rep.results
    answer = await app.ask("widget", "What is the default timeout?")
    paths = [s.path for s in answer.sources]
    assert first.rank == paths.index("README.md") + 1  # its place among the *cited* sources
    assert first.facts == 0.5 and second.rank is None and second.facts is None
    g = rep.groups()["overall"]
    assert rep.level == "cited" and g.fact == 0.5 and g.hitk == 0.5
    reports = await compare(app, "widget", QUESTIONS, 6, cited=True)
    assert all(r.level == "cited" for r in reports.values())
    md = markdown(reports, 6)
    assert md.startswith("### Cited") and "full fact" in md and "full hit |" in md
    assert "full quoted" in md
    await app.close()


def test_eval_questions_take_a_split_and_a_kind(tmp_path: Path) -> None:
    from core.errors import ConfigError
    from core.eval.metrics import load_questions

    f = tmp_path / "q.yaml"
    f.write_text(
        "- {id: a, route: code, question: q, gold: {paths: [x.py]}, split: tune, kind: bug}\n"
        "- {id: b, route: docs, question: q, gold: {paths: [y.md]}, split: report}\n"
    )
    a, b = load_questions(f)
    assert (a.split, a.kind, b.split, b.kind) == ("tune", "bug", "report", None)
    f.write_text("- {id: c, route: docs, question: q, gold: {paths: []}, split: dev}\n")
    with pytest.raises(ConfigError, match=r"question \[0\] split"):
        load_questions(f)


def test_quoted_counts_only_what_the_answer_itself_says() -> None:
    """fact: in the answer or its cited sources; quoted: in the answer's own text, what a
    person reads before opening a source."""
    from core.eval.metrics import QuestionResult, Report, facts_found
    from core.models import Answer, Source

    source = Source(collection="code", title="connect", url="u", text="TIMEOUT = 30\nretries = 3",
                    score=1.0, path="client.py")  # fmt: skip
    answer = Answer(text="• client.py: `TIMEOUT = 30` [1]", sources=[source])
    facts = ["timeout = 30", "retries = 3"]
    assert facts_found(facts, answer) == 1.0
    assert facts_found(facts, answer, quoted=True) == 0.5
    assert facts_found([], answer, quoted=True) is None
    rep = Report(k=6, system="full", level="cited")
    rep.results = [QuestionResult("a", "en", "code", 1, ["code"], 1.0, None, 1.0, 0.5)]
    assert rep.groups()["overall"].to_json()["quoted"] == 0.5
    assert "quoted" in rep.table()


@pytest.mark.asyncio
async def test_a_run_scores_the_systems_asked_for_and_counts_test_sources(sample) -> None:
    """``systems`` picks what is scored (a screen runs the full system alone); each question
    records how many of its sources are test files — here a question about tests, the one kind
    that gets them."""
    from helpers import commit_all, write_files

    from core.eval.metrics import run_cited, run_eval

    write_files(sample["repo"], {"tests/test_timeout.py":
                                 "def test_default_timeout():\n    assert TIMEOUT == 30\n"})
    commit_all(sample["repo"])
    app = sample["app"]
    await app.index("widget")
    reports = await compare(app, "widget", QUESTIONS, 6, systems=["full"])
    assert list(reports) == ["full"]
    asked = [q("t", "code", "which test checks the default timeout?", paths=["tests/"])]
    rep = await run_eval(asked, lambda text: app.retrieve("widget", text), 6)
    sources = (await app.retrieve("widget", asked[0].question)).sources
    want = sum(s.collection == "code" and (s.path or "").startswith("tests/") for s in sources)
    assert want >= 1 and rep.results[0].tests == want
    cited = await run_cited(asked, lambda text: app.ask("widget", text), 6)
    answer = await app.ask("widget", asked[0].question)
    assert cited.results[0].tests == sum(
        s.collection == "code" and (s.path or "").startswith("tests/") for s in answer.sources
    )
    await app.close()
