"""Operating the long-running processes: Prometheus metrics (``metrics.py``), the ``/healthz``,
``/readyz`` and ``/metrics`` endpoints and the small health server of the processes that have no
HTTP server of their own (``health.py``), JSON log lines (``logs.py``), and SIGTERM draining
(``drain.py``). Used by every face in ``bot/`` and by ``sync --watch``."""
