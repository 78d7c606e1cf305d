"""Prose splitting shared by the docs and issues chunkers.

Text is cut into *units* — sentences of paragraphs, list items, whole fenced code blocks, table
rows — each remembering the lines it came from. :func:`pack` then fills pieces with whole units
up to the embedder's window, repeating a context header (the heading path, or ``#N title``) at
the top of every piece. A unit is only ever cut below sentence level when one sentence alone is
larger than the window, and then at word boundaries, never silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

TokenCounter = Callable[[str], int]


@dataclass(frozen=True)
class Unit:
    text: str
    start_line: int
    end_line: int
    sep: str = " "  # what joins it to the unit before it: " " inside a paragraph, "\n\n" across


@dataclass(frozen=True)
class Piece:
    text: str  # header + body
    body: str
    start_line: int
    end_line: int
    tokens: int


_ABBREV = {
    "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "prof", "st", "no", "fig", "cf", "approx",
    "p.ej", "ej", "sr", "sra", "dra", "núm", "pág", "p", "pp", "al", "inc", "ltd", "jr", "sec",
    "incl", "ca", "resp", "esp", "min", "max", "ver", "vol", "ed", "aprox",
}  # fmt: skip
_SENT_END = re.compile(r"[.!?…。！？]+[\"'”’)\]]*(?=\s+)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
FENCE = re.compile(r"^\s*(```|~~~)")  # a fence line (also read by the answerer)
# AsciiDoc's code: a listing (----) or literal (....) block, closed by the same line; Markdown's
# fences too (Asciidoctor reads them). Not in Markdown, where `----` is a thematic break.
ADOC_FENCE = re.compile(r"^\s*(```|~~~|-{4,}(?=\s*$)|\.{4,}(?=\s*$))")
ADOC_SUFFIXES = (".adoc", ".asciidoc", ".asc")  # an AsciiDoc file's name ends so
# reStructuredText's inline literal, ``x``: shown as the `x` Markdown and chat clients read.
RST_LITERAL = re.compile(r"(?<!`)``([^`\n]+?)``(?!`)")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of a paragraph (whitespace between them excluded)."""
    spans: list[tuple[int, int]] = []
    start = 0
    n = len(text)
    for m in _SENT_END.finditer(text):
        end = m.end()
        # Look at the word the period closes: abbreviations and decimals don't end a sentence.
        word = re.search(r"([\w.]+)[.!?…]+[\"'”’)\]]*$", text[start:end])
        if word and m.group(0).startswith(".") and word.group(1).lower().rstrip(".") in _ABBREV:
            continue
        nxt = end
        while nxt < n and text[nxt].isspace():
            nxt += 1
        if nxt >= n:
            break
        ch = text[nxt]
        # The next sentence must start like one: a capital, a digit, an opening mark, or code.
        if not (ch.isupper() or ch.isdigit() or ch in "¿¡\"'“‘([`*_#>-"):
            continue
        spans.append((start, end))
        start = nxt
    if start < n and text[start:].strip():
        spans.append((start, len(text.rstrip())))
    return spans


def _line_of(offsets: list[int], pos: int) -> int:
    """Index of the line containing character ``pos`` (offsets are line start positions)."""
    lo, hi = 0, len(offsets) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if offsets[mid] <= pos:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _paragraph_units(lines: list[str], first_line: int, sep: str) -> list[Unit]:
    text = "\n".join(lines)
    offsets = [0]
    for ln in lines[:-1]:
        offsets.append(offsets[-1] + len(ln) + 1)
    units = []
    for i, (a, b) in enumerate(split_sentences(text)):
        sent = " ".join(text[a:b].split())  # a sentence wrapped over lines reads as one line
        units.append(
            Unit(
                sent,
                first_line + _line_of(offsets, a),
                first_line + _line_of(offsets, max(a, b - 1)),
                sep if i == 0 else " ",
            )
        )
    return units


