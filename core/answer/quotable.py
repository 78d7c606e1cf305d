"""What a source offers to quote, before the answerer chooses: a docs or issues source's
sentences, table rows and code blocks' comments (prose) and the code of those blocks
(:func:`prose_and_blocks` — a fence, or in reStructuredText a literal block, a code directive, a
doctest); a code source's definition (its signature joined over its lines), docstring and
comment sentences (:func:`code_quotes`) and the lines that may hold an answer
(:func:`code_lines`: a raise, a default, an environment variable, a return, a string literal).
"""

from __future__ import annotations

import html
import inspect
import re
import textwrap
from collections.abc import Iterator
from functools import lru_cache

from markdown_it import MarkdownIt

from core.answer.citations import clip
from core.answer.signature import DEFINITION, definition
from core.chunk.code_langs import comment_style, language_for_path
from core.chunk.text import ADOC_SUFFIXES, FENCE, prose_units
from core.lexical import terms
from core.models import Source


def body(src: Source) -> str:
    return src.text.split("\n", 1)[1] if "\n" in src.text else src.text


def prose_and_blocks(src: Source) -> tuple[list[str], list[str]]:
    """A docs or issues source's quotable text: its sentences, table rows and the comments of
    its code blocks (prose), and the code of those blocks (for :func:`code_lines`). A section
    that is one code block — an options object whose comments say what each key does — has
    nothing else to quote."""
    lines = body(src).splitlines()
    if src.collection == "issues" and lines and re.match(r"(Issue|PR) · ", lines[0]):
        lines = lines[1:]  # the "Issue · state · labels" line of a thread's first piece
    out: list[str] = []
    blocks: list[str] = []
    path = (src.path or "").lower()
    if path.endswith(".rst"):
        lines, blocks = _rst_literals(lines)
    elif src.collection == "docs" and path.endswith((".md", ".markdown", ".mdx")):
        lines, blocks = _md_indented(lines)
    elif src.collection == "docs" and path.endswith(ADOC_SUFFIXES):
        lines, blocks = _adoc_blocks(lines)
    for b in blocks:
        out.extend(comment_sentences(b.splitlines()))
    for u in prose_units(lines, 1):
        t = u.text.strip()
        if t.startswith(("```", "~~~")):
            inner = [ln for ln in t.splitlines()[1:] if not FENCE.match(ln)]
            out.extend(comment_sentences(inner))
            blocks.append("\n".join(inner))
        elif t.startswith("|"):
            if not _TABLE_RULE.match(t):
                out.append(t)  # a table row, verbatim (an option, its default, its meaning)
        elif len(t) >= 3:
            out.append(t)
    return out, blocks


# reStructuredText's code: the indented block after one of these directives, or after a
# paragraph ending "::" (not a directive: ".. note::" holds prose).
_RST_CODE = re.compile(r"\.\.\s+(code-block|code|sourcecode|doctest|testcode|testsetup)::", re.I)
_RST_DIRECTIVE = re.compile(r"\.\.\s+[\w:-]+::\s*$")  # no argument: ".. note::"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _rst_literals(lines: list[str]) -> tuple[list[str], list[str]]:
    """The lines with reStructuredText's literal blocks, code directives and doctest paragraphs
    (">>>") blanked, and those blocks' code, dedented: quoted as code lines, not as prose
    sentences ("@retry(stop=stop_after_delay(10))" with no backticks, the directive line)."""
    out, blocks, n, i = list(lines), [], len(lines), 0
    while i < n:
        t = lines[i].strip()
        if t.startswith(">>>"):
            j = i
            while j < n and lines[j].strip():
                j += 1
            blocks.append("\n".join(ln.strip() for ln in lines[i:j]))
            out[i:j] = [""] * (j - i)
            i = j
            continue
        directive = _RST_CODE.match(t)
        if not (directive or (t.endswith("::") and not t.startswith(".."))):
            if _RST_DIRECTIVE.match(t):
                out[i] = ""  # ".. note::": its content is prose, the line itself is not
            i += 1
            continue
        base, j = _indent(lines[i]), i + 1
        if directive:
            out[i] = ""
            while j < n and lines[j].strip().startswith(":") and _indent(lines[j]) > base:
                out[j] = ""  # the directive's options (":linenos:")
                j += 1
        while j < n and not lines[j].strip():
            j += 1
        k = j
        while k < n and (not lines[k].strip() or _indent(lines[k]) > base):
            k += 1
        while k > j and not lines[k - 1].strip():
            k -= 1
        if k > j:
            blocks.append(textwrap.dedent("\n".join(lines[j:k])))
            out[j:k] = [""] * (k - j)
        i = max(k, i + 1)
    return out, blocks


