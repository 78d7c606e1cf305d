"""The instance schema: what one YAML file in the instances directory may say.

Every setting is a pydantic field with a description and ``extra="forbid"``, so a typo fails
loudly with the file, the key path and what was expected (``load.py`` reads the files and
formats the errors; ``access.py`` is the bots' access policy).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import pathspec
from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from core.config.access import AccessConfig
from core.config.retrieval import EmbeddingConfig, RetrievalConfig
from core.config.retrieval import StrictModel as _Model

DEFAULT_DOCS_INCLUDE = [
    "**/*.md", "**/*.markdown", "**/*.mdx", "**/*.rst", "**/*.txt", "**/*.adoc", "**/*.asciidoc",
]  # fmt: skip
DEFAULT_CODE_INCLUDE = [
    "**/*.py", "**/*.pyi", "**/*.js", "**/*.jsx", "**/*.mjs", "**/*.cjs", "**/*.ts", "**/*.tsx",
    "**/*.go", "**/*.rs", "**/*.java", "**/*.c", "**/*.h", "**/*.cc", "**/*.cpp", "**/*.cxx",
    "**/*.hpp", "**/*.hh", "**/*.rb", "**/*.cs", "**/*.php", "**/*.kt", "**/*.kts",
    "**/*.swift",
    # no grammar here: chunked as line windows (core/chunk/code.py)
    "**/*.scala", "**/*.dart", "**/*.lua", "**/*.ex", "**/*.exs", "**/*.vue", "**/*.svelte",
    "**/*.sh", "**/*.toml", "**/*.yaml", "**/*.yml",
    "**/*.cfg", "**/*.ini", "**/Makefile", "**/Dockerfile", "**/Procfile",
]  # fmt: skip

# Noise nobody wants cited: vendored trees, lock files, minified or generated files.
BUILTIN_EXCLUDES = [
    ".git/", "node_modules/", "vendor/", "third_party/", "third-party/", "**/site-packages/",
    ".venv/", "venv/", "env/", "__pycache__/", "dist/", "build/", ".tox/", ".mypy_cache/",
    ".pytest_cache/", ".ruff_cache/", "*.egg-info/",
    "*.lock", "package-lock.json", "yarn.lock", "pnpm-lock.yaml", "poetry.lock", "Cargo.lock",
    "go.sum", "uv.lock", "Pipfile.lock",
    "*.min.js", "*.min.css", "*.map", "*.pb.go", "*_pb2.py", "*.generated.*",
    "*.png", "*.jpg", "*.jpeg", "*.gif", "*.ico", "*.pdf", "*.zip", "*.gz", "*.tar", "*.so",
    "*.dylib", "*.dll", "*.exe", "*.bin", "*.whl", "*.pyc", "*.woff", "*.woff2", "*.ttf",
    # .NET, Gradle and Swift build trees and generated sources (a local checkout that was built)
    "**/obj/Debug/", "**/obj/Release/", "*.AssemblyInfo.cs", ".gradle/", ".build/",
    "DerivedData/", "Pods/", "*.g.cs", "*.Designer.cs",
]  # fmt: skip


# An instance name is one safe path component (it names a folder under the data folder).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
NAME_RULE = "use letters, digits, '.', '_' and '-' (starting with a letter or digit)"


class RepoConfig(_Model):
    """Where the repository comes from: a local path, or a git URL that is cloned."""

    path: str | None = Field(
        default=None,
        description="Local checkout; relative paths are relative to the instance file's folder.",
    )
    url: str | None = Field(default=None, description="Git URL to clone (https or ssh).")
    ref: str | None = Field(default=None, description="Branch or tag to check out (with url).")
    token: SecretStr | None = Field(
        default=None,
        description="Token for a private https url, written as ${VAR}. Given to git in an HTTP "
        "header through its environment: never written to .git/config or the remote URL, never "
        "logged.",
    )

    @field_validator("token", mode="before")
    @classmethod
    def _empty_token(cls, v: Any) -> Any:
        return None if v == "" else v

    @model_validator(mode="after")
    def _one_of(self) -> RepoConfig:
        if bool(self.path) == bool(self.url):
            raise ValueError("give exactly one of 'path' (a local checkout) or 'url' (git URL)")
        return self


def check_glob(p: str) -> str:
    """A gitignore-style pattern as pathspec reads it: one that matches nothing (an unclosed
    ``[``, a trailing backslash, a comment) is an error here, not a silent no-op later."""
    try:
        compiled = pathspec.GitIgnoreSpec.from_lines([p]).patterns
    except Exception as e:  # pathspec's own error types vary across versions
        raise ValueError(f"pattern {p!r} is not a valid glob: {e}") from None
    if not compiled or compiled[0].include is None:
        why = "an unclosed '['?" if "[" in p else "empty or a comment"
        raise ValueError(f"pattern {p!r} matches nothing ({why})")
    return p


Glob = Annotated[str, AfterValidator(check_glob)]


class IncludeConfig(_Model):
    include: list[Glob] = Field(description="Gitignore-style globs of files in this collection.")


class IssuesConfig(_Model):
    """Issues and pull requests: a file in the shape ``gh issue list --json`` prints, or a GitHub
    repository read through the REST API and mirrored incrementally (see core/ingest/
    mirror.py). The filters apply to both."""

    file: str | None = Field(
        default=None,
        description="JSON from `gh issue list --state all --json number,title,body,state,labels,"
        "comments,url,createdAt,closedAt`; relative to the instance file's folder.",
    )
    github: str | None = Field(
        default=None,
        description="owner/repo: read issues and pull requests with their comments through the "
        "GitHub REST API, incrementally.",
    )
    api_url: str = Field(
        default="https://api.github.com",
        description="REST API base URL; GitHub Enterprise Server: https://HOST/api/v3.",
    )
    token: SecretStr | None = Field(
        default=None,
        description="API token, written as ${VAR}; default GITHUB_TOKEN from the environment; "
        "optional for public repositories. Never logged.",
    )
    state: Literal["open", "closed", "all"] = Field(
        default="all", description="Which issues to index (a merged pull request is closed)."
    )
    labels: list[str] = Field(
        default_factory=list,
        description="Index only issues with at least one of these labels (empty: any).",
    )
    exclude_labels: list[str] = Field(
        default_factory=list, description="Skip issues with any of these labels."
    )
    pull_requests: bool = Field(default=True, description="Index pull requests too.")
    review_comments: bool = Field(
        default=True, description="With github: include pull requests' review (diff) comments."
    )
    pr_files: bool = Field(
        default=True,
        description="With github: fetch the files each pull request changed (one more request "
        "per changed pull request), so 'where was #N fixed' finds them.",
    )
    max_age_days: float | None = Field(
        default=None, gt=0, description="Skip issues not updated in this many days."
    )
    full_listing_hours: float | None = Field(
        default=24.0,
        gt=0,
        description="With github: this often a sync lists every issue again, which catches "
        "deleted issues and deleted comments (incremental listings cannot show deletions; "
        "webhooks report them at once). null: only with `sync --refetch-issues`.",
    )

    @field_validator("token", mode="before")
    @classmethod
    def _empty_token(cls, v: Any) -> Any:
        return None if v == "" else v

    @field_validator("github")
    @classmethod
    def _repo_ok(cls, v: str | None) -> str | None:
        if v and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", v):
            raise ValueError("expected owner/repo, e.g. acme/widget")
        return v or None

    @field_validator("api_url")
    @classmethod
    def _api_url_ok(cls, v: str) -> str:
        if not re.match(r"https?://", v):
            raise ValueError("expected an http(s) URL such as https://github.example.com/api/v3")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _one_source(self) -> IssuesConfig:
        if self.file and self.github:
            raise ValueError("give one of 'file' (gh JSON) or 'github' (owner/repo), not both")
        return self


class LLMConfig(_Model):
    """How answers are written: quoted from the sources offline, or generated by a language model
    that must cite the numbered sources (checked after generation)."""

    provider: Literal["extractive", "openai", "anthropic", "auto"] = Field(
        default="extractive",
        description="extractive: quote the sources, no model (the offline default); openai: any "
        "OpenAI-compatible chat-completions endpoint (OpenAI, Azure, Ollama, vLLM, llama.cpp, "
        "LM Studio); anthropic: the Anthropic Messages API; auto: anthropic if ANTHROPIC_API_KEY "
        "is set, else openai if OPENAI_API_KEY is set, else extractive.",
    )
    base_url: str | None = Field(
        default=None,
        description="API base URL, e.g. http://localhost:11434/v1 for Ollama; default: the "
        "provider's own.",
    )
    model: str | None = Field(
        default=None,
        description="Model name; default claude-sonnet-4-5 (anthropic), gpt-4o-mini (openai).",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="API key, written as ${VAR} so it stays out of the file; default "
        "ANTHROPIC_API_KEY / OPENAI_API_KEY from the environment. Never logged or shown.",
    )
    timeout: float = Field(
        default=60.0, gt=0, le=600, description="Seconds one request may take (not retried)."
    )
    max_retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Retries after HTTP 429, a 5xx or a refused connection, with backoff.",
    )
    retry_backoff: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description="Seconds before the first retry, doubled for each next one; a Retry-After "
        "header (up to 30 s) wins.",
    )
    max_context_tokens: int = Field(
        default=6000,
        ge=500,
        le=1_000_000,
        description="Prompt budget in estimated tokens: instructions, earlier turns, sources.",
    )
    max_answer_tokens: int = Field(
        default=1024, ge=16, le=64_000, description="Most tokens the model may write."
    )
    temperature: float | None = Field(
        default=None,
        ge=0.0,
        le=2.0,
        description="Sampling temperature; default: the model's own (some models refuse one).",
    )

    @field_validator("base_url", "model", "api_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: Any) -> Any:
        return None if v == "" else v  # an unset ${VAR:-} means: use the default

    @field_validator("base_url")
    @classmethod
    def _base_url_ok(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"https?://", v):
            raise ValueError("expected an http(s) URL such as http://localhost:11434/v1")
        return v


class RepoEntry(RepoConfig):
    """One repository of an instance over several (``repos:``). Its own ``docs``, ``code``,
    ``exclude`` and ``issues`` replace the instance's (which are the defaults)."""

    name: str = Field(description="Unique in the instance; shown in citations (server: a.py:3).")
    web_url: str | None = Field(default=None, description="Web URL of this repository.")
    aliases: list[str] = Field(
        default_factory=list, description="Other names a question may use for this repository."
    )
    docs: IncludeConfig | None = None
    code: IncludeConfig | None = None
    exclude: list[Glob] | None = None
    issues: IssuesConfig | None = None

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not NAME.fullmatch(v):
            raise ValueError(NAME_RULE)
        return v

    @field_validator("web_url")
    @classmethod
    def _url_ok(cls, v: str | None) -> str | None:
        return _web_url(v)


def _web_url(v: str | None) -> str | None:
    if not v:  # "" from an unset ${VAR:-} means: no web URL
        return None
    if not re.match(r"https?://", v):
        raise ValueError("expected an http(s) URL such as https://github.com/owner/repo")
    return v.rstrip("/")


class Instance(_Model):
    """One configured repository (``repo:``) or several (``repos:``): its sources, how it is
    indexed, how it answers."""

    name: str = Field(default="", description="Instance name; defaults to the file name's stem.")
    description: str = Field(default="", description="One line shown in `instances`.")
    # Required unless ``repos`` is given; with ``repos`` it is the first entry.
    repo: RepoConfig = Field(description="The repository (the one-repository form).")
    repos: list[RepoEntry] = Field(
        default_factory=list,
        description="Several repositories in one instance (instead of repo: and web_url:).",
    )
    scopes: dict[str, list[str]] = Field(
        default_factory=dict,
        description="With repos: named groups of its repositories (python: [api, worker]); a "
        "scope's name filters like a repository's (repo:NAME, --repo, a channel's default).",
    )
    web_url: str | None = Field(
        default=None,
        description="Web URL of the repository for permalinks, e.g. https://github.com/o/r.",
    )
    docs: IncludeConfig = Field(default_factory=lambda: IncludeConfig(include=DEFAULT_DOCS_INCLUDE))
    code: IncludeConfig = Field(default_factory=lambda: IncludeConfig(include=DEFAULT_CODE_INCLUDE))
    exclude: list[Glob] = Field(
        default_factory=list, description="Gitignore-style patterns excluded from every collection."
    )
    builtin_excludes: bool = Field(
        default=True, description="Also exclude vendored dirs, lock files, minified/binary files."
    )
    max_file_bytes: int = Field(
        default=1_000_000, ge=1, description="Files larger than this are skipped (and reported)."
    )
    issues: IssuesConfig = Field(default_factory=IssuesConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    llm: LLMConfig = Field(
        default_factory=LLMConfig, description="The answerer: extractive (default) or a model."
    )
    access: AccessConfig = Field(
        default_factory=AccessConfig,
        description="Which Slack workspaces/channels and Discord guilds/channels may ask this "
        "instance, and where it is the default.",
    )
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="Secret of the GitHub webhook (as ${VAR}); `serve webhooks` verifies "
        "X-Hub-Signature-256 with it and syncs this instance on push/issues/PR events.",
    )
    sync_interval: float = Field(
        default=300.0, ge=1, description="Seconds between syncs with `sync --watch`."
    )

    # Set by the loader, not by the YAML.
    source_file: Path | None = Field(default=None, exclude=True, description="(internal)")
    # Set on the per-repository view of an instance over several (``repos.py``), not by the YAML.
    repo_name: str = Field(default="", exclude=True, description="(internal)")

    @model_validator(mode="before")
    @classmethod
    def _repo_or_repos(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("repos"):
            if "repo" in data:
                raise ValueError("give 'repo' (one repository) or 'repos' (several), not both")
            if data.get("web_url"):
                raise ValueError("with 'repos', give each entry its own web_url")
            data = {**data, "repo": {"path": "."}}  # replaced by the first entry below
        return data

    @model_validator(mode="after")
    def _first_repo(self) -> Instance:
        if self.repos:
            self.repo = self.repos[0]
        return self

    @field_validator("webhook_secret", mode="before")
    @classmethod
    def _empty_secret(cls, v: Any) -> Any:
        return None if v == "" else v  # an unset ${VAR:-}: no webhooks for this instance

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if v and not NAME.fullmatch(v):
            raise ValueError(NAME_RULE)
        return v

    @field_validator("web_url")
    @classmethod
    def _url_ok(cls, v: str | None) -> str | None:
        return _web_url(v)

    def resolve(self, rel: str) -> Path:
        """A path from the YAML, relative to the instance file's folder."""
        p = Path(os.path.expanduser(rel))
        if not p.is_absolute() and self.source_file is not None:
            p = self.source_file.parent / p
        return p.resolve()