def prose_units(lines: list[str], first_line: int, fences: re.Pattern[str] = FENCE) -> list[Unit]:
    """Units of a run of lines: fenced code and tables whole per block/row, prose by sentence.
    ``fences``: what opens a code block (:data:`ADOC_FENCE` for AsciiDoc)."""
    units: list[Unit] = []
    i = 0
    sep = ""
    n = len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            sep = "\n\n"
            i += 1
            continue
        fence = fences.match(line)
        if fence:
            j = i + 1
            close = fence.group(1)
            while j < n and not (
                lines[j].strip() == close
                if close[0] in "-."
                else lines[j].lstrip().startswith(close)
            ):
                j += 1
            j = min(j, n - 1)
            units.append(Unit("\n".join(lines[i : j + 1]), first_line + i, first_line + j, sep))
            sep = "\n"
            i = j + 1
            continue
        if line.lstrip().startswith("|") or line.startswith(("    ", "\t")):
            # Tables and indented code: a line is a unit, kept verbatim.
            units.append(Unit(line.rstrip(), first_line + i, first_line + i, sep))
            sep = "\n"
            i += 1
            continue
        # A paragraph runs to a blank line, a fence, a table, or the next list item.
        j = i + 1
        while (
            j < n
            and lines[j].strip()
            and not fences.match(lines[j])
            and not lines[j].lstrip().startswith("|")
            and not _LIST_ITEM.match(lines[j])
        ):
            j += 1
        para = lines[i:j]
        units.extend(_paragraph_units(para, first_line + i, sep if sep else ""))
        sep = "\n"
        i = j
    return units


