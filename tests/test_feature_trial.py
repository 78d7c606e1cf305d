"""benchmarks/feature_trial.py: a new ranker feature on trial beside the shipped ones
(``train_ranker.py --cv L2 --extra FILE.py``) — the file's checks, the held-out fits with the
extra columns, the paired comparison, and the command line's refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import train_ranker
from feature_trial import Extra, ExtraError, paired, trial_lines

from core.retrieve.rank import FEATURES

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
COS = FEATURES.index("cos")
ONES = "import numpy as np\nNAMES = {names}\ndef feats(q):\n    return {value}\n"


def _file(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "feature.py"
    p.write_text(body, encoding="utf-8")
    return p


def _question(n: int) -> SimpleNamespace:
    return SimpleNamespace(cands=[object()] * n, text="why does it fail?")


def test_a_feature_file_gives_one_row_per_candidate(tmp_path: Path) -> None:
    body = ONES.format(names="['a', 'b']", value="np.ones((len(q.cands), 2))")
    extra = Extra.load(_file(tmp_path, body), FEATURES)
    assert extra.names == ("a", "b")
    x = extra.columns(_question(3))
    assert x.shape == (3, 2) and x.dtype == np.float32


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("def feats(q):\n    return []\n", "NAMES must be a non-empty list"),
        ("NAMES = 'a'\ndef feats(q):\n    return []\n", "NAMES must be a non-empty list"),
        ("NAMES = ['cos']\ndef feats(q):\n    return []\n", "already in use: ['cos']"),
        ("NAMES = ['a', 'a']\ndef feats(q):\n    return []\n", "already in use: ['a']"),
        ("NAMES = ['a']\n", "no function feats(question)"),
    ],
)
def test_a_bad_feature_file_is_refused_with_its_name(tmp_path: Path, body: str, says: str) -> None:
    path = _file(tmp_path, body)
    with pytest.raises(ExtraError) as e:
        Extra.load(path, FEATURES)
    assert says in str(e.value) and str(path) in str(e.value)


def test_wrong_columns_are_refused_not_misread(tmp_path: Path) -> None:
    body = ONES.format(names="['a']", value="np.ones((len(q.cands), 2))")
    wide = Extra.load(_file(tmp_path, body))
    with pytest.raises(ExtraError, match=r"gave shape \(4, 2\).*expected \(4, 1\)"):
        wide.columns(_question(4))
    body = ONES.format(names="['a']", value="np.full((len(q.cands), 1), np.nan)")
    nan = Extra.load(_file(tmp_path, body))
    with pytest.raises(ExtraError, match="NaN or infinite"):
        nan.columns(_question(2))


def _sets(extra: bool) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Four sets of twelve questions, eight candidates, the second gold; the cosine says so in
    half of the questions only. ``extra``: one more column that marks the gold everywhere."""
    rng = np.random.default_rng(3)
    out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for s in range(4):
        groups = []
        for i in range(12):
            x = rng.normal(0, 0.1, (8, len(FEATURES))).astype(np.float32)
            y = np.zeros(8, np.float32)
            y[1] = 1
            x[:, COS] = rng.normal(0, 1, 8)
            if i % 2:
                x[1, COS] = 3.0
            if extra:
                x = np.concatenate([x, y[:, None] * 2.0], axis=1)
            groups.append((x, y))
        out[f"set{s}"] = groups
    return out


def test_a_feature_with_evidence_wins_held_out_and_the_comparison_shows_it() -> None:
    base, more = _sets(extra=False), _sets(extra=True)
    names = (*FEATURES, "gold_mark")
    held = train_ranker.held_out(base, 0.1)
    xheld = train_ranker.held_out(more, 0.1, names)
    _, out = train_ranker.ceiling(base, 0.1, held)
    xin, xout = train_ranker.ceiling(more, 0.1, xheld, names)
    assert xin == 1.0 and xout == 1.0 and out < 0.9
    a = [r for n in base for r in train_ranker.reciprocal_ranks(held[n], base[n])]
    b = [r for n in more for r in train_ranker.reciprocal_ranks(xheld[n], more[n])]
    lines = trial_lines([("code",)] * len(a), a, b, ("howto", "code"))
    assert [ln.split()[0] for ln in lines] == ["all", "code"]  # an empty group is left out
    mean, se = paired(a, b)
    assert mean == pytest.approx(1.0 - out) and se > 0
    assert f"paired {mean:+.4f} ± {se:.4f}" in lines[0] and "down 0" in lines[0]


def test_paired_difference_by_hand() -> None:
    mean, se = paired([0.5, 1.0, 0.0, 1.0], [1.0, 1.0, 0.5, 0.5])
    d = np.array([0.5, 0.0, 0.5, -0.5])
    assert mean == pytest.approx(d.mean()) and se == pytest.approx(d.std(ddof=1) / 2)
    assert paired([1.0], [0.5]) == (-0.5, 0.0)


def test_the_fit_refuses_columns_its_names_do_not_describe() -> None:
    with pytest.raises(ValueError, match="feature columns"):
        train_ranker.fit(_sets(extra=True)["set0"], l2=0.1)  # FEATURES, one column short


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "train_ranker.py"), *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_the_command_refuses_a_trial_without_cv_and_a_bad_file(tmp_path: Path) -> None:
    good = _file(tmp_path, "NAMES = ['a']\ndef feats(q):\n    return []\n")
    r = _cli("--extra", str(good))
    assert r.returncode == 2 and "give --cv L2 as well" in r.stderr
    missing = tmp_path / "nope.py"
    r = _cli("--cv", "0.1", "--extra", str(missing), "--workdir", str(tmp_path))
    assert r.returncode == 2 and f"--extra {missing}: no such file" in r.stderr


def test_files_are_counted_once_at_their_best_candidate() -> None:
    from feature_trial import file_ids, file_reciprocal_ranks

    def cand(path: str | None, issue: int | None = None, repo: str = "") -> SimpleNamespace:
        key = f"issue:{issue}" if issue else path  # the store's doc_key, repository-qualified
        ch = SimpleNamespace(path=path, issue=issue, repo=repo,
                             doc_key=f"{repo}:{key}" if repo else key)  # fmt: skip
        return SimpleNamespace(collection="issues" if issue else "code", chunk=ch, row=0)

    cands = [cand("a.py"), cand("b.py"), cand("a.py"), cand(None, 7), cand("a.py", repo="x")]
    assert list(file_ids(cands)) == [0, 1, 0, 2, 3]  # the same path of another repo: another file
    y = np.array([0, 0, 0, 1, 0.0])
    s = np.array([5.0, 1.0, 4.0, 0.5, 3.0])  # order a, a, x:a, b, #7: files a, x:a, b, #7
    f = file_ids(cands)
    assert file_reciprocal_ranks([s], [(np.zeros((5, 1)), y)], [f]) == [0.25]
    assert file_reciprocal_ranks([s], [(np.zeros((5, 1)), y)], [f], k=3) == [0.0]
    assert train_ranker.reciprocal_ranks([s], [(np.zeros((5, 1)), y)]) == [0.2]  # candidates
