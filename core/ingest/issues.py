"""Issues and pull requests from a file in the JSON shape that ``gh`` prints:

    gh issue list --state all --json number,title,body,state,labels,comments,url,createdAt,closedAt

(``gh pr list`` with the same fields works too, and ``files`` and ``closingIssuesReferences``
give a pull request's changed files and the issues it closes), or from the GitHub REST API
through the local mirror (``mirror.py``). Each issue becomes one document whose text is the
header, the body, the issues a pull request fixes and the files it changed, then every comment
in order; :func:`keep_issue` applies the configured filters to both.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from core.config import IssuesConfig
from core.errors import SourceError
from core.models import Document


@dataclass(frozen=True)
class Comment:
    author: str
    created_at: str
    body: str
    path: str | None = None  # a pull request review comment: the file it is on
    line: int | None = None

    def heading(self) -> str:
        if self.path is None:
            return f"Comment by @{self.author}:"
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"Review comment by @{self.author} on {where}:"


@dataclass(frozen=True)
class Issue:
    number: int
    title: str
    state: str
    labels: tuple[str, ...]
    body: str
    comments: tuple[Comment, ...]
    url: str
    created_at: str = ""
    closed_at: str = ""
    is_pr: bool = False
    updated_at: str = ""
    files: tuple[str, ...] = ()  # a pull request's changed files
    fixes: tuple[int, ...] = ()  # the issues a pull request closes

    def header(self) -> str:
        kind = "PR" if self.is_pr else "Issue"
        labels = f" · labels: {', '.join(self.labels)}" if self.labels else ""
        return f"#{self.number} {self.title}\n{kind} · {self.state.lower()}{labels}"


def _author(c: dict[str, Any]) -> str:
    a = c.get("author")
    if isinstance(a, dict):
        return str(a.get("login") or "unknown")
    return str(a or "unknown")


# GitHub's closing keywords: "Fixes #12", "closes #3, resolves #4".
_CLOSES = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d{1,7})\b", re.IGNORECASE
)


def closing_refs(text: str, *extra: int) -> tuple[int, ...]:
    """The issues a pull request's text closes, with ``extra`` ones (the API's), in order."""
    found = [*extra, *(int(n) for n in _CLOSES.findall(text or ""))]
    return tuple(dict.fromkeys(found))


def _paths(files: Any) -> tuple[str, ...]:
    """``gh pr list --json files`` items ({"path": …}) or plain paths."""
    out = []
    for f in files if isinstance(files, list) else []:
        p = f.get("path") or f.get("filename") if isinstance(f, dict) else f
        if isinstance(p, str) and p:
            out.append(p)
    return tuple(dict.fromkeys(out))


def parse_issue(obj: Any, where: str) -> Issue:
    if not isinstance(obj, dict):
        raise SourceError(f"{where}: expected an object with number, title, body, …")
    try:
        number = int(obj["number"])
        title = str(obj.get("title") or "")
    except (KeyError, TypeError, ValueError):
        raise SourceError(f"{where}: 'number' must be an integer") from None
    labels = tuple(
        str(lb.get("name") if isinstance(lb, dict) else lb) for lb in obj.get("labels") or []
    )
    comments = tuple(
        Comment(_author(c), str(c.get("createdAt") or ""), str(c.get("body") or ""))
        for c in obj.get("comments") or []
        if isinstance(c, dict)
    )
    url = str(obj.get("url") or "")
    body = str(obj.get("body") or "")
    files = _paths(obj.get("files"))
    is_pr = "/pull/" in url or bool(obj.get("isPullRequest")) or bool(files)
    refs = obj.get("closingIssuesReferences")
    closing = [int(r["number"]) for r in refs if isinstance(r, dict) and str(r.get("number", ""))
               .isdigit()] if isinstance(refs, list) else []  # fmt: skip
    return Issue(
        number=number,
        title=title,
        state=str(obj.get("state") or "open"),
        labels=labels,
        body=body,
        comments=comments,
        url=url,
        created_at=str(obj.get("createdAt") or ""),
        closed_at=str(obj.get("closedAt") or ""),
        is_pr=is_pr,
        updated_at=str(obj.get("updatedAt") or obj.get("closedAt") or obj.get("createdAt") or ""),
        files=files,
        fixes=closing_refs(body, *closing) if is_pr else (),
    )


def load_issues_file(path: Path) -> list[Issue]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SourceError(f"{path}: cannot read issues file: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise SourceError(f"{path}: not valid JSON (line {e.lineno}): {e.msg}") from None
    if not isinstance(data, list):
        raise SourceError(f"{path}: expected a JSON list of issues (as `gh issue list --json`)")
    return [parse_issue(o, f"{path}[{i}]") for i, o in enumerate(data)]


def issue_document(issue: Issue, web_url: str | None) -> Document:
    parts = [issue.header(), "", issue.body.strip()]
    if issue.fixes:
        parts += ["", "Fixes: " + ", ".join(f"#{n}" for n in issue.fixes)]
    if issue.files:
        parts += ["", "Files changed: " + ", ".join(issue.files)]
    for c in issue.comments:
        parts += ["", c.heading(), c.body.strip()]
    text = "\n".join(parts).strip()
    url = issue.url or (f"{web_url}/issues/{issue.number}" if web_url else f"#{issue.number}")
    return Document(
        collection="issues",
        key=f"issue:{issue.number}",
        text=text,
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        issue=issue.number,
        title=f"#{issue.number} {issue.title}",
        url=url,
        files=issue.files,
        fixes=issue.fixes,
    )


def _epoch(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def keep_issue(issue: Issue, cfg: IssuesConfig, now: float | None = None) -> bool:
    """Whether the configured filters (state, labels, pull requests, age) keep this issue."""
    if issue.is_pr and not cfg.pull_requests:
        return False
    state = issue.state.lower()
    if cfg.state != "all" and (state == "open") != (cfg.state == "open"):
        return False
    labels = {lb.lower() for lb in issue.labels}
    if cfg.labels and not labels & {lb.lower() for lb in cfg.labels}:
        return False
    if labels & {lb.lower() for lb in cfg.exclude_labels}:
        return False
    if cfg.max_age_days is not None:
        when = _epoch(issue.updated_at) if issue.updated_at else None
        now = time.time() if now is None else now
        if when is not None and now - when > cfg.max_age_days * 86400:
            return False
    return True
