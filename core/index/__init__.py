"""Indexing: a build from gathered sources (``build.py``) and one update of an instance —
gather, build, record — with its status (``sync.py``)."""
