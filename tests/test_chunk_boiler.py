"""Boilerplate-only chunks are left out (core/chunk/boiler.py): a chunk of nothing but a licence
header, package / namespace lines and imports answers no question yet takes a cited slot."""

from __future__ import annotations

import pytest

from core.chunk.code import chunk, chunk_code
from core.models import Document


def words(text: str) -> int:
    return len(text.split()) + 2


def spans(path: str, src: str, max_tokens: int = 500) -> list[tuple[int, int, str | None]]:
    chunks, _ = chunk_code(path, src, words, max_tokens)
    return [(c.start_line, c.end_line, c.symbol) for c in chunks]


LICENCE = "/*\n * Copyright (C) 2008 Google Inc.\n *\n * Licensed under the Apache License.\n */\n"


@pytest.mark.parametrize(
    ("path", "src", "want"),
    [
        # gson: licence header, package line and imports above a class's Javadoc
        ("Gson.java", f"{LICENCE}\npackage com.google.gson;\n\nimport java.util.List;\n"
         "import static java.util.Objects.requireNonNull;\n\n/** Gson. */\npublic class Gson {\n"
         "  int x;\n}\n", [(12, 15, "Gson")]),
        # jsoup: a package line alone between a file comment and the imports
        ("P.java", "package org.jsoup.parser;\n\n/*\n  Thanks to X for the idea.\n */\n\n"
         "import java.util.Map;\n\nclass P {\n  Map m;\n}\n", [(9, 11, "P")]),
        # just: `use super::*;` atop a file and inside its test module
        ("src/alias.rs", "use super::*;\n\n#[derive(Debug)]\npub(crate) struct Alias {\n"
         "  name: u8,\n}\n", [(3, 6, "Alias")]),
        ("src/lib.rs", "#[cfg(feature = \"git\")]\nuse crate::diff::LineChanges;\nuse crate::{\n"
         "  a::B,\n  c::D,\n};\nextern crate libc;\nmod alias;\n\nfn main() {}\n",
         [(10, 10, "main")]),
        ("server.go", "// Copyright 2009 The Go Authors.\n// Use of this source code is governed by"
         " a BSD-style\n// license.\n\npackage server\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\n"
         "func New() {}\n", [(12, 12, "New")]),
        ("pkg/a.py", "#!/usr/bin/env python\n# Licensed under the MIT licence.\nfrom __future__ "
         "import annotations\n\nimport os\nfrom typing import (\n    Any,\n)\n\n\ndef f() -> Any:\n"
         "    return os.sep\n", [(11, 12, "f")]),
        ("lib/x.js", "'use strict';\n\nimport utils from './utils.js';\nimport './polyfill.js';\n"
         "const fs = require('fs'), { join } = require('path').posix;\n\nfunction f() {}\n",
         [(7, 7, "f")]),
        ("src/a.ts", "/// <reference types=\"node\" />\nimport type { A } from './a';\n"
         "import x = require('x');\n\nexport function f(a: A) {}\n", [(5, 5, "f")]),
        ("x.h", "/* Copyright 2020 */\n#ifndef X_H\n#define X_H\n\n#include <stdio.h>\n"
         "#include \"y.h\"\n\nstruct p {\n  int x;\n};\n\n#endif\n", [(8, 10, "p")]),
        ("x.cc", "#pragma once\n#include <string>\nusing namespace std;\n\nint f() { return 1; }\n",
         [(5, 5, "f")]),
        ("C.cs", "using System;\nusing static X.Y;\n\nnamespace A.B\n{\n    using R;\n\n"
         "    public class C {\n        void M() {}\n    }\n}\n", [(8, 10, "C")]),
        ("a.php", "<?php\ndeclare(strict_types=1);\n\nnamespace A\\B;\n\nuse X\\Y;\n"
         "require_once 'a.php';\n\nfunction f() {\n  return 1;\n}\n", [(9, 11, "f")]),
        ("a.kt", "package a.b\n\nimport x.y.Z\n\nfun main() {\n  println(1)\n}\n",
         [(5, 7, "main")]),
        ("a.swift", "import Foundation\n@testable import X\n\nfunc f() -> Int {\n  return 1\n}\n",
         [(4, 6, "f")]),
        ("a.rb", "# frozen_string_literal: true\n\nrequire 'json'\nrequire_relative 'x'\n\n"
         "class A\nend\n", [(6, 7, "A")]),
    ],
)  # fmt: skip
def test_boilerplate_alone_is_no_chunk(
    path: str, src: str, want: list[tuple[int, int, str | None]]
) -> None:
    assert spans(path, src) == want


