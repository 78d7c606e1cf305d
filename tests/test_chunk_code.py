"""Tests for the tree-sitter code chunker (core/chunk/code.py)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest

from core.chunk.code import CodeChunk, SymbolDef, chunk_code, language_for_path


def words(text: str) -> int:
    """Cheap deterministic stand-in for a tokenizer: 2 special tokens + whitespace words."""
    return len(text.split()) + 2


def chars(text: str) -> int:
    return len(text) // 4 + 2


def src_lines(source: str) -> list[str]:
    lines = source.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def check(
    source: str,
    chunks: list[CodeChunk],
    max_tokens: int,
    count: Callable[[str], int] = words,
) -> None:
    """Invariants every result must satisfy."""
    lines = src_lines(source)
    prev_end = 0
    for c in chunks:
        assert count(c.text) <= max_tokens, c
        assert 1 <= c.start_line <= c.end_line <= len(lines), c
        code = "\n".join(lines[c.start_line - 1 : c.end_line])
        if c.text.endswith("\n" + code):
            assert c.start_line > prev_end, f"chunks out of order / overlapping: {c}"
        else:  # a piece of a single line too long for the budget
            assert c.start_line == c.end_line >= prev_end, c
            assert c.text.split("\n", 1)[1] in lines[c.start_line - 1], c
        prev_end = c.end_line


def by_symbol(chunks: list[CodeChunk]) -> dict[str | None, list[CodeChunk]]:
    out: dict[str | None, list[CodeChunk]] = {}
    for c in chunks:
        out.setdefault(c.symbol, []).append(c)
    return out


def sym_table(symbols: list[SymbolDef]) -> list[tuple[str, str, int, int]]:
    return [(s.qualname, s.kind, s.start_line, s.end_line) for s in symbols]


# --------------------------------------------------------------------------- languages


def test_language_for_path() -> None:
    assert language_for_path("a/b/c.py") == "python"
    assert language_for_path("x.pyi") == "python"
    assert language_for_path("web/app.jsx") == "javascript"
    assert language_for_path("web/app.mjs") == "javascript"
    assert language_for_path("web/app.ts") == "typescript"
    assert language_for_path("web/App.tsx") == "tsx"
    assert language_for_path("cmd/main.go") == "go"
    assert language_for_path("src/lib.rs") == "rust"
    assert language_for_path("Foo.java") == "java"
    assert language_for_path("x.c") == "c"
    assert language_for_path("x.h") == "c"
    assert language_for_path("x.cpp") == "cpp"
    assert language_for_path("x.hpp") == "cpp"
    assert language_for_path("x.CC") == "cpp"
    assert language_for_path("lib/foo.rb") == "ruby"
    assert language_for_path("Rakefile") == "ruby"
    assert language_for_path("README.md") is None
    assert language_for_path("Makefile") is None
    assert language_for_path("noext") is None


PY = '''import os
from typing import Any

TIMEOUT = 30


@dataclass
class Config(Base):
    """Settings."""

    name: str = "x"

    def load(self, path: str) -> Config:
        return self

    @staticmethod
    def default() -> Config:
        return Config()


def main(argv: list[str]) -> int:
    def helper() -> None:
        pass

    return 0


if __name__ == "__main__":
    main([])
'''


def test_python_symbols_and_chunks() -> None:
    chunks, symbols = chunk_code("src/pkg/config.py", PY, words, 500)
    check(PY, chunks, 500)
    assert sym_table(symbols) == [
        ("Config", "class", 7, 18),
        ("Config.load", "method", 13, 14),
        ("Config.default", "method", 16, 18),
        ("main", "function", 21, 25),
        ("main.helper", "function", 22, 23),
        ("TIMEOUT", "constant", 4, 4),  # a module-level constant: a name a question can use
    ]
    assert symbols[1].name == "load"
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("module", None, 1, 4),
        ("class", "Config", 7, 18),
        ("function", "main", 21, 25),
        ("module", None, 28, 29),
    ]
    # module code is named by what it declares
    assert (
        chunks[0].text
        == "src/pkg/config.py › TIMEOUT\nimport os\nfrom typing import Any\n\nTIMEOUT = 30"
    )
    # the decorator is part of the class chunk
    assert chunks[1].text.startswith("src/pkg/config.py › Config\n@dataclass\nclass Config(Base):")
    assert chunks[3].text.endswith('if __name__ == "__main__":\n    main([])')


def test_python_comment_before_def_is_attached() -> None:
    src = "X = 1\n\n# Adds numbers.\n# Really.\ndef add(a, b):\n    return a + b\n"
    chunks, _ = chunk_code("m.py", src, words, 200)
    assert [(c.kind, c.start_line, c.end_line) for c in chunks] == [
        ("module", 1, 1),
        ("function", 3, 6),
    ]
    assert (
        chunks[1].text == "m.py › add\n# Adds numbers.\n# Really.\ndef add(a, b):\n    return a + b"
    )


JS = """import { x } from "./x.js";

/** Greeter. */
export class Greeter {
  constructor(name) {
    this.name = name;
  }

  greet() {
    return `hi ${this.name}`;
  }
}

export function add(a, b) {
  return a + b;
}

