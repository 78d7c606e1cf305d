"""Log lines for people (text) or for log shippers (``--log-format json``: one JSON object per
line). Both go through :class:`~core.config.RedactingFormatter`'s redaction, so no known secret
reaches a log in either form."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from core.config import RedactingFormatter, redact

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(RedactingFormatter):
    """``{"time", "level", "logger", "message"[, "exc"]}``: the message with its arguments
    filled in, the traceback as one string; every value redacted."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            out["exc"] = redact(record.exc_text)
        return json.dumps(out, ensure_ascii=False)


def formatter(kind: str) -> logging.Formatter:
    return JsonFormatter() if kind == "json" else RedactingFormatter(TEXT_FORMAT)
