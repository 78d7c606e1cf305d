"""The PostgreSQL backend: one database shared by every process of a deployment — the index
(``index.py``, builds in tables of their own, ``build.py``), the instances' state and the bots'
conversations (``state.py``, ``conversations.py``: twins of the SQLite files behind the same
methods), the job queue of the index workers (``jobs.py``); ``db.py`` is the pool, the URL and
the numbered migrations of ``schema.py``. Needs the ``postgres`` extra (asyncpg, pgvector)."""