const twice = (f) => (v) => f(f(v));
"""


def test_javascript() -> None:
    chunks, symbols = chunk_code("web/greet.js", JS, words, 500)
    check(JS, chunks, 500)
    assert sym_table(symbols) == [
        ("Greeter", "class", 4, 12),
        ("Greeter.constructor", "method", 5, 7),
        ("Greeter.greet", "method", 9, 11),
        ("add", "function", 14, 16),
        ("twice", "function", 18, 18),
    ]
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("class", "Greeter", 3, 12),  # JSDoc comment included (line 1, an import: no chunk)
        ("function", "add", 14, 16),
        ("function", "twice", 18, 18),
    ]


TS = """export interface Shape {
  area(): number;
}

export type Id = string;

enum Color {
  Red,
  Green,
}

export class Circle implements Shape {
  constructor(private r: number) {}

  area(): number {
    return Math.PI * this.r ** 2;
  }
}

export default function makeCircle(r: number): Circle {
  return new Circle(r);
}
"""


def test_typescript_and_tsx() -> None:
    chunks, symbols = chunk_code("src/shapes.ts", TS, words, 500)
    check(TS, chunks, 500)
    assert sym_table(symbols) == [
        ("Shape", "interface", 1, 3),
        ("Id", "type", 5, 5),
        ("Color", "enum", 7, 10),
        ("Circle", "class", 12, 18),
        ("Circle.constructor", "method", 13, 13),
        ("Circle.area", "method", 15, 17),
        ("makeCircle", "function", 20, 22),
    ]
    assert [c.symbol for c in chunks] == ["Shape", "Id", "Color", "Circle", "makeCircle"]
    tsx = "export function App(): JSX.Element {\n  return <div>hi</div>;\n}\n"
    chunks, symbols = chunk_code("src/App.tsx", tsx, words, 500)
    assert sym_table(symbols) == [("App", "function", 1, 3)]
    assert chunks[0].text == "src/App.tsx › App\n" + tsx.rstrip("\n")


GO = """package server

import "net/http"

// Server serves.
type Server struct {
	addr string
}

type Handler interface {
	Serve() error
}

// Start starts the server.
func (s *Server) Start() error {
	return http.ListenAndServe(s.addr, nil)
}

func New(addr string) *Server {
	return &Server{addr: addr}
}
"""


def test_go() -> None:
    chunks, symbols = chunk_code("server/server.go", GO, words, 500)
    check(GO, chunks, 500)
    assert sym_table(symbols) == [
        ("Server", "struct", 6, 8),
        ("Handler", "interface", 10, 12),
        ("Server.Start", "method", 15, 17),
        ("New", "function", 19, 21),
    ]
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("struct", "Server", 5, 8),  # package and import lines: no chunk
        ("interface", "Handler", 10, 12),
        ("method", "Server.Start", 14, 17),
        ("function", "New", 19, 21),
    ]
    assert chunks[2].text.startswith("server/server.go › Server.Start\n// Start starts")


RUST = """use std::fmt;

#[derive(Debug, Clone)]
pub struct Point {
    x: f64,
    y: f64,
}

impl Point {
    pub fn new(x: f64, y: f64) -> Self {
        Point { x, y }
    }

    fn norm(&self) -> f64 {
        (self.x * self.x + self.y * self.y).sqrt()
    }
}

pub trait Shape {
    fn area(&self) -> f64;
}

enum Kind {
    A,
    B,
}

fn helper() -> u32 {
    1
}
"""


def test_rust() -> None:
    chunks, symbols = chunk_code("src/geo.rs", RUST, words, 500)
    check(RUST, chunks, 500)
    assert sym_table(symbols) == [
        ("Point", "struct", 4, 7),
        ("Point", "impl", 9, 17),
        ("Point.new", "method", 10, 12),
        ("Point.norm", "method", 14, 16),
        ("Shape", "trait", 19, 21),
        ("Kind", "enum", 23, 26),
        ("helper", "function", 28, 30),
    ]
    assert [(c.kind, c.symbol, c.start_line) for c in chunks] == [
        ("struct", "Point", 3),  # the attribute line belongs to the struct (`use`: no chunk)
        ("impl", "Point", 9),
        ("trait", "Shape", 19),
        ("enum", "Kind", 23),
        ("function", "helper", 28),
    ]


RUST_TESTS = """pub fn parse(s: &str) -> u32 {
    s.len() as u32
}

#[cfg(not(test))]
fn only_in_release() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse("ab"), 2);
    }
}

mod inner {
    pub fn real() {}

    // why it matters
    #[tokio::test]
    async fn runs() {}
}

#[cfg(all(test, feature = "slow"))]
mod slow {
    fn long() {}
}
"""


def test_rust_tests_beside_the_code_are_test_chunks() -> None:
    """Rust keeps unit tests in the file they test: items under `#[cfg(test)]` (also in
    `all(…)`, never `not(test)`) and functions under a test attribute are chunks of kind
    `test`, which the store reads as test code; the code around them is not."""
    chunks, _ = chunk_code("src/parse.rs", RUST_TESTS, words, 20)
    kinds = {(c.symbol or "", c.start_line): c.kind for c in chunks}
    assert kinds[("parse", 1)] == "function"
    assert kinds[("only_in_release", 5)] == "function"
    assert {k for (s, _), k in kinds.items() if s.startswith("tests")} == {"test"}
    assert kinds[("inner.real", 19)] == "function"
    assert kinds[("inner.runs", 21)] == "test"  # with the comment above its attribute
    assert {k for (s, _), k in kinds.items() if s.startswith("slow")} == {"test"}


JAVA = """package com.example;

