"""Machine translation of non-English questions (core/retrieve/translate.py): the real Apertium
program (Debian's apertium + apertium-eng-spa; .ci/run installs them, and these tests fail, not
skip, without them), what happens without a pair, a program or a working one, and retrieval
searching with the translation's terms — which finds what the Spanish words alone cannot."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest
from helpers import FakeApp, instance, make_repo

from core.config import EmbeddingConfig
from core.embed.backends import make_embedder
from core.retrieve import Options
from core.retrieve.analyse import analyse
from core.retrieve.candidates import EXTRA_TERMS, OWN_TERMS, lexical_terms
from core.retrieve.search import candidates
from core.retrieve.translate import KEPT_MAX, Apertium, _Pipeline, from_stream, to_stream

THOR_ES = "¿Cómo decide el programa el ancho del terminal y puedo forzar un valor?"


def _program(tmp_path: Path, name: str, body: str) -> str:
    """A real executable standing in for a broken apertium: ``-l`` lists spa-eng, a translation
    runs ``body``."""
    p = tmp_path / name
    p.write_text(f'#!/bin/sh\nif [ "$1" = -l ]; then echo spa-eng; exit 0; fi\n{body}\n')
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


@pytest.mark.asyncio
async def test_apertium_translates_a_spanish_question_into_english() -> None:
    a = Apertium()
    try:
        assert "spa-eng" in await a.directions(), "apt-get install apertium apertium-eng-spa"
        out = await a.translate(THOR_ES, "es", "en")
        assert out is not None and "width" in out and "terminal" in out, out
        assert "*" not in out and "#" not in out  # Apertium's marks are taken out
        assert await a.translate("  ", "es", "en") is None
        assert await a.translate(THOR_ES, "en", "en") is None  # nothing to translate
    finally:
        await a.aclose()


@pytest.mark.asyncio
async def test_the_kept_pipeline_translates_as_one_process_per_question_does() -> None:
    kept, single = Apertium(cache_size=0), Apertium(cache_size=0, keep=False)
    questions = [
        THOR_ES,
        "Mi ~/.fdignore no se aplica con --no-ignore-vcs [x] $HOME ^a /b <c> @d {k8} \\f.",
        "¿Por qué chi no comprime todos los tipos text/* por defecto?",
        "una línea\nen dos",
    ]
    try:
        pids = set()
        for q in questions:
            a, b = await kept.translate(q, "es", "en"), await single.translate(q, "es", "en")
            # The same words; one process per question drops a final full stop.
            assert a is not None and b is not None and a.rstrip(".") == b.rstrip("."), (a, b)
            pipe = kept._pipelines["spa-eng"]
            assert pipe is not None and pipe.proc is not None
            pids.add(pipe.proc.pid)
        assert len(pids) == 1  # one process served them all
        fd = await kept.translate(questions[1], "es", "en")
        assert fd is not None and "~/.fdignore" in fd and "[x]" in fd and "$HOME" in fd
        assert "{k8}" in fd and "<c>" in fd and "\\f" in fd  # reserved ones come back as written
        # Concurrent questions take turns on the one pipeline, each gets its own answer.
        many = await asyncio.gather(*(kept.translate(f"el ancho número {i}", "es", "en")
                                      for i in range(12)))  # fmt: skip
        assert all(m is not None and "wide" in m and m.endswith(f" {i}")
                   for i, m in enumerate(many)), many  # fmt: skip
    finally:
        await kept.aclose()
    assert kept._pipelines == {} and pipe is not None and pipe.proc is None


def test_stream_format_round_trip() -> None:
    text = "a [b] \\c ^d $e /f <g> @h {i} ~j"
    data = to_stream(text)
    assert data.endswith(b"[]\0") and b"[~]" in data and b"\\[b\\]" in data
    assert from_stream(data[:-1]) == text


def _installed(tmp_path: Path, stage: str, one: str) -> str:
    """A fake Apertium install: ``bin/apertium`` (lists spa-eng; a one-process translation runs
    ``one``) and ``share/apertium/modes/spa-eng.mode`` whose pipeline is ``stage`` (a script)."""
    (tmp_path / "bin").mkdir()
    modes = tmp_path / "share" / "apertium" / "modes"
    modes.mkdir(parents=True)
    script = tmp_path / "stage.sh"
    script.write_text(f"#!/bin/sh\n{stage}\n")
    script.chmod(0o755)
    (modes / "spa-eng.mode").write_text(f"{script}\n")  # wblank-mode adds -z: "$1" is -z
    return _program(tmp_path / "bin", "apertium", one)


@pytest.mark.asyncio
async def test_a_kept_pipeline_that_fails_gives_way_to_one_process_per_question(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="core.retrieve.translate")
    works = tmp_path / "works"
    works.mkdir()
    # sed -z: NUL-separated records, unbuffered: a stand-in that flushes like Apertium's stages.
    a = Apertium(program=_installed(works, "exec sed -u -z s/ancho/width/", "echo one"))
    assert await a.translate("el ancho", "es", "en") == "el width"
    assert await a.translate("el [ancho]", "es", "en") == "el [width]"
    assert await a.translate("el\0ancho", "es", "en") == "el width"  # a NUL would split it
    # A pasted log longer than KEPT_MAX goes to a process of its own (its timeout covers it).
    assert await a.translate("ancho " * (KEPT_MAX // 6 + 1), "es", "en") == "one"
    assert await a.translate("el ancho", "es", "en") == "el width"  # and the pipeline stays
    await a.aclose()
    dies = tmp_path / "dies"
    dies.mkdir()
    b = Apertium(program=_installed(dies, "exit 1", "echo one process"))
    assert await b.translate("una pregunta", "es", "en") == "one process"
    assert b._pipelines["spa-eng"] is None  # for good: the next ones run one process each
    assert await b.translate("otra pregunta", "es", "en") == "one process"
    hangs = tmp_path / "hangs"
    hangs.mkdir()
    c = Apertium(program=_installed(hangs, "exec sleep 30", "echo one"), timeout=0.5)
    assert await c.translate("una pregunta", "es", "en") is None  # a timeout is no translation
    assert await c.translate("otra pregunta", "es", "en") == "one"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "kept pipeline failed" in lines[0] and "0.5s" in lines[1], lines


def test_a_kept_pipeline_outlives_an_event_loop_and_restarts_when_killed() -> None:
    # The CLI runs one event loop per command: the pipeline belongs to none of them.
    a = Apertium(cache_size=0)

    async def once() -> tuple[str | None, _Pipeline | None]:
        return await a.translate("el ancho", "es", "en"), a._pipelines.get("spa-eng")

    first, pipe = asyncio.run(once())
    assert pipe is not None and pipe.proc is not None
    proc = pipe.proc
    second, _ = asyncio.run(once())
    assert first == second and first is not None and "width" in first and pipe.proc is proc
    os.killpg(proc.pid, signal.SIGKILL)  # gone (an OOM kill, say): the next question starts one
    proc.wait()
    third, _ = asyncio.run(once())
    assert third == first and pipe.proc is not None and pipe.proc is not proc
    asyncio.run(a.aclose())
    assert pipe.proc is None


@pytest.mark.asyncio
async def test_no_pair_or_no_program_means_no_translation(tmp_path: Path) -> None:
    assert await Apertium().translate("터미널 너비는 어떻게 정해지나요?", "ko", "en") is None
    missing = Apertium(program=str(tmp_path / "no-such-apertium"))
    assert await missing.directions() == frozenset()
    assert await missing.translate(THOR_ES, "es", "en") is None


@pytest.mark.asyncio
async def test_a_slow_or_failing_translator_counts_as_none_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="core.retrieve.translate")
    slow = Apertium(program=_program(tmp_path, "slow", "sleep 10"), timeout=0.5)
    assert await slow.translate("una pregunta", "es", "en") is None
    assert await slow.translate("otra pregunta", "es", "en") is None
    failing = Apertium(program=_program(tmp_path, "failing", "echo 'no mode' >&2; exit 3"))
    assert await failing.translate("una pregunta", "es", "en") is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # once per program and direction, not per question
    assert "took over 0.5s" in lines[0] and "exit 3" in lines[1] and "no mode" in lines[1]


@pytest.mark.asyncio
async def test_a_translation_is_cached_by_text(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    a = Apertium(program=_program(tmp_path, "counting", f"echo x >> {calls}; echo 'the width'"))
    assert await a.translate("el ancho", "es", "en") == "the width"
    assert await a.translate("el ancho", "es", "en") == "the width"
    assert await a.translate("la altura", "es", "en") == "the width"
    assert calls.read_text().count("x") == 2


def _world(tmp: Path, translate: bool = True) -> Path:
    """A repository whose only mention of the terminal's width is in English, and two instances
    of it: with and without translation."""
    repo = tmp / "cli"
    make_repo(repo, {
        "README.md": "# cli\n\nA small command-line tool.\n\n## Output\n\nColours follow the "
                     "theme.\n\n## Wrapping\n\nHelp text wraps at the width of the terminal, "
                     "read from the COLUMNS variable; set it to force a value.\n",
        "docs/install.md": "# Install\n\nRun the installer and pick a theme.\n",
        "src/main.py": "def run(argv):\n    '''Run the tool.'''\n    return 0\n",
    })  # fmt: skip
    inst = tmp / "instances"
    inst.mkdir()
    for name, on in (("cli", True), ("plain", False)):
        (inst / f"{name}.yaml").write_text(
            # thin_lines 0: which sections are cited is the translation's doing here, not a
            # thin section's follower (thin.py: "Output" is two lines, "Wrapping" follows it)
            f"repo: {{path: {repo}}}\nretrieval: {{translate: {str(on).lower()}, thin_lines: 0}}\n"
        )
    return inst


@pytest.mark.asyncio
async def test_retrieval_searches_with_the_translation_and_says_so(tmp_path: Path) -> None:
    app = FakeApp(_world(tmp_path), tmp_path / "data")  # bag-of-words vectors: words decide
    try:
        question = "¿De dónde sale el ancho con el que se parten las frases?"
        on = await app.retrieve("cli", question)
        tr = on.route["translation"]
        assert tr["language"] == "es" and "width" in tr["terms"], tr
        # A translated word no document holds is left out (it could only add noise) and listed.
        assert tr["unused"] and not set(tr["unused"]) & set(tr["terms"]), tr
        files = ("README.md", "docs/install.md", "src/main.py")
        corpus = " ".join((tmp_path / "cli" / f).read_text() for f in files).lower()
        assert all(w not in corpus for w in tr["unused"]), tr["unused"]

        # The translation brings the Wrapping section into the first cited file (README.md),
        # as its source or one of its passages; without it the section is never cited. Which of
        # README's sections leads is the learned ranker's call, and in this world of
        # bag-of-words vectors (cosines far outside e5's range) it is not the translation's.
        def titles(s: Any) -> list[str]:  # a source's own and its passages'
            return [s.title, *(p.title for p in s.passages)]

        def cited(r: Any) -> list[str]:
            return [t for s in r.sources for t in titles(s)]

        assert on.sources[0].path == "README.md", [s.path for s in on.sources]
        assert "cli › Wrapping" in titles(on.sources[0])
        assert "translate" in on.timings_ms
        off = await app.retrieve("plain", question)
        assert "translation" not in off.route
        assert "cli › Wrapping" not in cited(off), cited(off)
        # Without it the Spanish words never reach the section lexically: BM25 0 there.
        reader, kinds = await app.reader("cli"), await app.kinds(app.svc)

        async def lex(translate: bool) -> float:
            cfg = app.instance("cli").retrieval.model_copy(update={"translate": translate})
            pool = await candidates(reader, app.svc, question, Options.of(cfg), kinds,
                                    translator=app.translator)  # fmt: skip
            return max((c.lex for c in pool.all() if c.chunk is not None
                        and c.chunk.title == "cli › Wrapping"), default=0.0)  # fmt: skip

        assert await lex(True) > 0 and await lex(False) == 0
        english = await app.retrieve("cli", "Where does the wrapping width come from?")
        assert "translation" not in english.route
        baseline = await app.retrieve("cli", question, mode="bm25")  # baselines: as asked
        assert "translation" not in baseline.route
        await app.translator.aclose()
        app.translator = Apertium(program=str(tmp_path / "not-installed"))
        alone = await app.retrieve("cli", question)  # no translator: the glossary alone
        assert "translation" not in alone.route and alone.sources
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_long_question_keeps_its_translation_in_the_lexical_query(tmp_path: Path) -> None:
    """A Spanish question with more than 40 words of its own still searches with its
    translation's English terms: they have a cap of their own after the question's words (under
    one shared cap the Spanish words, which match nothing here, took their places)."""
    app = FakeApp(_world(tmp_path), tmp_path / "data")
    try:
        question = (
            "Tenemos una aplicación interna bastante antigua que imprime informes larguísimos en "
            "consolas muy distintas, algunas estrechas y otras anchísimas, y nuestros usuarios "
            "protestan cada semana porque los párrafos aparecen cortados de forma rara según la "
            "máquina. Lo probamos en terminales de Linux, macOS y Windows, con fuentes grandes y "
            "pequeñas, y el resultado cambia siempre. Antes de tocar nada quisiera entenderlo: "
            "¿de dónde sale el ancho con el "
            "que se parten las frases?"
        )
        route = analyse(question, {})
        assert len(lexical_terms(question, route)) == OWN_TERMS  # its own words fill the cap
        reader, kinds = await app.reader("cli"), await app.kinds(app.svc)
        cfg = app.instance("cli").retrieval
        pool = await candidates(reader, app.svc, question, Options.of(cfg), kinds,
                                translator=app.translator)  # fmt: skip
        tr = pool.translation
        assert tr is not None and "width" in tr["terms"], tr
        query = lexical_terms(question, pool.route, tr["terms"])
        assert "width" in query and len(query) > OWN_TERMS, query
        wrapping = [c.lex for c in pool.all()
                    if c.chunk is not None and c.chunk.title == "cli › Wrapping"]  # fmt: skip
        assert wrapping and max(wrapping) > 0, wrapping  # BM25 reaches it through "width"
    finally:
        await app.close()


def test_the_extra_terms_cap_is_their_own() -> None:
    route = analyse("", {})
    own = " ".join(f"palabra{i}" for i in range(50))
    extra = [f"term{i}" for i in range(40)] + ["palabra1"]  # one the question already holds
    q = lexical_terms(own, route, extra)
    assert q[:OWN_TERMS] == [f"palabra{i}" for i in range(OWN_TERMS)]
    assert q[OWN_TERMS:] == [f"term{i}" for i in range(EXTRA_TERMS)]
    # Under the caps the query is the question's terms, then the extra ones it lacks.
    assert lexical_terms("ancho del texto", route, ["width", "texto"]) == [
        "ancho",
        "texto",
        "width",
    ]


@pytest.mark.asyncio
async def test_a_translated_word_the_index_holds_only_as_written_is_kept(tmp_path: Path) -> None:
    """Translated words are plural-folded like every term ("strategies" → "strategie"); the
    index holds "strategies" as written, so that form joins the query — it was dropped as a
    word no document holds."""
    repo = tmp_path / "retrying"
    make_repo(repo, {
        "README.md": "# retrying\n\n## Backoff\n\nThree backoff strategies ship with it: "
                     "fixed, linear and exponential.\n",
        "src/main.py": "def run(argv):\n    return 0\n",
    })  # fmt: skip
    async with instance(tmp_path, repo, "r", "translate: true") as app:
        r = await app.retrieve("w", "¿Qué estrategias de reintento hay?")
        tr = r.route["translation"]
        assert "strategies" in tr["terms"] and "strategie" not in tr["unused"], tr
        assert r.sources[0].title == "retrying › Backoff", [s.title for s in r.sources]


@pytest.mark.asyncio
async def test_the_translations_vector_is_the_dense_query(tmp_path: Path) -> None:
    """retrieval.translate_dense: a translated question's dense query is its translation's
    vector — every candidate's cosine is the cosine with it, and the route says so; off, the
    question's own (glossed) vector; a question with nothing to translate is unchanged."""
    app = FakeApp(_world(tmp_path), tmp_path / "data")
    try:
        question = "¿De dónde sale el ancho con el que se parten las frases?"
        reader, kinds = await app.reader("cli"), await app.kinds(app.svc)

        async def cosines(question: str, dense: bool) -> tuple[list[float], list[float], Any]:
            cfg = app.instance("cli").retrieval.model_copy(update={"translate_dense": dense})
            pool = await candidates(reader, app.svc, question, Options.of(cfg), kinds,
                                    translator=app.translator)  # fmt: skip
            cands = pool.all()
            text = pool.translation["text"] if pool.translation else question
            tv = await app.svc.embed_query(text)
            with_tv = [(await reader.similarity(c.collection, tv, [c.row]))[0] for c in cands]
            return [c.cos for c in cands], with_tv, pool.translation

        got, want, tr = await cosines(question, True)
        assert tr is not None and tr["dense"] is True and got == pytest.approx(want)
        got, want, tr = await cosines(question, False)
        assert "dense" not in tr and got != pytest.approx(want)
        r = await app.retrieve("cli", question)  # the default: off
        assert "dense" not in r.route["translation"]
        english = "Where does the wrapping width come from?"  # nothing to translate: unchanged
        assert (await cosines(english, True))[0] == (await cosines(english, False))[0]
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_question_read_as_a_bug_report_is_searched_as_asked(tmp_path: Path) -> None:
    # The real model and the shipped kind classifier: bug reports lost with a translation.
    app = FakeApp(_world(tmp_path), tmp_path / "data",
                  lambda: make_embedder(EmbeddingConfig(backend="e5int8")))  # fmt: skip
    try:
        bug = (
            "Después de actualizar, `cli --wrap` falla con `KeyError: 'COLUMNS'` en "
            'src/main.py línea 3. Traceback (most recent call last): File "src/main.py"'
        )
        r = await app.retrieve("cli", bug)
        assert r.route["signals"]["kinds"]["bug"] >= 0.5, r.route["signals"]
        assert "translation" not in r.route
        how = await app.retrieve("cli", THOR_ES)
        assert how.route["signals"]["kinds"]["bug"] < 0.5
        assert "width" in how.route["translation"]["terms"]
    finally:
        await app.close()
