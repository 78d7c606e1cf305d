"""s60: are the reader's vectors the same whether a passage is read with its question (question
time, s59: the question and the missing passages in one batch) or read ahead (a build: passages by
16, the question alone)? Real chunks of an indexed dev set; prints the largest differences."""
import sqlite3
import sys

import numpy as np

from core.embed.reader import PASSAGE_TOKENS, QUESTION_TOKENS, shared

db = sqlite3.connect(sys.argv[1])  # a live build's chunks file, e.g. w53/data/fd/.../index.sqlite
texts = [t for (t,) in db.execute(sys.argv[2])][:48]
r = shared()
qs = ["how do I exclude hidden files?", "¿cómo ignoro los archivos ocultos?", "fix: panic on empty pattern"]
ps = [r.ids(t, False, PASSAGE_TOKENS) for t in texts]
worst_v = worst_s = 0.0
same = 0
for i, q in enumerate(qs):
    qi = [r.ids(q, True, QUESTION_TOKENS)]
    part = ps[i * 12 : i * 12 + 12]
    a = r.vectors(qi + part, threads=1)  # question time
    bq = r.vectors(qi, threads=1)  # read ahead: the question alone ...
    bp = r.vectors(ps, threads=1)[i * 12 : i * 12 + 12]  # ... the passages in batches of 16
    sa, sb = a[1:] @ a[0], bp @ bq[0]
    worst_v = max(worst_v, float(np.abs(a[0] - bq[0]).max()), float(np.abs(a[1:] - bp).max()))
    worst_s = max(worst_s, float(np.abs(sa - sb).max()))
    same += int((np.argsort(-sa, kind="stable") == np.argsort(-sb, kind="stable")).all())
print(f"{len(texts)} chunks, {len(qs)} questions: max |Δ vector| {worst_v}, max |Δ score| {worst_s}, same order {same}/{len(qs)}")
