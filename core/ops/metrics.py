"""One process's metrics in the Prometheus text format, with ``prometheus-client``.

The library (pure Python, no dependencies, ~100 KB) is in the default install: every
long-running process serves ``/metrics`` — ``sync --watch`` too, which needs no extra — and it
writes the exposition format, histograms and escaping exactly as Prometheus reads them. Each
:class:`Metrics` has a registry of its own (never the library's global one: a test runs several
servers in one process, and no process-wide collector such as the GC's leaks in).

Series (``repo_expert_`` prefix): ``questions_total{platform,outcome}`` (outcome: answered,
no_answer, error), ``answer_seconds{platform}`` (histogram), ``errors_total{kind}`` (the
error's class: ``LLMError``, ``SlackApiError``, ``Forbidden`` …), ``answers_in_progress``,
``feedback_total{verdict}``, ``http_requests_total{route,method,status}`` and
``http_request_seconds{route}`` (the HTTP API), ``syncs_total{outcome}`` (``sync --watch``),
``support_total{platform,decision}`` (support-channel mode: answered, silent, stopped), and
``index_age_seconds{instance}``, computed at each scrape (:func:`index_ages`) for the instances
the caller may see — the API's ``/metrics`` never names an instance a key may not use.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from core.service import RepoExpert

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds: a search takes tens of milliseconds, an extractive answer a fraction of a second, a
# language model's answer several seconds.
BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The series of one process (see the module docstring)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        p = "repo_expert_"
        self.questions = Counter(p + "questions", "Questions handled, by platform and outcome "
                                 "(answered, no_answer, error).", ["platform", "outcome"],
                                 registry=r)  # fmt: skip
        self.answer_seconds = Histogram(p + "answer_seconds", "Time to answer a question "
                                        "(history, search, answer, record), by platform.",
                                        ["platform"], buckets=BUCKETS, registry=r)  # fmt: skip
        self.errors = Counter(p + "errors", "Failures by kind (the error's class).", ["kind"],
                              registry=r)  # fmt: skip
        self.in_progress = Gauge(p + "answers_in_progress", "Answers being worked on now.",
                                 registry=r)  # fmt: skip
        self.feedback = Counter(p + "feedback", "Feedback recorded, by verdict.", ["verdict"],
                                registry=r)  # fmt: skip
        self.http_requests = Counter(p + "http_requests", "HTTP requests by route, method and "
                                     "status.", ["route", "method", "status"],
                                     registry=r)  # fmt: skip
        self.http_seconds = Histogram(p + "http_request_seconds", "Time to answer an HTTP "
                                      "request.", ["route"], buckets=BUCKETS,
                                      registry=r)  # fmt: skip
        self.syncs = Counter(p + "syncs", "Syncs run (or queued) by sync --watch, by outcome "
                             "(ok, failed, queued).", ["outcome"], registry=r)  # fmt: skip
        self.support = Counter(p + "support", "Support-channel mode: new questions answered "
                               "unasked, left alone (retrieval not confident) or stopped by "
                               "people.", ["platform", "decision"], registry=r)  # fmt: skip

    def answered(self, platform: str, seconds: float, no_answer: bool) -> None:
        self.questions.labels(platform, "no_answer" if no_answer else "answered").inc()
        self.answer_seconds.labels(platform).observe(seconds)

    def failed(self, platform: str, exc: BaseException) -> None:
        self.questions.labels(platform, "error").inc()
        self.error(exc)

    def error(self, exc: BaseException) -> None:
        self.errors.labels(type(exc).__name__).inc()

    def render(self, index_age: dict[str, float] | None = None) -> bytes:
        """The exposition text; ``index_age``: seconds per instance shown to this scraper."""
        text = generate_latest(self.registry)
        if index_age:
            ages = CollectorRegistry(auto_describe=True)
            g = Gauge("repo_expert_index_age_seconds", "Seconds since the instance's index was "
                      "last built or found up to date by a sync.", ["instance"],
                      registry=ages)  # fmt: skip
            for name, age in sorted(index_age.items()):
                g.labels(name).set(age)
            text += generate_latest(ages)
        return text


async def index_ages(app: RepoExpert, names: Iterable[str]) -> dict[str, float]:
    """Seconds since each indexed instance was built or last synced without error (an instance
    not indexed yet has no age: it is left out)."""
    now, out = time.time(), {}
    for name in names:
        st = await app.status(name)
        built = st.get("built_at")
        if built is None:
            continue
        fresh = float(built)
        if st.get("last_sync_ok") and st.get("last_sync_at"):
            fresh = max(fresh, float(st["last_sync_at"]))
        out[name] = max(0.0, now - fresh)
    return out
