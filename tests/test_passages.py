"""A source carries the further passages of its file that fit the question
(``retrieval.passages``): chosen in ``select``, shown on every face with their own lines and
links, quoted by the extractive answerer, given to a language model, counted by the eval."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import instance, make_repo

from core.models import Answer, Chunk, Passage, Source
from core.retrieve import Candidate

RETRY_DOCS = {
    "docs/retries.md": """
        # Retries

        ## Retry timeout

        The retry timeout bounds how long widget retries a failed upload before giving up.

        ## Retry timeout and backoff

        Each retry of a failed upload waits longer: the retry timeout caps the backoff at 30 s.
        """,
    "docs/uploads.md": """
        # Uploads

        ## Failed uploads

        A failed upload is retried until the retry timeout passes.
        """,
    "docs/other.md": "# Other\n\n## Colours\n\nThemes change colours of charts.\n",
}
QUESTION = "how long does widget retry a failed upload: the retry timeout?"


def cand(row: int, key: str, score: float, collection: str = "code") -> Candidate:
    """A ranked candidate: chunk ``row`` of file ``key``."""
    return Candidate(collection, row, score,  # type: ignore[arg-type]
                     chunk=Chunk(collection, key, "t", key, 1, path=key))  # type: ignore[arg-type]


def test_select_gives_a_chosen_chunk_the_next_relevant_ones_of_its_file() -> None:
    from core.retrieve import select

    def pool() -> dict[str, list[Candidate]]:
        return {"code": [cand(0, "a.py", 1.0), cand(1, "a.py", 0.9), cand(2, "b.py", 0.8),
                         cand(3, "a.py", 0.1), cand(4, "c.py", 0.0)]}  # fmt: skip

    chosen, _ = select(pool(), 3, 0.5, per_doc={"code": 1}, passages=2)  # type: ignore[arg-type]
    # One chunk per file: the third slot goes to the next file (as per_file 1 does) ...
    assert [c.row for c in chosen] == [0, 2, 4]
    # ... and a.py's 0.9 rides along as its passage: it clears the floor (the upper half of
    # this question's range, 0.0-1.0); its 0.1 does not.
    assert [p.row for p in chosen[0].passages] == [1]
    assert chosen[1].passages == chosen[2].passages == []
    # Passages from an earlier selection of the same candidates do not linger.
    again = pool()
    select(again, 3, 0.5, per_doc={"code": 1}, passages=2)  # type: ignore[arg-type]
    off, _ = select(again, 3, 0.5, per_doc={"code": 1})  # type: ignore[arg-type]
    assert [c.row for c in off] == [0, 2, 4] and all(not c.passages for c in off)


def test_more_slots_than_files_never_list_a_file_twice() -> None:
    """``_diverse`` fills spare slots with further chunks when no other file is left; with
    passages those become the file's passages (best first), not sources of their own."""
    from core.retrieve import select

    hits = {"docs": [cand(0, "a.md", 1.0, "docs"), cand(1, "a.md", 0.95, "docs"),
                     cand(2, "b.md", 0.9, "docs"), cand(3, "a.md", 0.85, "docs")]}  # fmt: skip
    chosen, _ = select(hits, 4, 0.0, per_doc={"docs": 1}, passages=1)  # type: ignore[arg-type]
    assert [c.row for c in chosen] == [0, 2]
    assert [p.row for p in chosen[0].passages] == [1] and chosen[1].passages == []


