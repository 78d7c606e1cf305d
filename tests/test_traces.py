"""Stack traces in a question (core/retrieve/traces.py): each frame's file, line and function
in the shapes the languages the chunker reads print them, and the file found by the part of a
crashed machine's path that the repository has."""

from __future__ import annotations

import pytest

from core.retrieve.analyse import analyse
from core.retrieve.traces import frames, suffixes, without_frames

GDB = """Program received signal SIGSEGV, Segmentation fault.
#0  0x00007ffff7bc2a1d in uv__io_poll (loop=0x555555558010, timeout=-1) at ../src/unix/linux.c:1234
#1  0x00007ffff7bb0f5c in uv_run (loop=0x555555558010, mode=UV_RUN_DEFAULT) at src/unix/core.c:460
#2  0x0000555555555189 in main () at app.c:12
#3  0x00007ffff7a05b97 in __libc_start_main () from /lib/x86_64-linux-gnu/libc.so.6"""


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (GDB, ["../src/unix/linux.c:1234 in uv__io_poll", "src/unix/core.c:460 in uv_run",
               "app.c:12"]),  # `main` names no repository's code
        ("* frame #0: 0x0000000100003f6a libuv.1.dylib`uv__stream_io(loop=0x1, w=0x2) at "
         "stream.c:1290:7", ["stream.c:1290 in uv__stream_io"]),  # lldb
        ("==1==ERROR: AddressSanitizer: heap-use-after-free\n"
         "    #0 0x4f2b1c in uv__queue_remove /home/u/libuv/src/queue.h:90:3\n"
         "    #1 0x4f3c2d in uv_close /home/u/libuv/src/unix/core.c:214:5",
         ["/home/u/libuv/src/queue.h:90 in uv__queue_remove",
          "/home/u/libuv/src/unix/core.c:214 in uv_close"]),
        ("System.InvalidOperationException: boom\n"
         "   at Polly.CircuitBreaker.CircuitStateController`1.OnActionFailureAsync(Outcome`1 "
         "outcome) in /_/src/Polly.Core/CircuitBreaker/"
         "CircuitStateController.cs:line 245\n   at Polly.Retry.RetryStrategy`1.ExecuteCore[TState]"
         "(Func`3 callback) in C:\\src\\Retry\\RetryStrategy.cs:line 88",
         ["/_/src/Polly.Core/CircuitBreaker/CircuitStateController.cs:245 in OnActionFailureAsync",
          "C:\\src\\Retry\\RetryStrategy.cs:88 in ExecuteCore"]),
        ("thread 'main' panicked at src/bin/bat/config.rs:42:9:\ncalled `Option::unwrap()` on a "
         "`None` value", ["src/bin/bat/config.rs:42"]),
        ("thread 'main' panicked at 'index out of bounds', src/printer.rs:120:17",
         ["src/printer.rs:120"]),
        ("stack backtrace:\n  12: bat::controller::Controller::run\n             at "
         "./src/controller.rs:42:13", ["./src/controller.rs:42 in run"]),
        ("panic: runtime error: invalid memory address\n\ngoroutine 1 [running]:\n"
         "github.com/go-chi/chi/v5.(*Mux).ServeHTTP(0xc000, {0x1, 0x2})\n"
         "\t/home/u/go/pkg/mod/github.com/go-chi/chi/v5@v5.0.8/mux.go:68 +0x1d",
         ["/home/u/go/pkg/mod/github.com/go-chi/chi/v5@v5.0.8/mux.go:68 in ServeHTTP"]),
        ("lib/thor/runner.rb:42:in 'Thor::Runner#install': undefined method (NoMethodError)\n"
         "\tfrom lib/thor/base.rb:12:in `block in start'",
         ["lib/thor/runner.rb:42 in install", "lib/thor/base.rb:12 in start"]),
        ("PHP Fatal error: Uncaught TypeError\n#0 /app/src/Handler/CurlFactory.php(123): "
         "GuzzleHttp\\Handler\\CurlFactory->finish()\n#1 {main}\n  thrown in /app/src/Client.php "
         "on line 12",
         ["/app/src/Handler/CurlFactory.php:123 in finish", "/app/src/Client.php:12"]),
        ("Fatal error: Unexpectedly found nil: file Sources/Alamofire/Session.swift, line 42",
         ["Sources/Alamofire/Session.swift:42"]),
        ('Traceback (most recent call last):\n  File "/usr/lib/python3/site-packages/tenacity/'
         'retry.py", line 88, in __call__\n    return fn()',
         ["/usr/lib/python3/site-packages/tenacity/retry.py:88 in __call__"]),
        ("TypeError: x\n    at Object.<anonymous> (/app/node_modules/axios/lib/core/Axios.js:45:12)"
         "\n    at dispatchRequest (lib/core/dispatchRequest.js:30:10)",
         ["/app/node_modules/axios/lib/core/Axios.js:45", "lib/core/dispatchRequest.js:30 in "
          "dispatchRequest"]),
        ("at com.google.gson.stream.JsonReader.nextDouble(JsonReader.java:941)",
         ["JsonReader.java:941 in nextDouble"]),
        ("How do I set the timeout at startup (see config.py:12)?", []),
    ],
)  # fmt: skip
def test_frames_in_each_language_s_shape(text: str, want: list[str]) -> None:
    """Each frame's path, line and the name it is looked up by (its function's last part)."""
    got = [f"{f.path}:{f.line}" + (f" in {f.name}" if f.name else "") for f in frames(text)]
    assert got == want


