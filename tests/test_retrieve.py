from __future__ import annotations

import pytest

from core.retrieve import allocate


def test_collection_with_nothing_relevant_gets_zero_slots() -> None:
    # Docs clearly fit; code and issues sit at the bottom of this question's range.
    cands = {
        "docs": [0.89, 0.88, 0.87, 0.86, 0.86, 0.85, 0.84],
        "code": [0.80, 0.79, 0.79, 0.78],
        "issues": [0.79, 0.78],
    }
    slots = allocate(cands, 6, floor=0.5)  # type: ignore[arg-type]
    assert slots == {"docs": 6, "code": 0, "issues": 0}


def test_allocation_is_proportional_not_round_robin() -> None:
    # Code fits much better than docs; RRF would interleave 3/3. We give code most slots.
    cands = {
        "code": [0.90, 0.89, 0.89, 0.88, 0.87, 0.86],
        "docs": [0.88, 0.87, 0.81, 0.80],
        "issues": [0.78, 0.77],
    }
    slots = allocate(cands, 6, floor=0.5)  # type: ignore[arg-type]
    assert slots["code"] >= 4
    assert slots["issues"] == 0
    assert sum(slots.values()) == 6
    assert slots["code"] > slots["docs"] >= 1


def test_slots_capped_by_relevant_candidates_and_spare_slots_move() -> None:
    cands = {"docs": [0.9], "code": [0.88, 0.87, 0.86, 0.85, 0.84, 0.83, 0.70]}
    slots = allocate(cands, 6, floor=0.5)  # type: ignore[arg-type]
    assert slots == {"docs": 1, "code": 5}


def test_route_weight_shifts_slots_but_zero_fit_stays_zero() -> None:
    cands = {"docs": [0.9, 0.89, 0.88], "code": [0.9, 0.89, 0.88], "issues": [0.5]}
    even = allocate(cands, 4, floor=0.5)  # type: ignore[arg-type]
    assert even["docs"] == even["code"] == 2 and even["issues"] == 0
    tilted = allocate(cands, 4, floor=0.5, weights={"code": 3.0, "issues": 10.0})  # type: ignore[arg-type]
    assert tilted["code"] == 3 and tilted["docs"] == 1 and tilted["issues"] == 0


def test_identical_scores_still_answer_with_one_slot() -> None:
    slots = allocate({"docs": [0.8], "code": [0.8]}, 6, floor=0.5)  # type: ignore[arg-type]
    assert sum(slots.values()) == 2  # both at the top of a zero-width range: both relevant
    assert allocate({}, 6) == {}


@pytest.mark.asyncio
async def test_docs_only_question_fills_no_slot_with_code(sample) -> None:
    app = sample["app"]
    await app.index("widget")
    r = await app.retrieve("widget", "themes change colours and fonts of every chart")
    assert r.slots["code"] == 0
    assert r.sources[0].path == "docs/guide.md"
    assert {s.collection for s in r.sources} <= {"docs", "issues"}
    await app.close()


@pytest.mark.asyncio
async def test_sources_carry_permalinks_and_scores_in_order(sample) -> None:
    app = sample["app"]
    await app.index("widget")
    r = await app.retrieve("widget", "parse_config reads widget.toml timeout")
    assert r.sources and all(s.url for s in r.sources)
    # Best first, each file's best chunk before any file's second (retrieval.file_first): the
    # files' first chunks in score order, then the further chunks in score order.
    seen: set[tuple[str, str | None, int | None]] = set()
    firsts, further = [], []
    for s in r.sources:
        key = (s.collection, s.path, s.issue)
        (further if key in seen else firsts).append(s.score)
        seen.add(key)
    assert firsts == sorted(firsts, reverse=True) and further == sorted(further, reverse=True)
    assert r.sources[0].score == max(s.score for s in r.sources)
    # The question names an identifier: the route weights code up and says why.
    assert r.route["signals"]["identifiers"] == ["parse_config"]
    assert r.route["weights"]["code"] > r.route["weights"]["docs"] == 1.0
    assert set(r.timings_ms) >= {"embed_query", "search", "fetch"}
    await app.close()