def _md_indented(lines: list[str]) -> tuple[list[str], list[str]]:
    """The lines with Markdown's indented code blocks blanked, and those blocks' code, dedented:
    as CommonMark reads them (markdown-it's ``code_block``), so a list item's indented
    continuation stays prose — and so does a block of nothing but list items (a section that
    begins inside a nested list, read without the list above it)."""
    out, blocks = list(lines), []
    for tok in _MD.parse("\n".join(lines)):
        if tok.type == "code_block" and tok.map:
            a, b = tok.map
            code = textwrap.dedent("\n".join(lines[a:b])).strip("\n")
            rows = [ln for ln in code.splitlines() if ln.strip()]
            if rows and not all(_LIST_ITEM.match(ln) for ln in rows):
                blocks.append(code)
                out[a:b] = [""] * (b - a)
    return out, blocks


_LIST_ITEM = re.compile(r"\s*([-*+]|\d+[.)])\s")
# AsciiDoc: a listing or literal block's fence (its lines are code), a comment block's, and the
# attribute line above a block (`[source,java]`), which is neither prose nor code.
_ADOC_CODE_FENCE = re.compile(r"^(-{4,}|\.{4,})\s*$")
_ADOC_COMMENT_FENCE = re.compile(r"^/{4,}\s*$")
# Lines that are neither prose nor code: block attributes (`[source,java]`, `[cols="1,3"]`), an
# anchor, an attribute entry (`:toc: left`), a block title (`.Java`), a comment line, a
# preprocessor directive (`ifdef::env[]`), another block's delimiter (`====`, `|===`, `--`).
_ADOC_ATTRS = re.compile(
    r"^(\[[^\[\]]*\]|\[\[[^\]]*\]\]|:!?[\w-]+!?:.*|\.[A-Za-z][^.]*|//(?!/).*|"
    r"(ifn?def|ifeval|endif|include)::.*\[.*\]|={4,}|\*{4,}|_{4,}|\+{4,}|[|,:!]={3,}|--)\s*$"
)


def _adoc_blocks(lines: list[str]) -> tuple[list[str], list[str]]:
    """The lines with AsciiDoc's listing and literal blocks (``----``, ``....``) and comment
    blocks blanked, and the listings' code: quoted as code, not as sentences."""
    out, blocks = list(lines), []
    fence: str | None = None
    start = 0
    for i, line in enumerate(lines):
        s = line.strip()
        if fence is None:
            if _ADOC_CODE_FENCE.match(s) or _ADOC_COMMENT_FENCE.match(s):
                fence, start = s, i
            elif _ADOC_ATTRS.match(s):
                out[i] = ""
            continue
        if s == fence:
            if not fence.startswith("/") and any(ln.strip() for ln in lines[start + 1 : i]):
                blocks.append("\n".join(lines[start + 1 : i]))
            out[start : i + 1] = [""] * (i + 1 - start)
            fence = None
    return out, blocks


_MD = MarkdownIt("commonmark")
_TABLE_RULE = re.compile(r"^[|\s:-]+$")
_COMMENT = re.compile(r"^\s*(#|//|/\*+|\*(?!\*))\s?")


def comment_sentences(lines: list[str]) -> list[str]:
    """The sentences of a code block's comments; a code line ends a comment's paragraph."""
    text = [_COMMENT.sub("", ln).rstrip(" */") if _COMMENT.match(ln) else "" for ln in lines]
    return [u.text.strip() for u in prose_units(text, 1) if len(u.text.strip()) >= 3]


def sentences(src: Source) -> list[str]:
    if src.collection == "code":
        return code_quotes(body(src), src.symbol, language_for_path(src.path or ""))
    return prose_and_blocks(src)[0]


# A comment line's marker: C's (Rust's /// and //! too; a lone */ closes), or "#" (never a
# shebang or Rust's inner attribute, #!).
_C_COMMENT = re.compile(r"\s*(//[/!]?|/\*+|\*(?!/))")
_HASH_COMMENT = re.compile(r"\s*#(?![!\[])")
# In a // comment: an indented line (Go doc's tab, Markdown's four spaces after "/// ") is a
# code example, and "# Examples" a heading (Go doc, rustdoc): neither is a sentence to quote.
_COMMENT_CODE = re.compile(r"\t| {5}|\s?#+\s")


_TRIPLE = re.compile(r'"""|\'\'\'')
_OPENS = re.compile(r"(^|[:(=,])\s*[rRbBuUfF]*$")  # what precedes a docstring's opening quotes


