"""Who may use an instance: the ``access:`` section of an instance file, and API keys.

A policy, not a schema detail: the bots ask :meth:`AccessConfig.allows` for every question (a
thread counts as its parent channel). The HTTP API and MCP over HTTP authenticate a caller by an
:class:`ApiKey` (kept in the settings file as a hash, :func:`match_key`), each key with the
instances it may use (:func:`names_allow`: a private instance only where it is named, as in
channels).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def _allows(
    spaces: list[str], channels: list[str], defaults: list[str], space: str | None, channel: str,
    private: bool,
) -> bool:  # fmt: skip
    if spaces and space not in spaces:
        return False
    if channel in channels or channel in defaults:
        return True
    if channels:
        return False
    return bool(spaces) or not private


class _ChatAccess(BaseModel):
    model_config = ConfigDict(extra="forbid")

    channels: list[str] = Field(
        default_factory=list,
        description="Channel IDs allowed; empty: every channel of the allowed workspaces/guilds.",
    )
    default_channels: list[str] = Field(
        default_factory=list,
        description="Channel IDs where this instance answers when no instance is named (these "
        "channels are allowed too). One default per channel across all instances.",
    )
    channel_repos: dict[str, str] = Field(
        default_factory=dict,
        description="An instance over several repositories: channel ID -> the repository or "
        "scope (`scopes:`) its questions search unless a question says repo:NAME or repo:all.",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _ids_as_text(cls, v: Any) -> Any:
        # Discord snowflakes are often written as YAML integers.
        if isinstance(v, dict):
            return {str(k) if isinstance(k, int) else k: x for k, x in v.items()}
        return [str(x) if isinstance(x, int) else x for x in v] if isinstance(v, list) else v


class SlackAccess(_ChatAccess):
    workspaces: list[str] = Field(
        default_factory=list, description="Slack team IDs (T…) allowed; empty: any workspace."
    )

    def allows(self, workspace: str | None, channel: str, private: bool) -> bool:
        return _allows(
            self.workspaces, self.channels, self.default_channels, workspace, channel, private
        )


class DiscordAccess(_ChatAccess):
    guilds: list[str] = Field(
        default_factory=list, description="Discord guild (server) IDs allowed; empty: any guild."
    )

    def allows(self, guild: str | None, channel: str, private: bool) -> bool:
        return _allows(self.guilds, self.channels, self.default_channels, guild, channel, private)


class AccessConfig(BaseModel):
    """Where the chat bots may answer with this instance (a thread counts as its channel).

    Without lists, an instance answers everywhere unless ``private``; a non-empty list restricts
    to it; ``private: true`` makes empty lists mean nowhere, so a private instance answers only in
    workspaces/guilds/channels it names.
    """

    model_config = ConfigDict(extra="forbid")

    private: bool = Field(
        default=False,
        description="Answer only where slack/discord below name a workspace, guild or channel.",
    )
    slack: SlackAccess = Field(default_factory=SlackAccess)
    discord: DiscordAccess = Field(default_factory=DiscordAccess)

    def allows(self, platform: str, space: str | None, channel: str) -> bool:
        side = self.slack if platform == "slack" else self.discord
        return side.allows(space, channel, self.private)

    def channel_repo(self, platform: str, channel: str) -> str | None:
        """The repository or scope a channel's questions search by default (None: all)."""
        side = self.slack if platform == "slack" else self.discord
        return side.channel_repos.get(channel)


def names_allow(names: list[str], instance: str, private: bool) -> bool:
    """The rule of a list of instance names (an API key's, the MCP server's): a name allows that
    instance; ``"*"`` allows every instance that is not ``access.private`` (a private one must be
    named)."""
    return instance in names or ("*" in names and not private)


def hash_key(key: str) -> str:
    """What the settings file stores of an API key: its SHA-256, hex. (A key is 32 random bytes
    from ``repo-expert api-key``, so a fast hash is enough; it is never stored or logged.)"""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiKey(BaseModel):
    """One key of the HTTP API (and of MCP over HTTP), as the settings file stores it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$",
        description="Who holds the key (letters, digits, '_', '.', '@', '-'): the user of its "
        "questions and feedback.",
    )
    sha256: str = Field(
        pattern=r"^[0-9a-fA-F]{64}$",
        description="SHA-256 (hex) of the key; `repo-expert api-key NAME` prints a new key and "
        "this line. The key itself is never stored.",
    )
    instances: list[str] = Field(
        min_length=1,
        description="Instances the key may use; '*': every instance that is not private. An "
        "instance a key may not use does not exist for it.",
    )


def match_key(keys: list[ApiKey], presented: str) -> ApiKey | None:
    """The key whose hash ``presented`` has, compared in constant time against every key."""
    digest = hash_key(presented).encode()
    found = None
    for k in keys:
        if hmac.compare_digest(digest, k.sha256.lower().encode()):
            found = k
    return found
