"""Everything persisted: the store interface of the index (``base.py``) and its local
implementation (``local.py``: SQLite + usearch files), the per-instance state file
(``state.py``), the bots' conversations (``conversations.py``), and the migrations helper of
every SQLite file (``sqlite.py``)."""
