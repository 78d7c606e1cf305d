"""C and C++ as libraries write them (core/chunk/cpre.py): a ``.h`` header's language read off
its content, and export/attribute macros that tree-sitter (no preprocessor) cannot read."""

from __future__ import annotations

import pytest
from tree_sitter import Node, Parser

from core.answer.quotable import code_quotes
from core.answer.signature import definition
from core.chunk.code import chunk_code
from core.chunk.code_langs import language
from core.chunk.cpre import for_parser, header_language
from tests.test_chunk_code import check, sym_table, words

# The shape of libuv's uv.h: an include guard, an export macro, `extern "C"`, a struct whose
# fields a macro supplies, a function-like macro.
C_HEADER = """#ifndef UV_H
#define UV_H
#ifdef __cplusplus
extern "C" {
#endif

#define UV_EXTERN __attribute__((visibility("default")))
#define UV_VERSION_MAJOR 1
#define UV_VERSION_HEX(major) ((major) << 16)

typedef struct uv_loop_s uv_loop_t;

UV_EXTERN int uv_loop_init(uv_loop_t* loop);
UV_EXTERN uv_loop_t* uv_default_loop(void);

#define UV_HANDLE_FIELDS \\
  void* data;

struct uv_handle_s {
  UV_HANDLE_FIELDS
};

/* Runs the event loop. */
struct uv_timer_s {
  int timeout;
};

UV_EXTERN int uv_run(uv_loop_t*, int mode);

#ifdef __cplusplus
}
#endif
#endif /* UV_H */
"""

# The shape of fmt's format.h: a C++ header named .h, namespace and specifier macros, a
# template parameter written as a macro, a class with a visibility macro.
CPP_HEADER = """#ifndef FMT_FORMAT_H_
#define FMT_FORMAT_H_

#include <string>

FMT_BEGIN_NAMESPACE

/// An error reported from a formatting function.
class FMT_API format_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename T, FMT_ENABLE_IF(std::is_integral<T>::value)>
FMT_CONSTEXPR auto count_digits(T n) -> int {
  return n < 10 ? 1 : 2;
}

class FMT_SO_VISIBILITY("default") buffer_base {
 public:
  FMT_CONSTEXPR20 void grow(size_t size) { capacity_ = size; }

 private:
  size_t capacity_;
};

FMT_END_NAMESPACE

#endif  // FMT_FORMAT_H_
"""


def _errors(source: str, lang: str) -> int:
    root = Parser(language(lang)).parse(source.encode()).root_node
    todo: list[Node] = [root]
    n = 0
    while todo:
        node = todo.pop()
        n += node.type == "ERROR" or node.is_missing
        todo.extend(node.children)
    return n


def test_a_header_s_language_is_read_off_its_content() -> None:
    assert header_language(CPP_HEADER) == "cpp"
    assert header_language(C_HEADER) == "c"  # `extern "C"` and __cplusplus: still C
    assert header_language("template <typename T> T id(T v);\n") == "cpp"
    assert header_language("namespace detail {\n}\n") == "cpp"
    assert header_language("class Foo {\n public:\n  int x;\n};\n") == "cpp"
    assert header_language("#include <stdio.h>\nint f(int);\n") == "c"


def test_specifier_macros_are_blanked_in_place() -> None:
    for src in (C_HEADER, CPP_HEADER):
        out = for_parser(src)
        assert len(out) == len(src) and out.count("\n") == src.count("\n")
        assert [len(a) for a in out.split("\n")] == [len(b) for b in src.split("\n")]
    out = for_parser(C_HEADER)
    assert "UV_EXTERN int uv_loop_init" not in out and "int uv_loop_init" in out
    assert "#define UV_EXTERN __attribute__" in out  # directives are the grammar's to read
    assert "  UV_HANDLE_FIELDS\n" not in out  # a macro alone on its line
    out = for_parser(CPP_HEADER)
    assert "FMT_API" not in out and " format_error : public" in out
    assert "FMT_ENABLE_IF" not in out and "template <typename T" in out
    assert "FMT_BEGIN_NAMESPACE" not in out and "FMT_CONSTEXPR20" not in out
    assert 'FMT_SO_VISIBILITY("default")' not in out
    # Parsed as C++, the header was one error from its first macro to its end
    assert _errors(CPP_HEADER, "cpp") > _errors(out, "cpp") == 0
    # (what is left: `extern "C" {` opened inside `#ifdef __cplusplus`, one local error)
    assert _errors(C_HEADER, "c") > 2 * _errors(for_parser(C_HEADER), "c")