@pytest.mark.asyncio
async def test_symbol_lookup_puts_the_definition_first(sample) -> None:
    app = sample["app"]
    await app.index("widget")
    for q in ("what does `Renderer.draw` return?", "what does parseConfig do?"):
        r = await app.retrieve("widget", q)
        top = r.sources[0]
        assert top.collection == "code" and top.path == "src/widget/config.py"
        assert top.symbol in ("Renderer.draw", "Renderer", "parse_config")
        assert r.route["exact"]["code"], "the exact hit is reported in the route"
    await app.close()


@pytest.mark.asyncio
async def test_code_aware_lexical_search(sample) -> None:
    reader = await sample["app"].reader("widget")
    from core.lexical import query_terms

    for spelling in ("ParseConfig", "parse-config", "parse config"):
        rows = await reader.lexical("code", query_terms(spelling), 5)
        chunks = await reader.chunks("code", [rows[0][0]])
        assert "def parse_config" in chunks[rows[0][0]].text
    await sample["app"].close()


@pytest.mark.asyncio
async def test_issue_number_question_puts_that_issue_first(sample) -> None:
    app = sample["app"]
    await app.index("widget")
    r = await app.retrieve("widget", "what is issue #7 about?")
    assert r.sources[0].issue == 7
    assert r.route["signals"]["issues"] == [7]
    await app.close()


@pytest.mark.asyncio
async def test_issue_to_code_hop_cites_issue_and_code(sample) -> None:
    app = sample["app"]
    await app.index("widget")
    r = await app.retrieve("widget", "where is the bug from issue #42?")
    assert r.route["signals"]["issue_to_code"] is True
    assert r.sources[0].issue == 42
    code = [s for s in r.sources if s.collection == "code"]
    assert code and code[0].path == "src/widget/config.py"
    assert code[0].symbol == "parse_config"  # named in the issue's title and comment
    a = await app.ask("widget", "where is the bug from issue #42?")
    cited = {s.collection for s in a.sources}
    assert {"issues", "code"} <= cited
    await app.close()


@pytest.mark.asyncio
async def test_baseline_modes_run_on_the_same_index(sample) -> None:
    app = sample["app"]
    await app.index("widget")
    q = "themes change colours and fonts of every chart"
    for mode in ("dense", "bm25", "rrf", "full"):
        r = await app.retrieve("widget", q, mode=mode)
        assert r.sources and r.route["mode"] == mode
    # RRF across collections interleaves: the code collection gets a slot although nothing
    # there is about themes — the failure mode proportional allocation avoids.
    rrf = await app.retrieve("widget", q, mode="rrf")
    full = await app.retrieve("widget", q)
    assert rrf.slots.get("code", 0) >= 1
    assert full.slots.get("code", 0) == 0
    await app.close()


@pytest.mark.asyncio
async def test_who_calls_finds_the_call_sites(sample) -> None:
    from helpers import commit_all, write_files

    write_files(sample["repo"], {"src/widget/app.py": """
        from widget.config import parse_config


        def main(path):
            settings = parse_config(path)
            return settings["timeout"]
        """})  # fmt: skip
    commit_all(sample["repo"])
    app = sample["app"]
    await app.index("widget")
    r = await app.retrieve("widget", "who calls parse_config?")
    why = {e["why"] for e in r.route["exact"]["code"]}
    assert "calls parse_config" in why and "defines parse_config" in why
    paths = [s.path for s in r.sources if s.collection == "code"]
    assert "src/widget/app.py" in paths and "src/widget/config.py" in paths


