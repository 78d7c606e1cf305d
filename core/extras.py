"""Optional features and the extra that installs each: the one helper every optional import
goes through, so a missing package is one line naming the extra, never an ImportError.

    pip install repo-expert              the default: index, ask, eval, sync, init (offline, CPU)
    pip install 'repo-expert[slack]'     serve slack                 slack-bolt, slack-sdk, aiohttp
                 ...[discord]            serve discord               discord.py
                 ...[api]                serve api, serve webhooks   aiohttp
                 ...[mcp]                serve mcp                   mcp, uvicorn
                 ...[llm]                llm.provider openai|anthropic|auto   openai, anthropic
                 ...[eval]               the chart of eval --compare matplotlib
                 ...[postgres]           the PostgreSQL store        asyncpg, pgvector
                 ...[st]                 embedding.backend sentence-transformers (torch)
                 ...[all]                every extra but st

    >>> openai = need("openai", "llm", "llm.provider openai")
"""

from __future__ import annotations

import importlib
from types import ModuleType

from core.errors import MissingExtra


def need(module: str, extra: str, feature: str) -> ModuleType:
    """``import module``, or :class:`MissingExtra` saying that ``feature`` needs ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = e.name or module
        raise MissingExtra(
            f"{feature} needs the '{extra}' extra (no module named {missing!r}): "
            f"pip install 'repo-expert[{extra}]' — in a checkout: "
            f".venv/bin/pip install -e '.[{extra}]'"
        ) from None