@pytest.mark.parametrize(
    "src",
    [
        "DWORD count;\nHANDLE h = NULL;\nstatic DWORD flags;\n",  # Windows types: types
        "int f(void) {\n  return MAX_SIZE;\n}\n",
        "enum color {\n  RED,\n  GREEN\n};\n",  # `GREEN` alone on its line inside an enum
    ],
)
def test_what_is_not_a_specifier_macro_is_left_alone(src: str) -> None:
    out = for_parser(src)
    if "GREEN" in src:  # blanked (it stands alone), and the parse is unharmed
        assert "GREEN" not in out and _errors(out, "c") == 0
        assert [s.qualname for s in chunk_code("c.h", src, words, 500)[1]] == ["color"]
    else:
        assert out == src


def test_a_c_header_reads_by_symbol_with_its_macros() -> None:
    chunks, symbols = chunk_code("include/uv.h", C_HEADER, words, 500)
    check(C_HEADER, chunks, 500)
    table = sym_table(symbols)
    assert ("uv_handle_s", "struct", 19, 21) in table
    assert ("uv_timer_s", "struct", 24, 26) in table
    # inside the include guard and `extern "C"`: the #defines, a function-like one as a function
    assert ("UV_VERSION_MAJOR", "constant", 8, 8) in table
    assert ("UV_VERSION_HEX", "function", 9, 9) in table
    assert not [s for s in symbols if s.name == "UV_H"][1:]  # named once
    twice = (
        "#ifdef _WIN32\n#define UV_EXTERN __declspec(dllimport)\n#else\n#define UV_EXTERN\n#endif\n"
    )
    first = chunk_code("include/uv.h", twice, words, 500)[0][0].text.split("\n", 1)[0]
    assert first == "include/uv.h › UV_EXTERN"  # defined in two branches, named once


def test_a_cpp_header_named_h_reads_by_symbol() -> None:
    chunks, symbols = chunk_code("include/fmt/format.h", CPP_HEADER, words, 500)
    check(CPP_HEADER, chunks, 500)
    table = sym_table(symbols)
    assert ("format_error", "class", 9, 12) in table
    assert ("count_digits", "function", 14, 17) in table  # its template line belongs to it
    assert ("buffer_base", "class", 19, 25) in table
    assert ("buffer_base.grow", "method", 21, 21) in table
    # the chunks keep the file's own text: the macros are blanked for the parser only
    doc = next(c for c in chunks if c.symbol == "format_error")
    assert "class FMT_API format_error" in doc.text
    assert "An error reported from a formatting function." in doc.text


def test_a_c_quote_reads_the_definition_line() -> None:
    body = (
        "/* Binds the handle. */\nint uv_tcp_bind(uv_tcp_t* handle,\n"
        "                const struct sockaddr* addr) {\n  return uv__tcp_bind(handle, addr);\n}\n"
    )
    assert code_quotes(body, "uv_tcp_bind", "c")[0] == (
        "`int uv_tcp_bind(uv_tcp_t* handle, const struct sockaddr* addr)`"
    )
    body = (
        "template <typename T,\n          typename U>\n"
        "constexpr auto twice(T v) -> T {\n  return v + v;\n}\n"
    )
    assert code_quotes(body, "other", "cpp")[0] == (
        "`template <typename T, typename U> constexpr auto twice(T v) -> T`"
    )
    body = "template <typename T> constexpr auto num_bits() -> int {\n  return 0;\n}\n"
    assert code_quotes(body, "num_bits", "cpp")[0] == (
        "`template <typename T> constexpr auto num_bits() -> int`"
    )
    # a statement is not a definition line
    for lang in ("c", "cpp"):
        assert (
            definition(["  return uv__run(loop, mode);", "  else if (x) f(y);"], None, lang) is None
        )
        assert definition(["  x = run(loop);", "  delete make(x);"], None, lang) is None


@pytest.mark.asyncio
async def test_an_instance_answers_from_c_and_cpp_headers(sample) -> None:  # type: ignore[no-untyped-def]
    """End to end, default globs: a C header's #define inside its include guard and a C++
    header's class behind an export macro are exact hits."""
    from helpers import commit_all, write_files

    write_files(sample["repo"], {"include/uv.h": C_HEADER, "include/fmt/format.h": CPP_HEADER})
    commit_all(sample["repo"])
    app = sample["app"]
    await app.index("widget")
    r = await app.retrieve("widget", "what is UV_VERSION_MAJOR?")
    assert "defines UV_VERSION_MAJOR" in {e["why"] for e in r.route["exact"]["code"]}
    assert r.sources[0].path == "include/uv.h"
    r = await app.retrieve("widget", "what does format_error hold?")
    assert "defines format_error" in {e["why"] for e in r.route["exact"]["code"]}
    assert r.sources[0].path == "include/fmt/format.h"