def _docstring_span(body: str) -> tuple[int, int, bool] | None:
    """Where a Python chunk's docstring text lies (start, end) — its first triple-quoted
    string; where the chunk holds an odd number of triple quotes, the start of one the chunk's
    end cut (a long class's first piece), or the end of one the chunk began inside (the piece
    after it: its first quotes close; then True)."""
    marks = list(_TRIPLE.finditer(body))
    if not marks:
        return None
    first = marks[0]
    if len(marks) % 2 == 1:
        before = body[: first.start()].rstrip()
        last = before.rsplit("\n", 1)[-1].strip()  # the last line with something on it
        if before and not (_OPENS.search(last) or DEFINITION.match(last)):
            return 0, first.start(), True
    end = body.find(first.group(), first.end())
    return first.end(), end if end >= 0 else len(body), False


# A later docstring's opening quotes begin their line (a prefix that keeps it a docstring
# allowed: r, u), and the line before does not leave an expression open (`dedent(`, `x = (`,
# `+ \`): there the string is an argument, an operand or a value — code.
_STATEMENT_QUOTES = re.compile(r"[ \t]*[rRuU]?$")
_CONTINUES = re.compile(r"[([{,=\\+\-*/%|&<>]\s*$")


# What the scan of :func:`_triple_strings` stops at: a comment, a triple quote, a one-line
# string's quote.
_SCAN = re.compile(r"#|\"\"\"|'''|[\"']")
_ONE_LINE_REST = {q: re.compile(rf"(?:[^{q}\\\n]|\\.)*") for q in "\"'"}


def _triple_strings(body: str, pos: int) -> Iterator[tuple[int, int, int]]:
    """The triple-quoted strings of a Python chunk from ``pos`` (read as outside any string):
    where its quotes begin, where its text begins, and where its text ends (its closing quotes,
    or the chunk's end where the chunk cut it). Comments and one-line strings are stepped over,
    so a triple quote inside one (``# strip the closing \"\"\"``, ``'\"\"\"'``) pairs with
    nothing."""
    n = len(body)
    while (m := _SCAN.search(body, pos)) is not None:
        tok = m.group()
        if tok == "#":
            nl = body.find("\n", m.end())
            pos = n if nl < 0 else nl
        elif len(tok) == 3:
            text = close = m.end()
            while (close := body.find(tok, close)) >= 0:
                escapes = len(body[text:close]) - len(body[text:close].rstrip("\\"))
                if escapes % 2 == 0:
                    break
                close += 1
            yield m.start(), text, (close if close >= 0 else n)
            if close < 0:
                return
            pos = close + 3
        else:  # a one-line string: to its closing quote or the line's end
            rest = _ONE_LINE_REST[tok].match(body, m.end())
            pos = (rest.end() if rest else m.end()) + 1


@lru_cache(maxsize=256)
def _docstring_spans(body: str) -> tuple[tuple[int, int, bool], ...]:
    """Every docstring of a Python chunk: the first as :func:`_docstring_span` reads it, then
    each later triple-quoted string that stands as a statement (:data:`_STATEMENT_QUOTES`,
    :data:`_CONTINUES`) — a method group's methods' docstrings, an attribute's —, whose lines
    are prose, not code. A string assigned, passed or continued is code."""
    first = _docstring_span(body)
    if first is None:
        return ()
    spans = [first]
    if first[1] >= len(body):  # the chunk ends inside the first
        return tuple(spans)
    for quotes, text, end in _triple_strings(body, first[1] + 3):  # past its closing quotes
        line = body.rfind("\n", 0, quotes) + 1
        before = body[:line].rstrip().rsplit("\n", 1)[-1]
        if _STATEMENT_QUOTES.match(body[line:quotes]) and not _CONTINUES.search(before):
            spans.append((text, end, False))
    return tuple(spans)


def _docstring(body: str) -> list[str] | None:
    """A Python chunk's docstrings (:func:`_docstring_spans`) as lines, each dedented as Python
    reads one (``inspect.cleandoc``), a blank line between two: the first (the chunk's own)
    opens the quotes; a method group's later ones are sentences to choose from too."""
    spans = _docstring_spans(body)
    if not spans:
        return None
    out: list[str] = []
    for start, end, inside in spans:
        if out:
            out.append("")
        if not inside:
            out.extend(inspect.cleandoc(body[start:end]).splitlines())
            continue
        lines = textwrap.dedent(body[start:end]).strip("\n").splitlines()
        # Lines indented past the text's own are the rest of a block the previous piece opened
        # (an example after "::"): code, not prose.
        lead = next((i for i, ln in enumerate(lines) if ln.strip() and not _indent(ln)), 0)
        out.extend([""] * lead + lines[lead:])
    return out


