"""``repo-expert serve webhooks``: GitHub webhook deliveries trigger targeted syncs.

Built on aiohttp, which the project already runs for Slack's HTTP mode and for the test
stand-ins: no new dependency, and one server stack to know.

A delivery is accepted only if its ``X-Hub-Signature-256`` is the HMAC-SHA256 of the raw body
under an instance's ``webhook_secret`` (compared in constant time); otherwise 401 and nothing
runs. ``POST /webhooks/github`` serves every instance: the delivery goes to the instances whose
secret verifies it and whose repository it is about (``issues.github``, ``web_url`` or
``repo.url`` naming ``owner/repo``); ``POST /webhooks/github/{instance}`` targets one instance.

- ``ping`` → 200.
- ``push`` to the instance's branch (``repo.ref``, else the default branch) → fetch and re-index
  the code (the issues mirror is left alone).
- ``issues``, ``issue_comment``, ``pull_request``, ``pull_request_review``,
  ``pull_request_review_comment`` → re-fetch that issue or PR (and its comments), then the
  incremental issues sync, then re-index; the code is not fetched.
- anything else → 202, ignored.

Nothing a caller without a secret sends costs more than a glance: a request whose
``X-Hub-Signature-256`` is missing or malformed (401) or whose ``Content-Length`` is over
``webhooks.max_body_bytes`` (413) is refused before its body is read; a body is read for at most
``webhooks.read_timeout`` seconds (408), and a refused connection is closed after a short
linger. A signed payload that is not the JSON object GitHub sends (too deep, a ``repository``
that is not an object) is a 400, never a traceback.

Deliveries are answered at once (202) and synced in the background, one sync per instance at a
time: deliveries arriving meanwhile are merged into the next one (a burst of comments costs one
sync). Questions are answered from the live build while a sync runs. With a shared store
(PostgreSQL) the receiver runs no sync itself: it queues a job for ``repo-expert worker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from core.config import Instance, repo_views
from core.errors import ConfigError
from core.ops.health import Probe
from core.service import RepoExpert, SyncRequest

from .settings import WebhookSettings

log = logging.getLogger(__name__)

DEFAULT_PATH = "/webhooks/github"
LINGER_S = 2.0  # how long a refused request's unread body is drained before the socket closes
_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")
ISSUE_EVENTS = {"issues": "issue", "issue_comment": "issue"}
PR_EVENTS = {
    "pull_request": "pull_request",
    "pull_request_review": "pull_request",
    "pull_request_review_comment": "pull_request",
}


def signature(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    if not secret or not header:
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.encode("utf-8", "replace"))


class SyncScheduler:
    """Runs requested syncs in the background: one per instance at a time, later requests merged
    into the next run (after ``debounce`` seconds, so a burst becomes one sync)."""

    def __init__(self, app: RepoExpert, debounce: float = 1.0) -> None:
        self.app = app
        self.debounce = debounce
        self._pending: dict[str, SyncRequest] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.runs: list[tuple[str, SyncRequest]] = []  # what ran, in order (for logs and tests)

    def request(self, name: str, req: SyncRequest) -> None:
        pending = self._pending.get(name)
        self._pending[name] = pending.merge(req) if pending is not None else req
        if name not in self._tasks:
            self._tasks[name] = asyncio.create_task(self._worker(name))

    async def _worker(self, name: str) -> None:
        try:
            while name in self._pending:
                await asyncio.sleep(self.debounce)
                req = self._pending.pop(name)
                self.runs.append((name, req))
                try:
                    if self.app.backend.jobs is not None:  # a shared store: a worker runs it
                        job = await self.app.enqueue(name, req)
                        log.info("queued sync of %s (job %d)", name, job)
                        continue
                    rep = await self.app.sync(name, req)
                    log.info("%s", rep.line())
                except Exception:  # one failed sync must not stop the receiver
                    log.exception("webhook-triggered sync of %s failed", name)
        finally:
            self._tasks.pop(name, None)

    async def idle(self) -> None:
        """Wait until no sync is pending or running."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def close(self) -> None:
        for t in list(self._tasks.values()):
            t.cancel()
        await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)


