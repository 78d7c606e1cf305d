"""Embedding: the backend interface and engines (``backends.py``, the e5 engines in ``e5/``) and
the service that owns one model on one thread, with the vector cache (``service.py``)."""

from core.embed.backends import Embedder, make_embedder
from core.embed.service import EmbedService, embed_service, text_hash

__all__ = ["EmbedService", "Embedder", "embed_service", "make_embedder", "text_hash"]
