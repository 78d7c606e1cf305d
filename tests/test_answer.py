from __future__ import annotations

import re

import numpy as np
import pytest

from core.answer.citations import finalize_citations
from core.answer.extractive import ExtractiveAnswerer
from core.cli.render import render_answer
from core.lexical import terms
from core.models import Retrieval, Source, markers


def src(i: int, coll: str = "docs", text: str = "h\nBody.", path: str | None = None) -> Source:
    return Source(collection=coll, title=f"T{i}", url=f"u{i}", text=text, score=1 - i / 10,
                  path=path or f"p{i}.md", start_line=1, end_line=2)  # type: ignore[arg-type]  # fmt: skip


def test_renumbered_by_first_use_bad_markers_and_uncited_dropped() -> None:
    sources = [src(0), src(1), src(2), src(3)]
    text, kept, rep = finalize_citations("A [3]. B [1] [3]. C [9]. D [0].", sources)
    assert text == "A [1]. B [2] [1]. C. D."
    assert [s.url for s in kept] == ["u2", "u0"]
    assert [s.n for s in kept] == [1, 2]
    assert rep.dropped_markers == 2 and rep.dropped_sources == 2


def test_terms_split_identifiers_and_drop_stop_words() -> None:
    assert terms("How does parse_config use parseConfig?") == [
        "parse_config", "parse", "config", "parseconfig", "parse", "config"
    ]  # fmt: skip
    assert "cómo" not in terms("¿Cómo configuro el timeout?")


@pytest.mark.asyncio
async def test_extractive_answer_quotes_and_cites_every_listed_source() -> None:
    sources = [
        src(0, text="a.md › Config\nThe timeout option sets the limit. Colours are blue."),
        src(1, "issues", "#4 Hang\nIssue · open\n\nRequests hang when the timeout is zero."),
        src(2, "code", 'x.py › load\ndef load(path):\n    """Load settings from path."""\n'),
    ]
    a = await ExtractiveAnswerer().answer("what does the timeout option do?", Retrieval(sources))
    markers = [int(m) for m in re.findall(r"\[(\d+)\]", a.text)]
    assert sorted(set(markers)) == list(range(1, len(a.sources) + 1))
    assert "The timeout option sets the limit. [1]" in a.text
    assert "Colours are blue" not in a.text
    assert "Requests hang when the timeout is zero. [2]" in a.text
    assert "`def load(path)`" in a.text
    out = render_answer(a)
    assert "Sources:\n[1] p0.md:1-2" in out


@pytest.mark.asyncio
async def test_no_sources_says_so() -> None:
    a = await ExtractiveAnswerer().answer("anything", Retrieval([]))
    assert a.sources == [] and "found nothing" in a.text


def test_markers_inside_code_are_not_citations() -> None:
    sources = [src(0), src(1)]
    text, kept, rep = finalize_citations(
        "Read `sys.argv[1]` and ```\nxs[2]\n``` here [2].", sources
    )
    assert text == "Read `sys.argv[1]` and ```\nxs[2]\n``` here [1]."
    assert [s.url for s in kept] == ["u1"] and rep.dropped_markers == 0


@pytest.mark.asyncio
async def test_quoted_brackets_never_become_citations() -> None:
    sources = [src(0, text="a.md › Intro\nAnswers cite numbered sources like [3] and [2].")]
    a = await ExtractiveAnswerer().answer("how do answers cite sources?", Retrieval(sources))
    assert "like ［3］ and ［2］. [1]" in a.text
    assert len(a.sources) == 1


