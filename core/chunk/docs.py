"""Docs chunker: Markdown, reStructuredText, AsciiDoc and plain text, split by heading.

Markdown headings come from markdown-it-py's tokens (their line ranges), so code fences, HTML
comments and setext headings are read as CommonMark reads them; reStructuredText titles are
found by their adornments; AsciiDoc section titles by their ``=`` marks, outside delimited blocks
(a ``----`` listing's lines are never titles).

Each chunk carries its heading path ("Options › Password prompts") in its title and as the first
line of its text, so the vector stays on topic and the citation keeps its context. Sections
longer than the window are split at sentence boundaries by :func:`text.pack`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

from core.models import Chunk, Document, Symbol

from .text import (
    ADOC_FENCE,
    ADOC_SUFFIXES,
    FENCE,
    RST_LITERAL,
    Piece,
    TokenCounter,
    pack,
    prose_units,
)

SEP = " › "

# CommonMark, tables on: a table row is never mistaken for a setext heading's text.
_MD = MarkdownIt("commonmark").enable("table")
_TAGS_ONLY = re.compile(r"\s*(?:</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>\s*)+")
_RST_ADORN = re.compile(r"^([=\-~^\"'`#*+:.<>_])\1{2,}\s*$")
# AsciiDoc: a section title (`== Options`, the document title `= picocli`; a symmetric closing
# run of `=` allowed), and a delimited block's fence — listing, literal, example, sidebar,
# quote, passthrough, comment, table, open block — closed by the same line.
_ADOC_TITLE = re.compile(r"^(={1,6})\s+(\S.*?)(?:\s+=+)?\s*$")
_ADOC_FENCE = re.compile(r"^(-{4,}|\.{4,}|={4,}|\*{4,}|_{4,}|\+{4,}|/{4,}|[|,:!]={3,}|--)$")
_ADOC_VERBATIM = "-./+"  # listing, literal, comment, passthrough: nothing nests inside
_ADOC_BEFORE_TITLE = re.compile(r"^(\[\[[^\]]*\]\]|\[[^\]]*\]|//.*)$")  # anchor, attributes
_ADOC_DISCRETE = re.compile(r"^\[(discrete|float)\b")
# What Asciidoctor never shows: a line comment, a preprocessor directive (blanked in the chunk, so
# that the prose around them is not joined to them).
_ADOC_HIDDEN = re.compile(r"^(//(?!/).*|(ifn?def|ifeval|endif)::.*\[.*\])$")
_ADOC_ANCHOR = re.compile(r"\s*\[\[[^\]]*\]\]\s*|<<[^,>]*,\s*([^>]*)>>|<<([^>]*)>>")


@dataclass
class Section:
    path: list[str]  # heading path
    start_line: int  # 1-based line of the heading (or of the first line for the preamble)
    lines: list[str]
    body_first_line: int


@dataclass(frozen=True)
class DocChunk:
    title: str
    piece: Piece


def _front_matter_end(lines: list[str]) -> int:
    """Index of the first line after YAML front matter (metadata, not prose), else 0."""
    if lines and lines[0].strip() == "---":
        for j in range(1, min(len(lines), 200)):
            if lines[j].strip() in ("---", "..."):
                return j + 1
    return 0


def _markdown_sections(lines: list[str]) -> list[Section]:
    """Sections by the headings markdown-it-py finds (CommonMark): ATX and setext headings at
    the top level of the document; a ``#`` line inside a code block, an HTML block (a comment)
    or a block quote is not one. Each token's ``map`` gives its line range."""
    first = _front_matter_end(lines)
    sections: list[Section] = [Section([], first + 1, [], first + 1)]
    # Parsed from our own lines joined by "\n", so its line numbers are our line numbers.
    tokens = _MD.parse("\n".join(lines[first:]))
    stack: list[tuple[int, str]] = []
    pos = first
    for i, tok in enumerate(tokens):
        if tok.type != "heading_open" or tok.level != 0 or tok.map is None:
            continue
        start, end = first + tok.map[0], first + tok.map[1]  # 0-based, end exclusive
        level, title = int(tok.tag[1]), _heading_text(tok.markup, tokens[i + 1].content)
        sections[-1].lines.extend(lines[pos:start])
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, _clean_title(title)))
        sections.append(Section([t for _, t in stack], start + 1, [], end + 1))
        pos = end
    sections[-1].lines.extend(lines[pos:])
    return sections