@pytest.mark.parametrize(
    ("path", "src", "want"),
    [
        # any other code keeps its chunk, imports and all
        ("p/__init__.py", "from .a import f\n\n__all__ = ['f']\n", [(1, 3, None)]),
        ("lib/a.js", "import x from 'x';\nmodule.exports = x;\n", [(1, 2, None)]),
        ("lib/d.js", "const debug = require('debug')('app');\n", [(1, 1, None)]),
        ("src/c.rs", "use std::fs;\n\nconst LIMIT: usize = 3;\n", [(1, 3, None)]),
        ("t.py", '"""What this module is for."""\n\nimport os\n', [(1, 3, None)]),
        # documentation: a crate's `//!`, a Go package's comment, a Java package-info
        ("src/lib.rs", "//! The crate.\n\nuse std::fs;\n", [(1, 3, None)]),
        ("doc.go", "// Copyright 2011 X.\n// license: BSD.\n\n// Package fmt formats.\n"
         "package fmt\n", [(1, 5, None)]),
        ("package-info.java", f"{LICENCE}\n/** The Gson package. */\npackage com.google.gson;\n",
         [(1, 8, None)]),
        # comments alone (a note, code commented out) are kept as they were
        ("n.py", "# TODO: the old way\n# x = compute()\n", [(1, 2, None)]),
        # a condition is code: an include under `#if` stays
        ("w.c", "#if defined(_WIN32)\n#include <windows.h>\n#endif\n", [(1, 3, None)]),
    ],
)  # fmt: skip
def test_a_chunk_with_anything_else_is_kept(
    path: str, src: str, want: list[tuple[int, int, str | None]]
) -> None:
    assert spans(path, src) == want


def test_a_test_modules_imports_are_no_chunk() -> None:
    src = "#[cfg(test)]\nmod tests {\n  use super::*;\n\n  #[test]\n  fn parses() {\n"
    src += "    assert!(true);\n  }\n}\n"
    assert spans("src/run.rs", src, 14) == [(5, 8, "tests.parses")]  # (was 1-3 `mod tests {…`)


def test_a_long_import_list_is_dropped_piece_by_piece() -> None:
    imports = "".join(f"import com.example.pkg{i}.Type{i};\n" for i in range(80))
    src = f"package p;\n\n{imports}\nclass A {{\n  int x;\n}}\n"
    assert spans("A.java", src, 60) == [(84, 86, "A")]


def test_a_files_symbols_do_not_depend_on_its_boilerplate_chunks() -> None:
    """Nothing of a file's parse is read from its chunks: its symbols and the calls each makes
    are the same whether its import chunk is kept or not."""
    src = "import os\nimport sys\n\n\ndef main():\n    os.exit(run(sys.argv))\n"
    chunks, symbols = chunk_code("cli.py", src, words, 500)
    assert [(c.start_line, c.symbol) for c in chunks] == [(5, "main")]
    assert [(s.qualname, s.start_line, s.calls) for s in symbols] == [("main", 5, ("exit", "run"))]


@pytest.mark.parametrize(
    ("path", "src"),
    [
        # a package's public API: re-exports, found by a question or a trace that names the file
        ("pkg/__init__.py", "from .a import f\nfrom .b import g\n"),
        ("src/lib.rs", "pub mod run;\npub use crate::e::{Error, Result};\n"),
        # a file of imports alone keeps them: it has nothing else to be found by
        ("pkg/compat.py", "# Licensed under the MIT licence.\nimport os\nimport sys\n"),
        # Go's cgo preamble is C code, not a comment
        ("add.go", "package add\n\n// int add(int a, int b) { return a + b; }\nimport \"C\"\n"),
    ],
)
def test_re_exports_cgo_and_a_file_of_imports_alone_keep_their_chunks(path: str, src: str) -> None:
    doc = Document("code", path, src, "h", path=path, title=path)
    chunks, _ = chunk(doc, words, 500)
    assert chunks and "\n".join(c.text for c in chunks).count("\n") >= src.count("\n") - 1


def test_cgo_preamble_beside_code_is_kept() -> None:
    src = ("package add\n\n/*\nint add(int a, int b) { return a + b; }\n*/\nimport \"C\"\n\n"
           "func Add() int {\n\treturn 1\n}\n")  # fmt: skip
    assert any("int add(int a" in c.text for c in chunk_code("add.go", src, words, 500)[0])