@pytest.mark.asyncio
async def test_an_index_in_quoted_code_is_kept_as_written() -> None:
    """In a code span "[1]" is an index (Go's `%[1]q`, `args[1]`): quoted as the source has it,
    and every reader of citation markers skips it (the support check, Slack's links, the web
    page: tests/test_web.py)."""
    body = 'func run(args []string) {\n\tname := args[1]\n\tfmt.Printf("%[1]q", name)\n}\n'
    code = src(0, "code", "cli.go › run\n" + body)
    code.path, code.symbol = "cli.go", "run"
    a = await ExtractiveAnswerer().answer("which of the args is the name?", Retrieval([code]))
    assert "`name := args[1]`" in a.text and "［" not in a.text
    assert markers(a.text) == [1] and len(a.sources) == 1
    prose = src(0, text="a.md › Intro\nCall `argv[1]` as in [2].")
    b = await ExtractiveAnswerer().answer("what is argv?", Retrieval([prose]))
    assert "Call `argv[1]` as in ［2］. [1]" in b.text  # outside code, still never a citation


@pytest.mark.asyncio
async def test_a_method_is_quoted_by_its_own_signature_with_its_return_type() -> None:
    """A method's chunk opens with its class's header (context for the embedder); the answer
    quotes the method's definition — a long one keeps its end, the return type."""
    text = (
        "httpx/_client.py › Client.send\nclass Client(BaseClient):\n    def send(\n"
        "        self,\n        request: Request,\n        *,\n        stream: bool = False,\n"
        "        auth: AuthTypes | UseClientDefault | None = USE_CLIENT_DEFAULT,\n"
        "        follow_redirects: bool | UseClientDefault = USE_CLIENT_DEFAULT,\n"
        "    ) -> Response:\n"
        '        """\n        Send a request.\n        """\n        return self._send(request)\n'
    )
    s = src(0, "code", text)
    s.symbol = "Client.send"
    a = await ExtractiveAnswerer().answer("what does Client.send return?", Retrieval([s]))
    quoted, *lines = re.findall(r"`([^`]*)`", a.text)
    # the definition first; then the line that answers, when one shares the question's words
    assert lines == ["return self._send(request)"]
    assert quoted.startswith("def send(self, request: Request,") and "class Client" not in quoted
    assert quoted.endswith(") -> Response") and len(quoted) <= 200
    assert "Send a request. `return self._send(request)` [1]" in a.text
    # without a symbol (or one not found) the first definition is quoted, as before
    s.symbol = None
    a = await ExtractiveAnswerer().answer("what does Client.send return?", Retrieval([s]))
    assert "`class Client(BaseClient)`" in a.text


def test_a_signature_is_joined_over_its_brackets_only() -> None:
    from core.answer.quotable import code_quotes

    js = "export const DEFAULTS = [\n  'alpha',\n  'beta',\n];\n\nfunction run(x) {\n  f(x);\n}\n"
    assert code_quotes(js)[0] == "`export const DEFAULTS = [ 'alpha', 'beta', ];`"
    py = "def f(x): return x\n\n\nclass A:\n    pass\n"
    assert code_quotes(py)[0] == "`def f(x): return x`"
    long = "def g(\n" + "".join(f"    arg{i}: int = {i},\n" for i in range(15)) + ") -> Widget:\n"
    quoted = code_quotes(long)[0]
    assert quoted.startswith("`def g(arg0: int = 0,") and quoted.endswith("… ) -> Widget`")


@pytest.mark.asyncio
async def test_a_far_less_similar_source_is_dropped_except_for_a_bug_report() -> None:
    async def similarity(queries: list[str], texts: list[str]) -> np.ndarray:
        # what the embedder would say: the quotes about timeouts answer, the others do not
        return np.array([[0.9 if "timeout" in t else 0.5 for t in texts]])

    sources = [
        src(1, "code", "client.py › connect\ndef connect(timeout):\n    raise TimeoutError()\n"),
        src(2, "code", "pool.py › acquire\ndef acquire(size):\n    return size\n"),
    ]
    answerer = ExtractiveAnswerer(similarity=similarity)
    asked = "connect hangs forever and never raises"
    plain = await answerer.answer(asked, Retrieval(sources))
    assert [s.title for s in plain.sources] == ["T1"]  # pool.py's best quote answers far less
    bug = await answerer.answer(asked, Retrieval(sources, route={"localize": True}))
    assert [s.title for s in bug.sources] == ["T1", "T2"]  # a bug report keeps its candidate files
    assert "[2]" in bug.text


