"""Counters and a latency histogram in the Prometheus text format (``GET /metrics``).

No client library: a process serves one small set of series, written out on each scrape. Labels
are routes (the pattern, never the raw path), methods, status codes, platforms and verdicts —
never an instance name, which a key that may not use it must not learn.
"""

from __future__ import annotations

from collections import defaultdict

# Seconds: a search takes tens of milliseconds, an extractive answer a fraction of a second, a
# language model's answer several seconds.
BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HELP = {
    "repo_expert_http_requests_total": ("counter", "HTTP requests by route, method and status."),
    "repo_expert_http_request_seconds": ("histogram", "Time to answer an HTTP request."),
    "repo_expert_answers_total": ("counter", "Questions answered, by platform."),
    "repo_expert_feedback_total": ("counter", "Feedback recorded, by verdict."),
    "repo_expert_answers_in_progress": ("gauge", "Answers being worked on now."),
}

Labels = tuple[tuple[str, str], ...]


def _labels(labels: Labels, extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    def __init__(self) -> None:
        self.counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self.hist: dict[Labels, list[float]] = {}  # labels -> bucket counts + [sum, count]
        self.answers_in_progress = 0

    def count(self, name: str, n: float = 1, **labels: str) -> None:
        self.counters[name][tuple(sorted(labels.items()))] += n

    def observe(self, seconds: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        h = self.hist.setdefault(key, [0.0] * (len(BUCKETS) + 2))
        for i, b in enumerate(BUCKETS):
            if seconds <= b:
                h[i] += 1
        h[-2] += seconds
        h[-1] += 1

    def render(self) -> str:
        out: list[str] = []
        for name, (kind, text) in HELP.items():
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            if kind == "counter":
                for labels, v in sorted(self.counters.get(name, {}).items()):
                    out.append(f"{name}{_labels(labels)} {v:g}")
            elif kind == "gauge":
                out.append(f"{name} {self.answers_in_progress}")
            else:
                for labels, h in sorted(self.hist.items()):
                    for i, b in enumerate(BUCKETS):
                        le = _labels(labels, f'le="{b:g}"')
                        out.append(f"{name}_bucket{le} {h[i]:g}")
                    le = _labels(labels, 'le="+Inf"')
                    out.append(f"{name}_bucket{le} {h[-1]:g}")
                    out.append(f"{name}_sum{_labels(labels)} {h[-2]:.6f}")
                    out.append(f"{name}_count{_labels(labels)} {h[-1]:g}")
        return "\n".join(out) + "\n"
