"""A code chunk's definition line as a quote (:func:`definition`): which of its lines
defines (the keywords of each language, or C/C++'s declaration shape), and that definition's
header as one line — joined over the lines its brackets span, a C++ ``template <…>`` header
joined to the declaration it introduces."""

from __future__ import annotations

import re

from core.answer.citations import clip

__all__ = ["DEFINITION", "definition"]

DEFINITION = re.compile(
    r"\s*(async\s+)?(def|class|func|fn|function|pub|public|private|static|export|interface|"
    r"struct|impl|module)\b"
)
_C_DEFINITION = re.compile(
    r"\s*(template\s*<|namespace\b|enum\b|union\b|typedef\b|"
    r"(?!(return|if|while|for|switch|else|case|do|goto|sizeof|new|delete|throw|co_return)\b)"
    r"[A-Za-z_][\w*&:<>, ]*[\s*&]\s*[A-Za-z_~][\w:~]*\()"
)
# The definition keywords of the languages that begin a declaration with modifiers the list above
# lacks (C#'s `internal sealed class`, Kotlin's `fun` and `override fun`, Swift's `init`, PHP's
# `final class`): a definition line there is found by these too.
_DEFINITION_MORE = {
    "csharp": re.compile(
        r"\s*(\[[^\]]*\]\s*)*(internal|protected|sealed|abstract|override|partial|virtual|"
        r"readonly|record|enum|delegate|event|const|async)\b"
    ),
    # Kotlin and Swift: modifiers, then the declaring keyword (a bare `value =` or `open(…)` line,
    # a local `val`, is not a definition).
    "kotlin": re.compile(
        r"\s*(@\w+(\([^)]*\))?\s+)*((public|private|internal|protected|open|override|abstract|"
        r"final|data|value|inline|sealed|enum|annotation|inner|suspend|operator|infix|tailrec|"
        r"external|companion|expect|actual|const)\s+)*(fun|class|interface|object|typealias|"
        r"constructor|init)\b|\s*((private|internal|protected|public)\s+)*const\s+val\b"
    ),
    "swift": re.compile(
        r"\s*(@\w+(\([^)]*\))?\s+)*((open|internal|fileprivate|final|override|mutating|"
        r"convenience|required|nonisolated|indirect|dynamic|lazy|weak|unowned)\s+)*(init|deinit|"
        r"subscript|protocol|extension|enum|typealias|actor|class|struct|func)\b"
    ),
    "php": re.compile(r"\s*(final|abstract|protected|trait|enum|const|readonly)\b"),
    # C / C++: a type, then the declared name and its parameters (`int uv_tcp_bind(`,
    # `auto vformat(…) ->`, `Foo::~Foo(`), or a template / namespace / enum / union header;
    # never a statement (`return f(x);`, `x = f(y)`, `else if (…)`).
    "c": _C_DEFINITION,
    "cpp": _C_DEFINITION,
}
_SIGNATURE_CHARS = 200


_C_LANGS = frozenset({"c", "cpp"})


def _after_template(lines: list[str], start: int) -> list[str]:
    """C++: a definition's lines from ``start``, a ``template <…>`` header alone on its lines
    (as many as its angle brackets span) joined to the declaration it introduces."""
    if not lines[start].lstrip().startswith("template"):
        return lines[start:]
    depth = 0
    for i in range(start, min(len(lines), start + 8)):
        for j, c in enumerate(lines[i].replace("->", "  ")):
            depth += (c == "<") - (c == ">")
            if depth == 0 and c == ">":
                if lines[i][j + 1 :].strip() or i + 1 >= len(lines):
                    return lines[start:]  # the declaration follows on the header's line
                head = " ".join(ln.strip() for ln in lines[start : i + 1])
                return [f"{head} {lines[i + 1].strip()}", *lines[i + 2 :]]
    return lines[start:]


def _is_definition(line: str, lang: str | None) -> bool:
    more = _DEFINITION_MORE.get(lang or "")
    return bool(DEFINITION.match(line) or (more is not None and more.match(line)))


def _closing(s: str, start: int) -> int:
    """Index of the bracket that closes the one at ``start``, or -1."""
    depth = 0
    for i in range(start, len(s)):
        if s[i] in "([":
            depth += 1
        elif s[i] in ")]":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _signature(lines: list[str]) -> str:
    """A definition's header as one line: joined over the lines its brackets span (a
    one-parameter-per-line signature), no further. A long one keeps its end after the
    parameter list — the return type is what people ask about."""
    sig_lines = []
    depth = 0
    for ln in lines[:24]:
        t = ln.strip()
        sig_lines.append(t)
        depth += sum(t.count(c) for c in "([") - sum(t.count(c) for c in ")]")
        if depth <= 0:
            break
    sig = " ".join(" ".join(sig_lines).split()).replace("( ", "(").replace(" )", ")")
    sig = sig.replace(",)", ")").rstrip(":{ ")  # a trailing comma of a one-per-line list
    if len(sig) <= _SIGNATURE_CHARS:
        return sig
    close = _closing(sig, sig.find("(")) if "(" in sig else -1
    tail = sig[close:] if close > 0 else ""
    if 1 < len(tail) < _SIGNATURE_CHARS // 3:
        return clip(sig[:close], _SIGNATURE_CHARS - len(tail) - 1) + " " + tail
    return clip(sig, _SIGNATURE_CHARS)


def definition(lines: list[str], symbol: str | None, lang: str | None) -> str | None:
    """The quote of a chunk's definition (its non-empty ``lines``): the first line that defines
    — the one that names ``symbol`` when one does (a method's chunk starts with its class's
    header as context) — as one line; None when no line defines."""
    defs = [i for i, ln in enumerate(lines) if _is_definition(ln, lang)]
    if not defs:
        return None
    start = defs[0]
    name = re.split(r"\.|::|#", symbol)[-1] if symbol else ""
    if name:
        own = [i for i in defs if re.search(rf"(?<![\w$]){re.escape(name)}(?![\w$])", lines[i])]
        start = own[0] if own else start
    return _signature(_after_template(lines, start) if lang in _C_LANGS else lines[start:])