@pytest.mark.asyncio
async def test_a_docs_section_that_is_one_code_block_is_quoted_by_its_comments_and_lines() -> None:
    """An options object in a fenced block (axios's README "Request Config") has no prose
    outside the block: its comments and code lines are what answers, and the section was the
    best source — it used to offer nothing to quote and vanished from the answer."""
    config = (
        "README.md › Request Config\n```js\n{\n  // `url` is the server URL used for the request\n"
        "  url: '/user',\n\n  // `baseURL` will be prepended to `url` unless `url` is absolute\n"
        "  // and option `allowAbsoluteUrls` is set to true.\n"
        "  baseURL: 'https://some-domain.com/api/',\n}\n```\n"
    )
    table = "docs/settings.md › Options\n| Option | Default |\n|---|---|\n| `--port` | 8000 |\n"
    sources = [src(0, text=config), src(1, text=table)]
    a = await ExtractiveAnswerer().answer(
        "can a full URL bypass the baseURL? which option controls absolute URLs?",
        Retrieval(sources),
    )
    assert a.sources and a.sources[0].title == "T0"
    said = "`baseURL` will be prepended to `url` unless `url` is absolute and option "
    assert said + "`allowAbsoluteUrls` is set to true." in a.text
    assert "```" not in a.text
    answerer = ExtractiveAnswerer()
    port = await answerer.answer("what is the default --port?", Retrieval([src(1, text=table)]))
    assert "| `--port` | 8000 |" in port.text and "|---|" not in port.text
    empty = src(2, text="a.md › Widgets\n```\nok\n```\n")
    bare = await answerer.answer("anything about widgets", Retrieval([empty]))
    assert [s.title for s in bare.sources] == ["T2"] and "ok" in bare.text  # its first line


@pytest.mark.asyncio
async def test_the_first_source_gets_one_more_quote_and_code_two_answer_lines() -> None:
    """The first source (retrieval's surest) is quoted by three sentences, the next by two; a
    code source by its definition, its docstring and the two lines that answer best — a second
    line is where the identifier asked about often sits (PLAN-s40, QC and QF)."""

    async def similarity(queries: list[str], texts: list[str]) -> np.ndarray:
        return np.array([[0.9 if "timeout" in t.lower() else 0.5 for t in texts]])

    def prose(i: int) -> Source:
        body = " ".join(f"The timeout rule number {n} of page {i} applies." for n in range(4))
        return src(i, text=f"p{i}.md › Timeouts\n{body}\n")

    code = src(
        2,
        "code",
        (
            'client.py › connect\ndef connect(host):\n    """Open a connection."""\n'
            "    timeout = settings.CONNECT_TIMEOUT\n    retries = 3\n"
            "    raise TimeoutError(f'gave up after {timeout}s')\n"
        ),
    )
    a = await ExtractiveAnswerer(similarity=similarity).answer(
        "what is the connect timeout?", Retrieval([prose(0), prose(1), code])
    )
    lines = a.text.splitlines()[1:]
    assert [ln.count("The timeout rule") for ln in lines[:2]] == [3, 2]
    assert "`def connect(host)` Open a connection." in lines[2]
    assert "`timeout = settings.CONNECT_TIMEOUT`" in lines[2]
    assert "`raise TimeoutError(f'gave up after {timeout}s')`" in lines[2]
    assert "retries = 3" not in lines[2]