def _comment_text(line: str, style: str) -> str | None:
    """A code line's comment text ("" for a bare marker), or None when it is code. ``style``:
    "#", "//" or "" for either (:func:`core.chunk.code_langs.comment_style`)."""
    m = (_C_COMMENT.match(line) if style != "#" else None) or (
        _HASH_COMMENT.match(line) if style != "//" else None
    )
    if m is None:
        return "" if style != "#" and line.strip() == "*/" else None
    rest = line[m.end() :]
    if m.group(0).lstrip().startswith("//") and _COMMENT_CODE.match(rest):
        return None
    return rest.removesuffix("*/").strip()


# Javadoc and JSDoc markup (:func:`_doc_markup`).
_INLINE_TAG = re.compile(r"\{@(code|literal|link|linkplain|value)\s+([^{}]*)\}")
_CODE_TAG = re.compile(r"<code>([^<`]*)</code>", re.I)
_HTML_TAG = re.compile(
    r"</?(p|br|b|i|em|strong|tt|code|ul|ol|li|a|h\d|dl|dt|dd|blockquote|span|sup|sub)\b[^>]*>", re.I
)


def _inline_tag(m: re.Match[str]) -> str:
    kind, body = m.group(1), m.group(2).strip()
    if kind == "literal" or not body:
        return body
    if kind.startswith("link"):
        target, _, label = body.partition(" ")
        if label.strip():
            return label.strip()
        body = target.removeprefix("#")
    return body if "`" in body else f"`{body}`"


# C#'s XML doc comments: a reference or inline code as what it names, the structure tags dropped.
_XML_REF = re.compile(
    r'<(see|seealso|paramref|typeparamref)\s+(cref|name|langword|href)="([^"]*)"\s*/>'
)
_XML_REF_LABEL = re.compile(r'<(see|seealso)\s+(cref|href|langword)="[^"]*"\s*>([^<]*)</\1>')
_XML_TAG = re.compile(
    r"</?(summary|remarks|returns|value|para|param|typeparam|exception|example|inheritdoc|list|"
    r"item|description|term|c|code)\b[^>]*>"
)


def _xml_ref(m: re.Match[str]) -> str:
    attr, target = m.group(2), m.group(3)
    if attr == "href":
        return target
    return f"`{re.sub(r'^[A-Z]:', '', target) if attr == 'cref' else target}`"  # T:Polly.X


def _xml_doc(text: str) -> str:
    text = _XML_REF_LABEL.sub(lambda m: m.group(3), _XML_REF.sub(_xml_ref, text))
    text = re.sub(r"<c>([^<`]*)</c>", r"`\1`", text)
    return " ".join(_XML_TAG.sub(" ", text).split())


def _doc_markup(text: str) -> str:
    """A C-family doc comment's sentence as Javadoc and JSDoc render it: ``{@code x}`` as `x`,
    ``{@link A#b label}`` as its label (else `A#b`), ``<code>x</code>`` as `x`, other HTML
    tags dropped and entities as the characters they stand for."""
    text = _INLINE_TAG.sub(_inline_tag, text)
    text = _HTML_TAG.sub(" ", _CODE_TAG.sub(r"`\1`", text))
    return " ".join(html.unescape(text).split())


_BRACKETS = re.compile(r"[\s{}()\[\];,]*")


def _comments(body: str, style: str) -> list[str | None]:
    """Each line's comment text (:func:`_comment_text`), or None for code. Inside a C block
    comment a line is comment text with or without its leading "*" (jsoup's ``/** … */``
    without them)."""
    out: list[str | None] = []
    block = False
    for ln in body.splitlines():
        t = ln.strip()
        if block:
            block = "*/" not in t
            text = _comment_text(ln, style) if t.startswith(("*", "//")) else t.split("*/")[0]
            # commented-out code's brackets ("}*/") are not a sentence
            if text is not None and text.strip() and _BRACKETS.fullmatch(text):
                text = None
            out.append(None if text is None else text.strip())
            continue
        text = _comment_text(ln, style)
        block = style == "//" and t.startswith("/*") and "*/" not in t[2:]
        out.append(text)
    return out


