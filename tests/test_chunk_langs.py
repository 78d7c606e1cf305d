"""The code chunker's C#, PHP, Kotlin and Swift grammars (core/chunk/code_langs.py): symbols,
chunks, the code graph and named constants, as for the languages of test_chunk_code.py."""

from __future__ import annotations

import pytest

from core.chunk.code import chunk_code, language_for_path
from core.chunk.code_langs import comment_style
from core.config.schema import BUILTIN_EXCLUDES, DEFAULT_CODE_INCLUDE
from tests.test_chunk_code import check, sym_table, words

CSHARP = """using System;

namespace Polly.Retry
{
    /// <summary>Options of the retry strategy.</summary>
    public class RetryStrategyOptions : ResilienceStrategyOptions
    {
        public const int DefaultRetryCount = 3;
        private static readonly TimeSpan DefaultDelay = TimeSpan.FromSeconds(2);
        private int _attempts;

        public RetryStrategyOptions() => Name = "Retry";

        [Pure]
        public TimeSpan GetDelay(int attempt)
        {
            var jitter = Jitter.Next(attempt);
            return new Backoff(jitter).Compute(DefaultDelay);
        }
    }

    internal interface IClock
    {
        DateTime Now();
    }

    public enum BackoffType { Constant, Linear, Exponential }

    public record Outcome(int Attempts);
}
"""


def test_csharp() -> None:
    chunks, symbols = chunk_code("src/Polly.Core/Retry/RetryStrategyOptions.cs", CSHARP, words, 500)
    check(CSHARP, chunks, 500)
    assert sym_table(symbols) == [
        ("RetryStrategyOptions", "class", 6, 20),
        ("RetryStrategyOptions.RetryStrategyOptions", "method", 12, 12),
        ("RetryStrategyOptions.GetDelay", "method", 14, 19),
        ("IClock", "interface", 22, 25),
        ("IClock.Now", "method", 24, 24),
        ("BackoffType", "enum", 27, 27),
        ("Outcome", "record", 29, 29),
        ("RetryStrategyOptions.DefaultRetryCount", "constant", 8, 8),
        ("RetryStrategyOptions.DefaultDelay", "constant", 9, 9),
    ]  # `_attempts`: a field, not a constant
    first = next(c for c in chunks if c.symbol == "RetryStrategyOptions")
    assert first.start_line == 5  # the doc comment belongs to the class
    get_delay = next(s for s in symbols if s.qualname == "RetryStrategyOptions.GetDelay")
    assert get_delay.calls == ("Next", "Backoff", "Compute")


PHP = """<?php

namespace GuzzleHttp;

const VERSION = '7.9';

/**
 * The client.
 */
final class Client implements ClientInterface
{
    public const MAJOR_VERSION = 7;
    private $config;

    public function __construct(array $config = [])
    {
        $this->configureDefaults($config);
        $stack = HandlerStack::create(Utils::chooseHandler());
        $this->stack = new Middleware($stack);
    }
}

interface ClientInterface
{
    public function send(RequestInterface $request, array $options = []);
}

trait ClientTrait
{
    public function get($uri, array $options = []) { return $this->request('GET', $uri); }
}

function describe_type($input): string
{
    return \\gettype($input);
}
"""


def test_php() -> None:
    chunks, symbols = chunk_code("src/Client.php", PHP, words, 500)
    check(PHP, chunks, 500)
    assert sym_table(symbols) == [
        ("Client", "class", 10, 21),
        ("Client.__construct", "method", 15, 20),
        ("ClientInterface", "interface", 23, 26),
        ("ClientInterface.send", "method", 25, 25),
        ("ClientTrait", "trait", 28, 31),
        ("ClientTrait.get", "method", 30, 30),
        ("describe_type", "function", 33, 36),
        ("VERSION", "constant", 5, 5),
        ("Client.MAJOR_VERSION", "constant", 12, 12),
    ]
    assert chunks[0].text.split("\n", 1)[0] == "src/Client.php › VERSION"
    ctor = next(s for s in symbols if s.qualname == "Client.__construct")
    assert ctor.calls == ("configureDefaults", "create", "chooseHandler", "Middleware")
    assert next(c for c in chunks if c.symbol == "Client").start_line == 7  # its doc comment