import java.util.List;

/**
 * A repository.
 */
public class Repo {
    private final List<String> items;

    public Repo(List<String> items) {
        this.items = items;
    }

    @Override
    public String toString() {
        return "Repo";
    }

    interface Listener {
        void changed();
    }
}
"""


def test_java() -> None:
    chunks, symbols = chunk_code("src/main/java/com/example/Repo.java", JAVA, words, 500)
    check(JAVA, chunks, 500)
    assert sym_table(symbols) == [
        ("Repo", "class", 8, 23),
        ("Repo.Repo", "method", 11, 13),
        ("Repo.toString", "method", 15, 18),
        ("Repo.Listener", "interface", 20, 22),
        ("Repo.Listener.changed", "method", 21, 21),
    ]
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("class", "Repo", 5, 23),  # package and imports: no chunk
    ]


C = """#include <stdio.h>

struct point {
    int x, y;
};

typedef struct {
    int w, h;
} size_t2;

/* Adds two ints. */
static int add(int a, int b) {
    return a + b;
}

char *name(void) {
    return "c";
}
"""


def test_c() -> None:
    chunks, symbols = chunk_code("lib/util.c", C, words, 500)
    check(C, chunks, 500)
    assert sym_table(symbols) == [
        ("point", "struct", 3, 5),
        ("size_t2", "struct", 7, 9),
        ("add", "function", 12, 14),
        ("name", "function", 16, 18),
    ]
    assert [(c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("point", 3, 5),  # `#include`: no chunk
        ("size_t2", 7, 9),
        ("add", 11, 14),
        ("name", 16, 18),
    ]


CPP = """#include <string>

namespace geo {

class Shape {
 public:
  virtual ~Shape() = default;
  double area() const { return 0.0; }
  std::string name() const;
};

}  // namespace geo

std::string geo::Shape::name() const {
  return "shape";
}

template <typename T>
T twice(T v) {
  return v + v;
}
"""


def test_cpp() -> None:
    chunks, symbols = chunk_code("src/shape.cpp", CPP, words, 500)
    check(CPP, chunks, 500)
    assert sym_table(symbols) == [
        ("geo", "namespace", 3, 12),
        ("geo.Shape", "class", 5, 10),
        ("geo.Shape.~Shape", "method", 7, 7),
        ("geo.Shape.area", "method", 8, 8),
        ("geo.Shape.name", "method", 14, 16),
        ("twice", "function", 18, 21),
    ]
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("namespace", "geo", 3, 12),  # `#include`: no chunk
        ("method", "geo.Shape.name", 14, 16),
        ("function", "twice", 18, 21),  # the template line belongs to the function
    ]


RUBY = """require "json"

module Shop
  # A cart.
  class Cart < Base
    TAX = 0.2

    def initialize(items)
      @items = items
    end

    def self.empty
      new([])
    end
  end