def test_quoted_restructuredtext_backticks_never_hide_a_citation() -> None:
    """A quote of reStructuredText wrapped in the answer's own backticks begins "```exc_info``":
    read as a fence it ran to the next such quote and took the citation between them with it
    (a source silently dropped from a structlog answer)."""
    sources = [src(0), src(1)]
    text = (
        "• a.py: ```exc_info`` is passed on.` `for kw in NAMES` [1]\n"
        "• b.py: ```exc_info`` field into the ``exception`` field.` [2]"
    )
    out, kept, rep = finalize_citations(text, sources)
    assert [s.url for s in kept] == ["u0", "u1"] and rep.dropped_sources == 0
    assert out.endswith("[2]") and "NAMES` [1]" in out


@pytest.mark.asyncio
async def test_a_code_line_with_backticks_of_its_own_is_not_wrapped_again() -> None:
    """reStructuredText in a docstring line, a template literal: wrapped in the answer's own
    backticks they read "```exc_info``", which chat clients take for a code block."""
    code = src(
        0,
        "code",
        (
            "log.py › render\ndef render(event):\n    x = 1\n"
            "    ``exc_info`` and ``stack_info`` are passed as kwargs\n"
            "    url = `${base}/render`\n"
        ),
    )
    a = await ExtractiveAnswerer().answer("how are exc_info and stack_info passed to render?",
                                          Retrieval([code]))  # fmt: skip
    assert "``exc_info`` and ``stack_info`` are passed as kwargs" in a.text
    assert "```" not in a.text and "`def render(event)`" in a.text
    # a sentence that begins and ends with code spans is prose, shown as written
    docs = src(1, text="api.md › Render\nThe hook:\n\n`render` returns `None`\n")
    b = await ExtractiveAnswerer().answer("what does render return?", Retrieval([docs]))
    assert "`render` returns `None` [1]" in b.text


def test_rust_doc_comments_are_quoted_without_their_slashes() -> None:
    from core.answer.quotable import code_quotes

    rs = "/// What theme should `bat` use?\n///\n/// The easiest way.\npub enum Theme {}\n"
    assert code_quotes(rs)[1:] == ["What theme should `bat` use?", "The easiest way."]
    inner = "//! `bat` is a library.\npub mod assets;\n"
    assert code_quotes(inner) == ["`pub mod assets;`", "`bat` is a library."]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Using fd with `fzf", "Using fd with `fzf`"),  # a heading's closing cut off
        ("bat` as a library", "`bat` as a library"),  # its opening cut off
        ("var Help = `NAME:", "var Help = `NAME:`"),  # a Go raw string opened on this line
        ("set the `Retry-After header and the …", "set the `Retry-After header and the` …"),
        ("set the `Retry-After …", "set the `Retry-After` …"),
        ("addHelpText('after', ` …", "addHelpText('after', …"),  # the clip kept only a backtick
        ("`MaybeEncodingError... when `x`", "`MaybeEncodingError...` when `x`"),
        ("`a` and `b`", "`a` and `b`"),  # already paired: as written
        ("no code at all", "no code at all"),
    ],
)
def test_code_spans_are_paired_within_a_quote(text: str, shown: str) -> None:
    from core.answer.markup import balance_ticks

    assert balance_ticks(text) == shown


@pytest.mark.asyncio
async def test_a_quoted_line_never_leaves_a_code_span_open() -> None:
    """A span the sentence splitter cut in two is whole again when both halves are quoted side
    by side; a title with one backtick too few and reStructuredText's ``literal`` are shown as
    spans that close (an open one ran on through the citation into the next source's line)."""
    issue = src(
        0,
        "issues",
        "#7 Completion fails with `Unsupported use\nRunning `completion fish` "
        "fails: `Unsupported use of '='. In fish, please use 'set x'.` points at a line.",
    )
    issue.title = "#7 Completion fails with `Unsupported use"
    rst = src(1, text="api.rst › API\nThe ``exc_info`` key is rendered by ``format_exc_info``.")
    a = await ExtractiveAnswerer(per_source=3).answer(
        "why does fish completion fail with Unsupported use of '='?", Retrieval([issue, rst])
    )
    lines = a.text.split("\n")[1:]
    assert all(len(re.findall(r"(?<!`)`(?!`)", ln)) % 2 == 0 for ln in lines), a.text
    assert "`Unsupported use of '='. In fish, please use 'set x'.`" in a.text
    assert lines[0].startswith("• #7 Completion fails with `Unsupported` use: ")
    assert "The `exc_info` key is rendered by `format_exc_info`." in a.text


