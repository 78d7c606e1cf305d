"""Symbol-aligned, token-bounded code chunking with tree-sitter.

``chunk_code`` turns a source file into chunks that each cover a contiguous range of lines of
the original file, start with a context line (``path › Qual.name``) and fit the embedder's
token budget. Top-level definitions become one chunk each when they fit; long classes are split
into a header chunk and (groups of) methods, long functions at statement boundaries with their
signature repeated; module-level code between definitions is packed into "module" chunks. A
chunk of nothing but imports, package lines and licence text is left out (``boiler.py``).
Unsupported languages, and definitions nested past Python's stack, fall back to line windows.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tree_sitter import Node, Parser

from core.chunk.boiler import LICENCE, boilerplate
from core.chunk.code_langs import (
    CLASSLIKE,
    LANGS,
    SCOPES,
    LangSpec,
    default_export_name,
    language,
    language_for_path,
    last_row,
    node_text,
)
from core.chunk.code_parse import (
    Decl,
    Def,
    collect_defs,
    declarations,
    join_names,
    label,
    member_constants,
    walk_defs,
)
from core.chunk.cpre import for_parser, header_language
from core.chunk.graph import call_sites, calls_of
from core.chunk.rust_tests import rows_of_tests
from core.chunk.text import TokenCounter
from core.models import Chunk, Document, Symbol

log = logging.getLogger(__name__)

__all__ = ["CodeChunk", "SymbolDef", "chunk", "chunk_code", "language_for_path"]

ELLIPSIS = "    ..."
SEP = " › "
WINDOW_LINES = 60
_MAX_CHARS_PER_TOKEN = 32  # texts longer than this many chars per budget token are "too long"
_TRIVIAL = re.compile(r"\s*(?:[\]\)\};,]+|end)?\s*")


@dataclass(frozen=True)
class CodeChunk:
    text: str  # context header line, then the code (plus repeated signatures for pieces)
    start_line: int  # 1-based, inclusive, lines of the original file covered by this piece
    end_line: int  # 1-based, inclusive
    symbol: str | None  # qualified name, None for module-level code and windows
    kind: str  # "function" | "class" | "method" | "method_group" | "module" | "window" | ...
    label: str | None = None  # its title, where not its symbol: the names module code declares,
    # a group's class and the members it holds


@dataclass(frozen=True)
class SymbolDef:
    name: str
    qualname: str
    kind: str
    start_line: int
    end_line: int
    calls: tuple[str, ...] = ()  # names it calls (core/chunk/graph.py)


# ---------------------------------------------------------------------------- chunking


class _Chunker:
    def __init__(
        self,
        path: str,
        lines: list[str],
        count: Callable[[str], int],
        max_tokens: int,
        spec: LangSpec | None,
        root: Node | None,
        decls: list[Decl] | None = None,
    ) -> None:
        self.path, self.lines, self.count, self.max = path, lines, count, max_tokens
        self.decls = decls or []  # module-level declarations: they name the module chunks
        self.comments: tuple[str, ...] = spec.comments if spec else ()
        self.base = count("")
        self.line_cost: dict[int, int] = {}
        self.heads: dict[tuple[str | None, str], str] = {}
        self.costs: dict[str, int] = {}
        self.out: list[CodeChunk] = []
        self.root_kids: list[Node] = list(root.named_children) if root is not None else []
        self.kid_starts = [c.start_point.row for c in self.root_kids]
        self.kid_ends = [c.end_point.row for c in self.root_kids]

    # -- helpers
    def fits(self, text: str) -> bool:
        return len(text) <= self.max * _MAX_CHARS_PER_TOKEN and self.count(text) <= self.max

    def join(self, a: int, b: int) -> str:
        return "\n".join(self.lines[a : b + 1])

    def blank(self, row: int) -> bool:
        return not self.lines[row].strip()

    def trivial(self, a: int, b: int) -> bool:
        return all(_TRIVIAL.fullmatch(self.lines[i]) for i in range(a, b + 1))

    def cost(self, row: int) -> int:
        if row not in self.line_cost:
            line = self.lines[row]
            big = len(line) > self.max * _MAX_CHARS_PER_TOKEN
            self.line_cost[row] = self.max + 1 if big else self.count(line + "\n") - self.base
        return self.line_cost[row]

    def sig(self, d: Def) -> str:
        return self.join(d.def_start, d.hdr_end) + "\n"

    def prefix(self, anc: list[Def], d: Def | None, row: int) -> str:
        text = "".join(self.sig(x) for x in anc)
        if d is not None and row > d.def_start:
            text += self.sig(d) + ELLIPSIS + "\n"
        return text

    def head(self, qual: str | None, prefix: str) -> str:
        """Context line (+ prefix); degraded when it would eat too much of the budget."""
        key = (qual, prefix)
        if key not in self.heads:
            ctx = self.path if qual is None else f"{self.path}{SEP}{qual}"
            short = os.path.basename(self.path) + (f"{SEP}{qual}" if qual else "")
            options = [(f"{ctx}\n{prefix}", self.max // 2), (f"{ctx}\n", self.max * 3 // 4)]
            options.append((f"{short}\n", self.max * 3 // 4))
            self.heads[key] = next((h for h, lim in options if self.count(h) <= lim), "")
        return self.heads[key]

    def head_cost(self, head: str) -> int:
        if head not in self.costs:
            self.costs[head] = self.count(head)
        return self.costs[head]

    def emit(
        self, text: str, a: int, b: int, symbol: str | None, kind: str, name: str | None = None
    ) -> None:
        self.out.append(CodeChunk(text, a + 1, b + 1, symbol, kind, name))

    def breaks(self, nodes: Sequence[Node], a: int, b: int) -> dict[int, int]:
        """Preferred piece starts: rows where a statement begins (shallower = better)."""
        out: dict[int, int] = {}
        stack = [(n, 3) for n in nodes]
        while stack:
            node, prio = stack.pop()
            s, e = node.start_point.row, node.end_point.row
            if e < a or s > b:
                continue
            line = self.lines[s] if s < len(self.lines) else ""
            if a < s <= b and node.start_point.column == len(line) - len(line.lstrip(" \t")):
                out[s] = max(out.get(s, 0), prio)
            if prio > 1 and e > s:
                stack.extend((c, prio - 1) for c in node.named_children)
        return out

    def root_breaks(self, a: int, b: int) -> dict[int, int]:
        lo, hi = bisect.bisect_left(self.kid_ends, a), bisect.bisect_right(self.kid_starts, b)
        return self.breaks(self.root_kids[lo:hi], a, b)

    # -- line packing
    def pack(
        self,
        a: int,
        b: int,
        qual: str | None,
        kind: str,
        anc: list[Def],
        d: Def | None,
        brk: dict[int, int],
        loose: bool = False,
        max_lines: int | None = None,
    ) -> None:
        """Cover rows a..b with consecutive pieces that fit; ``loose`` trims blank edges and
        drops pieces holding only blank / closing-bracket lines."""
        r = a
        named = kind == "module" and bool(self.decls)
        while r <= b:
            if loose and self.blank(r):
                r += 1
                continue
            head = self.head(label(self.decls, r, b) if named else qual, self.prefix(anc, d, r))
            budget = self.max - self.head_cost(head)
            m, acc = r, self.cost(r)
            while m < b and acc + self.cost(m + 1) <= budget:
                if max_lines is not None and m + 1 - r >= max_lines:
                    break
                m, acc = m + 1, acc + self.cost(m + 1)
            if m < b:  # choose a good break in the second half of what fits
                best, best_p = m + 1, -1
                for k in range(m + 1, r + 1 + (m - r) // 2 - 1, -1):
                    p = brk.get(k, 0) + (2 if self.blank(k - 1) else 0)
                    if p > best_p:
                        best, best_p = k, p
                m = best - 1
            while True:
                last = m
                while loose and last > r and self.blank(last):
                    last -= 1
                name = label(self.decls, r, last) if named else None
                if named:  # the names of what this piece declares, not of the rest of the gap
                    head = self.head(name, "")
                text = head + self.join(r, last)
                used = self.count(text) if len(text) <= self.max * _MAX_CHARS_PER_TOKEN else -1
                if 0 <= used <= self.max:
                    if not (loose and self.trivial(r, last)):
                        self.emit(text, r, last, qual, kind, name)
                    break
                if m == r:
                    self.split_line(r, qual, kind, head)
                    break
                shrunk = r + (m - r + 1) * self.max // used - 1 if used > 0 else r + (m - r) // 2
                m = max(r, min(m - 1, shrunk))
            r = m + 1

    def split_line(self, row: int, qual: str | None, kind: str, head: str) -> None:
        """A single line that does not fit: cut it at whitespace / characters into pieces."""
        line, n = self.lines[row], len(self.lines[row])
        ctx = self.head(qual, "")
        head = next((h for h in (head, ctx, "") if self.count(h + line[:1]) <= self.max), "")
        hc = self.count(head)
        if self.count(head + line[:1]) > self.max:
            raise ValueError(f"max_tokens={self.max} cannot hold a single character")
        pos, guess = 0, 4 * max(1, self.max - hc)
        while pos < n:
            if n - pos <= guess * 2 and self.count(head + line[pos:]) <= self.max:
                self.emit(head + line[pos:], row, row, qual, kind)
                return
            rest = n - pos
            lo, hi, probe, steps = 0, rest + 1, min(guess, rest), 0  # hi > rest: unknown
            while hi - lo > max(1, lo // 32):  # a few % short of the maximum is fine
                used = self.count(head + line[pos : pos + probe])
                lo, hi = (probe, hi) if used <= self.max else (lo, probe)
                est = probe * (self.max - hc) // max(1, used - hc)  # interpolate, then bisect
                est, steps = max(probe // 2, min(probe * 2, est)), steps + 1
                if steps < 3 and lo < est < hi:
                    probe = est
                else:
                    probe = (lo + hi) // 2 if hi <= rest else min(lo * 2, rest)
            if lo == 0:
                lo = 1
                if self.count(head + line[pos]) > self.max:
                    raise ValueError(f"max_tokens={self.max} cannot hold {line[pos]!r}")
            space = max(line.rfind(" ", pos, pos + lo), line.rfind("\t", pos, pos + lo)) - pos
            cut = space + 1 if space + 1 > lo // 2 else lo
            if cut != lo and self.count(head + line[pos : pos + cut]) > self.max:
                cut = lo  # (token counts of prefixes are not always monotonic)
            self.emit(head + line[pos : pos + cut], row, row, qual, kind)
            pos, guess = pos + cut, lo

    # -- symbols
    def ext_start(self, row: int, lo: int, d: Def | None = None) -> int:
        """The first row of a definition's leading comments: lines that start as comments do,
        and a block comment the parse puts right above it, whatever its inner lines start with
        (jsoup writes Javadoc without `*`; split off, it was untitled module code)."""
        while row - 1 >= lo and self.lines[row - 1].lstrip().startswith(self.comments):
            row -= 1
        node = d.node if d is not None else None
        while node is not None and (up := node.parent) is not None and up.end_byte == node.end_byte:
            node = up  # (an `export`, a decorator, a template: the wrapper's sibling)
        prev = node.prev_sibling if node is not None else None
        if prev is None or "comment" not in prev.type or prev.start_point.row < lo:
            return row
        text, at = node_text(prev), prev.start_point
        alone = not self.lines[at.row][: at.column].strip()  # (not `x = 5; /* c */`)
        if alone and text.startswith("/*") and not LICENCE.search(text):
            return min(row, at.row) if row <= last_row(prev) + 1 else row
        return row

    def parts(self, defs: list[Def], a: int, b: int) -> list[tuple[int, int, Def | None]]:
        """Split rows a..b into definitions (with their leading comments) and gaps."""
        out: list[tuple[int, int, Def | None]] = []
        cur = a
        for d in defs:
            s, e = max(d.start, cur), min(d.end, b)
            if e < s:
                continue
            s = self.ext_start(s, cur, d) if s == d.start else s
            self.add_gap(out, cur, s - 1)
            out.append((s, e, d))
            cur = e + 1
        self.add_gap(out, cur, b)
        return out

    def add_gap(self, out: list[tuple[int, int, Def | None]], a: int, b: int) -> None:
        while a <= b and self.blank(a):
            a += 1
        while b >= a and self.blank(b):
            b -= 1
        if a <= b:
            out.append((a, b, None))

    def gap(self, a: int, b: int, anc: list[Def], owner: Def | None) -> None:
        if owner is None:
            self.pack(a, b, None, "module", [], None, self.root_breaks(a, b), loose=True)
        else:
            self.pack(
                a, b, owner.qualname, owner.kind, anc, owner, self.body_breaks(owner, a, b), True
            )

    def body_breaks(self, d: Def, a: int, b: int) -> dict[int, int]:
        body = d.node.child_by_field_name("body")
        return self.breaks((body or d.node).named_children, a, b)

    def items(self, defs: list[Def], a: int, b: int, anc: list[Def], owner: Def | None) -> None:
        """Each definition its own chunk(s); code between them packed with the owner's context."""
        inner = [*anc, owner] if owner else anc
        for s, e, d in self.parts(defs, a, b):
            if d is not None:
                self.symbol(d, s, e, inner)
            elif owner is None or not all(
                self.blank(i) or owner.def_start <= i <= owner.hdr_end or self.trivial(i, i)
                for i in range(s, e + 1)
            ):
                self.gap(s, e, anc, owner)

    def symbol(self, d: Def, a: int, b: int, anc: list[Def]) -> None:
        text = self.head(d.qualname, self.prefix(anc, d, a)) + self.join(a, b)
        if self.fits(text):
            self.emit(text, a, b, d.qualname, d.kind)
        elif d.children and d.kind in SCOPES:
            self.items(d.children, a, b, anc, d)
        elif d.children and d.kind in CLASSLIKE:
            self.group(d, a, b, anc)
        else:
            self.pack(a, b, d.qualname, d.kind, anc, d, self.body_breaks(d, a, b))

    def group(self, d: Def, a: int, b: int, anc: list[Def]) -> None:
        """Class too long: header chunk, then methods alone or in groups that fit."""
        inner = [*anc, d]
        parts = self.parts(d.children, a, b)
        if parts and parts[0][2] is None:
            s, e, _ = parts.pop(0)
            self.pack(s, e, d.qualname, d.kind, anc, d, self.body_breaks(d, s, e))
        merged: list[tuple[int, int, Def | None, int]] = []  # gap + following member
        pending: tuple[int, int] | None = None
        for s, e, m in parts:
            if m is None:
                pending = (s, e)
            else:
                merged.append((s if pending is None else pending[0], e, m, s))
                pending = None
        if pending is not None:
            merged.append((*pending, None, pending[0]))
        group: list[Def | None] = []
        ga, gb = 0, -1

        def text_for(
            members: list[Def | None], s: int, e: int
        ) -> tuple[str, str | None, str, str | None]:
            """A group's text, symbol, kind and title: a group of members is titled by what
            it holds (``InteractivePrinter: print_snip, print_header``), not by its class
            alone, so that a question naming one of them can match its title."""
            real = [m for m in members if m is not None]
            qual, kind, name = d.qualname, d.kind, None
            if len(real) == 1:
                qual, kind = real[0].qualname, real[0].kind
            elif real:
                kind = "method_group" if all(m.kind == "method" for m in real) else "group"
                name = f"{d.qualname}: {join_names([m.name for m in real])}"
            head = self.head(name or qual, self.prefix(inner, None, s))
            return head + self.join(s, e), qual, kind, name

        def flush() -> None:
            if group and not (all(m is None for m in group) and self.trivial(ga, gb)):
                text, qual, kind, name = text_for(group, ga, gb)
                self.emit(text, ga, gb, qual, kind, name)
            group.clear()

        for s, e, m, ms in merged:
            if group and self.fits(text_for([*group, m], ga, e)[0]):
                group.append(m)
                gb = e
                continue
            flush()
            if self.fits(text_for([m], s, e)[0]):
                group.append(m)
                ga, gb = s, e
            elif m is None:
                self.gap(s, e, anc, d)
            else:
                if ms > s and not all(self.blank(i) for i in range(s, ms)):
                    self.gap(s, ms - 1, anc, d)
                    s = ms
                self.symbol(m, s, e, inner)
        flush()

    def run(self, defs: list[Def]) -> None:
        self.items(defs, 0, len(self.lines) - 1, [], None)

    def windows(self) -> None:
        self.pack(0, len(self.lines) - 1, None, "window", [], None, {}, True, WINDOW_LINES)