def repo_names(inst: Instance) -> set[str]:
    """``owner/repo`` names an instance answers for (lower case): of each of its repositories."""
    return {n for view in repo_views(inst) for n in _names(view)}


def _names(inst: Instance) -> set[str]:
    names = set()
    if inst.issues.github:
        names.add(inst.issues.github.lower())
    for url in (inst.web_url, inst.repo.url):
        m = re.search(r"[/:]([^/:]+/[^/]+?)(?:\.git)?/?$", url or "")
        if m:
            names.add(m.group(1).lower())
    return names


def request_for(inst: Instance, event: str, payload: dict[str, Any]) -> SyncRequest | None:
    """What a verified delivery asks of this instance; None: nothing to do. An instance over
    several repositories asks it of the repository the delivery is about."""
    views = repo_views(inst)
    if len(views) > 1:
        full_name = str(_object(payload, "repository").get("full_name") or "").lower()
        out: SyncRequest | None = None
        for v in views:
            got = _request(v, event, payload) if full_name in _names(v) else None
            if got is not None:
                out = got if out is None else out.merge(got)
        return out
    return _request(inst, event, payload)


def _request(inst: Instance, event: str, payload: dict[str, Any]) -> SyncRequest | None:
    if event == "push":
        ref = str(payload.get("ref") or "")
        want = inst.repo.ref
        if want:
            ok = ref in (f"refs/heads/{want}", f"refs/tags/{want}", want)
        else:
            default = str(_object(payload, "repository").get("default_branch") or "")
            ok = bool(default) and ref == f"refs/heads/{default}"
        return SyncRequest(repo=True, issues=False) if ok else None
    key = ISSUE_EVENTS.get(event) or PR_EVENTS.get(event)
    if key is None or not inst.issues.github:
        return None
    full_name = str(_object(payload, "repository").get("full_name") or "").lower()
    if full_name and full_name != inst.issues.github.lower():
        return None  # an issue of the code repository, not of the one the issues come from
    number = _object(payload, key).get("number")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    return SyncRequest(repo=False, issues=True, numbers=frozenset({number}))


class WebhookReceiver:
    def __init__(
        self, app: RepoExpert, instances: dict[str, Instance], scheduler: SyncScheduler,
        settings: WebhookSettings | None = None,
    ) -> None:  # fmt: skip
        self.app = app
        self.instances = instances
        self.scheduler = scheduler
        self.settings = settings or WebhookSettings()

    def routes(self, web_app: web.Application, path: str = DEFAULT_PATH) -> None:
        web_app.router.add_post(path, self.handle)
        web_app.router.add_post(path.rstrip("/") + "/{instance}", self.handle)
        Probe(self.app, sorted(self.instances)).add_routes(web_app)  # /healthz /readyz /metrics

    async def handle(self, request: web.Request) -> web.Response:
        delivery = request.headers.get("X-GitHub-Delivery", "?")[:80]
        header = request.headers.get("X-Hub-Signature-256") or ""
        if not _SIGNATURE.fullmatch(header):  # no secret can verify it: don't read the body
            log.warning("webhook delivery %s refused: missing or malformed signature", delivery)
            return _refuse(401, "invalid signature")
        cap = self.settings.max_body_bytes
        if (request.content_length or 0) > cap:
            return _refuse(413, f"body larger than {cap} bytes")
        try:
            async with asyncio.timeout(self.settings.read_timeout):
                body = await request.read()
        except TimeoutError:
            log.warning("webhook delivery %s refused: body not sent in time", delivery)
            return _refuse(408, "body not sent in time")
        except web.HTTPRequestEntityTooLarge:  # a chunked body past client_max_size
            return _refuse(413, f"body larger than {cap} bytes")
        name = request.match_info.get("instance")
        # An unknown name gets the same 401 as a bad signature: no probing for instance names.
        candidates = (
            [self.instances[name]] if name in self.instances else []
        ) if name else list(self.instances.values())  # fmt: skip
        verified = [
            i for i in candidates
            if i.webhook_secret and verify(i.webhook_secret.get_secret_value(), body, header)
        ]  # fmt: skip
        if not verified:
            log.warning("webhook delivery %s refused: bad signature", delivery)
            return web.json_response({"error": "invalid signature"}, status=401)
        event = request.headers.get("X-GitHub-Event", "")
        try:
            payload = _payload(body, request.content_type)
            full_name = str(_object(payload, "repository").get("full_name") or "").lower()
            wanted = [(i, request_for(i, event, payload)) for i in verified]
        except ValueError as e:
            log.warning("webhook delivery %s refused: %s", delivery, e)
            return web.json_response({"error": f"payload: {e}"}, status=400)
        if event == "ping":
            return web.json_response({"ok": True, "instances": [i.name for i in verified]})
        queued = []
        for inst, req in wanted:
            if name is None and full_name not in repo_names(inst):
                continue
            if req is not None:
                self.scheduler.request(inst.name, req)
                queued.append(inst.name)
        log.info("webhook %s %s (%s): queued %s", event[:40], delivery, full_name[:200],
                 queued or "nothing")  # fmt: skip
        return web.json_response({"queued": queued}, status=202)


