"""Process-wide settings of the faces (``repo-expert serve``): the chat bots, the HTTP API and
web page (``api:``), the MCP server (``mcp:``), the webhook receiver (``webhooks:``).

Optional: without a file every default below applies. The file is YAML, given with
``serve --config FILE`` or ``REPO_EXPERT_SERVE_CONFIG``; ``${VAR}`` reads the environment, as in
instance files. Which instance may answer in which chat channel is per instance (``access:``);
which instances an API key may use is here, with the key (stored as its SHA-256).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.config import ApiKey, load_settings_file
from core.models import MAX_QUESTION_CHARS


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SlackSettings(_Model):
    command: str = Field(default="/repo", description="The slash command, as set in the app.")
    mode: Literal["auto", "socket", "http"] = Field(
        default="auto",
        description="socket: Socket Mode (needs SLACK_APP_TOKEN, no public URL); http: Events "
        "over HTTP (needs SLACK_SIGNING_SECRET); auto: socket if SLACK_APP_TOKEN is set.",
    )
    api_url: str = Field(
        default="https://slack.com/api/",
        description="Base URL of the Slack Web API (GovSlack: https://slack-gov.com/api/; a "
        "local stand-in for tests).",
    )
    host: str = Field(default="0.0.0.0", description="HTTP mode: address to listen on.")
    port: int | None = Field(
        default=None, ge=1, le=65535, description="HTTP mode: port; default $PORT or 3000."
    )
    path: str = Field(default="/slack/events", description="HTTP mode: request URL path.")
    thread_replies: bool = Field(
        default=False,
        description="Answer every reply in a thread the bot answered, not only replies that "
        "mention it (needs the message.channels/message.groups events).",
    )
    stream_interval: float = Field(
        default=1.0,
        ge=0,
        description="While a language model streams its answer, the 'Searching …' message "
        "shows the text so far, updated (chat.update) at most once per this many seconds; "
        "0: no previews, only the final answer.",
    )

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, v: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", v):
            raise ValueError("expected an http(s) URL such as https://slack.com/api/")
        return v if v.endswith("/") else v + "/"

    @field_validator("command")
    @classmethod
    def _slash(cls, v: str) -> str:
        if not v.startswith("/") or " " in v:
            raise ValueError("a slash command starts with '/' and has no spaces, e.g. /repo")
        return v


class DiscordSettings(_Model):
    command: str = Field(default="ask", description="Name of the application (slash) command.")
    api_url: str = Field(
        default="https://discord.com/api/v10",
        description="Base URL of the Discord REST API; a local stand-in for tests.",
    )
    gateway_url: str = Field(
        default="wss://gateway.discord.gg/",
        description="The gateway's websocket address (a local stand-in for tests).",
        pattern=r"^wss?://\S+$",
    )
    thread_replies: bool = Field(
        default=True,
        description="Answer every message in a thread the bot answered (needs the Message "
        "Content intent); false: only messages that mention it.",
    )
    sync_commands: bool = Field(
        default=True, description="Register the slash command with Discord at startup."
    )
    stream_interval: float = Field(
        default=1.0,
        ge=0,
        description="While a language model streams its answer, a message in the thread shows "
        "the text so far, edited at most once per this many seconds (Discord allows about 5 "
        "edits per 5 s per channel), then replaced by the answer; 0: no previews.",
    )

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, v: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", v):
            raise ValueError("expected an http(s) URL such as https://discord.com/api/v10")
        return v.rstrip("/")


class ApiSettings(_Model):
    keys: list[ApiKey] = Field(
        default_factory=list,
        description="API keys of the HTTP API, the web page and MCP over HTTP, each with the "
        "instances it may use. None: only 127.0.0.1 may call (and no proxied request).",
    )
    max_body_bytes: int = Field(
        default=65536, ge=1024, le=16 * 1024 * 1024, description="Largest request body accepted."
    )
    max_question_chars: int = Field(
        default=2000,
        ge=10,
        le=MAX_QUESTION_CHARS,
        description=f"Longest question (or search query); at most {MAX_QUESTION_CHARS}, what "
        "the service reads.",
    )
    max_k: int = Field(default=20, ge=1, le=50, description="Most sources one search returns.")

    @field_validator("keys")
    @classmethod
    def _unique(cls, v: list[ApiKey]) -> list[ApiKey]:
        names = [k.name for k in v]
        if len(set(names)) != len(names):
            raise ValueError("two keys have the same name; each key needs its own")
        return v


class WebhookSettings(_Model):
    max_body_bytes: int = Field(
        default=5 * 1024 * 1024,
        ge=1024,
        le=25 * 1024 * 1024,
        description="Largest delivery accepted (GitHub sends at most 25 MB; most are a few KB). "
        "A larger Content-Length is refused before the body is read.",
    )
    read_timeout: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Seconds a delivery's body may take to arrive; a slower one is refused "
        "(408) and its connection closed.",
    )


class McpSettings(_Model):
    instances: list[str] = Field(
        default_factory=lambda: ["*"],
        description="Instances `serve mcp` offers over stdio (a local agent); '*': every "
        "instance that is not private. Over HTTP the API keys apply instead.",
    )


class HealthSettings(_Model):
    host: str = Field(
        default="0.0.0.0", description="Address of the health server (/healthz, /readyz, "
        "/metrics) of a process without an HTTP server of its own; 127.0.0.1 keeps it local.",
    )  # fmt: skip
    port: int | None = Field(
        default=None, ge=1, le=65535,
        description="Its port (`--health-port` wins); default $PORT when set, else no health "
        "server. Slack's HTTP mode serves the routes on its own port instead.",
    )  # fmt: skip


# Measured on the dev sets (benchmarks/support_sweep.py on marshmallow, urfave-cli and yargs,
# chosen on the tune split as the lowest threshold whose answers are >= 80% precise; re-measured
# whenever the ranker is refitted: 5.5 for the three-set ranker, 6.5 for the eight-set one, 5.5
# for the eleven-set one, 6.0 for it with declarations and comment share (and again on the
# reviewed gold, 2026-12-02);
# benchmarks/results/support/sweep.md; README, "Support channels"): the top source's fused score
# (the learned ranker's log-odds) from which an unasked answer is posted. With
# retrieval.ranker: hybrid the scores are cosine-like (< 2): set min_score for such an instance
# yourself.
DEFAULT_MIN_SCORE = 6.0


class SupportChannel(_Model):
    platform: Literal["slack", "discord"]
    channel: str = Field(
        description="The channel ID (Slack C…; Discord: a text channel or a forum channel, "
        "whose every new post is a thread)."
    )
    instance: str | None = Field(
        default=None, description="The instance answering there; default: the channel's "
        "default instance (access.*.default_channels, or the only one allowed there).",
    )  # fmt: skip
    min_score: float = Field(
        default=DEFAULT_MIN_SCORE,
        description="Answer unasked only when the top source's fused score is at least this "
        "(sources[0].score of ask --json; route.narrowed.first_score when the question was "
        "searched in the repository it names alone); higher: fewer, surer answers.",
    )
    otherwise: Literal["silent", "react"] = Field(
        default="silent", description="When not confident: say nothing, or react to the "
        "question with `reaction` (so people see the bot looked).",
    )  # fmt: skip
    reaction: str | None = Field(
        default=None, description="The reaction of `otherwise: react`: a Slack emoji name or "
        "a Discord emoji; default thinking_face / 🤔.",
    )  # fmt: skip

    @field_validator("channel", mode="before")
    @classmethod
    def _id_as_text(cls, v: object) -> object:
        return str(v) if isinstance(v, int) else v  # Discord snowflakes written as integers


class SupportSettings(_Model):
    channels: list[SupportChannel] = Field(
        default_factory=list, description="Channels where the bot answers new top-level "
        "questions without being mentioned, when retrieval is confident.",
    )  # fmt: skip
    stop_words: list[str] = Field(
        default_factory=lambda: ["no bot", "nobot"],
        description="A message containing one of these (any case) in a thread stops unasked "
        "answers there; in the question itself, it is never answered.",
    )
    stop_reaction: str = Field(
        default="no_entry_sign", description="This reaction on the question or an answer "
        "stops unasked answers in that thread (Slack name; on Discord 🚫 and ⛔ also count).",
    )  # fmt: skip

    @field_validator("stop_words")
    @classmethod
    def _lower(cls, v: list[str]) -> list[str]:
        return [" ".join(w.lower().split()) for w in v if w.strip()]


class ServeConfig(_Model):
    slack: SlackSettings = Field(default_factory=SlackSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    support: SupportSettings = Field(default_factory=SupportSettings)
    drain_seconds: float = Field(
        default=20.0, ge=0, le=600,
        description="On SIGTERM: how long answers in progress may take to finish (new questions "
        "are no longer taken); any still running then get a line saying the bot restarted.",
    )  # fmt: skip
    rate_limit: int = Field(
        default=5, ge=1, description="Questions one person may ask per rate_window seconds."
    )
    rate_window: float = Field(default=60.0, gt=0, description="Rate-limit window in seconds.")
    max_concurrent: int = Field(
        default=4, ge=1, description="Answers worked on at once; more get a polite 'busy'."
    )
    history_turns: int = Field(
        default=6, ge=0, le=50, description="Earlier turns of a thread given with a follow-up."
    )
    database: str | None = Field(
        default=None, description="Threads and feedback SQLite file; default {data}/conversations."
        "sqlite.",
    )  # fmt: skip

    def database_path(self, default: Path) -> Path:
        return Path(self.database) if self.database else default


def load_serve_config(file: str | None = None) -> ServeConfig:
    """The settings file named by ``file`` or ``REPO_EXPERT_SERVE_CONFIG``; else defaults."""
    name = file or os.environ.get("REPO_EXPERT_SERVE_CONFIG")
    return load_settings_file(Path(name), ServeConfig) if name else ServeConfig()
