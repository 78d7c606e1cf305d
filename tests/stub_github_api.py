"""A local stand-in for the GitHub REST API, on 127.0.0.1, speaking its shapes.

It serves one repository's issues and pull requests (``pull_request`` keys), issue comments and
pull request review comments, per issue and repository-wide, with ``since``/``sort``/
``direction``, ``page``/``per_page`` pagination by ``Link`` header, ``ETag``/``If-None-Match``
(304), ``X-RateLimit-*`` headers and a ``Date`` header. Timestamps (and ``Date``) come from a
fake clock that ticks one second per change, like a busy repository. Faults are scripted:
``fail(path_regex, status, headers, times)`` answers the next matching requests with that status;
``hook(req)`` runs before each request is answered (to change the world mid-sync). ``hold``
parks the issues listing until released (to ask questions during a sync). Every request is
recorded.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from stub_http import LocalServer


@dataclass
class Fault:
    pattern: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1
    body: dict[str, Any] = field(default_factory=lambda: {"message": "stub fault"})


@dataclass
class Req:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    status: int = 0


class StubGitHub(LocalServer):
    def __init__(self, repo: str = "acme/widget", prefix: str = "", token: str | None = None):
        super().__init__()
        self.repo, self.prefix, self.token = repo, prefix, token
        self.issues: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, list[dict[str, Any]]] = {}
        self.reviews: dict[int, list[dict[str, Any]]] = {}
        self.files: dict[int, list[str]] = {}  # a pull request's changed files
        self.requests: list[Req] = []
        self.faults: list[Fault] = []
        self.remaining = 5000
        self.reset_at = int(time.time()) + 3600
        self.hold: asyncio.Event | None = None  # when set: the issues listing waits for it
        self.held = asyncio.Event()  # set when a listing is parked on `hold`
        self.hook: Callable[[Req], None] | None = None
        self._t = datetime(2024, 1, 1, tzinfo=UTC)
        self._ids = 1000

    # -- the fake world ----------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def tick(self) -> str:
        self._t += timedelta(seconds=1)
        return self._t.strftime("%Y-%m-%dT%H:%M:%SZ")

    def add_issue(
        self, number: int, title: str, body: str = "", *, state: str = "open",
        labels: tuple[str, ...] = (), pr: bool = False, merged: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        now = self.tick()
        kind = "pull" if pr else "issues"
        obj: dict[str, Any] = {
            "number": number, "title": title, "body": body, "state": state,
            "labels": [{"name": lb} for lb in labels], "user": {"login": "ana"}, "comments": 0,
            "html_url": f"https://github.com/{self.repo}/{kind}/{number}",
            "created_at": now, "updated_at": now,
            "closed_at": now if state == "closed" else None,
        }  # fmt: skip
        if pr:
            obj["pull_request"] = {
                "url": f"{self.api_url}/repos/{self.repo}/pulls/{number}",
                "merged_at": now if merged else None,
            }
        self.issues[number] = obj
        self.comments.setdefault(number, [])
        return obj

    def touch(self, number: int, **changes: Any) -> None:
        """Change an issue's fields (state, title, body, labels …); bumps updated_at."""
        issue = self.issues[number]
        if "labels" in changes:
            changes["labels"] = [{"name": lb} for lb in changes["labels"]]
        issue.update(changes)
        issue["updated_at"] = self.tick()
        if changes.get("state") == "closed":
            issue["closed_at"] = issue["updated_at"]

    def add_comment(self, number: int, body: str, author: str = "bob") -> int:
        now = self.tick()
        self._ids += 1
        self.comments[number].append({
            "id": self._ids, "user": {"login": author}, "body": body, "created_at": now,
            "updated_at": now, "issue_url": f"{self.api_url}/repos/{self.repo}/issues/{number}",
        })  # fmt: skip
        self.issues[number]["comments"] = len(self.comments[number])
        self.issues[number]["updated_at"] = now
        return self._ids

    def set_files(self, number: int, *paths: str) -> None:
        """The files pull request ``number`` changed (what /pulls/{n}/files lists)."""
        self.files[number] = list(paths)
        self.issues[number]["updated_at"] = self.tick()

    def add_review_comment(self, number: int, body: str, path: str, line: int) -> int:
        now = self.tick()
        self._ids += 1
        self.reviews.setdefault(number, []).append({
            "id": self._ids, "user": {"login": "rev"}, "body": body, "path": path, "line": line,
            "created_at": now, "updated_at": now,
            "pull_request_url": f"{self.api_url}/repos/{self.repo}/pulls/{number}",
        })  # fmt: skip
        self.issues[number]["updated_at"] = now
        return self._ids

    def _find_comment(self, cid: int) -> tuple[int, dict[str, Any]]:
        for n, cs in self.comments.items():
            for c in cs:
                if c["id"] == cid:
                    return n, c
        raise KeyError(cid)

    def edit_comment(self, cid: int, body: str) -> None:
        """As on GitHub: the comment's updated_at moves, the issue's does not."""
        _, c = self._find_comment(cid)
        c["body"] = body
        c["updated_at"] = self.tick()

    def delete_comment(self, cid: int) -> None:
        """The comment is gone and the issue's comment count drops; updated_at stays."""
        n, c = self._find_comment(cid)
        self.comments[n].remove(c)
        self.issues[n]["comments"] = len(self.comments[n])

    def delete_issue(self, number: int) -> None:
        del self.issues[number]

    def fail(self, pattern: str, status: int, headers: dict[str, str] | None = None,
             times: int = 1, message: str = "stub fault") -> None:  # fmt: skip
        self.faults.append(Fault(pattern, status, headers or {}, times, {"message": message}))

    def of(self, pattern: str) -> list[Req]:
        return [r for r in self.requests if re.search(pattern, r.path)]

    # -- HTTP --------------------------------------------------------------------------------
    def routes(self, app: web.Application) -> None:
        base = f"{self.prefix}/repos/{{owner}}/{{name}}"
        app.router.add_get(f"{base}/issues", self._issues)
        app.router.add_get(f"{base}/issues/comments", self._repo_comments)
        app.router.add_get(f"{base}/pulls/comments", self._repo_reviews)
        app.router.add_get(f"{base}/issues/{{n:\\d+}}", self._issue)
        app.router.add_get(f"{base}/issues/{{n:\\d+}}/comments", self._issue_comments)
        app.router.add_get(f"{base}/pulls/{{n:\\d+}}/comments", self._pr_comments)
        app.router.add_get(f"{base}/pulls/{{n:\\d+}}/files", self._pr_files)
        app.middlewares.append(self._middleware)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        req = Req(request.path, dict(request.query), dict(request.headers))
        self.requests.append(req)
        if self.hook is not None:
            self.hook(req)
        resp = await self._guard(request) or await handler(request)
        self._t += timedelta(seconds=1)  # time passes while a client works
        resp.headers["Date"] = email.utils.format_datetime(self._t, usegmt=True)
        req.status = resp.status
        if resp.status != 304:
            self.remaining = max(0, self.remaining - 1)
        resp.headers.setdefault("X-RateLimit-Limit", "5000")
        resp.headers.setdefault("X-RateLimit-Remaining", str(self.remaining))
        resp.headers.setdefault("X-RateLimit-Reset", str(self.reset_at))
        return resp

    async def _guard(self, request: web.Request) -> web.StreamResponse | None:
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"message": "Bad credentials"}, status=401)
        for f in self.faults:
            if f.times > 0 and re.search(f.pattern, request.path):
                f.times -= 1
                return web.json_response(f.body, status=f.status, headers=f.headers)
        if request.match_info.get("owner", "") + "/" + request.match_info.get("name", "") != (
            self.repo
        ):
            return web.json_response({"message": "Not Found"}, status=404)
        return None

    def _page(
        self, request: web.Request, items: list[dict[str, Any]], date_field: str = "updated_at"
    ) -> web.Response:
        q = request.query
        since = q.get("since")
        if since:
            items = [i for i in items if i[date_field] >= since]
        if q.get("sort") == "updated":
            items = sorted(items, key=lambda i: (i["updated_at"], i.get("number", i.get("id"))))
            if q.get("direction", "desc") == "desc":
                items.reverse()
        per_page = int(q.get("per_page", "30"))
        page = int(q.get("page", "1"))
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        body = json.dumps(chunk, sort_keys=True)
        etag = 'W/"' + hashlib.sha1(body.encode()).hexdigest() + '"'
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        headers = {"ETag": etag}
        links = []
        base = f"http://{request.host}{request.path}"
        for rel, p in (("next", page + 1), ("last", last)):
            if rel == "next" and page >= last:
                continue
            links.append(f'<{base}?{urlencode({**q, "page": p})}>; rel="{rel}"')
        if links:
            headers["Link"] = ", ".join(links)
        return web.Response(text=body, content_type="application/json", headers=headers)

    async def _issues(self, request: web.Request) -> web.Response:
        if self.hold is not None:
            self.held.set()
            await self.hold.wait()
        items = list(self.issues.values())
        state = request.query.get("state", "open")
        if state != "all":
            items = [i for i in items if i["state"] == state]
        return self._page(request, items)

    async def _issue(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n not in self.issues:
            return web.json_response({"message": "This issue was deleted"}, status=410)
        return web.json_response(self.issues[n])

    async def _issue_comments(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        return self._page(request, list(self.comments.get(n, [])))

    async def _pr_comments(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        return self._page(request, list(self.reviews.get(n, [])))

    async def _pr_files(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n not in self.issues:
            return web.json_response({"message": "Not Found"}, status=404)
        files = [{"filename": f, "status": "modified"} for f in self.files.get(n, [])]
        return self._page(request, files)

    async def _repo_comments(self, request: web.Request) -> web.Response:
        return self._page(request, [c for cs in self.comments.values() for c in cs])

    async def _repo_reviews(self, request: web.Request) -> web.Response:
        return self._page(request, [c for cs in self.reviews.values() for c in cs])