def _heading_text(markup: str, content: str) -> str:
    """A heading's text on one line. A setext heading's lines that hold only HTML tags (the
    ``<a name="x"></a>`` anchor line above the title) are left out; an ATX heading is kept as
    written (its heading path as before markdown-it-py)."""
    lines = content.splitlines()
    if markup.startswith(("=", "-")):
        lines = [ln for ln in lines if not _TAGS_ONLY.fullmatch(ln)] or lines
    return " ".join(" ".join(lines).split())


def _rst_sections(lines: list[str]) -> list[Section]:
    sections: list[Section] = [Section([], 1, [], 1)]
    styles: list[tuple[str, bool]] = []  # adornment styles in order of first appearance = level
    stack: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        over = False
        title = None
        style_char = ""
        if (
            _RST_ADORN.match(line)
            and i + 2 < len(lines)
            and lines[i + 1].strip()
            and lines[i + 2].strip() == line.strip()
        ):
            over, title, style_char, used = True, lines[i + 1].strip(), line.strip()[0], 3
        elif (
            line.strip()
            and not _RST_ADORN.match(line)
            and i + 1 < len(lines)
            and _RST_ADORN.match(lines[i + 1])
            and len(lines[i + 1].rstrip()) >= len(line.rstrip())
            and (i == 0 or not lines[i - 1].strip())
        ):
            title, style_char, used = line.strip(), lines[i + 1].strip()[0], 2
        if title is not None:
            style = (style_char, over)
            if style not in styles:
                styles.append(style)
            level = styles.index(style) + 1
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, _clean_title(title)))
            sections.append(Section([t for _, t in stack], i + 1, [], i + 1 + used))
            i += used
            continue
        sections[-1].lines.append(line)
        i += 1
    return sections


def _adoc_sections(lines: list[str]) -> list[Section]:
    """Sections by AsciiDoc's titles: ``=`` the document's, ``==`` a section, ``===`` one below
    it … A line inside a delimited block (between two equal fences) is never a title."""
    sections: list[Section] = [Section([], 1, [], 1)]
    stack: list[tuple[int, str]] = []
    fences: list[str] = []  # the delimited blocks open here, innermost last
    for i, line in enumerate(lines):
        s = line.rstrip()
        m = _ADOC_TITLE.match(s) if not fences and _title_may_start(lines, i) else None
        if m is None:
            comment = bool(fences) and fences[-1][0] == "/"
            if fences and s == fences[-1]:
                fences.pop()
            elif _ADOC_FENCE.match(s) and not (fences and fences[-1][0] in _ADOC_VERBATIM):
                fences.append(s)
                comment = s[0] == "/"
            hidden = comment or (not fences and _ADOC_HIDDEN.match(s.strip()) is not None)
            sections[-1].lines.append("" if hidden else line)
            continue
        level = len(m.group(1))
        while stack and stack[-1][0] >= level:
            stack.pop()
        title = _ADOC_ANCHOR.sub(lambda a: a.group(1) or a.group(2) or "", m.group(2)).strip()
        stack.append((level, _clean_title(title or m.group(2))))
        sections.append(Section([t for _, t in stack], i + 1, [], i + 2))
    return sections