KOTLIN = """package com.github.ajalt.clikt.core

import java.io.File

const val DEFAULT_WIDTH = 79
private val logger = Logger()

/**
 * A command.
 */
@Suppress("unused")
abstract class CliktCommand(
    val name: String? = null,
) : ParameterHolder {
    companion object {
        const val MAX_DEPTH = 3
    }

    open fun run() {
        helper(1)
        val parser = Parser()
        currentContext.echo(parser.parse())
    }
}

interface ParameterHolder {
    fun registerOption(option: Option)
}

enum class Color {
    RED,
    GREEN,
}

object Registry {
    fun get(): Int = lookup()
}

fun String.shout(): String = uppercase()
"""


def test_kotlin() -> None:
    chunks, symbols = chunk_code("clikt/src/CliktCommand.kt", KOTLIN, words, 500)
    check(KOTLIN, chunks, 500)
    assert sym_table(symbols) == [
        ("CliktCommand", "class", 11, 24),
        ("CliktCommand.run", "method", 19, 23),
        ("ParameterHolder", "interface", 26, 28),
        ("ParameterHolder.registerOption", "method", 27, 27),
        ("Color", "enum", 30, 33),
        ("Registry", "class", 35, 37),
        ("Registry.get", "method", 36, 36),
        ("shout", "function", 39, 39),
        ("DEFAULT_WIDTH", "constant", 5, 5),
        ("CliktCommand.MAX_DEPTH", "constant", 16, 16),
    ]  # `logger`: a one-line lower-case val, not named
    run = next(s for s in symbols if s.qualname == "CliktCommand.run")
    assert run.calls == ("helper", "Parser", "echo", "parse")
    assert next(c for c in chunks if c.symbol == "CliktCommand").start_line == 8


SWIFT = """import Foundation

let defaultTimeout: TimeInterval = 60

/// A session.
open class Session {
    static let MAX_RETRIES = 3
    public let rootQueue: DispatchQueue

    public init(rootQueue: DispatchQueue) {
        self.rootQueue = rootQueue
        setup(rootQueue)
    }

    @discardableResult
    open func request(_ url: URLConvertible) -> DataRequest {
        return perform(Request(url: url).resume())
    }
}

public protocol URLConvertible {
    func asURL() throws -> URL
}

public struct HTTPMethod {
    public let rawValue: String
}

extension Session {
    func cancelAll() {}
}

typealias Parameters = [String: Any]
"""


def test_swift() -> None:
    chunks, symbols = chunk_code("Source/Session.swift", SWIFT, words, 500)
    check(SWIFT, chunks, 500)
    assert sym_table(symbols) == [
        ("Session", "class", 6, 19),
        ("Session.init", "method", 10, 13),
        ("Session.request", "method", 15, 18),
        ("URLConvertible", "interface", 21, 23),
        ("URLConvertible.asURL", "method", 22, 22),
        ("HTTPMethod", "struct", 25, 27),
        ("Session", "impl", 29, 31),
        ("Session.cancelAll", "method", 30, 30),
        ("Parameters", "type", 33, 33),
        ("Session.MAX_RETRIES", "constant", 7, 7),
    ]
    request = next(s for s in symbols if s.qualname == "Session.request")
    assert request.calls == ("perform", "Request", "resume")


@pytest.mark.parametrize(
    ("path", "lang"),
    [("src/A.cs", "csharp"), ("build.csx", "csharp"), ("src/Client.php", "php"),
     ("a/B.kt", "kotlin"), ("build.gradle.kts", "kotlin"), ("Source/S.swift", "swift"),
     ("src/Main.scala", None)],
)  # fmt: skip
def test_language_for_path_new_languages(path: str, lang: str | None) -> None:
    assert language_for_path(path) == lang


def test_comment_styles_of_the_new_languages() -> None:
    assert [comment_style(x) for x in ("csharp", "kotlin", "swift")] == ["//"] * 3
    assert comment_style("php") == ""  # both `#` and `//`


def test_their_files_are_indexed_by_default() -> None:
    """A C#, PHP, Kotlin or Swift repository's code is found by the default include (it used to
    index nothing of it); Scala and the like too, as line windows."""
    for ext in ("cs", "php", "kt", "kts", "swift", "scala", "dart", "lua", "ex", "vue"):
        assert f"**/*.{ext}" in DEFAULT_CODE_INCLUDE, ext
    chunks, symbols = chunk_code("src/Main.scala", "object Main {\n  def run() = 1\n}\n", words, 50)
    assert [c.kind for c in chunks] == ["window"] and symbols == []


