"""A second repo-expert process for the PostgreSQL tests (a real child process, sharing only
the database with the test): ``python tests/pg_child.py MODE URL TMP``.

    ask        answer "what does parse_config return?" for widget; print the build id and sources
    worker     run `repo-expert worker` on a slow fake embedder; TMP/embedding appears when it
               starts embedding (so the test can kill it mid-build)
    converse   a bot turn and a 👎 on it, through the service's conversations
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from helpers import FakeApp, FakeEmbedder

from core.index.worker import run_worker


class SlowEmbedder(FakeEmbedder):
    """Embeds passages slowly and says when it has started (the build is then mid-way)."""

    def __init__(self, marker: Path) -> None:
        super().__init__()
        self.marker = marker

    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        if not as_query and texts:
            self.marker.touch()
            time.sleep(2.0)
        return super().embed_batch(texts, as_query)


async def main(mode: str, url: str, tmp: Path) -> None:
    if mode == "worker":
        slow = SlowEmbedder(tmp / "embedding")
        app = FakeApp(tmp / "instances", tmp / "data-worker", lambda: slow, store=url)
        await run_worker(app, app.backend.jobs, poll=0.2)
        return
    app = FakeApp(tmp / "instances", tmp / "data-child", store=url)
    try:
        if mode == "ask":
            answer = await app.ask("widget", "what does parse_config return?")
            reader = await app.reader("widget")
            print(json.dumps({"build": reader.build_id,
                              "paths": [s.path for s in answer.sources]}))  # fmt: skip
        elif mode == "converse":
            from core.models import Answer

            store = await app.conversations(tmp / "ignored.sqlite")
            turn = await store.add_turn("slack", "T1:C1:1.0", "widget", "U1", "how?",
                                        Answer(text="like this", sources=[]))  # fmt: skip
            await store.record_feedback("slack", turn, "U2", "down")
            await store.close()
            print(json.dumps({"turn": turn}))
    finally:
        await app.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