end
"""


def test_ruby() -> None:
    chunks, symbols = chunk_code("lib/shop/cart.rb", RUBY, words, 500)
    check(RUBY, chunks, 500)
    assert sym_table(symbols) == [
        ("Shop", "module", 3, 16),
        ("Shop.Cart", "class", 5, 15),
        ("Shop.Cart.initialize", "method", 8, 10),
        ("Shop.Cart.empty", "method", 12, 14),
        ("Shop.Cart.TAX", "constant", 6, 6),  # a constant of the class: an exact-hit target
    ]
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("module", "Shop", 3, 16),  # `require`: no chunk
    ]
    # too small for the whole module: the class becomes its own chunk under the module header
    chunks, _ = chunk_code("lib/shop/cart.rb", RUBY, words, 28)
    check(RUBY, chunks, 28)
    cart = by_symbol(chunks)["Shop.Cart"]
    assert [(c.kind, c.start_line, c.end_line) for c in cart] == [("class", 4, 15)]
    assert cart[0].text.startswith("lib/shop/cart.rb › Shop.Cart\nmodule Shop\n  # A cart.\n")


# --------------------------------------------------------------------------- splitting


def long_function(n: int) -> str:
    body = []
    for i in range(n):
        body.append(f"    value_{i} = compute(items, {i}) + offset")
        body.append(f"    total = total + value_{i} * weight")
        if i % 3 == 2:
            body.append("")
    return (
        "import math\n\n\n"
        "def process(items: list[int], offset: int = 0) -> int:\n"
        '    """Process items."""\n'
        "    total = 0\n" + "\n".join(body) + "\n    return total\n"
    )


def test_long_function_split_with_signature_repeated() -> None:
    src = long_function(40)
    max_tokens = 80
    chunks, symbols = chunk_code("pkg/proc.py", src, words, max_tokens)
    check(src, chunks, max_tokens)
    lines = src_lines(src)
    assert sym_table(symbols) == [("process", "function", 4, len(lines))]
    pieces = by_symbol(chunks)["process"]
    assert len(pieces) >= 3
    assert all(p.kind == "function" for p in pieces)
    # contiguous, covering the whole function
    assert pieces[0].start_line == 4
    assert pieces[-1].end_line == len(lines)
    for a, b in itertools.pairwise(pieces):
        assert b.start_line == a.end_line + 1
    sig = "def process(items: list[int], offset: int = 0) -> int:"
    assert pieces[0].text.split("\n")[:2] == ["pkg/proc.py › process", sig]
    for p in pieces[1:]:
        head = p.text.split("\n")
        assert head[:3] == ["pkg/proc.py › process", sig, "    ..."]
        assert "\n".join(head[3:]) == "\n".join(lines[p.start_line - 1 : p.end_line])
    # pieces prefer to start at a statement after a blank line
    starts_after_blank = [p for p in pieces[1:] if lines[p.start_line - 2] == ""]
    assert len(starts_after_blank) >= len(pieces[1:]) - 1


def long_class() -> str:
    methods = []
    for name in ("get", "put", "delete", "scan"):
        stmts = "\n".join(f"        step_{i} = self.backend.{name}(key, {i})" for i in range(6))
        methods.append(f"    def {name}(self, key: str) -> None:\n{stmts}\n")
    return (
        "class Store(Base):\n"
        '    """Key value store."""\n\n'
        "    backend: Backend\n"
        "    retries = 3\n\n" + "\n".join(methods)
    )


def test_long_class_split_into_methods_with_class_header() -> None:
    src = long_class()
    max_tokens = 60
    chunks, symbols = chunk_code("kv/store.py", src, words, max_tokens)
    check(src, chunks, max_tokens)
    assert [s.qualname for s in symbols] == [
        "Store",
        "Store.get",
        "Store.put",
        "Store.delete",
        "Store.scan",
    ]
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("class", "Store", 1, 5),
        ("method", "Store.get", 7, 13),
        ("method", "Store.put", 15, 21),
        ("method", "Store.delete", 23, 29),
        ("method", "Store.scan", 31, 37),
    ]
    assert chunks[0].text == (
        'kv/store.py › Store\nclass Store(Base):\n    """Key value store."""\n\n'
        "    backend: Backend\n    retries = 3"
    )
    for c in chunks[1:]:
        text = c.text.split("\n")
        assert c.symbol is not None
        assert text[1] == "class Store(Base):"
        assert text[2].startswith(f"    def {c.symbol.split('.')[1]}(self")


def test_small_methods_are_grouped() -> None:
    methods = "\n".join(f"    def m{i}(self):\n        return {i}\n" for i in range(12))
    src = f"class Many:\n    x = 1\n\n{methods}"
    chunks, _ = chunk_code("many.py", src, words, 40)
    check(src, chunks, 40)
    groups = [c for c in chunks if c.kind == "method_group"]
    assert groups, [c.kind for c in chunks]
    assert all(c.symbol == "Many" for c in groups)
    assert all(c.text.split("\n")[1] == "class Many:" for c in groups)
    assert chunks[0].kind == "class" and chunks[0].end_line == 2
    # every method line is covered
    covered = {i for c in chunks for i in range(c.start_line, c.end_line + 1)}
    lines = src_lines(src)
    assert all(i + 1 in covered for i, line in enumerate(lines) if line.strip())


def test_a_method_group_is_titled_by_the_methods_it_holds() -> None:
    """A chunk of several methods names them, in its context line and as its title, so that a
    question naming one (`print_snip`) can match it; eight at most, then "…". Its symbol stays
    the class."""
    from core.chunk.code import chunk
    from core.models import Document

    def grouped(path: str, src: str, max_tokens: int) -> list[tuple[str, str, str | None]]:
        doc = Document("code", path, src, "h", path=path, title=path)
        chunks = [c for c in chunk(doc, words, max_tokens)[0] if c.kind == "method_group"]
        return [(c.text.split("\n", 1)[0], c.title, c.symbol) for c in chunks]

    fns = "".join(f"    fn print_{n}(&self) -> u8 {{\n        {i}\n    }}\n\n"
                  for i, n in enumerate(["snip", "header", "footer", "line"]))  # fmt: skip
    rust = f"impl<'a> InteractivePrinter<'a> {{\n{fns}}}\n"
    title = "InteractivePrinter: print_snip, print_header"
    assert grouped("src/printer.rs", rust, 30) == [
        (f"src/printer.rs › {title}", title, "InteractivePrinter"),
        ("src/printer.rs › InteractivePrinter: print_footer, print_line",
         "InteractivePrinter: print_footer, print_line", "InteractivePrinter"),
    ]  # fmt: skip
    methods = "\n".join(f"    def m{i}(self):\n        return {i}\n" for i in range(30))
    src = f"class Many:\n    x = 1\n\n{methods}"
    got = grouped("many.py", src, 110)
    assert got and all(sym == "Many" and head == f"many.py › {t}" for head, t, sym in got)
    assert got[0][1] == "Many: m0, m1, m2, m3, m4, m5, m6, m7, …"  # (it holds more)


def test_a_line_of_code_ending_in_a_comment_above_a_blank_line_is_not_a_doc_block() -> None:
    """``x = 5; /* five */`` or ``#endif /* X */`` end in ``*/`` but are code, and a file's own
    ``/** @fileoverview */`` is not the next function's: the definition below starts at its own
    first line (a doc-block rule tried in s52 once raised here, and left the file out)."""
    src = ("int x = 5; /* five */\n\nint f(void) {\n  return 1;\n}\n#endif /* X_H */\n\n"
           "int g(void);\n")  # fmt: skip
    chunks, _ = chunk_code("a.c", src, words, 500)
    check(src, chunks, 500, words)
    tight = "int x = 5; /* five */\nint f(void) {\n  return 1;\n}\n"  # no blank line between
    f = next(c for c in chunk_code("a.c", tight, words, 500)[0] if c.symbol == "f")
    assert f.start_line == 2
    js = "/** @fileoverview Helpers. */\n\nfunction a() {\n  return 1;\n}\n"
    (first, *_), _ = chunk_code("u.js", js, words, 500)
    assert (first.start_line, first.symbol) != (1, "a")
    assert any(c.symbol == "a" and c.start_line == 3 for c in chunk_code("u.js", js, words, 500)[0])


def test_a_javadoc_without_leading_stars_is_its_classs_even_when_split() -> None:
    """jsoup writes Javadoc without `*` on its inner lines: the block right above a class is the
    class's, and the pieces a long one is cut into carry the class's name (they were untitled
    module code); a licence block is not a class's doc."""
    doc = "\n".join(f" Line {i} of the selector syntax, <code>a b</code>." for i in range(40))
    src = (f"/* Copyright 2024, MIT licence. */\npackage p;\n\nimport java.util.List;\n\n"
           f"/**\n{doc}\n @see Element#select(String css) */\n"
           "public class Selector {\n    int x;\n}\n")  # fmt: skip
    chunks, _ = chunk_code("Selector.java", src, words, 120)
    check(src, chunks, 120, words)
    assert chunks[0].start_line == 6 and len(chunks) > 2
    assert all(c.symbol == "Selector" for c in chunks)
    assert not any("Copyright" in c.text for c in chunks)


