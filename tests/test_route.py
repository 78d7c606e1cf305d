from __future__ import annotations

import pytest

from core.lexical import expand, lexical_form, query_terms
from core.retrieve.analyse import analyse
from core.store.local_schema import fts_match


@pytest.mark.parametrize(
    "spelling", ["parse_config", "parseConfig", "ParseConfig", "parse config", "parse-config"]
)
def test_identifier_spellings_meet(spelling: str) -> None:
    form = set(lexical_form(spelling).split())
    assert {"parse", "config"} <= form
    assert set(lexical_form("def parse_config(path):").split()) >= {"parse", "config"}
    if " " not in spelling:
        assert "parseconfig" in form  # the joined form rewards the exact identifier


def test_dotted_names_and_paths_are_searchable() -> None:
    assert expand("click.core.Option") == ["click", "core", "option", "clickcoreoption"]
    assert expand("src/click/core.py")[:4] == ["src", "click", "core", "py"]
    assert expand("HTTPServerError") == ["http", "server", "error", "httpservererror"]


def test_a_token_splits_the_same_remembered_or_not() -> None:
    """Splitting is remembered per token up to 64 characters; a longer one (a hash, a blob) is
    split each time, the same way; stop words come out only of a query's terms."""
    long = "a" * 60 + "Client_Error"  # 72 characters
    assert expand(long) == ["a" * 60, "client", "error", f"{'a' * 60}clienterror"]
    assert expand(long) == expand(long) and expand("HTTPServer") == expand("HTTPServer")
    assert expand("for_the_win", keep_stop=False) == ["win"]
    assert expand("for_the_win") == ["for", "the", "win", "forthewin"]


def test_fts_query_drops_stop_words_and_dedupes() -> None:
    q = fts_match(query_terms("What does parse_config return for the config?"))
    assert q == '"parse" OR "config" OR "parseconfig" OR "return"'
    assert fts_match(query_terms("what is the")) is None


@pytest.mark.parametrize(
    ("question", "issues"),
    [
        ("where is the bug from issue #42?", [42]),
        ("see issue 42 and PR 1234", [42, 1234]),
        ("https://github.com/acme/widget/issues/99 again", [99]),
        ("pull request #7 broke it", [7]),
        ("¿dónde está el error de la incidencia 12?", [12]),
        ("color #fff and &#38; are not issues", []),
    ],
)
def test_issue_references(question: str, issues: list[int]) -> None:
    assert analyse(question).issues == issues


def test_identifiers_of_every_shape() -> None:
    r = analyse(
        "does `Renderer.draw` call parse_config, parseConfig or build() via click.core.Option?"
    )
    assert r.identifiers[:2] == ["Renderer.draw", "build"]
    assert {"parse_config", "parseConfig", "click.core.Option"} <= set(r.identifiers)


def test_scoped_names_are_identifiers_written_as_the_symbol_table_writes_them() -> None:
    """C++, Rust, Ruby and PHP write scopes with `::`; the symbol table with dots."""
    r = analyse("With Rack::Deflater, BodyProxy close callbacks run twice")
    assert r.identifiers == ["BodyProxy", "Rack.Deflater"]  # after the other shapes
    assert analyse("CLI::Range(1, 10) prints the wrong message").identifiers == ["CLI.Range"]
    r = analyse("does `PrettyPrinter::highlight(3)` or `crate::config::Config` panic?")
    assert {"PrettyPrinter.highlight", "crate.config.Config"} <= set(r.identifiers)
    assert "Foo.Bar.baz" in analyse("Why does Foo::Bar.baz raise?").identifiers
    # Whole names only: an error's colon after the name does not cut it ("Errno.EISDI").
    assert analyse("fails with Errno::EISDIR: Is a directory").identifiers == ["Errno.EISDIR"]
    # Not names: too short, the standard library's, an IPv6 address, emoji codes.
    for q in ("use a::b here", "given a std::string or `std::fs::read`", "ping 2001:db8::ff00:42",
              "thanks :heart::tada:"):  # fmt: skip
        assert analyse(q).identifiers == [], q
    # A backticked `core` or `std` alone is a name like any other (only `std::…` is left out).
    assert analyse("what does `core` export?").identifiers == ["core"]