def test_only_a_dropped_marker_takes_the_space_before_it() -> None:
    """The tidy-up after a dropped marker once removed every space before ".,;:" in the answer,
    quotes included: Ruby's `option :force` became `option:force`, ":meth:" ran into the word
    before it."""
    text = "A [9]. `method_option :force, type: :boolean` [1] By default, :meth:`load` [1] x [0] y"
    out, _, rep = finalize_citations(text, [src(0)])
    assert out == "A. `method_option :force, type: :boolean` [1] By default, :meth:`load` [1] x y"
    assert rep.dropped_markers == 2


@pytest.mark.asyncio
async def test_restructuredtext_code_is_quoted_as_code() -> None:
    """A literal block ("::", a code directive) and a doctest are code: quoted in backticks as
    code lines, never as bare prose sentences; the directive lines themselves are not quoted."""
    rst = (
        "index.rst › Whether to retry\n"
        "Retry only on some exceptions::\n\n"
        "    @retry(retry=retry_if_exception_type(IOError))\n"
        "    def might_io_error():\n        pass\n\n"
        ".. code-block:: python\n   :linenos:\n\n"
        "   @retry(retry=retry_if_not_exception_type(ClientError))\n"
        "   def might_client_error():\n       pass\n\n"
        ".. note::\n\n   The exception types are matched with isinstance.\n"
    )
    doc = src(0, text=rst, path="index.rst")
    a = await ExtractiveAnswerer(per_source=4).answer(
        "how do I retry only on an IOError exception type?", Retrieval([doc])
    )
    assert "`@retry(retry=retry_if_exception_type(IOError))`" in a.text
    assert "code-block" not in a.text and ".. note" not in a.text and ":linenos:" not in a.text
    assert re.search(r"(?<!`)@retry\(", a.text) is None  # no code shown as prose


def test_sphinx_and_myst_roles_are_shown_as_what_they_name() -> None:
    from core.answer.citations import quote

    text = (
        "By default, :meth:`Schema.load` raises a :exc:`ValidationError "
        "<marshmallow.exceptions.ValidationError>`; with {class}`~structlog.ProcessorFormatter` "
        "(:issue:`1342`, :pr:`1448`, thanks :user:`sloria`) see :py:func:`foo.bar`."
    )
    assert quote(text) == (
        "By default, `Schema.load` raises a `ValidationError`; with "
        "`structlog.ProcessorFormatter` (#1342, #1448, thanks @sloria) see `foo.bar`."
    )
    assert quote("/users/{userId}` and `:nodoc:`") == "/users/{userId}` and `:nodoc:`"
    assert quote(":meth:`x` in code", code=True) == ":meth:`x` in code"  # code as written


@pytest.mark.asyncio
async def test_a_docstring_line_shows_roles_and_literals_as_code_spans() -> None:
    """A Python docstring's line quoted as one of a code source's lines: its roles and
    ``literals`` read as spans; in JavaScript two backticks are code, kept as written."""
    py = src(0, "code", (
        "schema.py › validates_schema\ndef validates_schema(fn=None, skip_on_field_errors=True):\n"
        '    """Register a schema-level validator.\n\n'
        "    If ``skip_on_field_errors=True``, the validator is skipped when the\n"
        "    :func:`~marshmallow.Schema.validate` call found field errors.\n"
        '    """\n    return set_hook(fn, VALIDATES_SCHEMA)\n'
    ), path="schema.py")  # fmt: skip
    js = src(1, "code", "t.js › f\nfunction f(a) {\n  const skipped = `` + a + ``;\n}\n",
             path="t.js")  # fmt: skip
    a = await ExtractiveAnswerer().answer(
        "is the schema validator skipped on field errors? skip_on_field_errors skipped",
        Retrieval([py, js]),
    )
    assert "If `skip_on_field_errors=True`, the validator is skipped" in a.text
    assert ":func:" not in a.text and "``skip" not in a.text
    assert "const skipped = `` + a + ``;" in a.text


