"""Boilerplate: the lines of a source file that only say where it lives and what it uses —
package and namespace declarations, imports, include guards, licence headers.

A chunk holding nothing else answers no question yet takes a cited slot (gson: 91 of its 767
code chunks were a licence header, ``package …;`` and imports; just: a chunk ``use super::*;``
atop most files), so the chunker leaves it out (:meth:`Rows.only_boilerplate`). Read from the
syntax tree, not by pattern, so that a multi-line ``import (…)`` or ``use a::{…};`` is whole.
What a file declares, imports and calls is read from the tree too, never from its chunks: the
symbol table and the code graph are the same with or without these chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node

from core.chunk.code_langs import last_row, node_text

__all__ = ["LICENCE", "Rows", "boilerplate"]

_JS = frozenset({"import_statement"})
# Per language: statements that only place the file or import (more in :func:`_is_boiler`).
_STATEMENTS: dict[str, frozenset[str]] = {
    "python": frozenset({"import_statement", "import_from_statement", "future_import_statement"}),
    "javascript": _JS,
    "typescript": _JS,
    "tsx": _JS,
    "go": frozenset({"package_clause", "import_declaration"}),
    "rust": frozenset({"use_declaration", "extern_crate_declaration"}),
    "java": frozenset({"package_declaration", "import_declaration"}),
    "kotlin": frozenset({"package_header", "import", "import_list", "import_header"}),
    "swift": frozenset({"import_declaration"}),
    "c": frozenset({"preproc_include"}),
    "cpp": frozenset({"preproc_include", "using_declaration"}),
    "csharp": frozenset(
        {"using_directive", "extern_alias_directive", "file_scoped_namespace_declaration"}
    ),
    "php": frozenset({"php_tag", "declare_statement", "namespace_use_declaration"}),
}
_PACKAGE = frozenset({"package_clause", "package_declaration", "package_header"})
# Namespaces whose header (and body's imports) are boilerplate; C's preprocessor blocks.
_NAMESPACES = frozenset({"mod_item", "namespace_definition", "namespace_declaration"})
_C_BLOCKS = frozenset(
    {"preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif", "preproc_elifdef",
     "linkage_specification", "declaration_list"}
)  # fmt: skip
_COMMENTS = frozenset({"comment", "line_comment", "block_comment", "multiline_comment"})
_ATTRIBUTES = frozenset({"attribute_item"})  # Rust's `#[cfg(…)]`: as the item it annotates
LICENCE = re.compile(r"copyright|licen[cs]e|spdx|all rights reserved", re.IGNORECASE)
_DOC = ("///", "//!", "/**", "/*!")
_CGO = re.compile(r'import\s+"C"')
_DIRECTIVES = frozenset({"use strict", "use client", "use server"})
_RUBY_REQUIRE = frozenset({"require", "require_relative"})
_PHP_REQUIRE = frozenset({"require", "require_once", "include", "include_once"})


@dataclass
class Rows:
    """A file's rows (0-based) by what they hold; a row of code and anything else is code."""

    boiler: set[int] = field(default_factory=set)  # imports, declarations, licence text
    comment: set[int] = field(default_factory=set)  # other comments (not documentation)
    code: set[int] = field(default_factory=set)  # the rest, documentation comments included

    def only_boilerplate(self, lines: list[str], a: int, b: int) -> bool:
        """Whether rows a..b hold nothing but boilerplate, blank lines and comments, and some
        boilerplate: a chunk of comments alone (a note, code commented out) is kept."""
        some = False
        for r in range(a, b + 1):
            if r in self.code:
                return False
            if r in self.boiler:
                some = True
            elif r not in self.comment and lines[r].strip():
                return False  # a row no statement explains (a `}`, an `#endif`): kept
        return some


def boilerplate(root: Node, lang: str) -> Rows:
    rows = Rows()
    _visit(list(root.named_children), lang, rows)
    rows.boiler -= rows.code
    rows.comment -= rows.code | rows.boiler
    return rows


def _span(node: Node) -> range:
    return range(node.start_point.row, last_row(node) + 1)


def _visit(nodes: list[Node], lang: str, rows: Rows) -> None:
    i, attrs = 0, list[Node]()
    while i < len(nodes):
        node = nodes[i]
        if node.type in _COMMENTS:
            j = i  # a block: comments on consecutive rows
            while (
                j + 1 < len(nodes)
                and nodes[j + 1].type in _COMMENTS
                and nodes[j + 1].start_point.row <= last_row(nodes[j]) + 1
            ):
                j += 1
            block, after = nodes[i : j + 1], nodes[j + 1] if j + 1 < len(nodes) else None
            target = _comment_kind(block, after, rows)
            for c in block:
                target.update(_span(c))
            i = j + 1
            continue
        if node.type in _ATTRIBUTES:
            attrs.append(node)
            i += 1
            continue
        body = _body(node, lang)
        if _is_boiler(node, lang):
            rows.boiler.update(_span(node))
        elif body is not None:
            _container(node, body, lang, rows)
        else:
            rows.code.update(_span(node))
        first = node.start_point.row
        into = rows.boiler if first in rows.boiler and first not in rows.code else rows.code
        for a in attrs:
            into.update(_span(a))
        attrs = []
        i += 1
    for a in attrs:
        rows.code.update(_span(a))


