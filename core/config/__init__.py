"""Configuration: instance files (``schema.py``), how they are read (``load.py``), and where the
chat bots may use each instance (``access.py``)."""

from core.config.access import AccessConfig, DiscordAccess, SlackAccess
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
    "instance_files",
    "load_all",
    "load_instance",
    "load_settings_file",
]