@pytest.mark.asyncio
async def test_a_dotted_name_that_resolves_keeps_its_bare_last_part_out(sample) -> None:
    from helpers import commit_all, write_files

    write_files(sample["repo"], {"src/widget/shapes.py": """
        class Circle:
            def __init__(self, r):
                self.r = r


        class Square:
            def __init__(self, side):
                self.side = side


        class Meta(type):
            def __init__(cls, name, bases, ns):
                super().__init__(name, bases, ns)
        """})  # fmt: skip
    commit_all(sample["repo"])
    app = sample["app"]
    await app.index("widget")
    r = await app.retrieve("widget", "Fix incorrect super() call in Meta.__init__")
    assert "__init__" in r.route["signals"]["identifiers"]
    why = {e["why"] for e in r.route["exact"]["code"]}
    assert "defines Meta.__init__" in why
    assert not {"defines Circle.__init__", "defines Square.__init__"} & why
    # A dotted name that finds nothing still falls back to its last part.
    r = await app.retrieve("widget", "what does shape.__init__ store?")
    why = {e["why"] for e in r.route["exact"]["code"]}
    assert {"defines Circle.__init__", "defines Square.__init__"} <= why


def test_an_exact_hit_ranks_first_without_squashing_the_rest() -> None:
    from core.retrieve import Candidate, select

    code = [Candidate("code", 0, 0.88 + 0.15, 0.15)] + [
        Candidate("code", i, 0.88 - i * 0.005) for i in range(1, 6)
    ]
    docs = [Candidate("docs", i, 0.875 - i * 0.005) for i in range(4)]
    issues = [Candidate("issues", 0, 0.80)]
    chosen, slots = select({"code": code, "docs": docs, "issues": issues}, 6, 0.5)
    assert chosen[0].row == 0 and chosen[0].collection == "code"
    assert len(chosen) == 6 and slots["docs"] >= 1 and slots["issues"] == 0
    # Without the bonus taken out, the one exact hit would have been the only relevant chunk.
    from core.retrieve import allocate

    squashed = allocate({"code": [h.score for h in code], "docs": [h.score for h in docs]}, 6)
    assert squashed["docs"] == 0


@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("tests/test_cli.py", True), ("src/pkg/tests/helpers.py", True), ("test/a.c", True),
        ("pkg/conftest.py", True), ("web/__tests__/app.js", True), ("spec/model_spec.rb", True),
        ("src/util_test.go", True), ("src/app.test.ts", True), ("ui/button.spec.js", True),
        ("src/main/java/WidgetTest.java", True), ("Lib/ParserTests.cs", True),
        ("src/widget/config.py", False), ("core/testing_utils.py", False),
        ("src/contest.py", False), ("docs/testing.md", False), ("latest/x.py", False),
        ("src/Attest.java", False), ("app/tests.py", True), ("Tests/ParserTests.swift", True),
        ("e2e/login.cy.ts", True), ("numpy/testing/utils.py", False),
        ("docs/testing.md", False), ("src/latest_spec_parser.py", False), (None, False),
    ],
)  # fmt: skip
def test_test_code_is_recognised_by_path(path: str | None, is_test: bool) -> None:
    from core.models import is_test_path

    assert is_test_path(path) is is_test