def test_a_frame_number_is_no_issue_and_a_trace_s_text_names_nothing() -> None:
    r = analyse(GDB + "\nIs this the same as issue #4567?")
    assert r.issues == [4567]  # not #0, #1, #2, #3
    assert r.paths[:3] == ["../src/unix/linux.c", "src/unix/core.c", "app.c"]  # the crash first
    assert r.identifiers[:2] == ["uv__io_poll", "uv_run"]
    assert "main" not in r.identifiers and "loop" not in r.identifiers
    assert "#1" not in without_frames("#1 {main}\n") and "#7" in without_frames("#7 is open\n")
    php = analyse("#0 /app/src/Client.php(12): Foo->bar()\n#1 {main}")
    assert php.issues == [] and php.frames == ["/app/src/Client.php:12 in Foo->bar"]
    assert "bar" in php.identifiers


def test_paths_of_every_indexed_language() -> None:
    q = "Why does src/Polly.Core/Retry/RetryHelper.cs differ from lib/Client.php, Context.kt, "
    q += "Session.swift and docs/index.adoc?"
    assert analyse(q).paths == [
        "src/Polly.Core/Retry/RetryHelper.cs", "lib/Client.php", "Context.kt", "Session.swift",
        "docs/index.adoc",
    ]  # fmt: skip


def test_suffixes_of_a_crashed_machine_s_path() -> None:
    assert suffixes("/home/u/libuv/src/unix/core.c")[-2:] == ["src/unix/core.c", "unix/core.c"]
    assert suffixes("C:\\src\\Retry\\X.cs") == ["src/Retry/X.cs", "Retry/X.cs"]
    assert suffixes("../src/./a.c") == ["src/a.c"]
    assert suffixes("app.c") == ["app.c"]
    # a file in a folder keeps one: the standard library's json/__init__.py, a dependency's
    # router/index.js are not the repository's __init__.py or index.js
    assert suffixes("/usr/lib/python3.11/json/__init__.py")[-1] == "json/__init__.py"
    assert suffixes("/app/node_modules/express/lib/router/index.js")[-1] == "router/index.js"
    # …but a Go module cache's module@version folder is the repository's root
    assert suffixes("/home/u/go/pkg/mod/github.com/go-chi/chi/v5@v5.0.8/mux.go")[-1] == "mux.go"


@pytest.mark.asyncio
async def test_a_sanitizer_trace_finds_the_file_it_crashed_in(sample) -> None:  # type: ignore[no-untyped-def]
    """End to end (default globs): a frame's absolute path is found by its indexed tail (the
    other platform's file of the same name is not taken for it), and a frame's function that
    the repository defines is an exact hit."""
    from helpers import commit_all, write_files

    write_files(sample["repo"], {
        "src/unix/core.c": "int uv_close_all(int handle) {\n  return handle - 1;\n}\n",
        "src/win/core.c": "int uv_close_all_win(int handle) {\n  return handle;\n}\n",
        "src/queue.h": "#ifndef QUEUE_H\n#define QUEUE_H\nstruct uv__queue {\n  int n;\n};\n"
                       "#endif\n",
    })  # fmt: skip
    commit_all(sample["repo"])
    app = sample["app"]
    await app.index("widget")
    q = (
        "Crash on close:\n==1==ERROR: AddressSanitizer: heap-use-after-free\n"
        "    #0 0x4f2b1c in uv__free /home/me/build/libuv/src/unix/core.c:2:3\n"
        "    #1 0x4f3c2d in run_loop /home/me/app/loop.c:9:5"
    )
    r = await app.retrieve("widget", q)
    assert r.route["signals"]["issues"] == []
    why = {e["why"] for e in r.route["exact"]["code"]}
    assert "file /home/me/build/libuv/src/unix/core.c" in why
    assert r.sources[0].path == "src/unix/core.c"
    r = await app.retrieve("widget", q.replace("uv__free", "uv_close_all_win"))
    why = {e["why"] for e in r.route["exact"]["code"]}
    assert {"defines uv_close_all_win", "file /home/me/build/libuv/src/unix/core.c"} <= why


@pytest.mark.parametrize(
    ("q", "issues"),
    [
        ("Since #1234 uv_run() at src/unix/core.c:460 blocks", [1234]),
        ("Is #512 init() at config.c:12 fixed?", [512]),
        ("Fixed by PR #99:\n  render() at widget.js:12 now passes", [99]),
        ("#77 uv_close() at shutdown is slow", [77]),
        ("#123 fetch() from cache returns stale data", [123]),
    ],
)
def test_an_issue_number_in_prose_is_no_frame_number(q: str, issues: list[int]) -> None:
    """Only a backtrace line (at a line's start, before an address or a file) loses its #N."""
    assert analyse(q).issues == issues


@pytest.mark.parametrize(
    "text",
    ["\n" * 2000 + "1: f" + "\n" * 2000, "\n" * 20000, "a(" * 4000, "x" * 10000, "1: a\n" * 2000],
)
def test_pasted_text_that_backtracked_is_read_at_once(text: str) -> None:
    """Inputs that took seconds to minutes in earlier versions of these patterns (3,984
    characters of blank lines around `1: f`: 22.7 s; 6,000 of `a(`: 380 s): no frames, and the
    suite would stall here if they came back."""
    assert frames(text) == [] and analyse(text).issues == []
