"""Rust's tests beside the code they test: which rows of a source file are test code.

Rust keeps unit tests in the file they test — an item under `#[cfg(test)]` (usually `mod
tests`), a function under a test attribute (`#[test]`, `#[tokio::test]`, `#[test_case(…)]`,
`#[rstest]`, `#[wasm_bindgen_test]`), or a whole file under `#![cfg(test)]`. Other languages
keep tests in files of their own (``models.is_test_path``). A `cfg` predicate counts when it
cannot hold without `test` (`test`, `all(test, feature = "x")`), never when it can
(`any(test, fuzzing)`, `not(test)`, `feature = "test-util"`): it is evaluated with `test`
false and every other option unknown (:func:`_needs_test`).
"""

from __future__ import annotations

import re

from tree_sitter import Node

_TEST_ATTR = re.compile(r"^#\[(?:[\w:]*::)?(?:test|\w+_test|test_case|rstest|bench|quickcheck)\b")
_CFG = re.compile(r"^#!?\[cfg\((.*)\)\]$", re.S)
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|[A-Za-z_]\w*|[(),=]')
# Items an attribute may put under test; a span covers the item and what is written before it.
_ITEMS = frozenset(
    "mod_item function_item impl_item struct_item enum_item union_item const_item static_item "
    "trait_item type_item macro_invocation macro_definition use_declaration".split()
)
_COMMENTS = ("line_comment", "block_comment")


def _needs_test(predicate: str) -> bool:
    """Whether a `cfg(…)` predicate is false whenever `test` is: three-valued, with `test`
    false and every other option (features, targets, `debug_assertions` …) unknown."""
    tokens = _TOKEN.findall(predicate)
    pos = 0

    def expr() -> bool | None:
        nonlocal pos
        if pos >= len(tokens):
            return None
        word = tokens[pos]
        pos += 1
        if pos < len(tokens) and tokens[pos] == "(" and word in ("all", "any", "not"):
            pos += 1
            args: list[bool | None] = []
            while pos < len(tokens) and tokens[pos] != ")":
                if tokens[pos] == ",":
                    pos += 1
                    continue
                args.append(expr())
            pos += 1  # the closing parenthesis
            if word == "not":
                return None if not args or args[0] is None else not args[0]
            if word == "all":
                return False if False in args else (None if None in args else True)
            return True if True in args else (None if None in args else False)
        if pos < len(tokens) and tokens[pos] == "=":  # feature = "x": unknown
            pos += 2
            return None
        return False if word == "test" else None

    return expr() is False


def _attr_text(node: Node) -> str:
    return node.text.decode("utf-8", "replace") if node.text else ""


def _cfg_test(attr: str) -> bool:
    """An attribute `#[cfg(…)]` or `#![cfg(…)]` whose predicate needs `test`."""
    m = _CFG.match(attr)
    return m is not None and _needs_test(m.group(1))


def _is_test(attrs: list[str], item: str) -> bool:
    return any(_cfg_test(t) for t in attrs) or (
        item == "function_item" and any(_TEST_ATTR.match(t) for t in attrs)
    )


def rows_of_tests(root: Node, lang: str) -> list[tuple[int, int]]:
    """Rows (0-based, inclusive, sorted, apart) of the test code in a source file: in Rust the
    items under a test attribute with their attributes and the comments on the lines above
    them (not a comment that ends the line before, nor a `//!` inner doc comment), or every row
    of a file under `#![cfg(test)]`."""
    if lang != "rust":
        return []
    if any(c.type == "inner_attribute_item" and _cfg_test(_attr_text(c))
           for c in root.named_children):  # fmt: skip
        return [(0, root.end_point.row)]
    out: list[tuple[int, int]] = []
    todo = [root]
    while todo:
        node = todo.pop()
        attrs: list[str] = []
        lead: Node | None = None  # the first of the comments and attributes before an item
        prev_end = -1  # the last row of the item before
        for child in node.named_children:
            if child.type in _COMMENTS:
                inner = _attr_text(child).startswith(("//!", "/*!"))
                if lead is None and (inner or child.start_point.row <= prev_end):
                    continue
                lead = lead or child
                continue
            if child.type == "attribute_item":
                lead = lead or child
                attrs.append(_attr_text(child))
                continue
            if attrs and child.type in _ITEMS and _is_test(attrs, child.type):
                out.append(((lead or child).start_point.row, child.end_point.row))
            elif child.type in ("mod_item", "impl_item", "trait_item"):
                body = child.child_by_field_name("body")
                if body is not None:
                    todo.append(body)
            attrs, lead, prev_end = [], None, child.end_point.row
    return sorted(out)