@pytest.mark.asyncio
async def test_the_definition_line_is_not_quoted_again_with_its_brace() -> None:
    go = src(0, "code", (
        "flag.go › FlagBase.PostParse\n// PostParse populates the flag after parsing.\n"
        "func (f *FlagBase[T, C, V]) PostParse() error {\n"
        "\tif ty := reflect.TypeOf(f.Value); ty != nil {\n\t\treturn nil\n\t}\n"
        '\treturn fmt.Errorf("could not parse flag %s", f.Name)\n}\n'
    ))  # fmt: skip
    a = await ExtractiveAnswerer().answer("why does PostParse return a parse error?",
                                          Retrieval([go]))  # fmt: skip
    assert a.text.count("PostParse() error") == 1, a.text
    assert "`func (f *FlagBase[T, C, V]) PostParse() error`" in a.text


def test_markdown_indented_code_is_code_but_list_continuations_are_prose() -> None:
    from core.answer.quotable import prose_and_blocks

    md = src(0, text=(
        "cmd/README.md › Validator\nTry it out:\n\n    $ tomlv some-file.toml\n\n"
        "- a list item\n\n    its continuation paragraph.\n\nDone.\n"
    ), path="cmd/README.md")  # fmt: skip
    prose, blocks = prose_and_blocks(md)
    assert blocks == ["$ tomlv some-file.toml"]
    assert "its continuation paragraph." in prose and "$ tomlv some-file.toml" not in prose
    nested = src(1, text="r.md › Routes\n    - [RequestID](/middleware/request_id.go#L63)\n",
                 path="r.md")  # fmt: skip
    assert prose_and_blocks(nested)[1] == []  # a nested list read out of its list: prose


def test_asciidoc_listings_are_code_and_attribute_lines_neither() -> None:
    from core.answer.quotable import prose_and_blocks

    doc = src(0, text=(
        "docs/index.adoc › Options\nUse the option.\n\n[source,java]\n----\n"
        "@Option(names = \"-v\") boolean verbose;\n----\n\n[[anchor]]\n:toc: left\n"
        "////\nA comment.\n////\nDone.\n"
    ), path="docs/index.adoc")  # fmt: skip
    prose, blocks = prose_and_blocks(doc)
    assert blocks == ['@Option(names = "-v") boolean verbose;']
    assert prose == ["Use the option.", "Done."]


def test_asciidoc_listings_in_a_chunk_are_quoted_as_code() -> None:
    """Through the chunker, as an answer meets them: the listing is code, the block title, the
    attribute lines, the table's delimiters, the comment and the directive are nothing."""
    from core.answer.quotable import prose_and_blocks
    from core.chunk.docs import chunk_doc

    text = (
        "= D\n\n== Options\nUse the option.\n\n.Java\n[source,java,indent=0]\n----\n"
        '@Option(names = "-v") boolean verbose;\n----\n\n[cols="1,3*"]\n|===\n|a|b\n|===\n\n'
        "// a comment\nifdef::env-github[]\nDone.\nendif::[]\n"
    )
    piece = chunk_doc("docs/index.adoc", text, lambda s: len(s.split()) + 2, 400)[-1].piece
    doc = src(0, text=piece.text, path="docs/index.adoc")
    assert prose_and_blocks(doc) == (
        ["Use the option.", "|a|b", "Done."],
        ['@Option(names = "-v") boolean verbose;'],
    )