def _refuse(status: int, error: str) -> web.Response:
    """A refusal before (or instead of) reading the body: the connection is not kept alive."""
    resp = web.json_response({"error": error}, status=status)
    resp.force_close()
    return resp


def _payload(body: bytes, content_type: str) -> dict[str, Any]:
    """The delivery's JSON object; anything else (not JSON, not UTF-8, nested past Python's
    stack) is a ValueError."""
    try:
        if content_type == "application/x-www-form-urlencoded":
            body = (parse_qs(body.decode()).get("payload") or ["{}"])[0].encode()
        data = json.loads(body or b"{}")
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


def _object(payload: dict[str, Any], key: str) -> dict[str, Any]:
    """``payload[key]`` where GitHub sends an object there: absent or null is {}, anything else
    a ValueError."""
    value = payload.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be an object")
    return value


def make_web_app(
    app: RepoExpert, instances: dict[str, Instance], scheduler: SyncScheduler,
    path: str = DEFAULT_PATH, settings: WebhookSettings | None = None,
) -> web.Application:  # fmt: skip
    settings = settings or WebhookSettings()
    web_app = web.Application(client_max_size=settings.max_body_bytes)
    WebhookReceiver(app, instances, scheduler, settings).routes(web_app, path)
    return web_app


async def serve_webhooks(
    app: RepoExpert, host: str = "0.0.0.0", port: int | None = None, path: str = DEFAULT_PATH,
    settings: WebhookSettings | None = None,
) -> None:  # fmt: skip
    """Listen until cancelled. Fails before listening if no instance has a webhook secret."""
    instances = app.load_instances()
    with_secret = {n: i for n, i in instances.items() if i.webhook_secret}
    if not with_secret:
        raise ConfigError(
            "no instance has webhook_secret: add `webhook_secret: ${GITHUB_WEBHOOK_SECRET}` to "
            "the instance files that GitHub should keep fresh"
        )
    port = port or int(os.environ.get("PORT") or 8080)
    scheduler = SyncScheduler(app)
    runner = web.AppRunner(
        make_web_app(app, with_secret, scheduler, path, settings), lingering_time=LINGER_S
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        log.info(
            "webhooks: listening on http://%s:%d%s for %s", host, port, path, ", ".join(with_secret)
        )
        await asyncio.Event().wait()
    finally:
        with contextlib.suppress(Exception):
            await scheduler.close()
        await runner.cleanup()
