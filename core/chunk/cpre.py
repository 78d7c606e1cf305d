"""C and C++ before tree-sitter reads them: which language a ``.h`` header is in, and the
macros that stand where the grammar expects a specifier.

tree-sitter does not run the preprocessor, so a header's export and attribute macros
(``UV_EXTERN int uv_run(...)``, ``FMT_CONSTEXPR inline auto f(...)``, ``class FMT_API error``, a
line ``FMT_BEGIN_NAMESPACE``, ``template <typename T, FMT_ENABLE_IF(cond)>``) break the parse —
libuv's ``uv.h`` parsed as one error node from its first line to its last. :func:`for_parser`
blanks those macros (spaces, as many as their UTF-8 bytes, so every offset and line stays where
it was: the chunks, their lines and the names read off the tree are the file's own) before the
parse, and only those the
file itself shows in a specifier's place — never a type the file defines (``typedef … DWORD;``,
``struct POINT {``), a value (``NULL``), or a return type on its own line before the name.
(Universal Ctags asks its user to list such macros, ``-I``; here they are read off the file.)
"""

from __future__ import annotations

import re

__all__ = ["for_parser", "header_language"]

# GitHub linguist's heuristics for `.h` (lib/linguist/heuristics.yml, named pattern `cpp`).
# Hand-written: no library on PyPI implements linguist's heuristics offline.
_CPP = re.compile(
    r"^\s*#\s*include <(cstdint|string|vector|map|list|array|bitset|queue|stack|forward_list"
    r"|unordered_map|unordered_set|(i|o|io)stream)>"
    r"|^\s*template\s*<|^[ \t]*(try|constexpr)|^[ \t]*catch\s*\("
    r"|^[ \t]*(class|(using[ \t]+)?namespace)\s+\w+|^[ \t]*(private|public|protected):\r?$"
    r"|__has_cpp_attribute|__cplusplus >|std::\w+",
    re.M,
)


def header_language(source: str) -> str:
    """ "cpp" when a ``.h`` file reads as C++ (linguist's rules), else "c"."""
    return "cpp" if _CPP.search(source) else "c"


_KW = (
    r"(?:static|inline|extern|constexpr|consteval|constinit|virtual|explicit|friend|void"
    r"|int|char|short|long|unsigned|signed|float|double|bool|auto|struct|class|union|enum"
    r"|typename|template|typedef|size_t|_Bool|register|wchar_t|char8_t|char16_t|char32_t)"
)  # (not `const` / `volatile`: a type comes before them too — `DWORD const n`)
_PRIM = r"(?:void|int|char|short|long|unsigned|signed|float|double|bool|auto|size_t)"
# An upper-case identifier with a letter besides "_", read whole (possessive: a long one once).
_TOK = r"(?=[A-Z0-9_]*[A-Z])[A-Z_][A-Z0-9_]*+(?!\w)"
# Where a macro can only be a specifier: before a keyword (`UV_EXTERN int`), after a tag that
# opens a class (`class FMT_API error {`), between a type and the declared function (`int
# ZEXPORT inflate(`), after a parameter list before a body (`void f() FMT_NOEXCEPT {`), before
# a qualified return type and the declared name (`CLI11_INLINE std::string f(`).
_STRONG = (
    re.compile(rf"\b({_TOK})[ \t]+{_KW}\b"),
    re.compile(
        rf"\b(?:class|struct|union)[ \t]+({_TOK})[ \t]+[A-Za-z_]\w*+"
        r"(?=[ \t]*(?:final\b|[:{]|\r?$))",
        re.M,
    ),
    re.compile(rf"\b{_PRIM}[ \t]*[*&]*[ \t]+({_TOK})[ \t]+[A-Za-z_]\w*[ \t]*\("),
    re.compile(rf"\)[ \t]*(?:const[ \t]+)?({_TOK})[ \t]*(?=\{{|->|override\b|final\b)"),
    re.compile(
        rf"^[ \t]*({_TOK})[ \t]+(?:[A-Za-z_]\w*::)+[A-Za-z_]\w*+(?:<[^;{{}}()\n]*>)?"
        r"(?:[ \t]+|[ \t]*[*&]+[ \t]*)[A-Za-z_~][\w:~]*[ \t]*\(",
        re.M,
    ),
)
# Never a specifier: a name the file defines as a type (`struct POINT {`, `} POINT;`, `typedef
# unsigned long DWORD;`), and values (`(char *) NULL`, `UINT_MAX`).
_TYPES = (
    re.compile(rf"\b(?:class|struct|union|enum)[ \t]+({_TOK})[ \t]*(?:[{{:]|\r?$)", re.M),
    re.compile(rf"\}}[ \t]*({_TOK})[ \t]*[;,]"),
    re.compile(rf"\btypedef\b[^;{{}}]*?\b({_TOK})[ \t]*;"),
)
_VALUES = re.compile(r"NULL|EOF|TRUE|FALSE|\w+_(?:MAX|MIN)")
# `FMT_BEGIN_NAMESPACE` alone on its line (never a return type on the line before the declared
# name: `NTSTATUS` then `NTAPI` then `DriverEntry(`, as GNU and EDK2 write them).
_ALONE = re.compile(rf"^[ \t]*{_TOK}[ \t]*(\([^;{{}}]*\))?[ \t\r]*$")
_DECLARATOR = re.compile(r"^[ \t]*[A-Za-z_~][\w:~]*[ \t]*\(")
# `CJSON_PUBLIC(cJSON *) cJSON_Parse(` — the macro wraps the return type: keep its argument.
_WRAPPED = re.compile(
    rf"^([ \t]*(?:extern[ \t]+)?)({_TOK})\(([^()\n]*)\)(?=[ \t]*[*&]*[ \t]*[A-Za-z_]\w*[ \t]*\()"
)
# A function-like macro after a tag (`class FMT_VISIBILITY("default") error`), or as a template
# parameter (`template <typename T, FMT_ENABLE_IF(c)>`): blanked with its arguments.
_TAG_CALL = re.compile(rf"\b(?:class|struct)[ \t]+({_TOK})\(")
_TEMPLATE = re.compile(r"\btemplate[ \t]*<")
_PARAM_CALL = re.compile(rf",[ \t\r\n]*{_TOK}\(")
_NOISE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"", re.S)


