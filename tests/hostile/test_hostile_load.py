"""Issue 17, item 12: a cold build of one instance does not make another instance's question
wait — over the HTTP API, two instances on one embedding service (one model, one thread)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest
from face_rig import ApiRig
from helpers import FakeApp, FakeEmbedder, make_repo, sample_world

BATCH_S = 0.02  # what one batch of passages (or one query) costs the slow model


class SlowModel(FakeEmbedder):
    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        time.sleep(BATCH_S)
        return super().embed_batch(texts, as_query)


async def ask(url: str, instance: str, question: str) -> tuple[float, httpx.Response]:
    t = time.perf_counter()
    async with httpx.AsyncClient(timeout=120) as c:
        r = await c.post(f"{url}/v1/ask", content=json.dumps(
            {"instance": instance, "question": question}).encode())  # fmt: skip
    return time.perf_counter() - t, r


@pytest.mark.asyncio
async def test_a_cold_build_does_not_hold_up_a_warm_instances_question(tmp_path: Path) -> None:
    _, _, inst = sample_world(tmp_path)
    files = {f"docs/page{i}.md": f"# Page {i}\n\nTopic {i} explains part {i} of the manual.\n"
             for i in range(240)}  # fmt: skip
    make_repo(tmp_path / "big", files)
    (inst / "big.yaml").write_text(f"repo: {{path: {tmp_path / 'big'}}}\n")
    app = FakeApp(inst, tmp_path / "data", SlowModel, batch_size=4)
    rig = await ApiRig(app).start()
    try:
        warm_s, r = await ask(rig.url, "widget", "what is the default timeout?")  # builds, warms
        assert r.status_code == 200, r.text
        cold = asyncio.create_task(ask(rig.url, "big", "what does topic 7 explain?"))
        for _ in range(3000):  # until the cold build is embedding
            if app.svc.passages_embedded >= 40:
                break
            await asyncio.sleep(0.01)
        t = time.perf_counter()
        warm_s, r = await ask(rig.url, "widget", "what is the default timeout?")
        assert r.status_code == 200 and "thirty" in r.text
        assert not cold.done(), "the cold build finished first: make it bigger"
        cold_s, r = await cold
        assert r.status_code == 200, r.text
        build_left = time.perf_counter() - t
        # One batch (or a chunking job) in the way at most, not the rest of the build.
        print(f"warm {warm_s:.3f}s while the cold build had {build_left:.3f}s to go")
        assert warm_s < 0.25 * build_left, (warm_s, build_left, cold_s)
    finally:
        await rig.close()
        await app.close()