def _fit_prefix(word: str, budget: int, count: TokenCounter) -> int:
    """How many leading characters of ``word`` fit ``budget`` tokens (all of them: ``len``),
    looking at no more than 16 characters per budget token: a cut costs the same however long
    the word is (a 1 MB base64 image is cut in linear time, not quadratic)."""
    size = budget * 3  # most text has more characters than tokens: one probe usually tells
    while True:
        probe = word[:size]
        used = count(probe)
        if used > budget:
            break
        if len(probe) == len(word) or size >= budget * 16:
            return len(probe)
        size *= 4
    cut = max(1, len(probe) * budget * 19 // (20 * used))  # 5% short of the estimate
    while cut > 1 and count(probe[:cut]) > budget:
        cut = max(1, cut * 9 // 10)
    return cut


def _split_long_unit(unit: Unit, budget: int, count: TokenCounter) -> list[Unit]:
    """A unit larger than the window: cut at line breaks, else at word boundaries; a single
    "word" over the window (minified data, base64) is cut hard. A fenced code block is cut
    between its lines and every part fenced again (its opening line, info string included, and
    a closing fence), so each piece is a block a reader renders as code; a part cut at line
    breaks keeps its own lines' range."""
    lines = unit.text.split("\n")
    fence = FENCE.match(lines[0]) if len(lines) > 2 else None
    listing = ADOC_FENCE.match(lines[0]) if len(lines) > 2 and fence is None else None
    if listing and lines[0].strip() == lines[-1].strip():  # an AsciiDoc listing, closed
        fence = listing  # (a paragraph is never a unit of several lines: only a block is)
    if fence:
        closed = bool(FENCE.match(lines[-1])) or (listing is not None)
        inner = lines[1:-1] if closed else lines[1:]
        opener, closer = lines[0], lines[-1] if closed else lines[0][: fence.end()]
        room = budget - count(f"{opener}\n\n{closer}")
        if inner and room >= 4:
            parts = _split_lines(inner, unit.start_line + 1, room, count)
            out = [Unit(f"{opener}\n{p.text}\n{closer}", p.start_line, p.end_line, "\n")
                   for p in parts]  # fmt: skip
            out[0] = Unit(out[0].text, unit.start_line, out[0].end_line, unit.sep)
            out[-1] = Unit(out[-1].text, out[-1].start_line, unit.end_line, out[-1].sep)
            return out
    if len(lines) > 1:
        out = _split_lines(lines, unit.start_line, budget, count)
    else:
        out = [
            Unit(t, unit.start_line, unit.end_line, " ")
            for t in _split_words(unit.text, budget, count)
        ]
    first = out[0]
    out[0] = Unit(first.text, first.start_line, first.end_line, unit.sep)
    return out


def _split_lines(lines: list[str], first_line: int, budget: int, count: TokenCounter) -> list[Unit]:
    """Consecutive lines packed up to ``budget``; each part knows its lines. A line alone over
    the budget is cut at word boundaries (its parts share its line number)."""
    sizes = [count(ln) for ln in lines]
    over = {k for k, n in enumerate(sizes) if n > budget}
    out: list[Unit] = []
    for a, b in _runs(lines, sizes, "\n", budget, count, over):
        if a in over:
            line = first_line + a
            out += [Unit(t, line, line, "\n") for t in _split_words(lines[a], budget, count)]
        else:
            out.append(Unit("\n".join(lines[a:b]), first_line + a, first_line + b - 1, "\n"))
    return out


def _split_words(text: str, budget: int, count: TokenCounter) -> list[str]:
    """One line over the budget, cut at word boundaries; a single "word" over the window
    (minified data, base64) is cut hard, each cut a part of its own."""
    words: list[str] = []
    cuts: set[int] = set()
    for w in text.split(" "):
        while (n := _fit_prefix(w, budget, count)) < len(w):
            cuts.add(len(words))
            words.append(w[:n])
            w = w[n:]
        words.append(w)
    sizes = [0 if i in cuts else count(w) for i, w in enumerate(words)]
    return [" ".join(words[a:b]) for a, b in _runs(words, sizes, " ", budget, count, cuts)]


def _runs(
    items: list[str], sizes: list[int], sep: str, budget: int, count: TokenCounter,
    alone: set[int],
) -> list[tuple[int, int]]:  # fmt: skip
    """Greedy runs ``[a, b)`` of ``items`` whose ``sep``-join fits ``budget``; the indices in
    ``alone`` are runs of their own. Item counts are summed (one token per separator, an upper
    bound for the embedders' tokenizers) and the joined text is counted only when the sum says
    it would not fit: linear in the items."""
    out: list[tuple[int, int]] = []
    start: int | None = None
    est = 0  # tokens of sep.join(items[start:i]), an upper bound
    for i, size in enumerate(sizes):
        if i in alone:
            if start is not None:
                out.append((start, i))
            out.append((i, i + 1))
            start, est = None, 0
            continue
        if start is not None and est + 1 + size > budget:
            joined = count(sep.join(items[start : i + 1]))
            if joined > budget:
                out.append((start, i))
                start, est = None, 0
            else:
                est = joined - size - 1  # the real count: the next item adds to it
        est += size + (0 if start is None else 1)
        if start is None:
            start = i
    if start is not None:
        out.append((start, len(items)))
    return out


def pack(header: str, units: list[Unit], count: TokenCounter, max_tokens: int) -> list[Piece]:
    """Greedily fill pieces with whole units; each piece is ``header\\n body`` ≤ max_tokens."""
    if not units:
        return []
    # A context header may take at most a quarter of the window (a heading path made of a whole
    # paragraph would otherwise leave no room): shorten it, keeping its start.
    while len(header) > 24 and max_tokens - count(header + "\n") < max(16, max_tokens // 4):
        header = header[: int(len(header) * 0.7)].rstrip() + "…"
    base = count(header + "\n")  # specials + prefix + header: what every piece pays
    empty = count("")  # specials + prefix: what every standalone count includes
    budget = max_tokens - base  # tokens left for the body
    if budget < 4:
        raise ValueError(f"a {max_tokens}-token window is too small for any text")

    def body_tokens(s: str) -> int:
        return count(s) - empty

    flat: list[Unit] = []
    sizes: list[int] = []
    for u in units:
        c = body_tokens(u.text)
        parts = [u] if c <= budget else _split_long_unit(u, budget, body_tokens)
        for part in parts:
            flat.append(part)
            sizes.append(c if len(parts) == 1 else body_tokens(part.text))

    pieces: list[Piece] = []
    i = 0
    while i < len(flat):
        j = i
        est = 0
        while j < len(flat) and (j == i or est + sizes[j] + 1 <= budget):
            est += sizes[j] + 1
            j += 1
        # The estimate adds tokens per unit; confirm with the real count, backing off if needed.
        while True:
            body = _join(flat[i:j])
            text = f"{header}\n{body}"
            tokens = count(text)
            if tokens <= max_tokens:
                break
            if j > i + 1:
                j -= 1
                continue
            # One unit that fits alone by estimate but not beside the header (tokens merge
            # differently at the seam): cut it smaller and try again.
            over = tokens - max_tokens
            parts = _split_long_unit(flat[i], max(8, sizes[i] - over - 2), body_tokens)
            if len(parts) == 1:
                parts = _split_long_unit(flat[i], max(4, sizes[i] // 2), body_tokens)
            flat[i : i + 1] = parts
            sizes[i : i + 1] = [body_tokens(p.text) for p in parts]
            j = i + 1
        pieces.append(Piece(text, body, flat[i].start_line, flat[j - 1].end_line, tokens))
        i = j
    return pieces


def _join(units: list[Unit]) -> str:
    out = units[0].text
    for u in units[1:]:
        out += u.sep + u.text
    return out