def _spaces(text: str) -> str:
    """Blank ``text`` keeping its lines and its length in UTF-8 bytes (the parser's offsets)."""
    return re.sub(r"[^\n]", lambda m: " " * len(m.group(0).encode("utf-8")), text)


def _directive_rows(lines: list[str]) -> list[bool]:
    """Which lines are preprocessor directives (or their ``\\`` continuations): left as they
    are — the grammar reads them itself."""
    out: list[bool] = []
    cont = False
    for line in lines:
        is_pp = cont or line.lstrip().startswith("#")
        out.append(is_pp)
        cont = is_pp and line.rstrip().endswith("\\")
    return out


def _close(text: str, i: int, opening: str = "(", closing: str = ")") -> int:
    """The index just past the bracket that closes the one at ``text[i]`` (or -1: a statement
    or a block ends first)."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == opening and not (opening == "<" and text[j - 1 : j] == "<"):
            depth += 1
        elif c == closing and not (closing == ">" and text[j - 1 : j] in ("-", ">")):
            depth -= 1
            if depth == 0:
                return j + 1
        if c in ";{}":
            return -1
    return -1


def _calls(text: str) -> list[tuple[int, int]]:
    """The spans of the function-like macros to blank (:data:`_TAG_CALL`, :data:`_PARAM_CALL`
    inside a ``template <…>``'s parameters)."""
    spans = []
    for m in _TAG_CALL.finditer(text):
        end = _close(text, m.end() - 1)
        if end > 0:
            spans.append((m.start(1), end))
    for t in _TEMPLATE.finditer(text):
        close = _close(text, t.end() - 1, "<", ">")
        if close < 0:
            continue
        for m in _PARAM_CALL.finditer(text, t.end(), close):
            end = _close(text, m.end() - 1)
            if 0 < end < close:
                spans.append((m.start(), end))
    return spans


def _blank_alone(lines: list[str], pp: list[bool]) -> list[bool]:
    """Which lines are a macro alone (:data:`_ALONE`) to blank: not those before a declared
    name (a return type or a calling convention on its own line)."""
    alone = [
        not p and bool(_ALONE.match(_NOISE.sub(" ", ln))) for ln, p in zip(lines, pp, strict=True)
    ]
    out = list(alone)
    before_name = False  # the next line that is neither blank nor alone declares a name
    for i in range(len(lines) - 1, -1, -1):
        if alone[i]:
            out[i] = not before_name
        elif lines[i].strip():
            before_name = not pp[i] and bool(_DECLARATOR.match(lines[i]))
    return out


def for_parser(source: str) -> str:
    """``source`` with its specifier macros blanked: the same lines, each the same length in
    UTF-8 bytes (what tree-sitter's offsets count)."""
    if not re.search(_TOK, source):
        return source
    lines = source.split("\n")
    pp = _directive_rows(lines)
    code = "\n".join("" if p else line for line, p in zip(lines, pp, strict=True))
    scan = _NOISE.sub(lambda m: _spaces(m.group(0)), code)
    macros = {m.group(1) for rx in _STRONG for m in rx.finditer(scan)}
    while macros:  # one before another: `CLI11_NODISCARD CLI11_INLINE std::string f(`
        known = "|".join(map(re.escape, sorted(macros)))
        more = {m.group(1) for m in re.finditer(rf"\b({_TOK})[ \t]+(?:{known})\b", scan)}
        if more <= macros:
            break
        macros |= more
    macros -= {m.group(1) for rx in _TYPES for m in rx.finditer(scan)}
    macros = {x for x in macros if not _VALUES.fullmatch(x)}
    every = (
        re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(macros))) + r")\b") if macros else None
    )
    blank_alone = _blank_alone(lines, pp)
    out: list[str] = []
    for line, p, alone in zip(lines, pp, blank_alone, strict=True):
        if alone:
            line = _spaces(line)
        elif not p:
            if every is not None:
                line = every.sub(lambda m: _spaces(m.group(0)), line)
            line = _WRAPPED.sub(
                lambda m: m.group(1) + " " * (len(m.group(2)) + 1) + m.group(3) + " ", line
            )
        out.append(line)
    text = "\n".join(out)
    pieces, at = [], 0
    for a, b in sorted(_calls(text)):
        if a >= at:
            pieces += [text[at:a], _spaces(text[a:b])]
            at = b
    return "".join(pieces) + text[at:]