def test_the_first_source_carries_one_more_passage() -> None:
    """``first_passages``: the source read first (the best chosen candidate) carries up to that
    many passages, the others ``passages`` — in a spare slot's fold as in ``_attach``."""
    from core.retrieve import select

    def pool() -> dict[str, list[Candidate]]:
        return {"code": [cand(0, "a.py", 1.0), cand(1, "a.py", 0.95), cand(2, "a.py", 0.9),
                         cand(3, "b.py", 0.85), cand(4, "b.py", 0.8), cand(5, "b.py", 0.75),
                         cand(6, "c.py", 0.0)]}  # fmt: skip

    def pick(first: int | None, k: int = 3) -> list[Candidate]:
        chosen, _ = select(pool(), k, 0.5, per_doc={"code": 1}, passages=1,  # type: ignore[arg-type]
                           first_passages=first)  # fmt: skip
        return chosen

    one = pick(None)
    assert [c.row for c in one] == [0, 3, 6]
    assert [[p.row for p in c.passages] for c in one] == [[1], [4], []]
    two = pick(2)
    assert [c.row for c in two] == [0, 3, 6]  # the same sources, in the same order
    assert [[p.row for p in c.passages] for c in two] == [[1, 2], [4], []]
    # A file's further chunks that filled spare slots fold in under the same limits (``_fold``
    # on its own: in ``select`` ``_attach`` would take them back up to the limit anyway).
    from core.retrieve.fusion import _fold

    for most, want in (([1] * 5, [[1], [4]]), ([2] + [1] * 4, [[1, 2], [4]])):
        chosen = [cand(0, "a.py", 1.0), cand(1, "a.py", 0.95), cand(3, "b.py", 0.85),
                  cand(2, "a.py", 0.9), cand(4, "b.py", 0.8)]  # fmt: skip
        for c in chosen:
            c.passages = []
        out = _fold(chosen, most)
        assert [c.row for c in out] == [0, 3]
        assert [[p.row for p in c.passages] for c in out] == want


@pytest.mark.asyncio
async def test_first_source_passages_come_from_the_instance_config(tmp_path: Path) -> None:
    """``retrieval.passages_first`` reaches the selection (default: one more than
    ``passages``), and a value below ``passages`` is refused by name."""
    from core.config import load_instance
    from core.errors import ConfigError

    repo = tmp_path / "r"
    three = dict(RETRY_DOCS)
    three["docs/retries.md"] += (
        "\n        ## Retry timeout per attempt\n\n        Every retry attempt of a failed upload "
        "has its own retry timeout too.\n"
    )
    make_repo(repo, three)
    got = {}
    for name, extra in (("default", ""), ("one", ", passages_first: 1")):
        # thin_lines 0: the passages counted are the selection's (these sections are thin)
        settings = f"passages: 1, relevance_floor: 0.0, k: 3, thin_lines: 0{extra}"
        async with instance(tmp_path, repo, name, settings) as app:
            got[name] = await app.ask("w", QUESTION)
    first = got["default"].sources[0]
    assert first.path == "docs/retries.md" and len(first.passages) == 2
    assert all(len(s.passages) <= 1 for s in got["default"].sources[1:])
    assert len(got["one"].sources[0].passages) == 1
    assert [s.path for s in got["one"].sources] == [s.path for s in got["default"].sources]
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"repo: {{path: {repo}}}\nretrieval: {{passages: 2, passages_first: 1}}\n")
    with pytest.raises(ConfigError) as e:
        load_instance(bad)
    assert str(bad) in str(e.value) and "retrieval.passages_first" in str(e.value)
    assert "must be at least passages (2)" in str(e.value) and "got 1" in str(e.value)
    bad.write_text(f"repo: {{path: {repo}}}\nretrieval: {{passages: 0, passages_first: 2}}\n")
    with pytest.raises(ConfigError, match=r"retrieval\.passages_first: .*needs passages of at "
                                          r"least 1"):  # fmt: skip
        load_instance(bad)


