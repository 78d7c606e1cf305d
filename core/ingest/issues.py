"""Issues and pull requests from a file in the JSON shape that ``gh`` prints:

    gh issue list --state all --json number,title,body,state,labels,comments,url,createdAt,closedAt

(``gh pr list`` with the same fields works too, and ``files`` and ``closingIssuesReferences``
give a pull request's changed files and the issues it closes), or from the GitHub REST API
through the local mirror (``mirror.py``). Each issue becomes one document whose text is the
header, the body, the issues a pull request fixes and the files it changed, then every comment
in order; :func:`keep_issue` applies the configured filters to both. A file is validated like an
instance file (pydantic; ``[index].field: what was expected``), and numbers must be unique.
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

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

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


class _Gh(BaseModel):
    model_config = ConfigDict(extra="ignore")  # gh prints more fields than we read


# GitHub's closing keywords: "Fixes #12", "closes #3, resolves #4".
_CLOSES = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#(\d{1,7})\b", re.IGNORECASE
)


def closing_refs(text: str, *extra: int) -> tuple[int, ...]:
    """The issues a pull request's text closes, with ``extra`` ones (the API's), in order."""
    found = [*extra, *(int(n) for n in _CLOSES.findall(text or ""))]
    return tuple(dict.fromkeys(found))


class _GhLogin(_Gh):
    login: StrictStr | None = None


class _GhLabel(_Gh):
    name: StrictStr


class _GhComment(_Gh):
    author: _GhLogin | StrictStr | None = None
    body: StrictStr | None = None
    createdAt: StrictStr | None = None


class _GhFile(_Gh):
    path: StrictStr | None = None
    filename: StrictStr | None = None  # the REST API's name for it


class _GhRef(_Gh):
    number: StrictInt = Field(ge=1, le=2**63 - 1)


class _GhIssue(_Gh):
    """One item of ``gh issue list --json …``: the types gh prints, nothing coerced (``true`` is
    not issue #1, ``"bug"`` is not the labels b, u, g)."""

    number: StrictInt = Field(ge=1, le=2**63 - 1)
    title: StrictStr | None = None
    body: StrictStr | None = None
    state: StrictStr | None = None
    labels: list[_GhLabel | StrictStr] | None = None
    comments: list[_GhComment] | None = None
    url: StrictStr | None = None
    createdAt: StrictStr | None = None
    closedAt: StrictStr | None = None
    updatedAt: StrictStr | None = None
    isPullRequest: StrictBool | None = None
    files: list[_GhFile | StrictStr] | None = None  # gh pr list --json files
    closingIssuesReferences: list[_GhRef] | None = None

    def paths(self) -> tuple[str, ...]:
        out = [f if isinstance(f, str) else (f.path or f.filename or "") for f in self.files or []]
        return tuple(dict.fromkeys(p for p in out if p))

    def issue(self) -> Issue:
        url = self.url or ""
        files = self.paths()
        is_pr = "/pull/" in url or bool(self.isPullRequest) or bool(files)
        closing = [r.number for r in self.closingIssuesReferences or []]
        return Issue(
            number=self.number,
            title=self.title or "",
            state=self.state or "open",
            labels=tuple(lb if isinstance(lb, str) else lb.name for lb in self.labels or []),
            body=self.body or "",
            comments=tuple(
                Comment(_login(c.author), c.createdAt or "", c.body or "")
                for c in self.comments or []
            ),
            url=url,
            created_at=self.createdAt or "",
            closed_at=self.closedAt or "",
            is_pr=is_pr,
            updated_at=self.updatedAt or self.closedAt or self.createdAt or "",
            files=files,
            fixes=closing_refs(self.body or "", *closing) if is_pr else (),
        )


def _login(a: _GhLogin | str | None) -> str:
    login = a.login if isinstance(a, _GhLogin) else a
    return login or "unknown"


_ISSUES = TypeAdapter(list[_GhIssue])


def _expected(e: Any) -> str:
    """One pydantic error as ``[i].field: what was expected (got …)``."""
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"])
    union = r"\.(?:_GhLabel|_GhComment|_GhLogin|_GhFile|_GhRef|str)\b"  # union branch names
    loc = re.sub(union, "", loc)
    got = e.get("input")
    shown = "" if e["type"] == "missing" or isinstance(got, dict | list) else f" (got {got!r:.60})"
    return f"{loc}: {e['msg'].lower()}{shown}"


def load_issues_file(path: Path) -> list[Issue]:
    """The issues of a gh-JSON file, validated like an instance file: the first problem names
    the item, the field and what was expected, in one line."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise SourceError(f"{path}: cannot read issues file: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise SourceError(f"{path}: not UTF-8 (byte {e.start}: {e.reason})") from None
    except json.JSONDecodeError as e:
        raise SourceError(f"{path}: not valid JSON (line {e.lineno}): {e.msg}") from None
    except RecursionError:
        raise SourceError(f"{path}: not valid JSON: nested too deeply") from None
    if not isinstance(data, list):
        raise SourceError(f"{path}: expected a JSON list of issues (as `gh issue list --json`)")
    try:
        items = _ISSUES.validate_python(data)
    except ValidationError as err:
        errors = err.errors()
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise SourceError(f"{path}{_expected(errors[0])}{more}") from None
    first: dict[int, int] = {}
    for i, item in enumerate(items):
        j = first.setdefault(item.number, i)
        if j != i:
            raise SourceError(f"{path}[{i}].number: #{item.number} appears twice (also [{j}])")
    return [item.issue() for item in items]


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
