"""The webhook receiver over real HTTP: signed and badly signed deliveries, targeted syncs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import pytest_asyncio
from helpers import (
    SAMPLE_REPO,
    FakeApp,
    FakeEmbedder,
    commit_all,
    git,
    make_repo,
    open_live,
    write_files,
)
from prom import value
from stub_github_api import StubGitHub
from stub_http import LocalServer

from bot.webhooks import SyncScheduler, make_web_app, serve_webhooks, signature, verify
from core.config import Settings
from core.errors import ConfigError
from core.service import RepoExpert

SECRET = "hook-secret-42"


class Hooks:
    def __init__(self, tmp: Path, api: StubGitHub, emb: FakeEmbedder) -> None:
        self.tmp, self.api = tmp, api
        self.work = tmp / "work"
        make_repo(self.work, SAMPLE_REPO)
        self.bare = tmp / "remote" / "widget.git"
        self.bare.parent.mkdir()
        git(tmp, "clone", "-q", "--bare", str(self.work), str(self.bare))
        git(self.work, "remote", "add", "origin", str(self.bare))
        (tmp / "instances").mkdir()
        (tmp / "instances" / "widget.yaml").write_text(
            f"repo: {{url: 'file://{self.bare}', ref: main}}\n"
            "web_url: https://github.com/acme/widget\n"
            f"issues: {{github: acme/widget, api_url: '{api.api_url}'}}\n"
            "webhook_secret: ${TEST_HOOK_SECRET}\n"
        )
        # Another instance: another repository, another secret.
        (tmp / "instances" / "other.yaml").write_text(
            f"repo: {{path: {self.work}}}\nweb_url: https://github.com/acme/other\n"
            "webhook_secret: other-secret\n"
        )
        self.app = FakeApp(tmp / "instances", tmp / "data", lambda: emb,
                           cache=tmp / "data" / "cache.sqlite")  # fmt: skip
        self.svc = self.app.svc
        self.scheduler = SyncScheduler(self.app, debounce=0.05)
        self.server: LocalServer | None = None
        self.url = ""

    async def start(self) -> None:
        web_app = make_web_app(self.app, self.app.load_instances(), self.scheduler)
        self.server = LocalServer(web_app)
        await self.server.start()
        self.url = self.server.address("/webhooks/github")

    async def deliver(
        self, event: str, payload: dict[str, Any], secret: str | None = SECRET,
        path: str = "", form: bool = False,
    ) -> httpx.Response:  # fmt: skip
        if form:
            body = urlencode({"payload": json.dumps(payload)}).encode()
            ctype = "application/x-www-form-urlencoded"
        else:
            body, ctype = json.dumps(payload).encode(), "application/json"
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": "d-1", "Content-Type": ctype}
        if secret is not None:
            headers["X-Hub-Signature-256"] = signature(secret, body)
        async with httpx.AsyncClient() as client:
            return await client.post(self.url + path, content=body, headers=headers)

    async def close(self) -> None:
        await self.scheduler.close()
        if self.server is not None:
            await self.server.stop()
        await self.app.close()


@pytest_asyncio.fixture
async def hooks(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Hooks]:
    monkeypatch.setenv("TEST_HOOK_SECRET", SECRET)
    api = StubGitHub()
    await api.start()
    api.add_issue(42, "Timeout ignored", "The timeout setting is ignored.")
    h = Hooks(tmp_path, api, fake_embedder)
    await h.start()
    yield h
    await h.close()
    await api.stop()


REPO = {"full_name": "acme/widget", "default_branch": "main"}


def issue_event(number: int, action: str = "opened") -> dict[str, Any]:
    return {"action": action, "issue": {"number": number}, "repository": REPO}


async def issue_numbers(h: Hooks) -> set[int]:
    r = await open_live(h.tmp / "data", "widget")
    try:
        return {c.issue for c in await r.all_chunks("issues") if c.issue is not None}
    finally:
        await r.close()


def test_signature_check_is_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"zen": "Design for failure."}'
    good = signature("s", body)
    assert good.startswith("sha256=") and verify("s", body, good)
    assert not verify("s", body + b" ", good) and not verify("t", body, good)
    assert not verify("s", body, None) and not verify("", body, good)
    assert not verify("s", body, good.upper()) and not verify("s", body, "sha256=é")


@pytest.mark.asyncio
async def test_unsigned_or_badly_signed_deliveries_are_refused_and_run_nothing(
    hooks: Hooks,
) -> None:
    assert (await hooks.deliver("issues", issue_event(42), secret=None)).status_code == 401
    assert (await hooks.deliver("issues", issue_event(42), secret="wrong")).status_code == 401
    r = await hooks.deliver("issues", issue_event(42), secret="other-secret", path="/widget")
    assert r.status_code == 401  # the other instance's secret does not open this one
    await hooks.scheduler.idle()
    assert hooks.scheduler.runs == [] and hooks.api.requests == []
    ping = await hooks.deliver("ping", {"zen": "Keep it logically awesome.", "repository": REPO})
    assert ping.status_code == 200 and ping.json()["instances"] == ["widget"]


@pytest.mark.asyncio
async def test_issue_events_sync_that_issue_and_leave_the_code_alone(hooks: Hooks) -> None:
    first = await hooks.app.sync("widget")
    assert first.ok and await issue_numbers(hooks) == {42}
    hooks.api.add_issue(43, "Legend overlaps the chart", "The legend covers the last bar.")
    write_files(hooks.work, {"docs/new.md": "# New\n\nPushed but not announced.\n"})
    commit_all(hooks.work)
    git(hooks.work, "push", "-q", "origin", "main")
    hooks.api.requests.clear()
    r = await hooks.deliver("issues", issue_event(43))
    assert r.status_code == 202 and r.json() == {"queued": ["widget"]}
    await hooks.scheduler.idle()
    assert await issue_numbers(hooks) == {42, 43}
    assert hooks.api.of(r"/issues/43$")  # fetched by number
    st = await hooks.app.status("widget")
    assert st["indexed_commit"] == first.commit  # no fetch on an issue event
    live = await hooks.app.store.live_meta("widget")
    assert live is not None and live["summary"]["carried"] == ["code", "docs"]  # issues written

    sha = git(hooks.work, "rev-parse", "HEAD").strip()
    other_branch = {"ref": "refs/heads/feature", "repository": REPO}
    assert (await hooks.deliver("push", other_branch)).json() == {"queued": []}
    r = await hooks.deliver("push", {"ref": "refs/heads/main", "repository": REPO}, form=True)
    assert r.status_code == 202 and r.json() == {"queued": ["widget"]}
    await hooks.scheduler.idle()
    st = await hooks.app.status("widget")
    assert st["indexed_commit"] == sha
    live = await hooks.app.store.live_meta("widget")
    assert live is not None and live["summary"]["carried"] == []  # the commit moved
    assert [req for _, req in hooks.scheduler.runs][-1].repo is True


@pytest.mark.asyncio
async def test_comment_deleted_and_issue_deleted_deliveries(hooks: Hooks) -> None:
    cid = hooks.api.add_comment(42, "Secret workaround: set timeout_hack.")
    await hooks.app.sync("widget")
    hooks.api.delete_comment(cid)  # GitHub's listings would not show this
    payload = {"action": "deleted", "issue": {"number": 42}, "comment": {"id": cid},
               "repository": REPO}  # fmt: skip
    assert (await hooks.deliver("issue_comment", payload)).status_code == 202
    await hooks.scheduler.idle()
    r = await open_live(hooks.tmp / "data", "widget")
    try:
        assert not any("timeout_hack" in c.text for c in await r.all_chunks("issues"))
    finally:
        await r.close()
    hooks.api.delete_issue(42)
    assert (await hooks.deliver("issues", issue_event(42, "deleted"))).status_code == 202
    await hooks.scheduler.idle()
    assert await issue_numbers(hooks) == set()


@pytest.mark.asyncio
async def test_a_burst_of_deliveries_becomes_one_sync(hooks: Hooks) -> None:
    await hooks.app.sync("widget")
    hooks.scheduler.debounce = 1.0
    hooks.api.add_issue(44, "PR: faster legend", pr=True)
    pr = {"action": "opened", "pull_request": {"number": 44}, "repository": REPO}
    for event, payload in [("issues", issue_event(42, "edited")), ("pull_request", pr),
                           ("pull_request_review_comment", pr)]:  # fmt: skip
        assert (await hooks.deliver(event, payload)).status_code == 202
    await hooks.scheduler.idle()
    assert len(hooks.scheduler.runs) == 1 and hooks.scheduler.runs[0][1].numbers == {42, 44}
    assert await issue_numbers(hooks) == {42, 44}


@pytest.mark.asyncio
async def test_deliveries_about_other_repositories_or_events_do_nothing(hooks: Hooks) -> None:
    elsewhere = {"action": "opened", "issue": {"number": 1},
                 "repository": {"full_name": "acme/else"}}  # fmt: skip
    assert (await hooks.deliver("issues", elsewhere)).json() == {"queued": []}
    assert (await hooks.deliver("star", {"repository": REPO})).json() == {"queued": []}
    # The other instance has no GitHub issues: its own secret verifies, an issue event is moot.
    r = await hooks.deliver("issues", issue_event(42), secret="other-secret", path="/other")
    assert r.status_code == 202 and r.json() == {"queued": []}
    # An unknown instance name answers like a bad signature: names cannot be probed.
    r = await hooks.deliver("issues", issue_event(42), path="/nope")
    assert r.status_code == 401
    bad = await hooks.deliver("issues", issue_event(42))  # fine, but then not JSON:
    assert bad.status_code == 202
    async with httpx.AsyncClient() as client:
        body = b"not json"
        headers = {"X-GitHub-Event": "issues", "X-Hub-Signature-256": signature(SECRET, body)}
        r = await client.post(hooks.url, content=body, headers=headers)
    assert r.status_code == 400
    await hooks.scheduler.idle()


@pytest.mark.asyncio
async def test_serving_needs_an_instance_with_a_secret(tmp_path: Path) -> None:
    (tmp_path / "i").mkdir()
    make_repo(tmp_path / "r", {"README.md": "# R\n"})
    (tmp_path / "i" / "r.yaml").write_text(f"repo: {{path: {tmp_path / 'r'}}}\n")
    app = RepoExpert(Settings(tmp_path / "i", tmp_path / "d"))
    with pytest.raises(ConfigError, match="no instance has webhook_secret"):
        await serve_webhooks(app, "127.0.0.1", 0)


@pytest.mark.asyncio
async def test_health_readiness_and_metrics_beside_the_deliveries(hooks: Hooks) -> None:
    base = hooks.url.removesuffix("/webhooks/github")
    async with httpx.AsyncClient() as client:
        assert (await client.get(base + "/healthz")).json() == {"ok": True}
        ready = await client.get(base + "/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"ready": True, "instances": 2, "indexed": 0, "problems": []}
        metrics = await client.get(base + "/metrics")
    assert metrics.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    # Prometheus's own parser reads it (a malformed line raises).
    assert value(metrics.text, "repo_expert_answers_in_progress") == 0


def test_issue_events_of_the_code_repository_are_not_the_issues_repositorys() -> None:
    from bot.webhooks import request_for
    from core.config import Instance

    inst = Instance.model_validate({
        "repo": {"url": "https://github.com/acme/widget.git"},
        "issues": {"github": "acme/tracker"},
    })  # fmt: skip
    event = {"action": "opened", "issue": {"number": 12}}
    code_repo = {**event, "repository": {"full_name": "acme/widget"}}
    tracker = {**event, "repository": {"full_name": "acme/tracker"}}
    assert request_for(inst, "issues", code_repo) is None
    req = request_for(inst, "issues", tracker)
    assert req is not None and req.numbers == {12}
