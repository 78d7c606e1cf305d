"""The data folder: every path repo-expert writes under it, in one place.

    {data}/{instance}/current -> builds/{id}        the live build (local store, ``store/local.py``)
    {data}/{instance}/builds/{id}/                  one build: meta.sqlite + {collection}.fbin
    {data}/{instance}/.lock                         one build or sync of the instance at a time
    {data}/{instance}/state.sqlite                  issues mirror, sync marks, last sync and error
    {data}/{instance}/checkout/                     the clone of a ``repo.url`` instance
    {data}/{instance}/repos/{repo}/checkout/        … of one of several repositories (``repos:``)
    {data}/{instance}/repos/{repo}/state.sqlite     … and its issues mirror
    {data}/{instance}/eval/                         ``eval --compare`` reports (default folder)
    {data}/cache/embeddings.sqlite                  passage vectors by (model, text hash)
    {data}/conversations.sqlite                     the bots' threads and feedback
    {data}/discord-commands.json                    hash of the Discord commands last synced

An instance name becomes a folder name here, so it must be one path component that stays inside
the data folder: :meth:`Layout.instance` refuses anything else (``..``, ``a/b``, an absolute path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigError

# The instance-name rule of the configuration (``Instance.name``): letters, digits, '.', '_', '-',
# starting with a letter or digit — so never '..' and never a separator.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Layout:
    """Paths under one data folder."""

    data: Path

    def instance(self, name: str) -> Path:
        """``{data}/{name}``; a name that is not a single safe path component is refused."""
        if not _NAME.fullmatch(name):
            raise ConfigError(
                f"instance name {name!r}: use letters, digits, '.', '_' and '-' (starting with a "
                "letter or digit); it names a folder under the data folder"
            )
        return self.data / name

    def builds(self, name: str) -> Path:
        return self.instance(name) / "builds"

    def current(self, name: str) -> Path:
        """The symlink to the live build."""
        return self.instance(name) / "current"

    def lock(self, name: str) -> Path:
        return self.instance(name) / ".lock"

    def state(self, name: str) -> Path:
        return self.instance(name) / "state.sqlite"

    def checkout(self, name: str) -> Path:
        return self.instance(name) / "checkout"

    def repo(self, name: str, repo: str) -> Path:
        """``{data}/{name}/repos/{repo}``: one repository of an instance over several."""
        if not _NAME.fullmatch(repo):
            raise ConfigError(f"repository name {repo!r}: use letters, digits, '.', '_' and '-'")
        return self.instance(name) / "repos" / repo

    def eval_reports(self, name: str) -> Path:
        return self.instance(name) / "eval"

    @property
    def embeddings_cache(self) -> Path:
        return self.data / "cache" / "embeddings.sqlite"

    @property
    def conversations(self) -> Path:
        return self.data / "conversations.sqlite"

    @property
    def discord_commands(self) -> Path:
        return self.data / "discord-commands.json"
