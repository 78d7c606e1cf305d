"""A small async client for the GitHub REST API (github.com or GitHub Enterprise), on httpx.

It does what an incremental mirror needs and nothing more: ``GET`` with pagination by the
``Link`` header, conditional requests (``If-None-Match``; a 304 means nothing changed and does
not count against the rate limit), and polite behaviour under rate limits:

- a response with ``X-RateLimit-Remaining: 0`` makes the next request wait for
  ``X-RateLimit-Reset``;
- 403/429 with ``Retry-After`` waits that long; 403/429 with ``Remaining: 0`` waits for the reset;
  a secondary limit without either header waits at least a minute, doubling, with jitter;
- 5xx and dropped connections are retried with exponential backoff and jitter;
- a wait longer than ``max_wait`` raises :class:`RateLimited` instead of sleeping, so a sync
  stops, keeps what it stored and resumes on its next run.

Sleeping, randomness and the clock are injectable, so tests run the real client against a local
server without waiting. The token is sent in the ``Authorization`` header only: it is never
logged and never part of an error message.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.errors import Gone, RateLimited, SourceError

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.github.com"


@dataclass
class ClientOptions:
    """How the client behaves; tests inject ``sleep``/``rand``/``clock`` to run without waiting."""

    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    clock: Callable[[], float] = time.time
    max_retries: int = 5  # per request, for 5xx, dropped connections and secondary limits
    max_wait: float = 900.0  # longest single wait; beyond it RateLimited is raised
    backoff: float = 1.0  # first backoff for 5xx / connection errors, doubled per attempt
    secondary_wait: float = 60.0  # first wait on a secondary limit without Retry-After
    per_page: int = 100
    timeout: float = 30.0
    transport: httpx.AsyncBaseTransport | None = None


@dataclass
class Page:
    """One response of a listing: its items, or ``not_modified`` for a 304."""

    url: str
    items: list[dict[str, Any]] = field(default_factory=list)
    etag: str | None = None
    next_url: str | None = None
    not_modified: bool = False
    server_time: float | None = None  # the response's Date header, as epoch seconds


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


class GitHubClient:
    """``async with GitHubClient("owner/repo", token=…) as gh: async for page in gh.pages(…)``"""

    def __init__(
        self,
        repo: str,
        *,
        api_url: str = DEFAULT_API_URL,
        token: str | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        self.repo = repo
        self.api_url = api_url.rstrip("/")
        self.opt = options or ClientOptions()
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "repo-expert",
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.AsyncClient(
            headers=headers,
            timeout=self.opt.timeout,
            transport=self.opt.transport,
            follow_redirects=False,
        )
        self._remaining: int | None = None
        self._reset_at: float | None = None
        self.requests = 0  # requests sent (retries included), for reports and tests

    async def __aenter__(self) -> GitHubClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def url(self, path: str) -> str:
        """An API URL for ``path`` under this repository (``/issues`` → …/repos/o/r/issues)."""
        return f"{self.api_url}/repos/{self.repo}{path}"

    # -- one request, with rate limits and retries ------------------------------------------
    async def _wait(self, seconds: float, why: str) -> None:
        if seconds > self.opt.max_wait:
            reset = self.opt.clock() + seconds
            raise RateLimited(
                f"GitHub API {why}: resuming needs a wait of {seconds:.0f}s (longer than "
                f"max_wait {self.opt.max_wait:.0f}s); the next sync continues where this stopped",
                reset,
            )
        log.info("GitHub API %s: waiting %.1fs", why, seconds)
        await self.opt.sleep(seconds)

    def _jitter(self, seconds: float) -> float:
        return seconds * (0.75 + 0.5 * self.opt.rand())

    def _note_limits(self, r: httpx.Response) -> None:
        rem, reset = r.headers.get("x-ratelimit-remaining"), r.headers.get("x-ratelimit-reset")
        try:
            self._remaining = int(rem) if rem is not None else self._remaining
            self._reset_at = float(reset) if reset is not None else self._reset_at
        except ValueError:
            pass

    def _until_reset(self) -> float:
        if self._reset_at is None:
            return self.opt.secondary_wait
        return max(0.0, self._reset_at - self.opt.clock()) + 1.0

    def _limit_wait(self, r: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait after a 403/429, or None when it is not a rate limit."""
        retry_after = r.headers.get("retry-after")
        if retry_after is not None:
            try:
                return max(0.0, float(retry_after))
            except ValueError:
                when = _http_date(retry_after)
                if when is not None:
                    return max(0.0, when - self.opt.clock())
        if r.headers.get("x-ratelimit-remaining") == "0":
            return self._until_reset()
        text = r.text.lower() if r.status_code in (403, 429) else ""
        if r.status_code == 429 or "rate limit" in text or "abuse" in text:
            return self._jitter(self.opt.secondary_wait * 2**attempt)
        return None

    async def get(
        self, url: str, params: dict[str, Any] | None = None, etag: str | None = None,
        missing_ok: bool = False,
    ) -> httpx.Response:  # fmt: skip
        """GET with rate-limit waits and retries. 200 and 304 come back; with ``missing_ok`` 404,
        410 and 301 (deleted or transferred) come back too; anything else raises SourceError."""
        headers = {"If-None-Match": etag} if etag else {}
        attempt = 0
        while True:
            if self._remaining == 0 and self._reset_at and self._reset_at > self.opt.clock():
                await self._wait(self._until_reset(), "rate limit exhausted")
                self._remaining = None
            try:
                self.requests += 1
                r = await self._http.get(url, params=params, headers=headers)
            except httpx.TransportError as e:
                if attempt >= self.opt.max_retries:
                    raise SourceError(f"cannot reach the GitHub API at {self.api_url}: {e}") from e
                await self._wait(self._jitter(self.opt.backoff * 2**attempt), f"{e!r}; retrying")
                attempt += 1
                continue
            self._note_limits(r)
            status = r.status_code
            if status in (200, 304) or (missing_ok and status in (301, 404, 410)):
                return r
            if status in (403, 429):
                wait = self._limit_wait(r, attempt)
                if wait is not None:
                    if attempt >= self.opt.max_retries:
                        raise RateLimited(
                            f"GitHub API still rate-limited after {attempt} retries",
                            self.opt.clock() + wait,
                        )
                    await self._wait(wait, f"rate limit (HTTP {status})")
                    self._remaining = None  # waited for the reset already
                    attempt += 1
                    continue
            if status >= 500:
                if attempt >= self.opt.max_retries:
                    raise SourceError(
                        f"GitHub API error HTTP {status} for {_path(url)} after {attempt} retries"
                    )
                await self._wait(self._jitter(self.opt.backoff * 2**attempt), f"HTTP {status}")
                attempt += 1
                continue
            raise SourceError(_explain(status, url, self.repo, r))

    # -- listings ----------------------------------------------------------------------------
    async def pages(
        self,
        url: str,
        params: dict[str, Any] | None = None,
        etag: str | None = None,
        missing_ok: bool = False,
    ) -> AsyncGenerator[Page, None]:
        """Every page of a listing, following ``Link: <…>; rel="next"``. ``etag`` applies to the
        first page: a 304 yields one ``Page(not_modified=True)`` and ends the listing. With
        ``missing_ok`` a listing that is gone (404/410/301) raises :class:`Gone`."""
        params = {"per_page": self.opt.per_page, **(params or {})}
        first = True
        next_url: str | None = url
        while next_url:
            r = await self.get(
                next_url, params if first else None, etag if first else None, missing_ok=missing_ok
            )
            if r.status_code in (301, 404, 410):
                raise Gone(f"GitHub API: {_path(str(r.request.url))} is gone ({r.status_code})")
            page = Page(
                url=str(r.request.url),
                etag=r.headers.get("etag"),
                server_time=_http_date(r.headers.get("date")),
            )
            if r.status_code == 304:
                page.not_modified = True
                yield page
                return
            data = _json(r)
            if not isinstance(data, list):
                raise SourceError(f"GitHub API: expected a list from {_path(page.url)}")
            page.items = [d for d in data if isinstance(d, dict)]
            page.next_url = r.links.get("next", {}).get("url")
            first = False
            next_url = page.next_url
            yield page

    async def all_items(
        self, url: str, params: dict[str, Any] | None = None, missing_ok: bool = False
    ) -> list[Any] | None:
        """All items of a listing; None when ``missing_ok`` and the listing is gone."""
        out: list[Any] = []
        try:
            async for page in self.pages(url, params, missing_ok=missing_ok):
                out.extend(page.items)
        except Gone:
            if missing_ok:
                return None
            raise
        return out

    async def issue(self, number: int) -> dict[str, Any] | None:
        """One issue or pull request (as the issues API shows it); None if deleted/moved."""
        r = await self.get(self.url(f"/issues/{number}"), missing_ok=True)
        if r.status_code != 200:
            return None
        data = _json(r)
        return data if isinstance(data, dict) else None


def _json(r: httpx.Response) -> Any:
    """The body as JSON; a 200 that isn't (a maintenance or proxy login page) is a SourceError."""
    try:
        return r.json()
    except ValueError:
        ctype = r.headers.get("content-type", "?")
        raise SourceError(
            f"GitHub API: {_path(str(r.request.url))} answered {r.status_code} with {ctype}, "
            "not JSON (a proxy or maintenance page?)"
        ) from None


def _path(url: str) -> str:
    return httpx.URL(url).path


def _explain(status: int, url: str, repo: str, r: httpx.Response) -> str:
    try:
        message = str(r.json().get("message", ""))[:200]
    except (ValueError, AttributeError):
        message = ""
    hint = {
        401: "the token was rejected (expired or revoked?)",
        403: "forbidden: the token lacks access (needs Issues and Pull requests read)",
        404: f"not found: is '{repo}' right? A private repository needs a token with access",
    }.get(status, "unexpected response")
    return f"GitHub API HTTP {status} for {_path(url)}: {hint}" + (
        f" ({message})" if message else ""
    )