def mark_tests(chunks: list[CodeChunk], spans: list[tuple[int, int]]) -> list[CodeChunk]:
    """Chunks wholly inside test code (``rows_of_tests``: 0-based rows, sorted, not overlapping)
    as kind ``test``: the store reads it, with the path, as test code (retrieval's
    ``test_penalty``)."""
    starts = [a for a, _ in spans]

    def inside(c: CodeChunk) -> bool:
        i = bisect.bisect_right(starts, c.start_line - 1) - 1
        return i >= 0 and spans[i][1] >= c.end_line - 1

    return [replace(c, kind="test") if inside(c) else c for c in chunks]


def chunk_code(
    path: str, source: str, count_tokens: Callable[[str], int], max_tokens: int, parse: bool = True
) -> tuple[list[CodeChunk], list[SymbolDef]]:
    """Chunk one source file; returns (chunks in file order, symbol table). ``parse=False``:
    line windows only."""
    if not source.strip():
        return [], []
    lines = source.removesuffix("\n").split("\n")
    lang = language_for_path(path) if parse else None
    if lang == "c" and path.endswith(".h"):
        lang = header_language(source)
    defs: list[Def] | None = None
    root: Node | None = None
    if lang is not None:
        try:
            parser = Parser(language(lang))
            text = for_parser(source) if lang in ("c", "cpp") else source
            root = parser.parse(text.encode("utf-8", "replace")).root_node
            defs = collect_defs(root, lang, default_export_name(path))
        except Exception:  # grammar missing / parser failure: fall back to windows
            log.warning("tree-sitter failed for %s; using line windows", path, exc_info=True)
            defs, root = None, None
    decls = declarations(root, lang) if root is not None and lang else []
    spec = LANGS[lang] if lang else None
    chunker = _Chunker(path, lines, count_tokens, max_tokens, spec, root, decls)
    if defs is None:
        chunker.windows()
        return chunker.out, []
    chunker.run(defs)
    if root is not None and lang and not path.endswith("__init__.py"):
        # Imports and licence text alone: no chunk (boiler.py). A package's `__init__.py` is its
        # public API (re-exports); a file of boilerplate alone keeps its chunks, so that a
        # question or a trace naming it still finds it.
        bare = boilerplate(root, lang).only_boilerplate
        kept = [c for c in chunker.out if not bare(lines, c.start_line - 1, c.end_line - 1)]
        chunker.out = kept or chunker.out
    if root is not None and lang and (spans := rows_of_tests(root, lang)):
        chunker.out = mark_tests(chunker.out, spans)
    sites = call_sites(root, lang) if root is not None and lang else []
    symbols = [
        SymbolDef(d.name, d.qualname, d.kind, d.start + 1, d.end + 1,
                  calls_of(d.node, [c.node for c in d.children], sites))
        for d in walk_defs(defs)
    ]  # fmt: skip
    for c in decls:  # constants and the like: an exact hit when a question names one
        symbols.append(SymbolDef(c.name, c.name, c.kind, c.start + 1, c.end + 1))
        symbols.extend(SymbolDef(k, f"{c.name}.{k}", "function", s + 1, e + 1)
                       for k, s, e in c.members)  # fmt: skip
    symbols.extend(SymbolDef(n, q, "constant", s + 1, e + 1)
                   for n, q, s, e in member_constants(defs, lang or ""))  # fmt: skip
    return chunker.out, symbols


def chunk(doc: Document, count: TokenCounter, window: int) -> tuple[list[Chunk], list[Symbol]]:
    """The chunker contract (``core.chunk``): a source file → chunks and its symbol table."""
    assert doc.path is not None
    try:
        code_chunks, defs = chunk_code(doc.path, doc.text, count, window)
    except RecursionError:  # definitions nested deeper than Python's stack: line windows
        log.warning("%s: nested too deeply to chunk by symbol; using line windows", doc.path)
        code_chunks, defs = chunk_code(doc.path, doc.text, count, window, parse=False)
    chunks = [
        Chunk("code", doc.key, cc.text, cc.label or cc.symbol or doc.path, count(cc.text),
              path=doc.path, start_line=cc.start_line, end_line=cc.end_line, symbol=cc.symbol,
              kind=cc.kind)
        for cc in code_chunks
    ]  # fmt: skip
    return chunks, [Symbol(d.name, d.qualname, d.kind, doc.path, d.start_line, d.end_line,
                           d.calls) for d in defs]  # fmt: skip
