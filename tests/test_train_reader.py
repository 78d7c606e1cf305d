"""benchmarks/train_reader.py: the torch model it trains is our engine's model, and what it trains
reaches the product unchanged (torch → differences file → the numpy engine, same scores)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import torch  # the test command installs it (scripts/test); the product does not need it
import train_reader

from core.embed.e5 import FastE5, default_model_path
from core.embed.e5._format import read_model
from core.embed.reader import Reader, trained_shapes, write_deltas

QUESTION = "how do I raise the connection timeout?"
TEXTS = ["Timeouts: pass timeout=30 to Client() to wait longer for a connection.",
         "def render(chart):\n    return chart.draw(colours=THEME)",
         "Changelog 1.2: fixed a crash when the config file is empty."]  # fmt: skip


def test_the_torch_model_is_the_engines_model() -> None:
    torch.set_num_threads(1)
    m = train_reader.e5_torch()
    with torch.no_grad():
        mine = train_reader.cosines(m, QUESTION, TEXTS).numpy() * train_reader.TAU
    base = FastE5(engine="fp32", num_threads=1)
    ref = base.embed_batch(TEXTS, as_query=False) @ base.embed_batch([QUESTION], True)[0]
    assert np.allclose(mine, ref, atol=1e-4)
    d = train_reader.differences(m)
    # exactly the tensors the product's reader adds to
    assert set(d) == set(trained_shapes(read_model(str(default_model_path()))))
    assert not any(np.abs(v).max() for v in d.values())


def test_a_trained_step_reaches_the_product_unchanged(tmp_path: Path) -> None:
    """One listwise step towards the second text; its differences, written and read by the
    product's reader, score like the torch model (and the step did move the scores)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    m = train_reader.e5_torch()
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    before = train_reader.cosines(m, QUESTION, TEXTS).detach().numpy()
    loss = torch.nn.functional.cross_entropy(
        train_reader.cosines(m, QUESTION, TEXTS)[None], torch.tensor([1])
    )
    loss.backward()
    opt.step()
    with torch.no_grad():
        after = train_reader.cosines(m, QUESTION, TEXTS).numpy()
    assert after[1] - after[0] > before[1] - before[0]  # it learned what it was shown
    path = tmp_path / "step.npz"
    write_deltas(path, train_reader.differences(m), str(default_model_path()), {"recipe": "1"})
    product = Reader(path).scores(QUESTION, TEXTS)
    assert np.allclose(product, after * train_reader.TAU, atol=2e-4)
