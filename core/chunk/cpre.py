"""C and C++ before tree-sitter reads them: which language a ``.h`` header is in, and the
macros that stand where the grammar expects a specifier.

tree-sitter does not run the preprocessor, so a header's export and attribute macros
(``UV_EXTERN int uv_run(...)``, ``FMT_CONSTEXPR inline auto f(...)``, ``class FMT_API error``, a
line ``FMT_BEGIN_NAMESPACE``, ``template <typename T, FMT_ENABLE_IF(cond)>``) break the parse —
libuv's ``uv.h`` parsed as one error node from its first line to its last. :func:`for_parser`
blanks those macros (spaces, so every byte offset and line stays where it was: the chunks, their
lines and the names read off the tree are the file's own) before the parse, and only those the
file itself shows in a specifier's place: a Windows type (``DWORD n``) is left alone.
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
    r"|^[ \t]*(class|(using[ \t]+)?namespace)\s+\w+|^[ \t]*(private|public|protected):$"
    r"|__has_cpp_attribute|__cplusplus >|std::\w+",
    re.M,
)


def header_language(source: str) -> str:
    """ "cpp" when a ``.h`` file reads as C++ (linguist's rules), else "c"."""
    return "cpp" if _CPP.search(source) else "c"


_KW = (
    r"(?:static|inline|extern|const|constexpr|consteval|constinit|virtual|explicit|friend|void"
    r"|int|char|short|long|unsigned|signed|float|double|bool|auto|struct|class|union|enum"
    r"|typename|template|typedef|size_t|operator|volatile|_Bool|register|wchar_t|char8_t"
    r"|char16_t|char32_t)"
)
_PRIM = r"(?:void|int|char|short|long|unsigned|signed|float|double|bool|auto|size_t)"
_TOK = r"[A-Z_][A-Z0-9_]*[A-Z][A-Z0-9_]*"  # upper case, at least one letter besides "_"
# Where a macro can only be a specifier: before a keyword (`UV_EXTERN int`), after a tag
# (`class FMT_API error`), between a type and the declared function (`int ZEXPORT inflate(`),
# after a parameter list (`void f() FMT_NOEXCEPT;`), before a qualified type and a name.
_STRONG = (
    re.compile(rf"\b({_TOK})[ \t]+{_KW}\b"),
    re.compile(rf"\b(?:class|struct|union)[ \t]+({_TOK})[ \t]+[A-Za-z_]"),
    re.compile(rf"\b{_PRIM}[ \t]*[*&]*[ \t]+({_TOK})[ \t]+[A-Za-z_]\w*[ \t]*\("),
    re.compile(rf"\)[ \t]*(?:const[ \t]+)?({_TOK})[ \t]*(?=[;{{=]|->|override\b|final\b)"),
    # before a qualified return type and the declared name: `CLI11_INLINE std::string f(`
    re.compile(
        rf"^[ \t]*({_TOK})[ \t]+(?:[A-Za-z_]\w*::)+\w+(?:<[^;{{}}()\n]*>)?[ \t]*[*&]*[ \t]*"
        r"[A-Za-z_~][\w:~]*[ \t]*\(",
        re.M,
    ),
)
_ALONE = re.compile(rf"^[ \t]*{_TOK}[ \t]*(\([^;{{}}]*\))?[ \t]*$")  # `FMT_BEGIN_NAMESPACE`
# `CJSON_PUBLIC(cJSON *) cJSON_Parse(` — the macro wraps the return type: keep its argument.
_WRAPPED = re.compile(
    rf"^([ \t]*(?:extern[ \t]+)?)({_TOK})\(([^()\n]*)\)(?=[ \t]*[*&]*[ \t]*[A-Za-z_]\w*[ \t]*\()"
)
# In a template's parameters or after a tag, a function-like macro: `, FMT_ENABLE_IF(c)`,
# `class FMT_VISIBILITY("default") error`; blanked with its arguments (balanced parentheses).
_CALL_AT = re.compile(rf"(,[ \t\n]*|\b(?:class|struct)[ \t]+)({_TOK})\(")
_NOISE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"", re.S)


def _spaces(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


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


def _close(text: str, i: int) -> int:
    """The index just past the parenthesis that closes the one at ``text[i]`` (or -1)."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        depth += c == "("
        depth -= c == ")"
        if depth == 0:
            return j + 1
        if c in ";{}":
            return -1
    return -1


def for_parser(source: str) -> str:
    """``source`` with its specifier macros blanked (same length, same lines)."""
    if not re.search(_TOK, source):
        return source
    lines = source.split("\n")
    pp = _directive_rows(lines)
    code = "\n".join("" if p else line for line, p in zip(lines, pp, strict=True))
    scan = _NOISE.sub(lambda m: _spaces(m.group(0)), code)
    macros = {m.group(1) for rx in _STRONG for m in rx.finditer(scan)}
    while True:  # one before another: `CLI11_NODISCARD CLI11_INLINE std::string f(`
        known = "|".join(map(re.escape, sorted(macros)))
        more = {m.group(1) for m in re.finditer(rf"\b({_TOK})[ \t]+(?:{known})\b", scan)}
        if not known or more <= macros:
            break
        macros |= more
    every = (
        re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(macros))) + r")\b") if macros else None
    )
    out: list[str] = []
    for line, p in zip(lines, pp, strict=True):
        if not p:
            if _ALONE.match(_NOISE.sub(lambda m: _spaces(m.group(0)), line)):
                line = _spaces(line)
            else:
                if every is not None:
                    line = every.sub(lambda m: _spaces(m.group(0)), line)
                line = _WRAPPED.sub(
                    lambda m: m.group(1) + " " * (len(m.group(2)) + 1) + m.group(3) + " ", line
                )
        out.append(line)
    text = "\n".join(out)
    for m in reversed(list(_CALL_AT.finditer(text))):
        end = _close(text, m.end() - 1)
        if end > 0:
            a = m.start() if m.group(1).startswith(",") else m.start(2)
            text = text[:a] + _spaces(text[a:end]) + text[end:]
    return text