def test_long_java_class_split_with_char_counter() -> None:
    methods = "\n".join(
        f"    public int m{i}(int x) {{\n"
        + "\n".join(f"        x = x * {j} + {i};" for j in range(8))
        + "\n        return x;\n    }\n"
        for i in range(5)
    )
    src = f"package p;\n\npublic class Calc extends Base {{\n    int k = 2;\n\n{methods}}}\n"
    chunks, symbols = chunk_code("Calc.java", src, chars, 90)
    check(src, chunks, 90, chars)
    assert [s.qualname for s in symbols] == ["Calc"] + [f"Calc.m{i}" for i in range(5)]
    methods_chunks = [c for c in chunks if c.kind == "method"]
    assert [c.symbol for c in methods_chunks] == [f"Calc.m{i}" for i in range(5)]
    for c in methods_chunks:
        assert c.text.split("\n")[1] == "public class Calc extends Base {"


def test_single_huge_line_is_split_without_loss() -> None:
    payload = " ".join(f"w{i}" for i in range(3000))
    src = f'X = 1\nDATA = "{payload}"\n'
    max_tokens = 50
    chunks, symbols = chunk_code("data.py", src, words, max_tokens)
    check(src, chunks, max_tokens)
    assert sym_table(symbols) == [("DATA", "constant", 2, 2)]  # X: one letter, not named
    line2 = [c for c in chunks if c.start_line == 2]
    assert len(line2) >= 3000 // 48
    assert all(c.end_line == 2 and c.kind == "module" and c.symbol is None for c in line2)
    assert "".join(c.text.split("\n", 1)[1] for c in line2) == f'DATA = "{payload}"'
    assert all(c.text.startswith(("data.py › DATA\n", "data.py\n")) for c in line2)


def test_huge_line_without_spaces_char_counter() -> None:
    line = "x" * 20000
    chunks, _ = chunk_code("blob.js", line, chars, 100)
    check(line, chunks, 100, chars)
    assert len(chunks) > 1
    assert "".join(c.text.split("\n", 1)[1] for c in chunks) == line


def test_module_level_constants_grouped() -> None:
    src = "".join(f"CONST_{i} = {i}\n" for i in range(300))
    chunks, symbols = chunk_code("consts.py", src, words, 200)
    check(src, chunks, 200)
    assert sym_table(symbols) == [(f"CONST_{i}", "constant", i + 1, i + 1) for i in range(300)]
    assert all(c.kind == "module" and c.symbol is None for c in chunks)
    assert 3 <= len(chunks) <= 9
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 300
    for a, b in itertools.pairwise(chunks):
        assert b.start_line == a.end_line + 1
    # each piece names the first eight constants it declares, not those of other pieces
    for c in chunks:
        names = [f"CONST_{i - 1}" for i in range(c.start_line, c.end_line + 1)]
        label = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
        assert c.text.startswith(f"consts.py › {label}\n"), c.text[:80]