@pytest.mark.asyncio
async def test_test_code_yields_to_the_code_it_tests_unless_tests_are_asked_about(
    sample,
) -> None:
    """A test that quotes the question's words must not outrank the code that answers it;
    a question about tests still gets the test first."""
    from helpers import commit_all, write_files

    write_files(sample["repo"], {"tests/test_config.py": '''
        from widget.config import parse_config


        def test_parse_config_reads_widget_toml_and_applies_the_timeout(tmp_path):
            """Read widget.toml and return a dict of settings with the timeout applied."""
            (tmp_path / "widget.toml").write_text("")
            assert parse_config(tmp_path / "widget.toml")["timeout"] == 30
        '''})  # fmt: skip
    commit_all(sample["repo"])
    app = sample["app"]
    await app.index("widget")
    question = "which settings does reading widget.toml return, with the timeout applied?"
    # the bag-of-words test embedder spreads scores far wider than e5 (where cosines of one
    # question span ~0.1 and the default 0.02 is enough), so the penalty is raised to match
    inst = app.instance("widget")
    inst.retrieval.test_penalty = 0.15
    inst.retrieval.test_candidates = True  # the penalty's own path: tests among the candidates

    def first_code(r) -> str | None:  # type: ignore[no-untyped-def]
        return next((s.path for s in r.sources if s.collection == "code"), None)

    def scores(r) -> dict[str | None, float]:  # type: ignore[no-untyped-def]
        return {s.path: s.score for s in r.sources}

    # The ordering, on the hybrid score the penalty was calibrated on.
    inst.retrieval.ranker = "hybrid"
    r = await app.retrieve("widget", question)
    assert r.route["signals"]["tests"] is False
    assert first_code(r) == "src/widget/config.py"
    penalised = scores(r)
    r = await app.retrieve("widget", question.replace("which", "which test checks"))
    assert r.route["signals"]["tests"] is True
    assert first_code(r) == "tests/test_config.py"
    # with the penalty off the test's extra matching words put it first, and the penalty is
    # exactly what moved it
    inst.retrieval.test_penalty = 0.0
    r = await app.retrieve("widget", question)
    assert first_code(r) == "tests/test_config.py"
    off = scores(r)
    assert off["tests/test_config.py"] - 0.15 == pytest.approx(penalised["tests/test_config.py"])
    assert off["src/widget/config.py"] == pytest.approx(penalised["src/widget/config.py"])
    # The learned ranker's scores are not cosines: the penalty moves a test by what raising its
    # cosine by that much would (the ranker's slope for cosine), and nothing else.
    from core.retrieve import Options
    from core.retrieve.rank import load
    from core.retrieve.search import candidates, rerank

    model = load()
    assert model is not None
    slope = model.slope(("cos", "cos_gap", "cos_gap_coll"))
    reader, svc = await app.reader("widget"), app.embedder("widget")
    inst.retrieval.test_penalty = 0.15
    opt = Options.of(inst.retrieval)  # test_penalty > 0: test code is flagged

    async def learned(penalty: float) -> dict[str | None, float]:
        pool = await candidates(reader, svc, question, opt, await app.kinds(svc))
        rerank(pool, model, penalty)
        return {c.chunk.path: c.score for c in pool.found.hits["code"] if c.chunk}

    off, on = await learned(0.0), await learned(0.15)
    assert off["tests/test_config.py"] - on["tests/test_config.py"] == pytest.approx(
        0.15 * slope, rel=1e-4
    )
    assert on["src/widget/config.py"] == pytest.approx(off["src/widget/config.py"])
    await app.close()


