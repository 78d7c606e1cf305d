"""What the tests of the API, the web page and the MCP server share: the API server on
127.0.0.1 over a RepoExpert (the sample app on the fake embedder), settings with API keys, and
``serve_fake.py`` — ``repo-expert serve …`` in a subprocess on the fake embedder."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from helpers import commit_all
from stub_http import LocalServer

from bot.api import ApiServer
from bot.gateway import Gateway
from bot.settings import ServeConfig
from core.config import hash_key
from core.service import RepoExpert
from core.store.conversations import ConversationStore

ROOT = Path(__file__).parent.parent
SERVE_FAKE = Path(__file__).parent / "serve_fake.py"
KEYS = {"docs-site": "rx-docs-site-key", "ops": "rx-ops-key"}


def keyed(instances: dict[str, list[str]], **api: Any) -> dict[str, Any]:
    """Settings (as the YAML file holds them) with one key per name: its instances."""
    keys = [{"name": n, "sha256": hash_key(KEYS[n]), "instances": i} for n, i in instances.items()]
    return {"api": {"keys": keys, **api}}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


class ApiRig:
    """The API server of ``app`` on a free port of 127.0.0.1 (``url``), its conversations store
    at the default place (so ``repo-expert feedback`` finds it)."""

    def __init__(self, app: RepoExpert, settings: dict[str, Any] | None = None) -> None:
        self.app = app
        self.config = ServeConfig.model_validate(settings or {})
        self.server: LocalServer | None = None
        self.store: ConversationStore | None = None
        self.gateway: Gateway | None = None
        self.url = ""

    async def start(self) -> ApiRig:
        self.store = await ConversationStore.open(self.app.layout.conversations)
        self.gateway = Gateway(self.app, self.store, self.config, self.app.load_instances())
        self.server = LocalServer(ApiServer(self.gateway).web_app())
        await self.server.start()
        self.url = self.server.address()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self.store is not None:
            await self.store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fake_serve_argv(instances: Path, data: Path, *serve: str) -> list[str]:
    """The command line of ``repo-expert serve …`` on the fake embedder."""
    return [sys.executable, str(SERVE_FAKE), "--instances", str(instances), "--data", str(data),
            "serve", *serve]  # fmt: skip


def with_links(sample: dict[str, Any]) -> str:
    """Symbolic links committed to the sample repository: one to a file outside it, one to a
    folder outside it, one to a file inside it. Returns the new commit."""
    repo: Path = sample["repo"]
    outside = sample["tmp"] / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nThe password is hunter2.\n")
    os.symlink(outside / "secret.md", repo / "leak.md")
    os.symlink(outside, repo / "linked")
    os.symlink("README.md", repo / "again.md")
    return commit_all(repo, "links")
