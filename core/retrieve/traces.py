"""Stack-trace frames in a question, in the shapes the languages the chunker reads print them:
each frame's file, line and function (:func:`frames`), and the question with its frames blanked
(:func:`without_frames`: a gdb frame's ``#1`` is no issue number).

A frame's path is the one on the machine that crashed (``/home/u/libuv/src/unix/core.c``,
``./src/main.rs``, ``C:\\src\\Polly\\X.cs``): :func:`suffixes` gives the paths to look it up by,
longest first, down to the file name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Frame", "frames", "read", "suffixes", "without_frames"]

# A path as a trace prints it: one run of path characters (after a drive), read possessively and
# only from the run's start — a long run is read once, not once per character (these regexes
# see whatever a user pastes). Its suffix is checked after the match (``_Shape.suffixes``).
_PATH = r"(?<![\w./\\@+-])(?P<path>(?:[A-Za-z]:)?[\w./\\@+-]++)"


@dataclass(frozen=True)
class _Shape:
    rx: re.Pattern[str]
    suffixes: tuple[str, ...] = ()  # the path must end in one ("" : any file with a suffix)


def _shape(pattern: str, *suffixes: str) -> _Shape:
    return _Shape(re.compile(pattern.replace("{P}", _PATH), re.M), suffixes or ("",))


# Each shape as that language prints it; a frame found by one is not read again by another.
# Spaces and tabs only ([ \t], never \s) where a frame is one line: a pattern that may cross
# lines is read again from every line start.
_SHAPES = [
    # Python: File "x.py", line 12, in f
    _shape(r'File "(?P<path>[^"\n]++)", line (?P<line>\d+)(?:, in (?P<func>[\w<>]+))?'),
    # Java, Kotlin, JavaScript: at a.b.C.f(C.java:12) / at f (lib/x.js:12:5)
    _shape(r"\bat[ \t]+(?P<func>[\w.$<>]++)[ \t]*\({P}:(?P<line>\d+)"),
    # .NET: at A.B.C.M[T](Int32 x) in /src/X.cs:line 42
    _shape(
        r"\bat[ \t]+(?P<func>[\w.`<>\[\],]++)\([^)\n]*+\)[ \t]+in[ \t]+"
        r"(?P<path>(?:[A-Za-z]:)?[^\n:]++):line[ \t]+(?P<line>\d+)"
    ),
    # gdb / lldb, at a line's start: #0  0x00007f in uv__io_poll (loop=0x1) at src/unix/linux.c:1234
    #                                 * frame #0: 0x1 libuv.so`uv__io_poll(loop=0x1) at linux.c:12:5
    _shape(
        r"^[ \t]*(?:\*[ \t]*)?(?:frame[ \t]+)?#\d+:?[ \t]+(?:0x[0-9a-fA-F]++[ \t]+(?:in[ \t]+)?)?"
        r"(?:[\w.+-]++`)?(?P<func>[A-Za-z_~][\w:~<>]*+)[ \t]*\([^\n]*?\)[ \t]+at[ \t]+{P}"
        r":(?P<line>\d+)"
    ),
    # AddressSanitizer and friends: #3 0x4f2b1c in uv_run /home/u/libuv/src/unix/core.c:430:7
    _shape(
        r"^[ \t]*#\d+[ \t]+0x[0-9a-fA-F]++[ \t]+in[ \t]+(?P<func>[A-Za-z_~][\w:~<>]*+)"
        r"(?:\([^)\n]*+\))?[ \t]+{P}:(?P<line>\d+)"
    ),
    # Rust: panicked at src/main.rs:10:5 / panicked at 'msg', src/main.rs:10:5; and a
    # backtrace's frame: `12: bat::controller::Controller::run` then `at ./src/controller.rs:42:13`
    _shape(r"panicked at[ \t]+(?:'[^'\n]*+',[ \t]*)?{P}:(?P<line>\d+)", ".rs"),
    _shape(
        r"^[ \t]*\d+:[ \t]+(?P<func>[\w:<>]++)[ \t]*\r?\n[ \t]*at[ \t]+{P}:(?P<line>\d+)", ".rs"
    ),
    # Go: main.(*T).f(0x1) on the line before `\t/home/u/x/main.go:12 +0x1d` (see _go_func)
    _shape(r"{P}:(?P<line>\d+)[ \t]+\+0x", ".go"),
    # Ruby: lib/thor/runner.rb:42:in 'Thor::Runner#install' (or `install')
    _shape(r"{P}:(?P<line>\d+):in[ \t]+[`'‘](?P<func>[^'’\n]++)['’]", ".rb", ".rake"),
    # PHP: #0 /src/Handler/CurlFactory.php(123): GuzzleHttp\Handler\CurlFactory->finish()
    #      … thrown in /src/Client.php on line 12 / in /src/Client.php:12
    _shape(
        r"^[ \t]*#\d+[ \t]+{P}\((?P<line>\d+)\)(?::[ \t]+(?P<func>[\w\\]++(?:->|::)\w+))?",
        ".php",
    ),
    _shape(r"\bin[ \t]+{P}(?::|[ \t]+on[ \t]+line[ \t]+)(?P<line>\d+)", ".php"),
    # Swift: Fatal error: …: file MyLib/Foo.swift, line 42
    _shape(r"\bfile[ \t]+{P},[ \t]+line[ \t]+(?P<line>\d+)", ".swift"),
]
_GO_FUNC = re.compile(r"^\s*(\S+)\([^()\n]*\)\s*$")  # `github.com/x/chi.(*Mux).ServeHTTP(0xc0)`


def _go_func(text: str, at: int) -> str | None:
    """A Go frame's function: the line before its path line."""
    end = text.rfind("\n", 0, at)
    if end < 0:
        return None
    m = _GO_FUNC.match(text[text.rfind("\n", 0, end) + 1 : end])
    return m.group(1) if m else None


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str | None  # as the trace prints it: `com.acme.Widget.render`, `Thor::Runner#install`
    name: str | None  # the name to look up: `render`, `install`; None for `main`, `<anonymous>`

    def __str__(self) -> str:  # "path:line in func", as Route.frames holds them
        return f"{self.path}:{self.line}" + (f" in {self.func}" if self.func else "")


