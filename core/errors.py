"""The one error tree of repo-expert.

    RepoExpertError                 base: every error we raise on purpose
    ├── ConfigError                 an instance file is invalid (file, key path, what was expected)
    ├── InstanceNotFound            no instance by that name
    ├── SourceError                 a repository or issues source could not be read
    ├── IndexError_                 the index is missing, stale or broken
    └── EmbeddingError              the embedding backend failed or is unavailable

Adapters (CLI, bots) catch ``RepoExpertError`` once, print/log one line, never a traceback.
"""

from __future__ import annotations


class RepoExpertError(Exception):
    """Base class of all deliberate errors."""


class ConfigError(RepoExpertError):
    """An instance configuration is invalid."""


class InstanceNotFound(RepoExpertError):
    """No instance with that name is configured."""


class SourceError(RepoExpertError):
    """A repository or issue source could not be read."""


class IndexError_(RepoExpertError):
    """The index is missing or unusable."""


class EmbeddingError(RepoExpertError):
    """The embedding backend failed or is unavailable."""
