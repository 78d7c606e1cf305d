"""The learned ranker: its features describe the candidate for this question, and fitting learns
weights that put the gold candidates first."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.models import Chunk
from core.retrieve.analyse import analyse
from core.retrieve.fusion import Candidate
from core.retrieve.rank import FEATURES, Context, Ranker, comment_share, coverage, fit, matrix
from core.store.doc_terms import DocTerms

DOCUMENTED_TYPE = """source/types/options.ts › Options
export type Options = {
\t/**
\tHow many times to retry a failed request.

\t@default 2
\t*/
\tretry?: number;

\t// The per-attempt timeout in milliseconds.
\ttimeout?: number | false;
};"""

LOGIC = """source/core/retry.ts › retryDelay
export function retryDelay(attempt: number, header: string | null): number {
\tif (header === null) {
\t\treturn 0.3 * 2 ** (attempt - 1) * 1000;  // the default backoff
\t}
\tconst seconds = Number(header);
\treturn Number.isNaN(seconds) ? Date.parse(header) - Date.now() : seconds * 1000;
}"""

PYTHON = '''src/pkg/retry.py › delay
def delay(attempt):
    """The wait before this attempt.

    Doubles each time.
    """
    return 2 ** attempt'''


def test_comment_share_tells_documentation_from_behaviour() -> None:
    assert comment_share(DOCUMENTED_TYPE) == pytest.approx(5 / 9)
    assert comment_share(LOGIC) == 0.0  # a trailing comment does not make a comment line
    assert comment_share(PYTHON) == pytest.approx(3 / 5)  # the docstring's lines, not the code
    assert comment_share("only/a/context/line.py") == 0.0
    # a piece of a long block comment that starts inside it: its lines up to `*/` are comment
    assert comment_share("Sel.java › Selector\n more about it\n @see X */\nclass S {\n}") == 0.5
    assert comment_share("a.c\nint x; /* a */\nint y;") == 0.0


def _cand(path: str, kind: str, text: str, cos: float) -> Candidate:
    chunk = Chunk("code", path, text, text.split("\n")[0], 30, path=path, kind=kind)
    return Candidate("code", 0, cos, chunk=chunk, cos=cos)


def test_declarations_comment_share_and_their_kind_crosses() -> None:
    question = "How does the retry delay get computed?"
    ctx = Context.of(question, [], analyse(question), {"howto": 0.2, "code": 0.7, "issues": 0.1,
                                                       "bug": 0.0}, "en")  # fmt: skip
    cands = [
        _cand("source/types/options.ts", "type", DOCUMENTED_TYPE, 0.86),
        _cand("source/core/retry.ts", "function", LOGIC, 0.84),
        _cand("index.d.ts", "function", LOGIC, 0.80),
    ]
    x = matrix(cands, ctx)
    f = {n: i for i, n in enumerate(FEATURES)}
    assert x[0, f["is_decl"]] == 1.0 and x[1, f["is_decl"]] == 0.0 and x[2, f["is_decl"]] == 1.0
    assert x[0, f["is_decl_code"]] == pytest.approx(0.7)
    assert x[0, f["is_decl_bug"]] == 0.0
    assert x[0, f["comment_share"]] > x[1, f["comment_share"]]
    assert x[1, f["comment_share_howto"]] == 0.0 and x[0, f["comment_share_howto"]] > 0.1


def test_symbol_names_meet_the_questions_plural_folded_words_and_example_folders() -> None:
    """``sym_match`` folds a symbol's parts as the question's terms are folded ("options" →
    "option"), so ``Thor.Options`` meets "unknown options"; an ``_examples/`` folder (chi's) is
    an example folder."""
    question = "Why are unknown options not rejected by the parser?"
    ctx = Context.of(question, [], analyse(question), {"howto": 0.0, "code": 1.0, "issues": 0.0,
                                                       "bug": 0.0}, "en")  # fmt: skip
    cands = [
        _cand(
            "lib/thor/parser/options.rb",
            "class",
            "lib/thor/parser/options.rb › Thor.Options\nclass Options < Arguments\nend",
            0.8,
        ),
        _cand("_examples/rest/main.go", "function", LOGIC, 0.8),
        _cand("examples/rest/main.go", "function", LOGIC, 0.8),
        _cand("src/my_examples.go", "function", LOGIC, 0.8),
    ]
    assert cands[0].chunk is not None
    cands[0].chunk.symbol = "Thor.Options"
    x = matrix(cands, ctx)
    f = {n: i for i, n in enumerate(FEATURES)}
    assert x[0, f["sym_match"]] == 1.0
    assert [x[i, f["is_example"]] for i in (1, 2, 3)] == [1.0, 1.0, 0.0]


def test_identifiers_meet_whole_tokens_and_python_type_modules_are_declarations() -> None:
    """``ident_in_text`` counts the question's identifiers that a chunk holds as whole tokens
    (parts joined, as the question's are): ``get`` is not in ``target``, ``parse_config`` is in
    ``parseConfig(``; a Ruby predicate's ``?`` does not hide it. ``_types.py`` declares."""
    question = "Why does `get()` ignore parse_config and `valid?`?"
    ctx = Context.of(question, [], analyse(question), {"howto": 0.0, "code": 1.0, "issues": 0.0,
                                                       "bug": 0.0}, "en")  # fmt: skip
    cands = [
        _cand("src/a.py", "function", "src/a.py › target\ndef target(): return widget", 0.8),
        _cand("src/b.js", "function", "src/b.js › get\nget() { parseConfig(x); }", 0.8),
        _cand("lib/c.rb", "method", "lib/c.rb › valid?\ndef valid?\n  true\nend", 0.8),
        _cand("src/pkg/_types.py", "module", "src/pkg/_types.py\nTimeout = float", 0.8),
    ]
    assert cands[2].chunk is not None
    cands[2].chunk.symbol = "C.valid?"
    x = matrix(cands, ctx)
    f = {n: i for i, n in enumerate(FEATURES)}
    assert x[0, f["ident_in_text"]] == 0.0
    assert x[1, f["ident_in_text"]] == pytest.approx(2 / 3)
    assert x[2, f["ident_in_text"]] == pytest.approx(1 / 3)
    assert x[2, f["sym_match"]] == 1.0
    assert x[3, f["is_decl"]] == 1.0 and x[0, f["is_decl"]] == 0.0


def test_document_coverage_weighs_rare_terms_and_is_crossed_with_the_kinds() -> None:
    """Coverage: the idf-weighted share of the question's terms the candidate's whole document
    holds; a term held by every document weighs least, one held by none is left out."""
    held = DocTerms(10, {"retry": 1, "delay": 5, "the": 10, "absent": 0},
                    {("code", 0): frozenset({"retry", "delay"}), ("code", 1): frozenset({"the"}),
                     ("docs", 0): frozenset()})  # fmt: skip
    got = coverage(held)
    idf = {t: np.log(1 + 10 / n) for t, n in (("retry", 1), ("delay", 5), ("the", 10))}
    total = sum(idf.values())
    assert got[("code", 0)] == pytest.approx((idf["retry"] + idf["delay"]) / total)
    assert got[("code", 1)] == pytest.approx(idf["the"] / total) and got[("docs", 0)] == 0.0
    assert coverage(DocTerms(10, {"absent": 0}, {("code", 0): frozenset()})) == {}
    question = "How does the retry delay get computed?"
    kinds = {"howto": 0.2, "code": 0.7, "issues": 0.1, "bug": 0.0}
    ctx = Context.of(question, [], analyse(question), kinds, "en", got)
    cands = [_cand("source/core/retry.ts", "function", LOGIC, 0.84),
             _cand("source/types/options.ts", "type", DOCUMENTED_TYPE, 0.86)]  # fmt: skip
    cands[1].row = 1
    x = matrix(cands, ctx)
    f = {n: i for i, n in enumerate(FEATURES)}
    assert x[0, f["cover"]] == pytest.approx(got[("code", 0)])
    assert x[0, f["cover"]] > x[1, f["cover"]] > 0
    assert x[0, f["cover_code"]] == pytest.approx(0.7 * got[("code", 0)])
    assert x[0, f["cover_bug"]] == 0.0


def test_fit_learns_to_put_the_gold_first_and_json_keeps_the_model() -> None:
    """Groups where the gold candidate is the one with the implementation (not the best
    cosine): the fitted model ranks it first on groups it has not seen."""
    rng = np.random.default_rng(0)
    f = {n: i for i, n in enumerate(FEATURES)}

    def group() -> tuple[np.ndarray, np.ndarray]:
        x = np.zeros((8, len(FEATURES)), np.float32)
        x[:, f["cos"]] = rng.uniform(0.7, 0.9, 8)
        x[0, f["is_decl"]] = 1.0
        x[0, f["cos"]] = 0.95  # the declaration has the best cosine
        y = np.zeros(8, np.float32)
        y[1 + int(rng.integers(7))] = 1.0  # the gold is one of the others
        x[y.astype(bool), f["path_match"]] = 1.0
        return x, y

    model = fit([group() for _ in range(60)], steps=400)
    assert model.weights[f["is_decl"]] < 0 and model.weights[f["path_match"]] > 0
    held = [group() for _ in range(20)]
    assert all(int(np.argmax(model.score(x))) == int(np.argmax(y)) for x, y in held)
    again = Ranker.from_json(json.loads(json.dumps(model.to_json())))
    x, _ = held[0]
    assert np.allclose(again.score(x), model.score(x), atol=1e-3)
    other = model.to_json() | {"features": list(FEATURES[:-1])}
    with pytest.raises(ValueError, match="refit"):
        Ranker.from_json(other)


def test_fit_is_reproducible_whatever_the_order_of_the_groups() -> None:
    """The same groups in another order change only the float order of the sums; the fit must
    end at the same weights (a constant Adam step stopped near the optimum, where that order
    decided where: 6e-3 apart on these groups)."""
    rng = np.random.default_rng(1)

    def group() -> tuple[np.ndarray, np.ndarray]:
        k = int(rng.integers(5, 30))
        x = rng.normal(size=(k, len(FEATURES))).astype(np.float32)
        noisy = x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=2.0, size=k)
        y = np.zeros(k, np.float32)
        y[int(np.argmax(noisy))] = 1.0
        return x, y

    groups = [group() for _ in range(200)]
    forward, backward = fit(groups).weights, fit(groups[::-1]).weights
    assert float(np.abs(forward - backward).max()) < 1e-4


def _conflict() -> tuple[list[tuple[np.ndarray, np.ndarray]], list[np.ndarray]]:
    """Three questions whose chunk counts pull the objectives apart: in A a wrong file has five
    candidates of kind [1, 0] and the gold file one of kind [0, 1]; in B (twice) the gold file
    has five [1, 0] and a wrong file one [0, 1]. Counting chunks, A's five wrong ones weigh five
    times: the fit prefers [0, 1] and B's gold files rank second; counting files, two B's
    outweigh one A."""
    many, one = np.tile([1.0, 0.0], (5, 1)), np.array([[0.0, 1.0]])
    groups = [
        (np.vstack([many, one]), np.array([0, 0, 0, 0, 0, 1.0])),
        (np.vstack([many, one]), np.array([1, 1, 1, 1, 1, 0.0])),
        (np.vstack([many, one]), np.array([1, 1, 1, 1, 1, 0.0])),
    ]
    files = [np.array([0, 0, 0, 0, 0, 1])] * 3
    # padding (a shorter group) and a question with no gold candidate (skipped by both fits)
    groups += [(np.full((2, 2), 0.5), np.array([1, 0.0])), (np.eye(2), np.zeros(2))]
    files += [np.array([0, 1]), np.array([0, 1])]
    return groups, files


def test_fitting_on_files_ranks_files_as_the_user_sees_them() -> None:
    groups, files = _conflict()
    names = ("many", "one")
    chunks = fit(groups, l2=1e-3, names=names)
    by_file = fit(groups, l2=1e-3, names=names, files=files)
    # chunks: [0, 1] wins (two questions of three get their gold file second)
    assert chunks.score(groups[0][0])[5] > chunks.score(groups[0][0])[0]
    # files: [1, 0] wins (the two B questions get theirs first)
    assert by_file.score(groups[1][0])[0] > by_file.score(groups[1][0])[5]
    # each candidate its own file: the file objective is the chunk objective
    apart = fit(groups, l2=1e-3, names=names, files=[np.arange(len(y)) for _, y in groups])
    assert np.allclose(apart.weights, chunks.weights, atol=1e-5)
    with pytest.raises(ValueError, match="file arrays"):
        fit(groups, l2=1e-3, names=names, files=files[:2])
    with pytest.raises(ValueError, match="length differs"):
        fit(groups, l2=1e-3, names=names, files=[f[:-1] for f in files])