def _comment_kind(block: list[Node], after: Node | None, rows: Rows) -> set[int]:
    """Licence text is boilerplate; documentation (``///``, ``/** … */``, a Go package's
    ``// Package x …`` or a Java ``package-info``'s comment right above its package line) is
    content; other comments are neither."""
    text = "\n".join(node_text(c) for c in block)
    if LICENCE.search(text) or text.startswith("/// <reference"):  # (TypeScript's imports)
        return rows.boiler
    adjoins = after is not None and after.start_point.row == last_row(block[-1]) + 1
    doc = any(node_text(c).startswith(_DOC) for c in block)
    if doc or (adjoins and after is not None and after.type in _PACKAGE):
        return rows.code
    if adjoins and after is not None and _CGO.fullmatch(node_text(after).strip()):
        return rows.code  # Go's cgo preamble: C code in the comment above `import "C"`
    return rows.comment


def _body(node: Node, lang: str) -> Node | None:
    """The body of a namespace or preprocessor block, whose statements are read as a file's."""
    if node.type in _NAMESPACES:
        return node.child_by_field_name("body")
    if lang in ("c", "cpp") and node.type in _C_BLOCKS:
        return node
    return None


def _container(node: Node, body: Node, lang: str, rows: Rows) -> None:
    kids = list(body.named_children)
    if node.type in _NAMESPACES:  # `namespace X {`, `mod tests {`: like a package line
        rows.boiler.update(range(node.start_point.row, body.start_point.row + 1))
    elif _include_guard(node):  # `#ifndef X_H` / `#define X_H` … `#endif`
        rows.boiler.update({node.start_point.row, kids[1].start_point.row, last_row(node)})
        kids = kids[2:]
    else:  # `#if …`, `extern "C" {`: its condition is code
        kids = [k for k in kids if last_row(k) > node.start_point.row]
        rows.code.add(node.start_point.row)
    _visit(kids, lang, rows)


def _include_guard(node: Node) -> bool:
    kids = node.named_children
    return (
        node.type == "preproc_ifdef"
        and len(kids) > 1
        and node.children[0].type == "#ifndef"
        and kids[1].type == "preproc_def"
        and kids[1].child_by_field_name("value") is None
        and node_text(kids[1].child_by_field_name("name")) == node_text(kids[0])
    )


def _is_boiler(node: Node, lang: str) -> bool:
    t = node.type
    if lang == "rust" and any(c.type == "visibility_modifier" for c in node.children):
        return False  # `pub use …`, `pub mod x;`: a crate's public API (a re-export), not an import
    if t in _STATEMENTS.get(lang, ()):
        return True
    if lang == "rust" and t == "mod_item":
        return node.child_by_field_name("body") is None  # `mod x;`
    if lang == "php" and t == "namespace_definition":
        return node.child_by_field_name("body") is None  # `namespace A\B;`
    if lang in ("c", "cpp") and t == "preproc_call":  # `#pragma once`
        return node_text(node).split() == ["#pragma", "once"]
    if lang in ("javascript", "typescript", "tsx"):
        if t in ("lexical_declaration", "variable_declaration"):  # const x = require('x')
            values = [d.child_by_field_name("value") for d in node.named_children
                      if d.type == "variable_declarator"]  # fmt: skip
            return bool(values) and all(_required(v) for v in values)
        if t == "expression_statement" and len(node.named_children) == 1:  # 'use strict';
            s = node.named_children[0]
            return s.type == "string" and node_text(s)[1:-1] in _DIRECTIVES
    if lang == "ruby" and t == "call":  # require 'x'
        method = node.child_by_field_name("method")
        return node.child_by_field_name("receiver") is None and node_text(method) in _RUBY_REQUIRE
    if lang == "php" and t == "expression_statement" and node.named_children:  # require_once
        return node.named_children[0].type.removesuffix("_expression") in _PHP_REQUIRE
    return False


def _required(value: Node | None) -> bool:
    """``require('x')``, or a member of it (``require('x').y``)."""
    while value is not None and value.type == "member_expression":
        value = value.child_by_field_name("object")
    if value is None or value.type != "call_expression":
        return False
    return node_text(value.child_by_field_name("function")) == "require"