def test_their_build_trees_and_generated_sources_are_not() -> None:
    import pathspec

    spec = pathspec.GitIgnoreSpec.from_lines(BUILTIN_EXCLUDES)
    for path in ("src/Polly.Core/obj/Debug/net8.0/Polly.Core.AssemblyInfo.cs", "app/.gradle/x.kt",
                 ".build/checkouts/Alamofire/Source/Session.swift", "ios/Pods/A/B.swift",
                 "src/Views/Main.Designer.cs", "src/Gen/Parser.g.cs"):  # fmt: skip
        assert spec.match_file(path), path
    for path in ("src/Polly.Core/Retry/RetryHelper.cs", "src/Objects/Box.kt", "bin/cli.js",
                 "pkg/obj/model.py"):  # fmt: skip
        assert not spec.match_file(path), path


@pytest.mark.asyncio
async def test_an_instance_with_default_globs_reads_them_by_symbol(sample) -> None:  # type: ignore[no-untyped-def]
    """End to end, the instance file naming no code globs: the C# and PHP files are indexed,
    a call in one is found by "who calls", and a class constant is an exact hit."""
    from helpers import commit_all, write_files

    write_files(sample["repo"], {
        "src/Retry/Backoff.cs": """
            namespace Widget.Retry
            {
                public static class Backoff
                {
                    public static TimeSpan ComputeDelay(int n) => TimeSpan.FromSeconds(n);
                }
            }
            """,
        "src/Retry/RetryRunner.cs": """
            namespace Widget.Retry
            {
                public class RetryRunner
                {
                    public void Run(int attempt)
                    {
                        Thread.Sleep(Backoff.ComputeDelay(attempt));
                    }
                }
            }
            """,
        "lib/Client.php": """
            <?php
            final class Client
            {
                public const MAJOR_VERSION = 7;
            }
            """,
    })  # fmt: skip
    commit_all(sample["repo"])
    app = sample["app"]
    await app.index("widget")
    r = await app.retrieve("widget", "who calls ComputeDelay?")
    why = {e["why"] for e in r.route["exact"]["code"]}
    assert {"calls ComputeDelay", "defines Backoff.ComputeDelay"} <= why
    paths = [s.path for s in r.sources if s.collection == "code"]
    assert {"src/Retry/RetryRunner.cs", "src/Retry/Backoff.cs"} <= set(paths)
    r = await app.retrieve("widget", "what is Client.MAJOR_VERSION?")
    assert r.sources[0].path == "lib/Client.php"


# -- what an answer quotes from their code (core/answer/quotable.py) ---------------------------


@pytest.mark.parametrize(
    ("lang", "body", "symbol", "want"),
    [
        ("csharp", "internal sealed class Runner\n{\n    /// <summary>Runs <see cref=\"Retry\"/>"
         " with <paramref name=\"max\"/> tries.</summary>\n    protected override void Run(int max)"
         "\n    {\n    }\n}\n", "Runner.Run",
         ["`protected override void Run(int max)`", "Runs `Retry` with `max` tries."]),
        ("kotlin", "abstract class CliktCommand {\n    /** Runs the command. */\n"
         "    override fun run() {\n    }\n}\n", "CliktCommand.run",
         ["`override fun run()`", "Runs the command."]),
        ("swift", "open class Session {\n    /// Creates a session.\n"
         "    convenience init(rootQueue: DispatchQueue) {\n    }\n}\n", "Session.init",
         ["`convenience init(rootQueue: DispatchQueue)`", "Creates a session."]),
        ("php", "final class Client\n{\n    /** The client. */\n    const X = 1;\n}\n", "Client",
         ["`final class Client`", "The client."]),
    ],
)  # fmt: skip
def test_a_quote_reads_their_definition_lines_and_doc_comments(
    lang: str, body: str, symbol: str, want: list[str]
) -> None:
    from core.answer.quotable import code_quotes

    assert code_quotes(body, symbol, lang) == want