def test_paths_and_stack_traces() -> None:
    trace = (
        "Traceback (most recent call last):\n"
        '  File "src/widget/config.py", line 9, in parse_config\n'
        "KeyError: 'timeout'"
    )
    r = analyse(trace)
    assert r.frames == ["src/widget/config.py:9 in parse_config"]
    assert "src/widget/config.py" in r.paths
    assert "parse_config" in r.identifiers
    assert r.errors == ["KeyError: 'timeout'"]
    assert r.kind == "code" and r.weights["code"] > 1
    j = analyse("NullPointerException at com.acme.Widget.render(Widget.java:42)")
    assert j.frames == ["Widget.java:42 in com.acme.Widget.render"]
    assert "Widget.java" in j.paths


@pytest.mark.parametrize(
    ("question", "kind", "top"),
    [
        ("How do I configure the timeout?", "howto", "docs"),
        ("¿Cómo configuro el tiempo de espera?", "howto", "docs"),
        ("What does the draw method return?", "code", "code"),
        ("What is the default of the timeout option?", "code", "code"),
        ("¿Qué devuelve la función principal?", "code", "code"),
        ("Is there a known bug with dark themes?", "issues", "issues"),
        ("Was it fixed already?", "issues", "issues"),
        ("¿Hay una incidencia sobre los temas oscuros?", "issues", "issues"),
        ("Was a GitHub webhook receiver requested?", "issues", "issues"),
        ("Has anyone asked for Discord DMs?", "issues", "issues"),
        ("Is there a feature request for dark mode?", "issues", "issues"),
        ("¿Se pidió un receptor de webhooks?", "issues", "issues"),
        ("What does Client.send do with the requested URL?", "code", "code"),
    ],
)
def test_kind_of_question_sets_weights(question: str, kind: str, top: str) -> None:
    r = analyse(question)
    assert r.kind == kind
    assert max(r.weights, key=lambda c: r.weights[c]) == top
    assert min(r.weights.values()) == 1.0  # weights tilt; they never exclude a collection


def test_issue_to_code_hop_detected() -> None:
    assert analyse("where is the bug from issue #42?").hop
    assert analyse("¿dónde está el código que arregla la incidencia #42?").hop
    assert not analyse("what is issue #42 about?").hop


def test_spanish_software_words_get_english_terms_for_lexical_search() -> None:
    from core.retrieve.glossary import english_terms

    assert english_terms("¿Cómo ejecuto las pruebas?") == ["run", "execute", "test", "tests"]
    assert "timeout" in english_terms("¿Cuál es el tiempo de espera por defecto?")
    assert english_terms("How do I run the tests?") == []
    built = english_terms("¿Cómo se activa de forma atómica una nueva construcción?")
    assert {"atomic", "build"} <= set(built) and "new" not in built
    q = fts_match(
        query_terms("¿Qué archivos omite select_files? " + " ".join(english_terms("archivos")))
    )
    assert q is not None and '"files"' in q and '"select"' in q


def test_kind_keywords_match_whole_words() -> None:
    # "Which programming …" is not "which PR"; "reportedly" is not "reported".
    assert analyse("Which programming languages are chunked by symbol?").kind != "issues"
    assert analyse("Which PR changed the parser?").kind == "issues"


def test_backticked_commands_and_abbreviations_are_not_identifiers() -> None:
    r = analyse("Run `repo-expert serve slack`, then call `ask` (e.g. from `bot/common.py`).")
    assert r.identifiers == ["ask"]
    assert "bot/common.py" in r.paths


def test_how_does_x_decide_is_not_a_how_to() -> None:
    """A question "how does X decide …" asks what the code does; "how do I" and "how does one"
    ask how to."""
    assert analyse("How does the parser decide which option wins?").kind != "howto"
    assert analyse("How do I configure the proxy?").kind == "howto"
    assert analyse("How does one configure the proxy?").kind == "howto"