@pytest.mark.asyncio
async def test_one_source_per_file_with_its_passage_shown_quoted_and_in_json(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "r"
    make_repo(repo, RETRY_DOCS)
    got = {}
    for n in (1, 0):
        settings = f"passages: {n}, relevance_floor: 0.0, k: 3"
        async with instance(tmp_path, repo, str(n), settings) as app:
            got[n] = await app.ask("w", QUESTION)
    off, on = got[0], got[1]
    assert [s.path for s in off.sources].count("docs/retries.md") == 2
    retries = [s for s in on.sources if s.path == "docs/retries.md"]
    assert len(retries) == 1 and len({s.path for s in on.sources}) == len(on.sources)
    [p] = retries[0].passages
    assert p.title.endswith("Retry timeout and backoff") and "caps the backoff" in p.text
    assert p.url.endswith(f"#L{p.start_line}-L{p.end_line}")
    # The answer quotes the passage under its source's number, named by its heading and lines.
    n = retries[0].n
    lines = on.text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("• ") and ln.endswith(f"[{n}]"))
    # ... on its own line under the source's bullet, cited like it.
    under = lines[at + 1]
    assert under.startswith(f"  ↳ Retry timeout and backoff (lines {p.lines()}): ")
    assert under.endswith(f" [{n}]") and "30 s" in under and "30 s" not in lines[at]
    route = on.route["sources"][n - 1]
    assert len(route["passages"]) == 1 and "passages" not in off.route["sources"][0]
    js = on.to_json()["sources"][n - 1]
    assert js["passages"][0]["url"] == p.url and "passages" not in off.to_json()["sources"][0]
    assert on.to_json()["evidence"]["chars"] > sum(len(s.text) for s in on.sources)


UPLOAD_CODE = {
    "src/upload.py": """
        def upload_with_retry(path, retry_timeout=30):
            \"\"\"Upload a file, retrying a failed upload until the retry timeout passes.\"\"\"
            return _retry(lambda: _send(path), retry_timeout)


        def _retry(call, retry_timeout):
            \"\"\"Call again after a failed upload while the retry timeout has not passed.\"\"\"
            return call()


        def _send(path):
            \"\"\"Send one upload; a failed upload raises UploadError with the retry timeout.\"\"\"
            raise UploadError(path)
        """,
    "src/colours.py": """
        def theme_colours(name):
            \"\"\"The colours of a chart theme.\"\"\"
            return {"dark": "#000"}.get(name)
        """,
}
UPLOAD_ISSUE = {
    "number": 5, "title": "upload_with_retry ignores retry_timeout after a failed upload",
    "body": "A failed upload in upload_with_retry is retried forever: retry_timeout is ignored "
            "by _retry.",
    "state": "OPEN", "labels": [{"name": "bug"}], "comments": [],
    "url": "https://github.com/acme/w/issues/5",
    "createdAt": "2024-01-01T00:00:00Z", "closedAt": None,
}  # fmt: skip


@pytest.mark.asyncio
async def test_the_issue_to_code_hop_lists_each_file_once_with_its_passages(
    tmp_path: Path,
) -> None:
    """"Where is the bug from issue #5?": the issue, then the code it points at chosen as a bug
    report's code is — each file once — its further chunks riding along as passages."""
    import json

    repo = tmp_path / "r"
    make_repo(repo, UPLOAD_CODE)
    (tmp_path / "issues.json").write_text(json.dumps([UPLOAD_ISSUE]))
    got = {}
    issues = f"issues: {{file: {tmp_path / 'issues.json'}}}\n"
    for n in (1, 0):
        settings = f"passages: {n}, relevance_floor: 0.0, k: 4, thin_lines: 0"  # as above
        async with instance(tmp_path, repo, str(n), settings, issues) as app:
            got[n] = await app.retrieve("w", "where is the bug from issue #5?")
            # An issue that is not indexed: the question is answered as asked (no issue
            # first), chosen as any question's sources are.
            got[n + 10] = await app.retrieve("w", "where is the bug from issue #99 in _retry?")
    # ... chosen by the ordinary selection: with passages each file once, carrying its further
    # chunks (the old fallback took neither the per-file limit nor passages).
    asked = got[11].sources
    code = [s.path for s in asked if s.collection == "code"]
    assert code and len(set(code)) == len(code) and any(s.passages for s in asked)
    got = {n: r for n, r in got.items() if n < 10}
    for r in got.values():
        assert r.route["signals"]["issue_to_code"] is True and r.sources[0].issue == 5
    code = [s.path for s in got[1].sources if s.collection == "code"]
    assert code[0] == "src/upload.py" and len(set(code)) == len(code)  # each file once
    on = [s for s in got[1].sources if s.path == "src/upload.py"]
    assert len(on) == 1 and len(on[0].passages) == 2  # the first code source: one more
    assert {on[0].symbol, *(p.symbol for p in on[0].passages)} == {
        "upload_with_retry", "_retry", "_send"}  # fmt: skip
    assert all(not s.passages for s in got[0].sources)
    # Answered as a bug report is: every code file stays cited (no drop by quote likeness).
    assert got[1].route.get("localize") is True