def test_module_code_between_symbols_kept() -> None:
    src = (
        "import a\n\ndef f():\n    pass\n\n"
        "REGISTRY = {}\nREGISTRY['f'] = f\n\n\ndef g():\n    pass\n"
    )
    chunks, _ = chunk_code("reg.py", src, words, 200)
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("function", "f", 3, 4),  # `import a` alone: no chunk (core/chunk/boiler.py)
        ("module", None, 6, 7),
        ("function", "g", 10, 11),
    ]
    assert chunks[1].text == "reg.py › REGISTRY\nREGISTRY = {}\nREGISTRY['f'] = f"


# --------------------------------------------------------------------------- fallback


def test_unknown_extension_falls_back_to_windows() -> None:
    src = "".join(f"line {i}\n" for i in range(1, 151))
    chunks, symbols = chunk_code("notes/data.xyz", src, words, 1000)
    check(src, chunks, 1000)
    assert symbols == []
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 60), (61, 120), (121, 150)]
    assert all(c.kind == "window" and c.symbol is None for c in chunks)
    assert chunks[0].text.split("\n")[:2] == ["notes/data.xyz", "line 1"]


def test_windows_respect_token_budget() -> None:
    src = "".join(f"alpha beta gamma delta {i}\n" for i in range(100))
    chunks, _ = chunk_code("x.txt", src, words, 60)
    check(src, chunks, 60)
    assert len(chunks) >= 10
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 100


@pytest.mark.parametrize("src", ["", "   \n\n\t\n"])
def test_empty_file(src: str) -> None:
    assert chunk_code("empty.py", src, words, 100) == ([], [])
    assert chunk_code("empty.txt", src, words, 100) == ([], [])


def test_line_numbers_editor_style() -> None:
    src = "def f():\n    return 1\n"  # trailing newline does not add a line
    chunks, symbols = chunk_code("f.py", src, words, 100)
    assert (chunks[0].start_line, chunks[0].end_line) == (1, 2)
    assert (symbols[0].start_line, symbols[0].end_line) == (1, 2)
    src_crlf = "x = 1\r\n\r\ndef f():\r\n    return 1\r\n"
    chunks, symbols = chunk_code("f.py", src_crlf, words, 100)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 1), (3, 4)]


def test_broken_source_still_chunks() -> None:
    src = "def ok():\n    return 1\n\ndef broken(:\n    pass\n"
    chunks, symbols = chunk_code("b.py", src, words, 100)
    check(src, chunks, 100)
    assert symbols[0].qualname == "ok"
    covered = {i for c in chunks for i in range(c.start_line, c.end_line + 1)}
    assert {1, 2, 4, 5} <= covered


def test_large_file_is_fast() -> None:
    parts = []
    for i in range(700):
        parts.append(
            f"def func_{i}(a, b):\n    x = a + b * {i}\n    if x > {i}:\n"
            f"        return x - {i}\n    return x\n\n"
        )
    src = "".join(parts)
    assert len(src) > 50_000
    src = src * 2  # ~140 KB
    t0 = time.perf_counter()
    chunks, symbols = chunk_code("big.py", src, words, 256)
    elapsed = time.perf_counter() - t0
    assert len(symbols) == 1400
    assert len(chunks) == 1400
    assert elapsed < 2.0, elapsed


# -- the code graph: what each definition calls -------------------------------------------------
GRAPH_CASES = {
    "a.py": ("def run(x):\n    y = helper(x)\n    return obj.finish(y)\n", "run",
             ["helper", "finish"]),
    "a.js": ("function run(x) {\n  const p = new Parser(x);\n  return p.go(helper(x));\n}\n",
             "run", ["Parser", "go", "helper"]),
    "a.ts": ("export function run(x: number): number {\n  return util.twice(helper(x));\n}\n",
             "run", ["twice", "helper"]),
    "a.go": ("package a\n\nfunc Run(x int) int {\n\treturn fmt.Sprint(helper(x))\n}\n", "Run",
             ["Sprint", "helper"]),
    "a.rs": ("fn run(x: i32) -> i32 {\n    let v = Vec::new();\n    helper(x).max(v.len())\n}\n",
             "run", ["new", "helper", "max", "len"]),
    "A.java": ("class A {\n  int run(int x) {\n    return helper(new B(x));\n  }\n}\n", "A.run",
               ["helper", "B"]),
    "a.c": ("int run(int x) {\n  return helper(x) + other(x);\n}\n", "run", ["helper", "other"]),
    "a.cpp": ("int run(int x) {\n  return ns::helper(x) + obj.other(x);\n}\n", "run",
              ["helper", "other"]),
    "a.rb": ("def run(x)\n  helper(x).finish\nend\n", "run", ["helper", "finish"]),
}  # fmt: skip


@pytest.mark.parametrize("path", sorted(GRAPH_CASES))
def test_the_code_graph_records_what_each_definition_calls(path: str) -> None:
    src, qualname, calls = GRAPH_CASES[path]
    _, symbols = chunk_code(path, src, words, 200)
    sym = next(s for s in symbols if s.qualname == qualname)
    assert list(sym.calls) == calls