def test_names_in_calls_ruby_predicates_and_not_domains_or_product_names() -> None:
    """A backticked call with arguments names what it calls; a Ruby predicate or bang method is
    a name with its `?`/`!`; an e-mail's domain and the names of languages and platforms are not
    the repository's identifiers (a backticked one still is)."""
    assert analyse("does `parse(text, strict=True)` raise?").identifiers == ["parse"]
    assert analyse("what do `valid?` and `save!` return?").identifiers == ["valid?", "save!"]
    assert analyse("Validating foo@bar.com or john.doe@x.org fails").identifiers == []
    assert analyse("Why does @click.option drop defaults?").identifiers == ["click.option"]
    assert analyse("after `if (x > 0)` or `require('axios')`").identifiers == []
    assert analyse("Why does TypeScript complain on GitHub and JavaScript?").identifiers == []
    assert analyse("the `GitHub` class of this repository").identifiers == ["GitHub"]
    assert analyse("is parseConfig typed in TypeScript?").identifiers == ["parseConfig"]
    # an HTML tag written in mixed case is markup, not a name
    assert analyse("<textarea>x</TeXtArEa> ends parseConfig's title").identifiers == ["parseConfig"]


@pytest.mark.parametrize(
    "question",
    [
        "How are requested scopes validated?",
        "Was the requested URL logged?",
        "How have the proposed defaults changed?",
    ],
)
def test_requested_as_an_adjective_is_not_an_issue_question(question: str) -> None:
    assert analyse(question).kind != "issues"


@pytest.mark.parametrize(
    ("question", "tests"),
    [
        ("Which test checks the timeout?", True),
        ("where is test_parse_config?", True),
        ("¿Cómo pruebo el bot?", True),
        ("¿Qué pruebas cubren el índice?", True),
        ("What are the latest release notes?", False),
        ("How do I attest a build?", False),
        ("¿Cómo configuro el tiempo de espera?", False),
    ],
)
def test_questions_about_tests_are_recognised(question: str, tests: bool) -> None:
    assert analyse(question).tests is tests


def test_glossary_stems_leave_english_words_alone() -> None:
    from core.retrieve.glossary import english_terms

    assert english_terms("What does the Client constructor accept?") == []
    assert english_terms("Is the config compiled or activated at startup?") == []
    assert "build" in english_terms("¿Cómo se construye el índice?")
    assert "atomic" in english_terms("¿es atomico el cambio?")
    # Stems that once prefixed English words ("envi" → environ, "archiv" → archive, "borr" →
    # borrow): an English question or issue text must get no Spanish reading.
    assert english_terms("Why is os.environ read before the archive is opened? envious") == []
    assert english_terms("Can I borrow the connection, parse the version, retry it?") == []
    assert english_terms("¿Quién envió la petición?") == ["send", "request"]
    assert english_terms("Se borró el archivo") == ["delete", "remove", "file", "files"]
    assert english_terms("Estoy enviando la petición") == ["send", "request"]


def test_glossary_phrases_say_what_their_words_say_together() -> None:
    """A phrase is read before its words: "código de salida" is an exit code, not output, and
    "marca de tiempo" a timestamp, not time; the words alone keep their own terms."""
    from core.retrieve.glossary import english_terms

    assert english_terms("¿Qué código de salida devuelve?") == [
        "exit", "code", "status", "return", "returns",
    ]  # fmt: skip
    assert english_terms("la salida del comando") == ["output", "command"]
    assert english_terms("Las marcas de tiempo se pierden") == ["timestamp", "timestamps"]
    assert english_terms("lanza una excepción con el valor devuelto") == [
        "throw", "raise", "throws", "exception", "value", "return", "returned",
    ]  # fmt: skip
    assert english_terms("el codigo de salida") == ["exit", "code", "status"]  # typed unaccented
    # No English word begins a new stem.
    assert english_terms("The library can autocomplete a subcommand's schema") == []
    assert english_terms("The retry loop devolves; devolving it") == []


def test_the_glossary_is_data_and_can_be_turned_off() -> None:
    from importlib import resources

    import yaml

    from core.config import RetrievalConfig
    from core.retrieve.options import Options

    raw = yaml.safe_load(resources.files("core.retrieve").joinpath("glossary.yaml").read_text())
    assert raw["es"]["prueba"] == "test tests"
    assert Options.of(RetrievalConfig()).glossary
    off = Options.of(RetrievalConfig(glossary=False))
    assert not off.glossary and not off.glossary_dense