_GENERIC = re.compile(r"\[[^\]]*\]|<[^>]*>|\([^)]*\)")  # generics, Go's (*T)


# Where every program starts, in no repository's code: not a name to look up.
_ENTRY = frozenset({"main", "_start", "__libc_start_main", "__libc_start_call_main",
                    "start_thread", "clone", "clone3", "_main"})  # fmt: skip


def _last(func: str | None) -> str | None:
    if not func or re.search(r"[.:]<", func):  # JavaScript's `Object.<anonymous>`
        return None
    name = _GENERIC.sub("", func.split(" in ")[-1])  # Ruby's "block in X#m"
    parts = [p for p in re.split(r"::|->|[.#/\\`]", name) if p]
    last = parts[-1] if parts else ""
    ok = re.fullmatch(r"[A-Za-z_$~][\w$~]*", last) and last not in _ENTRY
    return last if ok else None


def _spans(question: str) -> list[tuple[int, int, Frame]]:
    found: list[tuple[int, int, Frame]] = []
    for shape in _SHAPES:
        for m in shape.rx.finditer(question):
            if any(a <= m.start() < b for a, b, _ in found):
                continue  # one frame, one shape
            d = m.groupdict()
            base = re.split(r"[/\\]", d["path"])[-1]
            if not any(base.endswith(x) if x else "." in base.strip(".") for x in shape.suffixes):
                continue
            func = d.get("func") or (
                _go_func(question, m.start()) if ".go" in shape.suffixes else None
            )
            found.append((m.start(), m.end(), Frame(d["path"], int(d["line"]), func, _last(func))))
    return sorted(found, key=lambda x: x[0])


def frames(question: str) -> list[Frame]:
    """The stack-trace frames of ``question``, in the order they appear."""
    return read(question)[0]


# A backtrace line's number where the frame has no file (`#3 0x7f in __libc_start_main () from
# /lib/libc.so.6`, PHP's `#1 {main}`).
_NUMBERED = re.compile(
    r"(?m)^([ \t]*(?:\*[ \t]*)?(?:frame[ \t]+)?)(#\d+)(?=:?[ \t]+(?:0x[0-9a-fA-F]|\{main\}|"
    r"[\w:~<>]+[ \t]*\([^)\n]*\)[ \t]+(?:at|from)[ \t]+[^\s/.]*[/.]))"
)  # a number before a file's path (`at x.c:1`, `from /lib/…`), not `#123 fetch() from cache`


def without_frames(question: str) -> str:
    """``question`` with its frames, and a backtrace's frame numbers, blanked: ``#1`` there is
    no issue."""
    return read(question)[1]


def read(question: str) -> tuple[list[Frame], str]:
    """:func:`frames` and :func:`without_frames` of ``question``, its frames found once."""
    spans = _spans(question)
    pieces, at = [], 0
    for a, b, _ in spans:
        pieces += [question[at:a], " " * (b - a)]
        at = b
    bare = "".join(pieces) + question[at:]
    return [f for _, _, f in spans], _NUMBERED.sub(
        lambda m: m.group(1) + " " * len(m.group(2)), bare
    )


def suffixes(path: str) -> list[str]:
    """The paths a frame's file may be indexed under, longest first: its components from each
    one on (``/home/u/libuv/src/unix/core.c`` … ``src/unix/core.c``, ``unix/core.c``), leaving
    out the drive, ``.`` and ``..``. A file in a folder keeps one folder (``json/__init__.py``
    from the standard library is not the repository's ``__init__.py``), except after a Go
    module cache's ``module@version`` folder: the repository's own root."""
    parts = [p for p in re.split(r"[/\\]+", path) if p and p not in (".", "..")]
    if parts and re.fullmatch(r"[A-Za-z]:", parts[0]):
        parts = parts[1:]
    out = ["/".join(parts[i:]) for i in range(max(1, len(parts) - 1))]
    if len(parts) > 1 and "@" in parts[-2]:
        out.append(parts[-1])
    return out