def test_nested_definitions_keep_their_own_calls() -> None:
    src = (
        "class Parser:\n    def parse(self, text):\n        def inner(x):\n"
        "            return helper(x)\n        return self._tokens(text) + inner(text)\n"
    )
    _, symbols = chunk_code("p.py", src, words, 200)
    calls = {s.qualname: s.calls for s in symbols}
    assert calls == {"Parser": (), "Parser.parse": ("_tokens", "inner"),
                     "Parser.parse.inner": ("helper",)}  # fmt: skip


# ------------------------------------------------------------- module-level declarations

JS_DECLS = """const fs = require('fs');

const defaults = {
  timeout: 0,
  transformRequest: [function transformRequest(data, headers) {
    return JSON.stringify(data);
  }],
  validateStatus: (status) => status >= 200 && status < 300,
};

export const MAX_RETRIES = 3;

export default connect(state)(function Page(props) {
  return props;
});

exports.helpers = {
  pick: function () { return 1; },
};
"""


def test_js_module_code_is_named_by_its_declarations() -> None:
    chunks, symbols = chunk_code("lib/defaults.js", JS_DECLS, words, 500)
    check(JS_DECLS, chunks, 500)
    assert sym_table(symbols) == [
        ("defaults", "constant", 3, 9),
        ("defaults.transformRequest", "function", 5, 7),
        ("defaults.validateStatus", "function", 8, 8),
        ("MAX_RETRIES", "constant", 11, 11),
        ("Page", "function", 13, 15),  # wrapped in a call: a value, named as its function
        ("helpers", "constant", 17, 19),
        ("helpers.pick", "function", 18, 18),
    ]  # `fs`: a one-line lower-case binding (an import), not named
    assert [c.kind for c in chunks] == ["module"] and chunks[0].symbol is None
    assert chunks[0].text.split("\n", 1)[0] == (
        "lib/defaults.js › defaults, defaults.transformRequest, defaults.validateStatus, "
        "MAX_RETRIES, Page, helpers, helpers.pick"
    )


def test_a_function_exported_by_default_behind_a_condition_is_a_definition() -> None:
    """axios: `export default isSupported && function httpAdapter(config) {…}` is the file's
    adapter, a definition with its closures inside it; anonymous, it is named by its file (an
    index file by its folder). A function passed as a value elsewhere is not one."""
    http = (
        "import utils from './utils.js';\n\n"
        "const isSupported = typeof process !== 'undefined';\n\n"
        "/*eslint consistent-return:0*/\n"
        "export default isSupported && function httpAdapter(config) {\n"
        "  function onFinished() {\n    return 1;\n  }\n"
        "  const abort = (reason) => {\n    throw reason;\n  };\n"
        "  return onFinished();\n};\n"
    )
    chunks, symbols = chunk_code("lib/adapters/http.js", http, words, 500)
    check(http, chunks, 500)
    assert sym_table(symbols) == [
        ("httpAdapter", "function", 6, 14),
        ("httpAdapter.onFinished", "function", 7, 9),
        ("httpAdapter.abort", "function", 10, 12),
    ]
    assert [(c.kind, c.symbol, c.start_line, c.end_line) for c in chunks] == [
        ("module", None, 1, 3),
        ("function", "httpAdapter", 5, 14),
    ]
    pieces, _ = chunk_code("lib/adapters/http.js", http, words, 24)
    assert {c.symbol for c in pieces if c.start_line >= 6} == {"httpAdapter"}
    xhr = (
        "export default isXHRAdapterSupported && function (config) {\n"
        "  return new Promise(function dispatchXhrRequest(resolve) {\n"
        "    resolve(config);\n  });\n}\n"
    )
    fetch = (
        "export default isFetchSupported && (async (config) => {\n"
        "  return fetch(config.url);\n});\n\n"
        "[1].map(function double(x) { return 2 * x; });\n"
    )
    for path, src, want in [
        ("lib/adapters/xhr.js", xhr, [("xhr", "function", 1, 5)]),
        ("lib/adapters/fetch.js", fetch, [("fetch", "function", 1, 3)]),
        ("src/widget/index.js", "export default function () {\n  return 1;\n}\n",
         [("widget", "function", 1, 3)]),
        ("src/add.ts", "export default (a: number) => a + 1;\n", [("add", "function", 1, 1)]),
    ]:  # fmt: skip
        chunks, symbols = chunk_code(path, src, words, 500)
        assert sym_table(symbols) == want, path
        assert (chunks[0].symbol, chunks[0].kind) == (want[0][0], "function"), path


def test_a_long_declaration_names_each_piece_it_spans() -> None:
    body = "".join(f"  key{i}: {i},\n" for i in range(200))
    src = f"const table = {{\n{body}  lookup: (k) => table[k],\n}};\n"
    chunks, _ = chunk_code("t.js", src, words, 120)
    check(src, chunks, 120)
    assert len(chunks) > 3
    heads = [c.text.split("\n", 1)[0] for c in chunks]
    assert all(h.startswith("t.js › table") for h in heads)
    assert heads[-1] == "t.js › table, table.lookup"  # the member's own piece only


