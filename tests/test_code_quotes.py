"""What a code source offers to quote: its comments read by its language's markers, its
docstring as Python reads it, and the answer's choice among them."""

from __future__ import annotations

import pytest

from core.answer.extractive import ExtractiveAnswerer
from core.answer.quotable import code_lines, code_quotes
from core.chunk.code_langs import comment_style
from core.models import Retrieval, Source


def test_comment_markers_follow_the_language() -> None:
    assert (comment_style("python"), comment_style("ruby"), comment_style("rust")) == (
        "#",
        "#",
        "//",
    )
    assert comment_style("javascript") == comment_style("go") == "//" and comment_style(None) == ""
    rs = (
        '#[cfg(all(feature = "paging"))]\n#[test]\n/// Ensure no env vars\nfn pager_default() {\n'
        "    // the default wins\n    assert!(true);\n}\n"
    )
    quotes = code_quotes(rs, "pager_default", "rust")
    assert quotes[0] == "`fn pager_default()`"
    assert not any("cfg" in q or "[test]" in q for q in quotes)  # attributes are code
    assert "Ensure no env vars" in quotes and "the default wins" in quotes
    js = "/**\n * Does things.\n */\nclass A {\n  #cache = new Map();\n}\n"
    assert code_quotes(js, "A", "javascript") == ["`class A`", "Does things."]  # no "/", no cache
    # where the language is unknown, both kinds of marker (a shell script, a YAML file)
    assert code_quotes("# set the port\nPORT=80\n") == ["set the port"]


def test_python_star_parameters_are_not_comments() -> None:
    py = (
        "def load(\n    data,\n    *,\n    many=None,\n    **kwargs,\n):\n"
        "    # Run validators\n    pass\n"
    )
    assert code_quotes(py, "load", "python") == ["`def load(data, *, many=None, **kwargs)`",
                                                 "Run validators"]  # fmt: skip


def test_a_code_line_ends_a_comment_paragraph() -> None:
    rs = (
        "pub struct Config {\n    /// The configured language, if any\n"
        "    pub language: Option<String>,\n    ///\n    /// The fallback syntax\n"
        "    /// used when detection fails\n    pub fallback: String,\n}\n"
    )
    assert code_quotes(rs, "Config", "rust")[1:] == [
        "The configured language, if any",
        "The fallback syntax used when detection fails",  # an empty /// line continues it
    ]


def test_a_docstring_reads_as_python_reads_it() -> None:
    py = (
        'def f(x):\n    """Return the thing.\n\n    This is an implementation that can be used to\n'
        "    format entries. Example::\n\n        example()\n\n    >>> f(1)\n    1\n\n"
        '    Args:\n        x: the value\n            to use.\n    """\n    return x\n'
    )
    quotes = code_quotes(py, "f", "python")
    opening = "This is an implementation that can be used to format entries."
    assert quotes[:3] == ["`def f(x)`", "Return the thing.", opening]
    assert "Args: x: the value to use." in quotes
    assert not any("example()" in q or ">>>" in q for q in quotes)  # code, not prose
    # its lines are not offered again as code lines; the code's are
    assert code_lines(py, {"value", "implementation"}, lang="python") == ["`return x`"]


def test_a_docstring_cut_at_either_end_is_found() -> None:
    head = 'class A:\n    r"""\n    Call *structlog* processors.\n\n    This one\n    formats.\n'
    assert code_quotes(head, "A", "python") == ["`class A`", "Call *structlog* processors.",
                                                "This one formats."]  # fmt: skip
    tail = (
        "        @post_dump(pass_many=True)\n        def add(self):\n            pass\n\n"
        "More text of the docstring that\ncontinues here.\n"
        '"""\n\nfrom __future__ import annotations\nX = 1\n'
    )
    quotes = code_quotes(tail, None, "python")
    assert "More text of the docstring that continues here." in quotes
    assert not any("__future__" in q or "post_dump" in q for q in quotes)


def test_every_docstring_of_a_method_group_is_prose_not_code() -> None:
    # A chunk of several methods: each one's docstring is prose to quote, none of its lines a
    # "code line" (an answer quoted 'file (`thin.py` asks it)."""'); an attribute's docstring
    # too; a string that is assigned or passed stays code.
    py = (
        "class Reader(Protocol):\n"
        "    def tests(self, rows):\n"
        '        """Which rows hold test code."""\n'
        "        ...\n\n"
        "    async def next_chunk(self, path, after):\n"
        '        """The chunk of the file that starts first\n'
        "        after line ``after``, or None. One indexed lookup\n"
        '        (``thin.py`` asks it for every thin piece).\"\"\"\n'
        "        ...\n\n"
        "    LIMIT = 20\n"
        '    """The most rows a lookup returns."""\n\n'
        "    def render(self):\n"
        '        template = """thin piece header\n'
        '        {rows}"""\n'
        "        return template\n"
    )
    quotes = code_quotes(py, None, "python")
    assert "Which rows hold test code." in quotes  # the chunk's first docstring
    assert "The chunk of the file that starts first after line ``after``, or None." in quotes
    assert "The most rows a lookup returns." in quotes
    lines = code_lines(py, {"thin", "piece", "lookup", "rows", "chunk"}, lang="python")
    assert not any("asks it" in q or "indexed lookup" in q or "most rows" in q for q in lines)
    assert "`template = \"\"\"thin piece header`" in lines  # an assigned string is code
    assert "`{rows}\"\"\"`" in lines


