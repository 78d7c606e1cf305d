"""``repo-expert …`` on the fake embedder: the real parser, ``main`` and its error handling; only
the embedder is the tests' fake (``helpers.FakeEmbedder``), with the real vector cache under the
data folder, so the real model never loads. Faults of the embedder, by environment variable:
``FAKE_EMBED_DELAY`` (seconds per batch) slows it; ``FAKE_EMBED_FAIL`` makes loading it fail;
a text holding ``POISON_PILL`` makes its token counter raise (a file no chunker gets through).
``FAKE_KILL_AT_SWAP`` SIGKILLs the process as it is about to swap the ``current`` link (after
the new build was renamed into place, its temporary link made)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parents[2]), str(Path(__file__).parents[1])]

from helpers import FakeApp, FakeEmbedder  # noqa: E402

import core.cli  # noqa: E402
from core.config import Settings  # noqa: E402
from core.errors import EmbeddingError  # noqa: E402
from core.layout import Layout  # noqa: E402

POISON_PILL = "\u2620 poison pill \u2620"


class SlowEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        if os.environ.get("FAKE_EMBED_FAIL"):
            raise EmbeddingError("cannot load the fake model (FAKE_EMBED_FAIL is set)")
        super().__init__()

    def count_tokens(self, text: str) -> int:
        if POISON_PILL in text:
            raise RuntimeError("the fake tokenizer chokes on this text")
        return super().count_tokens(text)

    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        time.sleep(float(os.environ.get("FAKE_EMBED_DELAY") or 0))
        return super().embed_batch(texts, as_query)


class CliApp(FakeApp):
    def __init__(self, settings: Settings) -> None:
        cache = Layout(settings.data_dir).embeddings_cache
        super().__init__(settings.instances_dir, settings.data_dir, SlowEmbedder, cache=cache)


def _fake() -> None:
    """Patch the CLI for this process only (importing this module changes nothing: a test
    imports ``POISON_PILL`` from it)."""
    core.cli.RepoExpert = CliApp  # type: ignore[misc]
    if os.environ.get("FAKE_KILL_AT_SWAP"):
        replace = os.replace

        def kill_at_swap(src: str, dst: str) -> None:
            if Path(dst).name == "current":
                os.kill(os.getpid(), signal.SIGKILL)
            replace(src, dst)

        os.replace = kill_at_swap  # type: ignore[assignment]


if __name__ == "__main__":
    _fake()
    sys.exit(core.cli.main(sys.argv[1:]))