@pytest.mark.parametrize(
    ("path", "src", "want"),
    [
        ("c.go", "package x\n\nconst Limit = 5\n\nvar (\n\tdefaultName = `a\nb`\n\tMAX_N = 2\n)\n",
         [("Limit", 3), ("defaultName", 6), ("MAX_N", 8)]),
        ("t.go", "package x\n\nvar _ io.Reader = (*T)(nil)\n\ntype T struct{}\n", []),
        ("lib.rs", "use std::fs;\n\nconst RECURSION_LIMIT: usize = if cfg!(windows) { 48 } else"
         " { 256 };\nstatic COUNTER: i32 = 0;\n", [("RECURSION_LIMIT", 3), ("COUNTER", 4)]),
        ("x.c", "#include <a.h>\n#define MAX_LEN 64\nstatic int COUNT = 0;\nint f(int);\n",
         [("MAX_LEN", 2), ("COUNT", 3)]),
        ("v.rb", "require 'x'\nVERSION = '1.0'\nFoo::BAR_BAZ = 2\n",
         [("VERSION", 2), ("BAR_BAZ", 3)]),
        ("s.py", "import logging\nlog = logging.getLogger(__name__)\n__all__ = ['a']\n"
         "DEFAULTS = {\n    'a': 1,\n}\nA, B = 1, 2\n", [("DEFAULTS", 4)]),
        ("k.ts", "export const kyOptionKeys: Registry = {\n\tjson: true,\n};\nexport default ky;\n",
         [("kyOptionKeys", 1)]),
    ],
)  # fmt: skip
def test_declarations_per_language(path: str, src: str, want: list[tuple[str, int]]) -> None:
    chunks, symbols = chunk_code(path, src, words, 500)
    check(src, chunks, 500)
    assert [(s.qualname, s.start_line) for s in symbols if s.kind == "constant"] == want
    names = ", ".join(n for n, _ in want)
    assert chunks[0].text.split("\n", 1)[0] == (f"{path} › {names}" if want else path)


def test_declarations_never_shadow_definitions() -> None:
    # `const f = () => …` and Python `def` are definitions with their own chunks, not constants
    src = "export const handler = (req) => {\n  return req;\n};\nconst CONFIG = {\n  a: 1,\n};\n"
    chunks, symbols = chunk_code("h.ts", src, words, 500)
    assert sym_table(symbols) == [("handler", "function", 1, 3), ("CONFIG", "constant", 4, 6)]
    assert [(c.symbol, c.kind) for c in chunks] == [("handler", "function"), (None, "module")]
    assert chunks[1].text.startswith("h.ts › CONFIG\n")


@pytest.mark.parametrize(
    ("path", "src", "want"),
    [
        ("G.java", "public class Gson {\n  static final boolean DEFAULT_LENIENT = false;\n"
         "  private final int x = 1;\n  public static final String A = \"a\", B = \"b\";\n"
         "  void f() {}\n}\ninterface K { int MAX = 3; }\n",
         [("Gson.DEFAULT_LENIENT", 2), ("Gson.A", 4), ("Gson.B", 4), ("K.MAX", 7)]),
        ("u.rb", "module Rack\n  class Utils\n    DEFAULT_SEP = /[&] */n\n    def x; end\n  end\n"
         "  VERSION = '3'\nend\n", [("Rack.VERSION", 6), ("Rack.Utils.DEFAULT_SEP", 3)]),
        ("a.py", "class A:\n    MAX = 3\n    name: str = 'x'\n", [("A.MAX", 2)]),
        ("l.rs", "impl Foo {\n    const LIMIT: usize = 3;\n}\n", [("Foo.LIMIT", 2)]),
        ("k.ts", "class K {\n  static readonly MAX_RETRY = 3;\n  private X = 1;\n"
         "  static low = 2;\n}\n", [("K.MAX_RETRY", 2)]),
    ],
)  # fmt: skip
def test_constants_inside_definitions_join_the_symbol_table(
    path: str, src: str, want: list[tuple[str, int]]
) -> None:
    chunks, symbols = chunk_code(path, src, words, 500)
    check(src, chunks, 500)
    assert [(s.qualname, s.start_line) for s in symbols if s.kind == "constant"] == want
    assert all(s.name == s.qualname.rsplit(".", 1)[-1] for s in symbols if s.kind == "constant")


def test_a_named_module_chunk_is_titled_by_its_declarations() -> None:
    """The chunk a source cites: a definition's title is its name, named module code's the names
    it declares (the citation reads `src/lib.rs › RECURSION_LIMIT, VERSION`), the rest the path."""
    from core.chunk.code import chunk
    from core.models import Document

    src = 'use std::fs;\n\nconst RECURSION_LIMIT: usize = 256;\nconst VERSION: &str = "1";\n\n'
    src += "fn run() -> usize {\n    RECURSION_LIMIT\n}\n"
    doc = Document("code", "src/lib.rs", src, "h", path="src/lib.rs", title="src/lib.rs")
    chunks, _ = chunk(doc, words, 500)
    assert [(c.kind, c.title, c.symbol) for c in chunks] == [
        ("module", "RECURSION_LIMIT, VERSION", None),
        ("function", "run", "run"),
    ]
    plain = Document("code", "a.py", "import os\nos.umask(0)\n", "h", path="a.py", title="a.py")
    assert [c.title for c in chunk(plain, words, 500)[0]] == ["a.py"]