def code_quotes(body: str, symbol: str | None = None, lang: str | None = None) -> list[str]:
    """For code: the definition line and the docstring/comment sentences. A method's chunk
    starts with its class's header as context; the quote is the method's own definition.
    Without a docstring, the chunk's comments are read as paragraphs that a code line ends (a
    doc comment's empty line does not: shorter quotes lost facts). ``lang``: the chunker's
    language name (None: unknown) — its comment marker (in Rust ``#[test]`` is code, in
    Python ``*args`` is), and whether triple quotes make a docstring (Python, or unknown)."""
    style = comment_style(lang)
    lines = [ln for ln in body.splitlines() if ln.strip()]
    out = []
    sig = definition(lines, symbol, lang)
    if sig is not None:
        out.append(f"`{sig}`")
    doc = _docstring(body) if lang in ("python", None) else None
    if doc is not None:
        # Read as reStructuredText, as the project's docs are: its literal blocks, code
        # directives and doctests are code (not quoted as prose), the rest flush left — its
        # lines after the first were quoted as indented code, a line at a time ("This is an
        # implementation that can be used to"), and so were a section's items ("Args:").
        text = [ln.strip() for ln in _rst_literals(doc)[0]]
    else:  # a bare marker (a doc comment's empty line) is left out: it continues a paragraph
        text = [t or "" for t in _comments(body, style) if t != ""]
    units = [u.text for u in prose_units(text, 1) if u.text.strip() and not FENCE.match(u.text)]
    if lang == "csharp":
        units = [t for t in map(_xml_doc, units) if t]
    if style == "//":
        units = [t for t in map(_doc_markup, units) if t]
    out.extend(units)
    if not out and lines:  # module-level code with neither a definition nor a comment
        out.append(f"`{lines[0].strip()}`")
    return out


# Code lines that tend to hold an answer: a raised error, a default, an environment variable,
# a return, a string literal (messages, names, keys).
_ANSWER_LINE = re.compile(
    r"\b(raise|throw|panic|errors?\.New|fmt\.Errorf|return|default|environ|getenv|process\.env|"
    r"ENV\b|os\.Getenv)\b|=\s*\S|[\"'`][^\"'`]{3,}[\"'`]"
)
_TRIVIAL_LINE = re.compile(rf"^{_BRACKETS.pattern}$|^\s*(import|from|package|use|#include)\b")
# The same for the languages whose answers and imports read otherwise: .NET's environment lookup,
# PHP's $_ENV / $_SERVER, Swift's ProcessInfo; C#'s `using` and `namespace` lines.
_ANSWER_MORE = {
    "csharp": re.compile(r"GetEnvironmentVariable"),
    "php": re.compile(r"\$_(ENV|SERVER)\b"),
    "swift": re.compile(r"\bProcessInfo\b.*\benvironment\b"),
}
_TRIVIAL_MORE = {
    "csharp": re.compile(
        r"^\s*(global\s+)?using\s+(static\s+)?[\w.]+(\s*=\s*[\w.<>, ]+)?\s*;|^\s*namespace\b"
    ),  # a `using var x = …;` statement is code
    "php": re.compile(r"^\s*(namespace|use|declare|(require|include)(_once)?)\b"),
}
CODE_LINES = 12  # answer-bearing lines of a code source considered for quoting


def code_lines(body: str, qterms: set[str], skip: int = 1, lang: str | None = "text") -> list[str]:
    """A code chunk's lines that may hold the answer: those sharing words with the question,
    then raises, defaults, returns, environment variables and string literals. ``skip``: the
    leading lines not offered (a chunk's definition line: its signature is quoted anyway).
    ``lang``: the chunk's language (:func:`code_quotes`; the default, for a docs page's code
    blocks, reads C's comment markers and no docstring); its comments' and (in Python, or
    unknown) its docstring's lines are not code: their sentences are quoted as prose."""
    out: list[tuple[int, str]] = []
    spans = _docstring_spans(body) if lang in ("python", None) else ()
    comments = _comments(body, comment_style(lang))
    answer_more, trivial_more = _ANSWER_MORE.get(lang or ""), _TRIVIAL_MORE.get(lang or "")
    at = 0
    for i, ln in enumerate(body.splitlines(keepends=True)):
        at, start = at + len(ln), at
        docstring = any(start < b and at > a for a, b, _ in spans)  # the line meets one
        if i < skip or docstring or comments[i] is not None:
            continue
        t = ln.strip()
        if len(t) < 4 or _TRIVIAL_LINE.match(t) or t.startswith(("#", "//", "*", "/*", '"""')):
            continue
        if trivial_more is not None and trivial_more.match(t):
            continue
        shared = len(set(terms(t)) & qterms)
        if shared or _ANSWER_LINE.search(t) or (answer_more is not None and answer_more.search(t)):
            out.append((shared, t))
    out.sort(key=lambda x: -x[0])  # stable: file order among equals
    return [f"`{clip(t, 160)}`" for _, t in out[:CODE_LINES]]
