"""Configuration: instance files (``schema.py``), how they are read (``load.py``), where the
chat bots may use each instance (``access.py``), and the secrets kept out of every error and log
line (``redact.py``)."""

from core.config.access import (
    AccessConfig,
    ApiKey,
    DiscordAccess,
    SlackAccess,
    hash_key,
    match_key,
    names_allow,
)
from core.config.load import (
    Settings,
    find_instance,
    instance_files,
    load_all,
    load_instance,
    load_settings_file,
)
from core.config.redact import RedactingFormatter, redact
from core.config.repos import EVERY, aliases, is_multi, repo_names, repo_views, scopes
from core.config.retrieval import EmbeddingConfig, RetrievalConfig
from core.config.schema import (
    BUILTIN_EXCLUDES,
    IncludeConfig,
    Instance,
    IssuesConfig,
    LLMConfig,
    RepoConfig,
    RepoEntry,
)

__all__ = [
    "BUILTIN_EXCLUDES",
    "EVERY",
    "AccessConfig",
    "ApiKey",
    "DiscordAccess",
    "EmbeddingConfig",
    "IncludeConfig",
    "Instance",
    "IssuesConfig",
    "LLMConfig",
    "RedactingFormatter",
    "RepoConfig",
    "RepoEntry",
    "RetrievalConfig",
    "Settings",
    "SlackAccess",
    "aliases",
    "find_instance",
    "hash_key",
    "instance_files",
    "is_multi",
    "load_all",
    "load_instance",
    "load_settings_file",
    "match_key",
    "names_allow",
    "redact",
    "repo_names",
    "repo_views",
    "scopes",
]
