"""Machine translation of non-English questions (core/retrieve/translate.py): the real Apertium
program (Debian's apertium + apertium-eng-spa; .ci/run installs them, and these tests fail, not
skip, without them), what happens without a pair, a program or a working one, and retrieval
searching with the translation's terms — which finds what the Spanish words alone cannot."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
from helpers import FakeApp, make_repo

from core.config import EmbeddingConfig
from core.embed.backends import make_embedder
from core.retrieve import Options
from core.retrieve.search import candidates
from core.retrieve.translate import Apertium

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
    assert "spa-eng" in await a.directions(), "apt-get install apertium apertium-eng-spa"
    out = await a.translate(THOR_ES, "es", "en")
    assert out is not None and "width" in out and "terminal" in out, out
    assert "*" not in out and "#" not in out  # Apertium's marks are taken out
    assert await a.translate("  ", "es", "en") is None
    assert await a.translate(THOR_ES, "en", "en") is None  # nothing to translate


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
            f"repo: {{path: {repo}}}\nretrieval: {{translate: {str(on).lower()}}}\n"
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
        assert on.sources[0].title == "cli › Wrapping", [s.title for s in on.sources]
        assert "translate" in on.timings_ms
        off = await app.retrieve("plain", question)
        assert "translation" not in off.route
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
        app.translator = Apertium(program=str(tmp_path / "not-installed"))
        alone = await app.retrieve("cli", question)  # no translator: the glossary alone
        assert "translation" not in alone.route and alone.sources
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
