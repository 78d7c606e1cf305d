"""The shared tables of a PostgreSQL deployment, as numbered migrations (see ``db.py``).

Fixed tables (every name starts with ``rx_``):

    rx_schema        how many migrations have been applied
    rx_builds        one row per committed build: instance, meta (stamp, commit, summary …),
                     rows per collection, vector dimension
    rx_live          instance → its live build id (the atomic swap moves this pointer)
    rx_kv, rx_issues, rx_etags     the per-instance state (``store/state.py``'s twin)
    rx_turns, rx_feedback          the bots' threads and 👍/👎 (``store/conversations.py``'s twin)
    rx_jobs          the index/sync queue the workers take jobs from
    rx_vectors       (model, text hash) → vector: the tuned reader's passage vectors, shared
                     by every process (``vectors.py``)

A build's own rows live in tables named after it (``build.py``): ``rx_b{id}_{docs,code,issues}``
(chunks with a ``vector`` column), ``rx_b{id}_{collection}_post`` (BM25 postings),
``rx_b{id}_lengths``, ``rx_b{id}_symbols``, ``rx_b{id}_calls``, ``rx_b{id}_units``. They are
created inside the transaction that commits the build — a crashed build leaves nothing — and
dropped with the build, unless a later build still reads them (a carried collection's tables
are shared: ``shared_tables`` in its meta; they go when neither the live nor the previous build
reads them); their format is the store's ``SCHEMA_VERSION`` (in every build's stamp: a build of
another format is rebuilt, never migrated).
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 1: builds and the live pointer
    """
    CREATE EXTENSION IF NOT EXISTS vector;
    CREATE TABLE rx_builds (
        id TEXT PRIMARY KEY, instance TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        meta JSONB NOT NULL, sizes JSONB NOT NULL, dim INTEGER
    );
    CREATE INDEX rx_builds_instance ON rx_builds (instance, created_at);
    CREATE TABLE rx_live (
        instance TEXT PRIMARY KEY, build_id TEXT NOT NULL REFERENCES rx_builds (id),
        swapped_at TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    """,
    # 2: the per-instance state (issues mirror, ETags, marks, last sync and error)
    """
    CREATE TABLE rx_kv (
        instance TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (instance, key)
    );
    CREATE TABLE rx_issues (
        instance TEXT NOT NULL, number INTEGER NOT NULL, is_pr BOOLEAN NOT NULL,
        state TEXT NOT NULL, updated_at TEXT NOT NULL, data TEXT NOT NULL,
        comments TEXT NOT NULL DEFAULT '[]', comments_for TEXT,
        PRIMARY KEY (instance, number)
    );
    CREATE TABLE rx_etags (
        instance TEXT NOT NULL, url TEXT NOT NULL, etag TEXT NOT NULL, PRIMARY KEY (instance, url)
    );
    """,
    # 3: the bots' conversations and feedback
    """
    CREATE TABLE rx_turns (
        id BIGSERIAL PRIMARY KEY, platform TEXT NOT NULL, thread TEXT NOT NULL,
        instance TEXT NOT NULL, "user" TEXT NOT NULL, question TEXT NOT NULL,
        answer TEXT NOT NULL, sources TEXT NOT NULL, created DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX rx_turns_thread ON rx_turns (platform, thread, id);
    CREATE TABLE rx_feedback (
        id BIGSERIAL PRIMARY KEY, turn_id BIGINT NOT NULL REFERENCES rx_turns (id),
        "user" TEXT NOT NULL, verdict TEXT NOT NULL CHECK (verdict IN ('up', 'down')),
        created DOUBLE PRECISION NOT NULL, UNIQUE (turn_id, "user")
    );
    """,
    # 4: the job queue (one queued job per instance: later requests merge into it)
    """
    CREATE TABLE rx_jobs (
        id BIGSERIAL PRIMARY KEY, instance TEXT NOT NULL, request JSONB NOT NULL,
        state TEXT NOT NULL DEFAULT 'queued'
            CHECK (state IN ('queued', 'running', 'done', 'failed')),
        attempts INTEGER NOT NULL DEFAULT 0,
        enqueued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        not_before TIMESTAMPTZ NOT NULL DEFAULT now(),
        started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ, heartbeat TIMESTAMPTZ,
        worker TEXT, backend_pid INTEGER, backend_start TIMESTAMPTZ,
        error TEXT, result JSONB
    );
    CREATE UNIQUE INDEX rx_jobs_one_queued ON rx_jobs (instance) WHERE state = 'queued';
    CREATE INDEX rx_jobs_state ON rx_jobs (state, id);
    """,
    # 5: a pull request's changed files, fetched with its comments (state.py's migration 2)
    "ALTER TABLE rx_issues ADD COLUMN files TEXT NOT NULL DEFAULT '[]'",
    # 6: a turn the answerer could not answer (conversations.py's migration 3)
    "ALTER TABLE rx_turns ADD COLUMN no_answer BOOLEAN NOT NULL DEFAULT false",
    # 7: vectors every process shares (the tuned reader's passages: vectors.py)
    """
    CREATE TABLE rx_vectors (
        model TEXT NOT NULL, hash TEXT NOT NULL, vec BYTEA NOT NULL, PRIMARY KEY (model, hash)
    );
    """,
]
