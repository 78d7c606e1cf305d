"""Ingest: where documents come from — the checkout (``repo.py``), what changed (``git_diff.py``,
``documents.py``), issues from a gh-JSON file (``issues.py``) or the GitHub API mirror
(``github.py``, ``mirror.py``), and the one gather step every update runs (``gather.py``)."""
