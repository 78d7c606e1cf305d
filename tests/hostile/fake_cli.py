"""``repo-expert …`` on the fake embedder: the real parser, ``main`` and its error handling; only
the embedder is the tests' fake (``helpers.FakeEmbedder``), with the real vector cache under the
data folder, so the real model never loads. ``FAKE_EMBED_DELAY`` (seconds per batch) slows it."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parents[2]), str(Path(__file__).parents[1])]

from helpers import FakeApp, FakeEmbedder  # noqa: E402

import core.cli  # noqa: E402
from core.config import Settings  # noqa: E402
from core.layout import Layout  # noqa: E402


class SlowEmbedder(FakeEmbedder):
    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        time.sleep(float(os.environ.get("FAKE_EMBED_DELAY") or 0))
        return super().embed_batch(texts, as_query)


class CliApp(FakeApp):
    def __init__(self, settings: Settings) -> None:
        cache = Layout(settings.data_dir).embeddings_cache
        super().__init__(settings.instances_dir, settings.data_dir, SlowEmbedder, cache=cache)


core.cli.RepoExpert = CliApp  # type: ignore[misc]

if __name__ == "__main__":
    sys.exit(core.cli.main(sys.argv[1:]))