def test_later_docstrings_are_told_from_strings_comments_and_code() -> None:
    # Triple quotes in a comment or a one-line string pair with nothing; a string that is an
    # argument is code, one the chunk's end cut is prose; the opening line of a ''' or r"""
    # docstring is not a code line.
    py = (
        "class Table:\n"
        '    """Rows of a table."""\n\n'
        "    def a(self, text):\n"
        '        # strip the closing """ of the docstring\n'
        "        return text.strip()\n\n"
        "    def b(self, rows, table):\n"
        '        """Look up the rows\n'
        "        of a table.\n"
        '        """\n'
        "        if not rows:\n"
        "            raise KeyError('no rows in table')\n"
        "        return rows.lookup(table)\n\n"
        "    def c(self):\n"
        "        sql = textwrap.dedent(\n"
        '            """\n'
        "            SELECT name FROM rows_table\n"
        '            """\n'
        "        )\n"
        '        shown = render("""rows of the table""")\n'
        "        mark = '\"\"\"'\n"
        "        return sql, shown, mark\n\n"
        "    def d(self):\n"
        "        '''Count the rows of a table.'''\n\n"
        "    def e(self):\n"
        '        r"""Drop the rows of a table, and\n'
        "        the table"
    )
    quotes = code_quotes(py, None, "python")
    lines = code_lines(py, {"rows", "table", "name"}, lang="python")
    assert "Look up the rows of a table." in quotes
    assert "Count the rows of a table." in quotes
    assert "Drop the rows of a table, and the table" in quotes  # cut by the chunk's end
    assert "`raise KeyError('no rows in table')`" in lines
    assert "`return rows.lookup(table)`" in lines
    assert "`SELECT name FROM rows_table`" in lines  # an argument's text is code
    assert '`shown = render("""rows of the table""")`' in lines
    assert not any("raise" in q or "SELECT" in q for q in quotes)
    assert not any("Look up" in q or "of a table." in q or "Count the" in q or "Drop the" in q
                   for q in lines)  # fmt: skip


def test_triple_quotes_are_a_docstring_only_in_python() -> None:
    go = (
        "// lexMultilineString consumes the inner contents of a string.\n"
        "func lexMultilineString(lx *lexer) stateFn {\n"
        '\treturn lx.errorf(`unexpected EOF; expected \'"""\'`)\n}\n'
    )
    assert code_quotes(go, "lexMultilineString", "go") == [
        "`func lexMultilineString(lx *lexer) stateFn`",
        "lexMultilineString consumes the inner contents of a string.",
    ]


@pytest.mark.asyncio
async def test_a_later_docstring_sentence_that_answers_is_quoted() -> None:
    text = (
        "printer.rs › char_width\n/// Return the displayed width of a character.\n///\n"
        "/// Control characters are rendered by the terminal in caret notation, which occupies\n"
        "/// two columns.\nfn char_width(c: char) -> usize {\n    c.width().unwrap_or(2)\n}\n"
    )
    s = Source(collection="code", title="char_width", url="u", text=text, score=0.9,
               path="src/printer.rs", symbol="char_width")  # fmt: skip
    a = await ExtractiveAnswerer().answer(
        "does bat show control characters in caret notation?", Retrieval([s])
    )
    assert "Return the displayed width of a character." in a.text  # its opening, as before
    assert "rendered by the terminal in caret notation" in a.text


def test_a_doc_comment_example_or_heading_is_not_prose() -> None:
    go = (
        "// Package chi is a small router.\n//\n// # Example\n//\n//\tfunc main() {\n"
        "//\t\tr := chi.NewRouter()\n//\t}\n//\n// See the examples.\npackage chi\n"
    )
    assert code_quotes(go, None, "go") == ["Package chi is a small router.", "See the examples."]
    rs = (
        "/// Returns x.\n///\n/// # Examples\n///\n///     let b = g();\n/// More.\npub fn f() {}\n"
    )
    assert code_quotes(rs, "f", "rust") == ["`pub fn f() {}`", "Returns x.", "More."]


def test_javadoc_and_jsdoc_read_as_they_render() -> None:
    java = (
        "/**\n * Creates a {@link FormattingStyle} with the given newline.\n"
        ' * <p>Use {@code "\\n"} on Linux, or {@link java.lang.System#lineSeparator()}.\n'
        " * A List&lt;T&gt; works, {@code\n * false} by default; see {@link #of(String) of}.\n"
        " * @param newline the newline\n */\npublic FormattingStyle withNewline(String newline) {\n"
    )
    assert code_quotes(java, "withNewline", "java")[1:] == [
        'Creates a `FormattingStyle` with the given newline. Use `"\\n"` on Linux, or '
        "`java.lang.System#lineSeparator()`.",
        "A List<T> works, `false` by default; see of. @param newline the newline",
    ]
    # JSDoc's {@link} too; in Python the same text is left as written
    js = "/**\n * Parse argv, see {@link Command#parse}.\n */\nfunction parse(argv) {\n}\n"
    assert code_quotes(js, "parse", "javascript")[1] == "Parse argv, see `Command#parse`."
    py = "# see {@link X}\ndef f():\n    pass\n"
    assert code_quotes(py, "f", "python")[1] == "see {@link X}"


def test_a_block_comment_without_leading_stars_is_comment() -> None:
    java = (
        "package org.jsoup.helper;\n\n/**\n Execute HTTP requests with HttpURLConnection; set\n"
        " {@code jsoup.useHttpClient} to {@code false} to prefer it.\n */\nclass UrlExecutor {\n"
        '    String name = "url";\n}\n'
    )
    assert code_quotes(java, "UrlExecutor", "java")[1:] == [
        "Execute HTTP requests with HttpURLConnection; set `jsoup.useHttpClient` to `false` "
        "to prefer it."
    ]
    assert code_lines(java, {"jsoup", "requests"}, lang="java") == ['`String name = "url";`']
