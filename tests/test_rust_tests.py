"""Rust's tests beside the code (core/chunk/rust_tests.py): which rows are test code."""

from __future__ import annotations

import pytest
import tree_sitter_rust
from tree_sitter import Language, Parser

from core.chunk.rust_tests import _needs_test, rows_of_tests


def spans(src: str) -> list[tuple[int, int]]:
    root = Parser(Language(tree_sitter_rust.language())).parse(src.encode()).root_node
    return rows_of_tests(root, "rust")


@pytest.mark.parametrize(
    ("predicate", "test_only"),
    [
        ("test", True),
        ('all(test, feature = "slow")', True),
        ("all(unix, all(test))", True),
        ("any(test, fuzzing)", False),  # also built without tests
        ("not(test)", False),
        ("not(any(test, loom))", False),  # only outside tests
        ('feature = "test-util"', False),  # "test" in a string is a feature's name
        ("all(not(test), unix)", False),
        ("testing", False),
    ],
)
def test_a_cfg_counts_when_it_cannot_hold_without_test(predicate: str, test_only: bool) -> None:
    assert _needs_test(predicate) is test_only


def test_items_under_a_test_attribute_with_the_comments_above_them() -> None:
    src = (
        "pub const LIMIT: usize = 64; // the limit\n"  # 0: a comment ending the line before
        "#[cfg(test)]\n"  # 1
        "mod tests;\n"  # 2
        "// Pauses the clock.\n"  # 3
        '#[cfg(feature = "test-util")]\n'  # 4
        "pub fn pause() {}\n"  # 5
        "/// A fixture.\n"  # 6
        "#[cfg(test)]\n"  # 7
        "struct Fixture;\n"  # 8
        "#[wasm_bindgen_test]\n"  # 9
        "fn in_browser() {}\n"  # 10
        "//! The crate's own docs.\n"  # 11
        "#[cfg(not(any(test, loom)))]\n"  # 12
        "fn real() {}\n"  # 13
    )
    assert spans(src) == [(1, 2), (6, 8), (9, 10)]


def test_a_file_under_an_inner_cfg_test_is_test_code_whole() -> None:
    assert spans("//! Helpers.\n#![cfg(test)]\n\nfn helper() {}\n") == [(0, 4)]
    assert spans('#![cfg(any(test, feature = "mock"))]\nfn helper() {}\n') == []


def test_only_rust_reads_attributes() -> None:
    root = Parser(Language(tree_sitter_rust.language())).parse(b"#[test]\nfn t() {}\n").root_node
    assert rows_of_tests(root, "rust") == [(0, 1)] and rows_of_tests(root, "c") == []
