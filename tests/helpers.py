"""What tests share: a deterministic fake embedder, real git repositories in tmp folders, the
sample repository and issues, one factory for a RepoExpert on the fake embedder, and the checks
the e5 engine tests share. Import from here (``from helpers import …``); fixtures are in
conftest.py.

The fake embedder hashes words (identifiers split) into a 384-d bag-of-words vector, so texts
that share words are similar, and counts tokens as words + 2 (prefix and specials); tests of the
real backends live in test_embed.py.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import textwrap
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.answer import Answerer
from core.config import Settings, load_instance
from core.embed import Embedder, EmbedService
from core.errors import ConfigError
from core.layout import Layout
from core.lexical import terms
from core.service import RepoExpert
from core.store.local import LocalReader, LocalStore


class FakeEmbedder:
    dim = 384
    max_tokens = 128
    name = "fake-bow"

    def __init__(self) -> None:
        self.calls: list[tuple[int, bool]] = []
        self.queries: list[str] = []  # every text embedded as a query, in order

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 2

    def vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, np.float32)
        for t in terms(text):
            h = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 20) & 1 else -1.0
        v[0] += 0.05  # no zero vectors
        return v / np.linalg.norm(v)

    def embed_batch(self, texts: Sequence[str], as_query: bool) -> np.ndarray:
        self.calls.append((len(texts), as_query))
        if as_query:
            self.queries.extend(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.vector(t) for t in texts])


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
        env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
             "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
             "PATH": "/usr/bin:/bin", "HOME": str(root)},
    ).stdout  # fmt: skip


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))


def make_repo(root: Path, files: dict[str, str]) -> str:
    """A real git repository with one commit; returns the commit SHA."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    write_files(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return git(root, "rev-parse", "HEAD").strip()


def commit_all(root: Path, msg: str = "change") -> str:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", msg)
    return git(root, "rev-parse", "HEAD").strip()


SAMPLE_REPO = {
    "README.md": """
        # Widget

        Widget renders charts for dashboards.

        ## Installation

        Install widget with pip. Then run the setup command once.

        ## Configuration

        The timeout option sets how long a request may take. The default timeout is thirty
        seconds. Set it in widget.toml under the network section.
        """,
    "docs/guide.md": """
        # Guide

        ## Themes

        Themes change colours and fonts of every chart. A dark theme ships by default.
        """,
    "src/widget/config.py": '''
        """Configuration loading."""

        import tomllib


        def parse_config(path):
            """Read widget.toml and return a dict of settings with the timeout applied."""
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
            data.setdefault("timeout", 30)
            return data


        class Renderer:
            """Draws a chart onto a canvas."""

            def draw(self, chart):
                return chart.points
        ''',
    "tasks/internal.md": "# Internal task\n\nDo not index this task file.\n",
    "vendor/lib.py": "def vendored():\n    return 1\n",
}

SAMPLE_ISSUES = [
    {
        "number": 42,
        "title": "Timeout ignored when parse_config reads widget.toml",
        "body": "The timeout setting in widget.toml is ignored: requests hang forever.",
        "state": "CLOSED",
        "labels": [{"name": "bug"}],
        "comments": [{"author": {"login": "ana"}, "body": "Fixed in parse_config by setdefault."}],
        "url": "https://github.com/acme/widget/issues/42",
        "createdAt": "2024-01-01T00:00:00Z",
        "closedAt": "2024-01-02T00:00:00Z",
    },
    {
        "number": 7,
        "title": "Dark theme colours too dim",
        "body": "The dark theme colours are hard to read on projectors.",
        "state": "OPEN",
        "labels": [],
        "comments": [],
        "url": "https://github.com/acme/widget/issues/7",
        "createdAt": "2024-01-01T00:00:00Z",
        "closedAt": None,
    },
]


class FakeApp(RepoExpert):
    """A RepoExpert on one EmbedService of a fake (or given) embedder, closed with the app."""

    def __init__(
        self,
        instances: Path,
        data: Path,
        embedder: Callable[[], Embedder] = FakeEmbedder,
        *,
        cache: Path | None = None,
        answerer: Answerer | None = None,
        batch_size: int = 4,
        store: str | None = None,
    ) -> None:
        self.svc = EmbedService(embedder, cache, batch_size)
        super().__init__(Settings(instances, data, store), embedder_for=lambda inst: self.svc,
                         answerer=answerer)  # fmt: skip

    async def close(self) -> None:
        await super().close()
        self.svc.close()


@asynccontextmanager
async def instance(tmp_path: Path, repo: Path, name: str, retrieval: str, extra: str = "",
                   embedder: Callable[[], Embedder] = FakeEmbedder,
                   cache: Path | None = None) -> AsyncIterator[FakeApp]:  # fmt: skip
    """An app over ``repo`` as instance ``w`` with these ``retrieval`` settings (and ``extra``
    YAML lines), in folders of its own named ``name``, on ``embedder`` (the fake one unless
    given) with this embedding ``cache``; closed afterwards."""
    inst = tmp_path / f"i-{name}"
    inst.mkdir()
    (inst / "w.yaml").write_text(
        f"repo: {{path: {repo}}}\nweb_url: https://github.com/acme/w\n{extra}"
        f"retrieval: {{{retrieval}}}\n"
    )
    app = FakeApp(inst, tmp_path / f"data-{name}", embedder, cache=cache)
    try:
        yield app
    finally:
        await app.close()


def sample_world(tmp: Path) -> tuple[Path, str, Path]:
    """The sample repository (a real git repo), its issues file and an instance file for it:
    (repo, commit, instances folder)."""
    repo = tmp / "widget"
    sha = make_repo(repo, SAMPLE_REPO)
    inst_dir = tmp / "instances"
    inst_dir.mkdir(exist_ok=True)
    (tmp / "issues.json").write_text(json.dumps(SAMPLE_ISSUES))
    (inst_dir / "widget.yaml").write_text(
        f"repo: {{path: {repo}}}\n"
        "web_url: https://github.com/acme/widget\n"
        "exclude: ['**/tasks/**']\n"
        f"issues: {{file: {tmp / 'issues.json'}}}\n"
    )
    return repo, sha, inst_dir


def live_build(data: Path, name: str) -> Path | None:
    """The folder of the live build in a local store (None without one)."""
    return LocalStore(Layout(data)).live_path(name)


async def open_live(data: Path, name: str) -> LocalReader:
    """A reader of the live build in a local store (the caller closes it)."""
    reader = await LocalStore(Layout(data)).open_live(name)
    assert reader is not None, f"no live build of {name} in {data}"
    return reader


def assert_e5_api(model: Any, name: str) -> None:
    """An e5 engine's shape: 384-d, 512-token window, its name, L2-normalised float32 rows."""
    assert model.dim == 384 and model.max_tokens == 512
    assert model.name == name
    vecs = model.embed_batch(["a", "b c d"], as_query=False)
    assert vecs.shape == (2, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert model.embed_batch([], as_query=True).shape == (0, 384)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def config_error(tmp: Path, text: str) -> str:
    """The one-line-per-problem error of loading ``text`` as an instance file (``bad.yaml``)."""
    f = tmp / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_instance(f)
    return str(e.value)