def _title_may_start(lines: list[str], i: int) -> bool:
    """A title begins a block: the first line, or after a blank line, an anchor, attributes or a
    comment — not a `== x` line that continues a paragraph, nor a `[discrete]` heading."""
    j = i - 1
    while j >= 0 and _ADOC_BEFORE_TITLE.match(lines[j].strip()):
        if _ADOC_DISCRETE.match(lines[j].strip()):
            return False
        j -= 1
    return j < 0 or not lines[j].strip() or j < i - 1


# A heading's whole text in one span: `name`, **Note**, *fd* (the markup is dropped).
_WRAPPED = re.compile(r"(`|\*\*|\*|__|_)(.+?)\1")
_ANCHOR = re.compile(r"<a\b[^>]*>\s*</a>", re.I)  # <a id="x"></a>, a link target, no text
_IMG = re.compile(r"""<img\b[^<>]*?\balt=(["'])(.*?)\1[^<>]*>""", re.I)
_INLINE_TAG = re.compile(r"</?(a|br|sup|sub|span|b|i|em|strong|small|kbd|img)\b[^<>]*>", re.I)


def _untagged(t: str) -> str:
    """A title's inline HTML outside its code spans: an image as its alt text, the tags of
    links, line breaks, superscripts and the like dropped, their text kept."""
    parts = re.split(r"(`[^`]*`)", t)
    for i in range(0, len(parts), 2):
        parts[i] = _INLINE_TAG.sub(" ", _IMG.sub(lambda m: f" {m.group(2)} ", parts[i]))
    return " ".join("".join(parts).split())


def _clean_title(t: str) -> str:
    """A heading as its path shows it: links as their text, empty anchors dropped,
    reStructuredText's ``literal`` as `literal`, and markup that wraps the whole title dropped
    — only then: stripping backticks and underscores from the ends cut `Config` and `Server`
    to "Config` and `Server" (spans no longer paired) and `__init__` to "init"."""
    t = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", t)  # [text](link) -> text
    t = _untagged(RST_LITERAL.sub(r"`\1`", _ANCHOR.sub("", t)))
    m = _WRAPPED.fullmatch(t)
    if m and m.group(1) not in m.group(2):
        t = m.group(2).strip()
    return t or "(untitled)"


def chunk_doc(path: str, text: str, count: TokenCounter, max_tokens: int) -> list[DocChunk]:
    """Split a document into heading-path chunks that each fit ``max_tokens``."""
    lines = text.splitlines()
    low = path.lower()
    if low.endswith((".md", ".markdown", ".mdx")):
        sections = _markdown_sections(lines)
    elif low.endswith((".rst", ".rest")):
        sections = _rst_sections(lines)
    elif low.endswith(ADOC_SUFFIXES):
        sections = _adoc_sections(lines)
    else:
        sections = [Section([], 1, lines, 1)]
    fences = ADOC_FENCE if low.endswith(ADOC_SUFFIXES) else FENCE  # what opens a code block
    out: list[DocChunk] = []
    for sec in sections:
        if not any(ln.strip() for ln in sec.lines):
            continue
        heading = SEP.join(sec.path)
        header = f"{path}{SEP}{heading}" if heading else path
        units = prose_units(sec.lines, sec.body_first_line, fences)
        for n, piece in enumerate(pack(header, units, count, max_tokens)):
            # The first piece of a section is cited from its heading line.
            start = sec.start_line if n == 0 else piece.start_line
            out.append(
                DocChunk(
                    heading or path,
                    Piece(piece.text, piece.body, start, piece.end_line, piece.tokens),
                )
            )
    return out


def chunk(doc: Document, count: TokenCounter, window: int) -> tuple[list[Chunk], list[Symbol]]:
    """The chunker contract (``core.chunk``): a docs file → one chunk per section piece."""
    assert doc.path is not None
    chunks = [
        Chunk("docs", doc.key, dc.piece.text, dc.title, dc.piece.tokens, path=doc.path,
              start_line=dc.piece.start_line, end_line=dc.piece.end_line, kind="section")
        for dc in chunk_doc(doc.path, doc.text, count, window)
    ]  # fmt: skip
    return chunks, []
