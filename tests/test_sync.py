"""Sync end to end: real git repositories (local path, and a bare repository cloned over file://
and over smart HTTP with a token), the GitHub API stand-in, the fake embedder, and counting what
was read and embedded each time."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from helpers import (
    SAMPLE_REPO,
    FakeApp,
    FakeEmbedder,
    commit_all,
    git,
    live_build,
    make_repo,
    open_live,
    write_files,
)
from stub_github_api import StubGitHub
from stub_http import LocalServer

from core.cli import main
from core.cli.commands import cmd_index
from core.cli.render import format_status
from core.cli.watch import watch
from core.embed import EmbedService
from core.errors import SourceError
from core.index.sync import SyncReport
from core.ingest.github import ClientOptions
from core.service import RepoExpert, SyncRequest

TOKEN = "ghp_test_token_0123456789"


def world(api: StubGitHub) -> None:
    api.add_issue(42, "Timeout ignored when parse_config reads widget.toml",
                  "The timeout setting in widget.toml is ignored.", labels=("bug",))  # fmt: skip
    api.add_comment(42, "Same here: requests hang forever.")
    api.add_issue(7, "Dark theme colours too dim", "Hard to read on projectors.")
    api.add_issue(8, "Add a palette option", "Lets themes share colours.", pr=True)
    api.add_review_comment(8, "Name it palette_colors.", "src/widget/theme.py", 3)


class Live:
    """A repository, the API stand-in, an instance file and a RepoExpert on the fake embedder."""

    def __init__(self, tmp: Path, api: StubGitHub, emb: FakeEmbedder) -> None:
        self.tmp, self.api, self.emb = tmp, api, emb
        self.inst_dir = tmp / "instances"
        self.inst_dir.mkdir(exist_ok=True)
        self.app: RepoExpert = FakeApp(
            self.inst_dir, tmp / "data", lambda: emb, cache=tmp / "data" / "cache.sqlite"
        )
        self.svc = self.app.svc

    def instance(self, repo: str, issues: str | None = None, extra: str = "") -> None:
        issues = issues or (
            f"issues: {{github: {self.api.repo}, api_url: '{self.api.api_url}', "
            "token: '${TEST_GH_TOKEN}'}\n"
        )
        (self.inst_dir / "widget.yaml").write_text(
            f"repo: {repo}\nweb_url: https://github.com/acme/widget\n"
            f"exclude: ['**/tasks/**']\n{issues}{extra}"
        )

    def embedded(self) -> int:
        return sum(n for n, q in self.emb.calls if not q)

    async def close(self) -> None:
        await self.app.close()
        self.svc.close()


@pytest_asyncio.fixture
async def live(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Live]:
    monkeypatch.setenv("TEST_GH_TOKEN", TOKEN)
    api = StubGitHub(token=TOKEN)
    await api.start()
    world(api)
    lv = Live(tmp_path, api, fake_embedder)
    yield lv
    await lv.close()
    await api.stop()


def local_repo(lv: Live) -> Path:
    repo = lv.tmp / "widget"
    make_repo(repo, SAMPLE_REPO)
    lv.instance(f"{{path: {repo}}}")
    return repo


def bare_repo(lv: Live) -> tuple[Path, Path]:
    """A work repository and a bare one it pushes to (the "remote")."""
    work = lv.tmp / "work"
    make_repo(work, SAMPLE_REPO)
    bare = lv.tmp / "remote" / "widget.git"
    bare.parent.mkdir()
    git(lv.tmp, "clone", "-q", "--bare", str(work), str(bare))
    git(work, "remote", "add", "origin", str(bare))
    return work, bare


def push(work: Path) -> str:
    sha = commit_all(work)
    git(work, "push", "-q", "origin", "main")
    return sha


async def chunk_keys(lv: Live) -> dict[str, list[str]]:
    r = await open_live(lv.tmp / "data", "widget")
    try:
        out: dict[str, list[str]] = {}
        for c in await r.all_chunks():
            out.setdefault(c.doc_key, []).append(c.text)
        return out
    finally:
        await r.close()


# -- issues from the API -------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_sync_indexes_github_issues_and_reembeds_only_the_changed_one(live: Live) -> None:
    local_repo(live)
    first = await live.app.sync("widget")
    assert first.ok, first.errors
    s = first.summary
    assert s is not None and s.files["issues"] == 3 and s.chunks_embedded == sum(s.chunks.values())
    texts = await chunk_keys(live)
    assert "Review comment by @rev on src/widget/theme.py:3:" in texts["issue:8"][0]
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in live.api.requests)

    live.api.add_comment(42, "Fixed in release 2.4: the retry_budget option bounds the hang.")
    live.emb.calls.clear()
    second = await live.app.sync("widget")
    s = second.summary
    assert s is not None and second.issues is not None
    assert second.issues.changed == 1 and second.issues.comments_fetched == 1
    assert s.units_changed == 1 and s.units_reused == 5  # 3 files and issues 7 and 8
    assert s.files_read == 0 and s.change_detection.startswith("git diff")
    assert s.chunks_embedded == live.embedded() == len((await chunk_keys(live))["issue:42"]) == 1
    answer = await live.app.ask("widget", "which option bounds the hang? retry_budget")
    assert any(src.issue == 42 and "retry_budget" in src.text for src in answer.sources)

    # Closed, then reopened: the thread's header changes, so it is embedded again; nothing else.
    live.api.touch(7, state="closed")
    live.emb.calls.clear()
    third = await live.app.sync("widget")
    assert third.summary and third.summary.units_changed == 1 and live.embedded() == 1
    assert "Issue · closed" in (await chunk_keys(live))["issue:7"][0]
    live.api.touch(7, state="open")
    await live.app.sync("widget")
    assert "Issue · open" in (await chunk_keys(live))["issue:7"][0]

    # Nothing changed upstream: no chunk embedded, and the listings are conditional requests.
    live.emb.calls.clear()
    await live.app.sync("widget")
    live.api.requests.clear()
    idle = await live.app.sync("widget")
    assert idle.summary and idle.summary.chunks_embedded == 0 and live.embedded() == 0
    assert [r.status for r in live.api.requests] == [304, 304, 304]


@pytest.mark.asyncio
async def test_plain_index_of_a_github_instance_syncs_the_mirror_first(live: Live) -> None:
    local_repo(live)
    s = await live.app.index("widget")  # what `index` and a first question run
    assert s.files["issues"] == 3 and live.api.of(r"/issues$")
    st = await live.app.status("widget")
    # index is a sync: the same gather step, and its run recorded like any other
    assert st["issues_mirror"]["stored"] == 3 and st["last_sync_ok"] is True


@pytest.mark.asyncio
async def test_index_goes_on_with_the_mirror_when_the_api_fails_and_says_so(
    live: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    local_repo(live)
    await live.app.index("widget")
    live.api.fail(r"/issues$", 404, times=99)  # not retried: fails at once
    # One gather step for index and sync: the API failing no longer fails the build (it used to
    # raise from index only); the mirror serves, the error is recorded and printed.
    s = await live.app.index("widget")
    assert s.files["issues"] == 3
    st = await live.app.status("widget")
    assert st["last_sync_ok"] is False and "HTTP 404" in st["last_error"]
    args = argparse.Namespace(name="widget", full=False, json=False, quiet=True)
    assert await cmd_index(live.app, args) == 1
    out, err = capsys.readouterr()
    assert out.startswith("indexed widget") and "repo-expert: issues: GitHub API HTTP 404" in err


@pytest.mark.asyncio
async def test_issue_filters_shape_the_index(live: Live) -> None:
    repo = local_repo(live)
    live.instance(
        f"{{path: {repo}}}",
        f"issues: {{github: {live.api.repo}, api_url: '{live.api.api_url}', state: open, "
        "pull_requests: false, exclude_labels: [wontfix], token: '${TEST_GH_TOKEN}'}\n",
    )
    live.api.add_issue(9, "Old request", "Nobody wants this.", labels=("wontfix",))
    assert (await live.app.sync("widget")).ok
    assert {k for k in await chunk_keys(live) if k.startswith("issue:")} == {"issue:42", "issue:7"}
    live.api.touch(42, state="closed")
    await live.app.sync("widget")
    assert {k for k in await chunk_keys(live) if k.startswith("issue:")} == {"issue:7"}


# -- the repository ------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_url_repo_sync_reads_only_the_files_git_says_changed(live: Live) -> None:
    work, bare = bare_repo(live)
    live.instance(f"{{url: 'file://{bare}', ref: main}}")
    first = await live.app.sync("widget")
    s = first.summary
    assert s is not None and s.files_read == 3 and s.change_detection.startswith("content hashes")

    readme = (work / "README.md").read_text().replace("thirty", "sixty")
    (work / "README.md").write_text(readme)
    git(work, "mv", "docs/guide.md", "docs/themes.md")
    git(work, "rm", "-q", "src/widget/config.py")
    write_files(work, {"docs/cache.md": "# Cache\n\nThe render cache keeps charts for an hour.\n"})
    sha = push(work)
    live.emb.calls.clear()
    second = await live.app.sync("widget")
    s = second.summary
    assert s is not None and second.commit == sha and second.commit_before == first.commit
    assert s.change_detection.startswith("git diff") and "1 renamed" in s.change_detection
    assert s.files_read == 3  # README.md, docs/themes.md, docs/cache.md — nothing else opened
    assert s.units_deleted == 2  # docs/guide.md (renamed away) and src/widget/config.py
    keys = await chunk_keys(live)
    assert "src/widget/config.py" not in keys and "docs/guide.md" not in keys
    # Embedded: README's one changed section, and every chunk of the two new paths.
    expected = 1 + len(keys["docs/themes.md"]) + len(keys["docs/cache.md"])
    assert s.chunks_embedded == live.embedded() == expected
    assert any("sixty" in t for t in keys["README.md"])
    answer = await live.app.ask("widget", "how long does the render cache keep charts?")
    cited = [src for src in answer.sources if src.path == "docs/cache.md"]
    assert cited and cited[0].url.startswith(f"https://github.com/acme/widget/blob/{sha}/")
    live.emb.calls.clear()
    third = await live.app.sync("widget")
    assert third.summary and third.summary.files_read == 0 and live.embedded() == 0


@pytest.mark.asyncio
async def test_without_a_usable_old_commit_every_file_is_hashed(live: Live) -> None:
    work, bare = bare_repo(live)
    live.instance(f"{{url: 'file://{bare}', ref: main}}")
    await live.app.sync("widget")
    # A fresh (shallow) clone does not have the indexed commit any more.
    shutil.rmtree(live.tmp / "data" / "widget" / "checkout")
    write_files(work, {"docs/guide.md": "# Guide\n\n## Themes\n\nThemes are now called skins.\n"})
    push(work)
    live.emb.calls.clear()
    s = (await live.app.sync("widget")).summary
    assert s is not None and "is not in the clone" in s.change_detection and s.files_read == 3
    assert s.units_changed == 1 and live.embedded() == 1  # hashes still spare the rest


@pytest.mark.asyncio
async def test_local_checkout_dirty_tree_and_untracked_files(live: Live) -> None:
    repo = local_repo(live)
    await live.app.sync("widget", SyncRequest(issues=False))
    (repo / "docs" / "guide.md").write_text("# Guide\n\n## Themes\n\nA light theme too.\n")
    s = (await live.app.sync("widget", SyncRequest(issues=False))).summary
    assert s is not None and "uncommitted" in s.change_detection and s.files_read == 3
    assert s.units_changed == 1
    commit_all(repo)
    s = (await live.app.sync("widget", SyncRequest(issues=False))).summary
    assert s is not None and "not of a clean commit" in s.change_detection  # built from dirty
    write_files(repo, {"docs/draft.md": "# Draft\n\nUntracked notes about gradients.\n"})
    s = (await live.app.sync("widget", SyncRequest(issues=False))).summary
    assert s is not None and s.change_detection.startswith("git diff") and s.files_read == 1
    (repo / "docs" / "draft.md").write_text("# Draft\n\nUntracked notes about shadows.\n")
    live.emb.calls.clear()
    s = (await live.app.sync("widget", SyncRequest(issues=False))).summary
    assert s is not None and s.files_read == 1 and live.embedded() == 1  # git can't vouch for it
    assert any("shadows" in t for t in (await chunk_keys(live))["docs/draft.md"])


class GitHttp(LocalServer):
    """git's smart HTTP protocol (``git http-backend`` as CGI) behind Basic auth."""

    def __init__(self, root: Path, token: str) -> None:
        super().__init__()
        self.root = root
        self.expected = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.auth_seen: list[str | None] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{path:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization")
        self.auth_seen.append(auth)
        if auth != self.expected:
            return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="git"'})
        env = {
            "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": request.path, "QUERY_STRING": request.query_string,
            "REQUEST_METHOD": request.method, "CONTENT_TYPE": request.content_type,
            "REMOTE_USER": "x-access-token", "REMOTE_ADDR": "127.0.0.1", "PATH": "/usr/bin:/bin",
            "GIT_PROTOCOL": request.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": request.headers.get("Content-Encoding", ""),
        }  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            "git", "http-backend", env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await proc.communicate(await request.read())
        sep = b"\r\n\r\n" if b"\r\n\r\n" in out else b"\n\n"
        head, _, body = out.partition(sep)
        lines = head.decode().splitlines()
        headers = dict(line.split(": ", 1) for line in lines if line)
        status = int(headers.pop("Status", "200").split()[0])
        return web.Response(status=status, body=body, headers=headers)


@pytest.mark.asyncio
async def test_private_https_clone_sends_the_token_only_in_a_header(
    live: Live, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    work, bare = bare_repo(live)
    secret = "repo_token_s3cret"
    server = GitHttp(bare.parent, secret)
    await server.start()
    try:
        monkeypatch.setenv("TEST_REPO_TOKEN", "wrong")
        url = f"http://127.0.0.1:{server.port}/widget.git"
        live.instance(f"{{url: '{url}', ref: main, token: '${{TEST_REPO_TOKEN}}'}}", issues="")
        caplog.set_level(logging.DEBUG)
        with pytest.raises(SourceError, match="cannot clone") as e:
            await live.app.sync("widget")
        assert "wrong" not in str(e.value)
        monkeypatch.setenv("TEST_REPO_TOKEN", secret)
        live.app = RepoExpert(live.app.settings, embedder_for=lambda i: live.svc)  # re-read env
        first = await live.app.sync("widget")
        assert first.ok and first.summary and first.summary.files_read == 3
        write_files(work, {"docs/faq.md": "# FAQ\n\nCharts export to SVG.\n"})
        sha = push(work)
        second = await live.app.sync("widget")
        assert second.commit == sha and second.summary and second.summary.files_read == 1
        checkout = live.tmp / "data" / "widget" / "checkout"
        b64 = base64.b64encode(f"x-access-token:{secret}".encode()).decode()
        stored = (checkout / ".git" / "config").read_text()
        assert url in stored and secret not in stored and b64 not in stored
        assert git(checkout, "remote", "get-url", "origin").strip() == url
        assert secret not in caplog.text and b64 not in caplog.text
        assert server.auth_seen.count(server.expected) >= 2  # the clone and the fetch
    finally:
        await server.stop()


# -- while a sync runs, and after ----------------------------------------------------------------
@pytest.mark.asyncio
async def test_questions_are_answered_from_the_live_index_while_a_sync_runs(live: Live) -> None:
    local_repo(live)
    await live.app.sync("widget")
    serving = live_build(live.tmp / "data", "widget")
    live.api.add_comment(7, "Workaround: the contrast_boost setting fixes dim projectors.")
    live.api.hold = asyncio.Event()
    task = asyncio.create_task(live.app.sync("widget"))
    await asyncio.wait_for(live.api.held.wait(), 10)
    during = await live.app.ask("widget", "contrast_boost setting for dim projectors")
    assert not any("contrast_boost" in s.text for s in during.sources)
    assert during.sources and live_build(live.tmp / "data", "widget") == serving
    live.api.hold.set()
    report = await asyncio.wait_for(task, 30)
    assert report.ok and live_build(live.tmp / "data", "widget") != serving
    after = await live.app.ask("widget", "contrast_boost setting for dim projectors")
    assert any(s.issue == 7 and "contrast_boost" in s.text for s in after.sources)


@pytest.mark.asyncio
async def test_status_and_a_failing_api_that_does_not_stop_the_code_sync(live: Live) -> None:
    repo = local_repo(live)
    ok = await live.app.sync("widget")
    st = await live.app.status("widget")
    assert st["indexed_commit"] == ok.commit and st["last_sync_ok"] is True
    assert ok.summary and st["chunks"] == ok.summary.chunks
    assert st["issues_mark"] and st["issues_mirror"]["stored"] == 3 and not st["last_error"]
    live.api.fail(r"/issues$", 502, times=99)
    write_files(repo, {"docs/api.md": "# API\n\nThe render endpoint returns PNG.\n"})
    sha = commit_all(repo)
    bad = await live.app.sync("widget", options=ClientOptions(max_retries=0))
    assert not bad.ok and bad.commit == sha and "issues: GitHub API error HTTP 502" in bad.errors[0]
    assert bad.summary and bad.summary.files["issues"] == 3  # the mirror still serves
    st = await live.app.status("widget")
    assert st["last_sync_ok"] is False and "HTTP 502" in st["last_error"]
    assert st["indexed_commit"] == sha
    text = format_status(st)
    assert f"indexed:       {sha}" in text and "last error:" in text and "issues mark:" in text
    live.api.faults.clear()
    reset = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "4102444800"}  # year 2100
    live.api.fail(r"/issues$", 403, reset, message="API rate limit exceeded")
    limited = await live.app.sync("widget")
    assert (
        not limited.ok
        and round(limited.retry_at or 0) == 4102444801
        and "max_wait" in limited.errors[0]
    )


@pytest.mark.asyncio
async def test_watch_syncs_again_on_its_interval(live: Live) -> None:
    repo = local_repo(live)
    reports: list[SyncReport | BaseException] = []
    stop, first = asyncio.Event(), asyncio.Event()

    def on_report(name: str, r: SyncReport | BaseException) -> None:
        reports.append(r)
        first.set()

    task = asyncio.create_task(watch(live.app, ["widget"], on_report, interval=0.05, stop=stop))
    await asyncio.wait_for(first.wait(), 10)
    write_files(repo, {"docs/new.md": "# New\n\nA page about legends.\n"})
    sha = commit_all(repo)
    for _ in range(200):
        if any(isinstance(r, SyncReport) and r.commit == sha for r in reports):
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert any(isinstance(r, SyncReport) and r.commit == sha for r in reports)
    assert all(isinstance(r, SyncReport) and r.ok for r in reports)


def test_cli_sync_and_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "widget"
    sha = make_repo(repo, SAMPLE_REPO)
    (tmp_path / "i").mkdir()
    (tmp_path / "i" / "widget.yaml").write_text(f"repo: {{path: {repo}}}\nsync_interval: 60\n")
    # Each command is a process of its own that closes the embedding service it used.
    monkeypatch.setattr(
        "core.service.embed_service", lambda cfg, data: EmbedService(FakeEmbedder, None, 4)
    )
    base = ["--instances", str(tmp_path / "i"), "--data", str(tmp_path / "d")]
    assert main([*base, "sync", "widget", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("synced widget") and "chunks embedded" in out
    assert main([*base, "sync", "--all", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and rep["index"]["chunks_embedded"] == 0 and rep["commit"] == sha
    assert main([*base, "status", "--json"]) == 0
    st: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    assert st[0]["indexed_commit"] == sha and st[0]["last_sync_ok"] is True
    assert main([*base, "status", "widget"]) == 0
    assert f"indexed:       {sha}" in capsys.readouterr().out
    assert main([*base, "sync"]) == 2  # neither a name nor --all


@pytest.mark.asyncio
async def test_pull_request_files_are_mirrored_and_name_where_an_issue_was_fixed(
    live: Live,
) -> None:
    local_repo(live)
    live.api.add_issue(9, "Apply the timeout from widget.toml", "Fixes #42 by defaulting it.",
                       pr=True, merged=True, state="closed")  # fmt: skip
    live.api.set_files(9, "src/widget/config.py")
    rep = await live.app.sync("widget")
    assert rep.ok and live.api.of(r"/pulls/9/files$") and live.api.of(r"/pulls/8/files$")
    r = await live.app.retrieve("widget", "where was issue #42 fixed?")
    exact = r.route["exact"]
    assert {"row": 0, "why": "issue #42"} in exact["issues"] or exact["issues"]
    assert any(e["why"] == "changed by #9" for e in exact["code"])
    assert any(s.path == "src/widget/config.py" for s in r.sources)
    reader = await live.app.reader("widget")
    links = await reader.links([42, 9])
    assert links[9].files == ("src/widget/config.py",) and links[9].fixes == (42,)
    assert links[42].fixed_by == (9,)
    # A sync that lists the pull request unchanged does not fetch its files again.
    before = len(live.api.of(r"/pulls/9/files$"))
    await live.app.sync("widget")
    assert len(live.api.of(r"/pulls/9/files$")) == before
