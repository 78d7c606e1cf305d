"""Where the chat bots may answer with an instance: the ``access:`` section of an instance file.

A policy, not a schema detail: the bots ask :meth:`AccessConfig.allows` for every question (a
thread counts as its parent channel), and the faces added later use the same rule.
"""

from __future__ import annotations

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

    @field_validator("*", mode="before")
    @classmethod
    def _ids_as_text(cls, v: Any) -> Any:
        # Discord snowflakes are often written as YAML integers.
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
