"""Store URLs, without the driver: is it PostgreSQL, and how it may be printed."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

SCHEMES = ("postgresql", "postgres")


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and urlsplit(str(url)).scheme in SCHEMES


def redact(url: str) -> str:
    """The URL as it may be printed: the password replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # a malformed netloc: print none of it
        return "<unparseable URL>"
    if password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