def test_answer_lines_of_their_code() -> None:
    from core.answer.quotable import code_lines

    cs = "using System;\nnamespace Polly;\nclass B {\n  void C() {\n"
    cs += "    Configure(Environment.GetEnvironmentVariable(Name));\n  }\n}\n"
    assert code_lines(cs, {"system", "polly"}, skip=0, lang="csharp") == [
        "`Configure(Environment.GetEnvironmentVariable(Name));`"
    ]  # not the `using` / `namespace` lines, though they share the question's words
    php = "<?php\nfunction t() {\n    configure($_ENV[KEY]);\n}\n"
    assert code_lines(php, set(), skip=0, lang="php") == ["`configure($_ENV[KEY]);`"]


def test_review_cases() -> None:
    """What a review of the first version found: a Swift `static var` is no constant; C#'s
    null-conditional calls are calls; Kotlin's `value = …` line is no definition."""
    sw = "class S {\n    static var count = 0\n    static let MAX = 3\n"
    sw += "    static let shared = S()\n}\n"
    _, symbols = chunk_code("S.swift", sw, words, 200)
    assert [s.qualname for s in symbols if s.kind == "constant"] == ["S.MAX", "S.shared"]
    cs = "class S {\n    void M() { OnRetry?.Invoke(x); _lease?.Dispose(); }\n}\n"
    _, symbols = chunk_code("S.cs", cs, words, 200)
    assert next(s.calls for s in symbols if s.qualname == "S.M") == ("Invoke", "Dispose")
    from core.answer.quotable import code_lines, code_quotes

    kt = "val parser = Parser()\nvalue = transformAll(parser)\nfun run() = parser.go()\n"
    assert code_quotes(kt, "run", "kotlin")[0] == "`fun run() = parser.go()`"
    doc = (
        'class P\n{\n    /// <summary>See <see href="https://www.pollydocs.org/x"/> and'
        ' <see cref="T:Polly.Retry">the retry</see>.</summary>\n    public void M() {}\n}\n'
    )
    assert code_quotes(doc, "P", "csharp")[1] == "See https://www.pollydocs.org/x and the retry."
    using = "using System;\n  using var lease = await limiter.AcquireAsync(ct);\n"
    assert code_lines(using, {"lease", "system"}, skip=0, lang="csharp") == [
        "`using var lease = await limiter.AcquireAsync(ct);`"
    ]
    php = "<?php\nnamespace GuzzleHttp;\ndeclare(strict_types=1);\n"
    assert code_lines(php, {"guzzlehttp", "strict"}, skip=0, lang="php") == []


def test_members_that_compile_to_methods_are_definitions() -> None:
    """C# properties, events, indexers and operators (where .NET documents an option and its
    default), Kotlin's secondary constructors and Swift's subscripts: symbols, so a question
    naming one is an exact hit."""
    cs = (
        "public class RetryStrategyOptions\n{\n"
        "    /// <summary>The maximum number of retries. Default is 3.</summary>\n"
        "    public int MaxRetryAttempts { get; set; } = 3;\n"
        "    public event EventHandler Other { add { } remove { } }\n"
        "    public int this[int i] => i;\n"
        "    public static Delay operator +(Delay a, Delay b) => a;\n"
        "    public static implicit operator int(Delay d) => 0;\n"
        "    private int _attempts;\n"
        "}\n"
    )
    _, symbols = chunk_code("src/RetryStrategyOptions.cs", cs, words, 500)
    assert sym_table(symbols) == [
        ("RetryStrategyOptions", "class", 1, 10),
        ("RetryStrategyOptions.MaxRetryAttempts", "method", 4, 4),
        ("RetryStrategyOptions.Other", "method", 5, 5),
        ("RetryStrategyOptions.this", "method", 6, 6),
        ("RetryStrategyOptions.operator+", "method", 7, 7),
        ("RetryStrategyOptions.operatorint", "method", 8, 8),
    ]  # `_attempts`: a field
    kt = "class Foo(val a: Int) {\n    constructor(s: String) : this(s.length) {\n    }\n}\n"
    assert [s.qualname for s in chunk_code("a/Foo.kt", kt, words, 500)[1]] == [
        "Foo", "Foo.constructor",
    ]  # fmt: skip
    sw = "struct M {\n    subscript(i: Int) -> Int { return i }\n}\n"
    assert [s.qualname for s in chunk_code("a/M.swift", sw, words, 500)[1]] == ["M", "M.subscript"]