def _answer() -> Answer:
    p = Passage("f", "https://h/a.py#L10-L12", "def f():\n    return 42", 10, 12, "f")
    src = Source("code", "a.py", "https://h/a.py#L1-L3", "x = 1", 1.0, path="a.py",
                 start_line=1, end_line=3, symbol="x", n=1, passages=[p])  # fmt: skip
    return Answer(text="See [1].", sources=[src])


def test_every_face_shows_a_passage_with_its_lines_and_link() -> None:
    from bot.discord_render import answer_messages
    from bot.openapi import document
    from bot.settings import ServeConfig
    from bot.slack_blocks import source_lines
    from core.cli.render import render_sources

    a = _answer()
    cli = render_sources(a.sources)
    assert "    + a.py:10-12 — f\n      https://h/a.py#L10-L12" in cli
    assert source_lines(a)[1] == "      ↳ <https://h/a.py#L10-L12|a.py:10-12> f"
    [msg] = answer_messages(a)
    assert "↳ [a.py:10-12](https://h/a.py#L10-L12) f" in msg.embeds[0].description
    schema = document(ServeConfig())["components"]["schemas"]["Source"]
    assert set(schema["properties"]["passages"]["items"]["properties"]) == {
        "title", "start_line", "end_line", "url", "text"}  # fmt: skip


def test_a_model_and_the_fact_score_see_the_passages() -> None:
    from core.answer.prompt import build_context
    from core.eval.metrics import facts_found

    a = _answer()
    ctx = build_context("what does f return?", a.sources)
    assert "[… lines 10-12 · f]\ndef f():\n    return 42" in ctx.messages[-1]["content"]
    assert ctx.evidence[0].passages == [] and "return 42" in ctx.evidence[0].text
    assert facts_found(["return 42"], a) == 1.0
    assert facts_found(["return 42"], a, quoted=True) == 0.0


def test_the_judge_the_record_and_a_spanish_answer_treat_passages_right() -> None:
    from core.answer.citations import passage_name, snapshot
    from core.store.conversations import source_record

    a = _answer()
    [ev] = snapshot(a.sources)  # what a judge checks the answer against
    assert "return 42" in ev.text and ev.passages == [] and a.sources[0].passages
    rec = source_record(a)  # a thread's record keeps where sources point, not their text
    assert "return 42" not in rec and "a.py#L10-L12" in rec
    src = a.sources[0]
    assert passage_name(src, "f", "f", "10-12", "es") == "f (líneas 10-12)"
    assert passage_name(src, "f", "f", "10-12") == "f (lines 10-12)"
    thread = Source("issues", "#4 Slow", "https://h/i/4", "t", 1.0, issue=4)
    assert passage_name(thread, "#4 Slow", None, "#4 Slow", "es") == "más adelante en el hilo"


@pytest.mark.asyncio
async def test_a_source_with_nothing_to_quote_gets_no_empty_bullet() -> None:
    from core.answer.extractive import ExtractiveAnswerer
    from core.models import Retrieval

    # Its own chunk offers nothing to quote, its passage nothing that meets the question.
    colours = Passage(
        "Other › Colours",
        "o.md:5-6 @ abc",
        "o.md › Other › Colours\nThemes change colours of charts.",
        5,
        6,
    )
    bare = Source("docs", "Other › Fence", "o.md:1-3 @ abc", "o.md › Other › Fence\n```\n```",
                  0.9, path="o.md", start_line=1, end_line=3, passages=[colours])  # fmt: skip
    good = Source("docs", "Retries", "r.md:1-2 @ abc", "r.md › Retries\nThe retry timeout is 30 s.",
                  1.0, path="r.md", start_line=1, end_line=2)  # fmt: skip
    a = await ExtractiveAnswerer().answer("what is the retry timeout?", Retrieval([good, bare]))
    assert "Fence" not in a.text and ": [" not in a.text and [s.path for s in a.sources] == ["r.md"]
