"""A thin piece brings what follows it (``retrieval.thin_lines``, core/retrieve/thin.py): a shown
chunk of a few lines — a heading's one-sentence intro, a one-line type alias above the function
that uses it — is shown with the chunk that starts right after it in its file; and the first
source's own chunk reads on likewise, whatever its length (``retrieval.read_on_first``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import FakeApp, instance, make_repo, open_live

from core.models import Chunk, Passage, Source
from core.retrieve.thin import follow_thin

DOCS = {
    "docs/recipes.md": """# Recipes

## Recipes available everywhere

If you want recipes available everywhere, you have a few options.

### Global file

Put them in `~/.config/widget/global` and pass `--global-file`.

## Colours

Themes change the colours of charts and tables in the report.
""",
    "docs/install.md": "# Install\n\n## From source\n\nBuild widget with make and install it.\n",
}
QUESTION = "How do I make my recipes available everywhere?"

CODE = {
    "timing.py": '''"""Timing helpers."""
from datetime import timedelta

time_unit = int | float | timedelta


def to_seconds(value: time_unit) -> float:
    """Seconds in a number or a timedelta."""
    return float(value.total_seconds() if isinstance(value, timedelta) else value)


def later(value: time_unit) -> float:
    """Seconds plus one: an unrelated helper further down."""
    return to_seconds(value) + 1.0
''',
}


def _long(name: str) -> str:
    body = "".join(f"    out.append(n + {i})\n" for i in range(11))
    return f"def {name}(n: int) -> list[int]:\n    out = []\n{body}    return out\n"


LONG = (_long("steps") + "\n\ndef after_steps() -> int:\n    return 1\n\n\n"
        + _long("more_steps") + "\n\ndef after_more() -> int:\n    return 2\n")


def source(c: Chunk) -> Source:
    return Source(collection=c.collection, title=c.title, url=c.url, text=c.text, score=1.0,
                  path=c.path, start_line=c.start_line, end_line=c.end_line, symbol=c.symbol,
                  chunk_id=c.id, repo=c.repo)  # fmt: skip


@pytest.mark.asyncio
async def test_a_headings_intro_shows_the_subsection_after_it(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    make_repo(repo, DOCS)
    got = {}
    for name, settings in (("on", ""), ("off", "thin_lines: 0")):
        async with instance(tmp_path, repo, name, settings) as app:
            got[name] = await app.ask("w", QUESTION)
    on, off = got["on"], got["off"]
    first = on.sources[0]
    # The intro (three lines) answers nothing by itself; where to put the file is in the
    # subsection right after it, which shares no word with the question.
    assert first.title.endswith("Recipes available everywhere")
    assert first.end_line is not None and first.start_line is not None
    assert first.end_line - first.start_line + 1 < 12
    [p] = [p for p in first.passages if p.title.endswith("Global file")]
    assert "--global-file" in p.text and p.start_line is not None
    assert first.end_line < p.start_line <= first.end_line + 4
    # the route says why it is shown: the row of the chunk it brought
    reader = await open_live(tmp_path / "data-on", "w")
    try:
        [row] = on.route["sources"][0]["follows_thin"]
        assert (await reader.chunks("docs", [row]))[row].id == p.chunk_id
    finally:
        await reader.close()
    # off: nothing shows it
    assert off.sources[0].title == first.title
    assert not any("--global-file" in t for s in off.sources for t in s.texts())
    assert "follows_thin" not in off.route["sources"][0]


def far(blank: int) -> str:
    """A one-line alias, ``blank`` blank lines, then the function that uses it."""
    return "limit = int | float\n" + "\n" * blank + "def clamp(value: limit) -> float:\n" \
        "    return float(min(value, 10))\n"


@pytest.mark.asyncio
async def test_a_type_alias_shows_the_function_below_it_and_nothing_twice(
    tmp_path: Path,
) -> None:
    files = {**CODE, "gap3.py": far(3), "gap4.py": far(4), "long.py": LONG}
    for name in ("a", "b"):
        # the other repository has a timing.py of its own, whose function starts a line earlier
        make_repo(tmp_path / name, files if name == "a" else {
            "timing.py": "x = 1\ny = 2\nz = 3\nw = 4\n\ndef other_repo() -> int:\n"
                         "    return 2\n"})  # fmt: skip
    inst = tmp_path / "instances"
    inst.mkdir()
    (inst / "w.yaml").write_text(
        "repos:\n"
        f"  - {{name: alias, path: {tmp_path / 'a'}, web_url: 'https://github.com/acme/a'}}\n"
        f"  - {{name: other, path: {tmp_path / 'b'}, web_url: 'https://github.com/acme/b'}}\n"
    )
    app = FakeApp(inst, tmp_path / "data")
    try:
        await app.index("w")
    finally:
        await app.close()
    reader = await open_live(tmp_path / "data", "w")

    async def file_chunks(path: str) -> list[Chunk]:
        got = await reader.chunks("code", await reader.path_rows("code", path))
        return [c for c in got.values() if c.path == path]

    try:
        rows = await reader.path_rows("code", "timing.py")
        chunks = await reader.chunks("code", rows)
        assert {c.repo for c in chunks.values()} == {"alias", "other"}  # the same path twice
        mine = sorted((c for c in chunks.values() if c.repo == "alias"),
                      key=lambda c: c.start_line or 0)  # fmt: skip
        alias = next(c for c in mine if "time_unit = int" in c.text)
        fn = next(c for c in mine if c.symbol and c.symbol.endswith("to_seconds"))
        later = next(c for c in mine if c.symbol and c.symbol.endswith("later"))
        other = next(c for c in chunks.values() if c.repo == "other" and c.symbol)
        assert alias.end_line == 4 and fn.start_line == 7 and other.start_line == 6
        row = {c.id: r for r, c in chunks.items()}
        [out], added = await follow_thin(reader, [source(alias)], 12)
        assert [p.chunk_id for p in out.passages] == [fn.id] and added == {0: [row[fn.id]]}
        assert "def to_seconds" in out.passages[0].text
        # A piece of 12 lines or more is not thin; 0 turns it off.
        [same], none = await follow_thin(reader, [source(alias)], 1)
        assert same.passages == [] and none == {}
        assert (await follow_thin(reader, [source(alias)], 0))[0][0].passages == []
        # The function shown already (as another source) is not shown again, and nothing else
        # takes its place; the function itself is thin here (4 lines) and brings `later`.
        both, added = await follow_thin(reader, [source(alias), source(fn)], 12)
        assert both[0].passages == [] and [p.chunk_id for p in both[1].passages] == [later.id]
        assert added == {1: [row[later.id]]}
        # A thin passage brings its follower too, right after it.
        host = replace(source(later), passages=[Passage.of(alias)])
        [got], _ = await follow_thin(reader, [replace(host, start_line=1, end_line=40)], 12)
        assert [p.chunk_id for p in got.passages] == [alias.id, fn.id]
        # At most three blank lines between: gap3.py's function follows its alias, gap4.py's not.
        for path, want in (("gap3.py", True), ("gap4.py", False)):
            head = next(c for c in await file_chunks(path) if "limit = int" in c.text)
            [src], _ = await follow_thin(reader, [source(head)], 12)
            assert [p.symbol for p in src.passages] == (["clamp"] if want else []), path
        # read_on_first: the first source's own chunk reads on whatever its length; its
        # passages and the other sources' pieces only when thin.
        long = {c.symbol: c for c in await file_chunks("long.py")}
        one, two = long["steps"], long["more_steps"]
        assert all((c.end_line or 0) - (c.start_line or 0) + 1 >= 12 for c in (one, two))
        [first, second], _ = await follow_thin(reader, [source(one), source(two)], 12,
                                               first_on=True)  # fmt: skip
        assert [p.symbol for p in first.passages] == ["after_steps"] and second.passages == []
        assert (await follow_thin(reader, [source(one)], 12))[0][0].passages == []
        host = replace(source(two), passages=[Passage.of(one)])
        [got], _ = await follow_thin(reader, [host], 12, first_on=True)
        # the source's own follower right after it, then its (long) passage, which does not read on
        assert [p.chunk_id for p in got.passages] == [long["after_more"].id, one.id]
        # An issue thread is left as it is.
        issue = replace(source(alias), collection="issues", issue=7)
        assert (await follow_thin(reader, [issue], 12))[0][0].passages == []
    finally:
        await reader.close()


LONG_DOCS = {
    "docs/upload.md": "# Upload\n\n## Upload retries\n\n" + "".join(
        f"Upload retries step {i}: a failed upload retries with backoff.\n\n" for i in range(8)
    ) + "## Limits\n\nThe ceiling is `MAX_WAIT = 90` seconds.\n",
    "docs/other.md": "# Other\n\n## Colours\n\nThemes change colours of charts.\n",
}


@pytest.mark.asyncio
async def test_the_first_source_reads_on_from_the_instance_config(tmp_path: Path) -> None:
    """``read_on_first`` (default on) reaches retrieval: a long first source carries the section
    after it; with it off, or with ``thin_lines: 0`` (both off), it does not."""
    repo = tmp_path / "r"
    make_repo(repo, LONG_DOCS)
    got = {}
    for name, settings in (("on", ""), ("off", "read_on_first: false"), ("none", "thin_lines: 0")):
        async with instance(tmp_path, repo, name, settings) as app:
            got[name] = await app.ask("w", "How do upload retries step with backoff?")
    first = got["on"].sources[0]
    assert first.title.endswith("Upload retries")
    assert (first.end_line or 0) - (first.start_line or 0) + 1 >= 12  # not thin
    assert any("MAX_WAIT" in p.text for p in first.passages)
    assert "follows_thin" in got["on"].route["sources"][0]
    for name in ("off", "none"):
        src = got[name].sources[0]
        assert src.title == first.title and not any("MAX_WAIT" in t for t in src.texts())
        assert "follows_thin" not in got[name].route["sources"][0]
