"""Configuration: instance files (``schema.py``), how they are read (``load.py``), and where the
chat bots may use each instance (``access.py``)."""

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
from core.config.schema import (
    BUILTIN_EXCLUDES,
    EmbeddingConfig,
    IncludeConfig,
    Instance,
    IssuesConfig,
    LLMConfig,
    RepoConfig,
    RetrievalConfig,
)

__all__ = [
    "BUILTIN_EXCLUDES",
    "AccessConfig",
    "ApiKey",
    "DiscordAccess",
    "EmbeddingConfig",
    "IncludeConfig",
    "Instance",
    "IssuesConfig",
    "LLMConfig",
    "RepoConfig",
    "RetrievalConfig",
    "Settings",
    "SlackAccess",
    "find_instance",
    "hash_key",
    "instance_files",
    "load_all",
    "load_instance",
    "load_settings_file",
    "match_key",
    "names_allow",
]