@pytest.mark.asyncio
async def test_test_files_are_no_candidates_unless_the_question_asks_for_them(sample) -> None:
    """By default (``retrieval.test_candidates: false``) a question that is not about tests has
    no test file among its candidates, however closely the tests quote it: the code lists are
    read deeper so the code they hide still comes. A question about tests, or one naming a test
    file by its path, gets it; ``test_candidates: true`` brings the (penalised) tests back."""
    from helpers import commit_all, write_files

    from core.models import is_test_path
    from core.retrieve import Options
    from core.retrieve.fusion import Candidate
    from core.retrieve.search import candidates

    quote = "which settings does reading widget.toml return, with the timeout applied"
    write_files(sample["repo"], {
        **{f"tests/test_config_{n}.py": f'def test_settings():\n    """{quote}"""\n'
           for n in "abcd"},
        **{f"tests/test_calls_{i}.py": f"def test_{i}():\n    parse_config('w{i}.toml')\n"
           for i in range(10)},
        "web/cli.py": "def main(path):\n    return parse_config(path)\n",  # after tests/
        "e2e/login.cy.ts": "export function visitSettings() {\n  cy.visit('/settings');\n}\n"
                           f"it('{quote}', () => visitSettings());\n"
                           + "".join(f"export function step{i}(a, b) {{\n  const x = a * {i};\n"
                                     f"  return cy.get('#s{i}').type(x + b);\n}}\n"
                                     for i in range(40))
                           + "export function visitLate() {\n  cy.visit('/late');\n}\n",
    })  # fmt: skip
    commit_all(sample["repo"])
    app = sample["app"]
    await app.index("widget")
    inst = app.instance("widget")
    assert inst.retrieval.test_candidates is False  # the default
    reader, svc = await app.reader("widget"), app.embedder("widget")

    async def hits(question: str) -> list[Candidate]:  # the code candidates
        pool = await candidates(reader, svc, question, Options.of(inst.retrieval),
                                await app.kinds(svc))  # fmt: skip
        return [c for c in pool.found.hits.get("code", []) if c.chunk and c.chunk.path]

    async def code(question: str) -> list[str]:
        return [c.chunk.path for c in await hits(question)]

    async def listed(question: str) -> list[str]:  # by the dense or lexical list (no graph)
        return [c.chunk.path for c in await hits(question)
                if c.dense_rank is not None or c.lex_rank is not None]  # fmt: skip

    question = "which settings does reading widget.toml return, with the timeout applied?"
    got = await code(question)
    assert "src/widget/config.py" in got and not any(is_test_path(p) for p in got)
    # the tests lead both lists: read only as deep as asked, the code would be lost
    inst.retrieval.test_candidates, inst.retrieval.candidates = True, 2
    assert all(is_test_path(p) for p in await listed(question))
    inst.retrieval.test_candidates = False
    assert await listed(question) == ["src/widget/config.py"]
    inst.retrieval.candidates = 20
    sources = (await app.retrieve("widget", question)).sources
    assert not any(s.collection == "code" and is_test_path(s.path) for s in sources)
    # asked about tests: the tests come back
    assert "tests/test_config_a.py" in await code(question.replace("which", "which test checks"))
    # a test file named by its path (no test word: the question is not "about tests")
    named = await code("what does e2e/login.cy.ts visit?")
    assert "e2e/login.cy.ts" in named and "tests/test_config_a.py" not in named
    # … also when the question names what the test file defines (found first as a definition)
    assert "e2e/login.cy.ts" in await code("what does visitSettings in e2e/login.cy.ts do?")
    assert "e2e/login.cy.ts" not in await code("what does visitSettings do?")
    # a definition far into the named test file: past the path's first chunks, still found
    late = [c for c in await hits("what does visitLate in e2e/login.cy.ts do?")
            if "visitLate()" in c.chunk.text]  # fmt: skip
    assert late and late[0].exact and late[0].chunk.start_line > 40
    # "who calls X?": the code's call sites first, then the tests'
    route = (await app.retrieve("widget", "who calls parse_config?")).route
    calls = [e["row"] for e in route["exact"]["code"] if str(e["why"]).startswith("calls")]
    rows = await reader.chunks("code", calls)
    callers = [rows[r].path for r in calls]
    assert callers[0] == "web/cli.py" and len(callers) > 1  # then the tests' (8 at most)
    # the switch: tests are candidates again, behind the penalty
    inst.retrieval.test_candidates = True
    assert "tests/test_config_a.py" in await code(question)


@pytest.mark.asyncio
async def test_a_named_constant_is_an_exact_hit(tmp_path, fake_embedder) -> None:
    """Module-level declarations join the symbol table: a question naming a constant, or a
    configuration object's function-valued key, gets the chunk that declares it first, and
    the route says it was an exact hit."""
    from tests.helpers import FakeApp, make_repo

    many = "".join(f"fn helper_{i}(x: usize) -> usize {{\n    x + {i}\n}}\n\n" for i in range(30))
    repo = tmp_path / "r"
    make_repo(repo, {
        "src/lib.rs": f"{many}const RECURSION_LIMIT: usize = if cfg!(windows) {{ 48 }}"
                      " else { 256 };\n",
        "lib/defaults.js": "const defaults = {\n  transformRequest: [function (data) {\n"
                           "    return JSON.stringify(data);\n  }],\n};\n"
                           "export default defaults;\n",
        "lib/other.js": "export function transform(x) {\n  return x;\n}\n",
    })  # fmt: skip
    inst = tmp_path / "instances"
    inst.mkdir()
    (inst / "r.yaml").write_text(f"repo: {{path: {repo}}}\n")
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder)
    try:
        await app.index("r")
        for q, path in (
            ("what is `RECURSION_LIMIT` on windows?", "src/lib.rs"),
            ("what does `defaults.transformRequest` do with data?", "lib/defaults.js"),
        ):
            r = await app.retrieve("r", q)
            top = r.sources[0]
            assert (top.collection, top.path) == ("code", path), q
            assert r.route["exact"]["code"], q
    finally:
        await app.close()
