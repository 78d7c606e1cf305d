"""Secrets kept out of every error and log line, whatever produced the text (a GitHub error body
that echoes a token, a library's exception, a traceback in the log).

The values are the instances' secret settings (``SecretStr``: tokens, API keys, webhook secrets —
remembered as each file is loaded) and the environment variables that hold tokens. The CLI
redacts every line it prints and every log record it formats; a sync redacts its errors before
they are recorded in the state file (so ``status`` never shows one either).
"""

from __future__ import annotations

import logging
import os

from pydantic import BaseModel, SecretStr

TOKEN_VARS = (
    "GITHUB_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "DISCORD_TOKEN",
    "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
)  # fmt: skip
MIN_CHARS = 6  # shorter values would blank ordinary words; no real token is that short
MASK = "***"

_known: set[str] = set()


def remember(model: BaseModel) -> None:
    """Every ``SecretStr`` value in ``model`` and the models it holds."""
    for value in _values(model):
        if len(value) >= MIN_CHARS:
            _known.add(value)


def _values(obj: object) -> list[str]:
    if isinstance(obj, SecretStr):
        return [obj.get_secret_value()]
    if isinstance(obj, BaseModel):
        return [v for name in type(obj).model_fields for v in _values(getattr(obj, name))]
    if isinstance(obj, list | tuple):
        return [v for item in obj for v in _values(item)]
    if isinstance(obj, dict):
        return [v for item in obj.values() for v in _values(item)]
    return []


def redact(text: str) -> str:
    """``text`` with every known secret replaced by ``***`` (longest first)."""
    env = {os.environ.get(v, "") for v in TOKEN_VARS}
    for s in sorted({*_known, *(e for e in env if len(e) >= MIN_CHARS)}, key=len, reverse=True):
        if s in text:
            text = text.replace(s, MASK)
    return text


class RedactingFormatter(logging.Formatter):
    """A log formatter whose output (message, arguments and traceback) holds no known secret."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