def test_macros_in_a_row_and_before_a_qualified_type() -> None:
    """CLI11's shape: a macro before another (`CLI11_NODISCARD CLI11_INLINE`), and one before a
    qualified return type in a file where nothing else shows it is a macro."""
    src = (
        "namespace CLI {\n"
        "CLI11_NODISCARD CLI11_INLINE std::string App::config_to_str() const {\n"
        '    return "";\n'
        "}\n"
        "CLI11_INLINE std::vector<std::string> compute_argv() {\n"
        "    return {};\n"
        "}\n"
        "}  // namespace CLI\n"
    )
    out = for_parser(src)
    assert "CLI11_" not in out and "std::string App::config_to_str() const {" in out
    _, symbols = chunk_code("include/CLI/impl/App_inl.hpp", src, words, 500)
    assert [s.qualname for s in symbols] == ["CLI", "CLI.App.config_to_str", "CLI.compute_argv"]


@pytest.mark.parametrize(
    ("path", "src", "want"),
    [
        # a return type and a calling convention on their own lines (GNU, EDK2, ReactOS style)
        ("nt.c", "NTSTATUS\nNTAPI\nDriverEntry(PDRIVER_OBJECT d)\n{\n  return 0;\n}\n",
         ["DriverEntry"]),
        ("edk2.c", "EFI_STATUS\nEFIAPI\nUefiMain (\n  IN EFI_HANDLE h\n  )\n{\n  return 0;\n}\n"
         "STATIC\nUINTN\nCountItems (\n  VOID\n  )\n{\n  return 1;\n}\n",
         ["UefiMain", "CountItems"]),
        # a value after a cast, a variable after a macro that wraps its type
        ("null.c", "char *p = (char *) NULL;\nint f(char *s) {\n  return s == NULL;\n}\n",
         ["f", "p"]),
        ("termcap.h", "extern NCURSES_EXPORT_VAR(char) PC;\n"
         "extern NCURSES_EXPORT_VAR(char *) UP;\n", ["PC", "UP"]),
        # a type the file defines: east const, a struct tag, a typedef, a qualified method
        ("east.c", "typedef unsigned long DWORD;\nDWORD const flags = 0;\n"
         "DWORD count(DWORD n) {\n  return n;\n}\n", ["count", "flags"]),
        ("point.c", "struct POINT {\n  int x;\n};\nstruct POINT origin;\n"
         "int norm(struct POINT p) {\n  return p.x;\n}\n", ["POINT", "norm", "origin"]),
        ("app.cpp", "typedef unsigned int UINT32;\n"
         "BOOL CMyApp::InitInstance() {\n  return TRUE;\n}\n"
         "UINT32 Parser::read() {\n  return 0;\n}\n", ["CMyApp.InitInstance", "Parser.read"]),
        # Windows line ends
        ("crlf.h", "#ifndef X_H\r\n#define X_H\r\nFMT_BEGIN_NAMESPACE\r\n"
         "class FMT_API format_error : public std::runtime_error {\r\n"
         " public:\r\n  int x;\r\n};\r\n"
         "FMT_END_NAMESPACE\r\n#endif\r\n", ["format_error", "X_H"]),
    ],
)  # fmt: skip
def test_what_a_specifier_macro_is_not(path: str, src: str, want: list[str]) -> None:
    """The shapes a macro rule could take for a macro, and must not (review of 2026-12-06)."""
    out = for_parser(src)
    assert len(out.encode()) == len(src.encode()) and out.count("\n") == src.count("\n")
    assert [s.qualname for s in chunk_code(path, src, words, 500)[1]] == want


def test_only_a_template_s_parameters_lose_a_macro_call() -> None:
    src = "void g(void) {\n  use(a, FIELD(a)->next);\n}\n"
    assert for_parser(src) == src
    src = "template <typename T, FMT_ENABLE_IF(is_x<T>::value)>\nauto f(T v) -> T;\n"
    assert "FMT_ENABLE_IF" not in for_parser(src)


def test_blanking_keeps_utf8_offsets() -> None:
    src = "FMT_BEGIN_NAMESPACE // café\nclass FMT_API é_error {};\n"
    out = for_parser(src)
    assert [len(x.encode()) for x in out.split("\n")] == [len(x.encode()) for x in src.split("\n")]
