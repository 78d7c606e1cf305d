"""The GitHub REST client and the issues mirror, over the wire against a local stand-in API."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from stub_github_api import Req, StubGitHub

from core.config import IssuesConfig
from core.errors import RateLimited, SourceError
from core.ingest.github import ClientOptions, GitHubClient
from core.ingest.issues import issue_document
from core.ingest.mirror import ISSUES_MARK, row_to_issue, sync_mirror
from core.store.state import StateDB

NOW = 1_900_000_000.0  # the client's injected clock


class Sleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(round(seconds, 3))


def options(sleeps: Sleeps, **kw: Any) -> ClientOptions:
    base: dict[str, Any] = {"sleep": sleeps, "rand": lambda: 0.5, "clock": lambda: NOW}
    return ClientOptions(**{**base, **kw})


@pytest_asyncio.fixture
async def api() -> AsyncIterator[StubGitHub]:
    stub = StubGitHub()
    await stub.start()
    yield stub
    await stub.stop()


@pytest_asyncio.fixture(params=["local", "postgres"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """The instance state the mirror writes: the SQLite file, and its PostgreSQL twin (every
    mirror test runs on both)."""
    if request.param == "local":
        state = await StateDB.open(tmp_path / "state.sqlite")
        yield state
        await state.close()
        return
    from core.store.postgres.db import Database
    from core.store.postgres.state import PgState

    database = Database(request.getfixturevalue("pg_url"))
    yield PgState(await database.pool(), "widget")
    await database.close()


def client(api: StubGitHub, sleeps: Sleeps | None = None, **kw: Any) -> GitHubClient:
    return GitHubClient(
        api.repo, api_url=api.api_url, options=options(Sleeps() if sleeps is None else sleeps, **kw)
    )


# -- the client ----------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_pagination_follows_the_link_header(api: StubGitHub) -> None:
    for n in range(1, 6):
        api.add_issue(n, f"issue {n}")
    async with client(api, per_page=2) as gh:
        pages = [p async for p in gh.pages(gh.url("/issues"), {"state": "all"})]
    assert [len(p.items) for p in pages] == [2, 2, 1]
    assert [r.query.get("page") for r in api.of("/issues$")] == [None, "2", "3"]
    assert all(r.query["per_page"] == "2" and r.query["state"] == "all" for r in api.requests)
    assert pages[-1].next_url is None and pages[0].server_time is not None


@pytest.mark.asyncio
async def test_etag_gives_a_304_and_costs_no_rate_limit(api: StubGitHub) -> None:
    api.add_issue(1, "one")
    async with client(api) as gh:
        first = [p async for p in gh.pages(gh.url("/issues"))]
        remaining = api.remaining
        again = [p async for p in gh.pages(gh.url("/issues"), etag=first[0].etag)]
    assert again[0].not_modified and not again[0].items
    assert api.requests[-1].headers["If-None-Match"] == first[0].etag
    assert api.requests[-1].status == 304 and api.remaining == remaining


@pytest.mark.asyncio
async def test_403_with_exhausted_limit_waits_for_the_reset(api: StubGitHub) -> None:
    api.add_issue(1, "one")
    reset = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 30)}
    api.fail("/issues$", 403, reset, message="API rate limit exceeded")
    sleeps = Sleeps()
    async with client(api, sleeps) as gh:
        items = await gh.all_items(gh.url("/issues"))
    assert sleeps == [31.0] and len(items) == 1
    assert [r.status for r in api.requests] == [403, 200]


@pytest.mark.asyncio
async def test_429_honours_retry_after(api: StubGitHub) -> None:
    api.add_issue(1, "one")
    api.fail("/issues$", 429, {"Retry-After": "7"})
    sleeps = Sleeps()
    async with client(api, sleeps) as gh:
        assert len(await gh.all_items(gh.url("/issues"))) == 1
    assert sleeps == [7.0]


@pytest.mark.asyncio
async def test_secondary_limit_without_headers_backs_off_doubling_with_jitter(
    api: StubGitHub,
) -> None:
    api.add_issue(1, "one")
    api.fail("/issues$", 403, times=2, message="You have exceeded a secondary rate limit")
    sleeps = Sleeps()
    rands = iter([0.0, 1.0])
    async with client(api, sleeps, rand=lambda: next(rands)) as gh:
        assert len(await gh.all_items(gh.url("/issues"))) == 1
    assert sleeps == [45.0, 150.0]  # 60·0.75, then 120·1.25


@pytest.mark.asyncio
async def test_502_is_retried_with_backoff_then_gives_up(api: StubGitHub) -> None:
    api.add_issue(1, "one")
    api.fail("/issues$", 502, times=2)
    sleeps = Sleeps()
    async with client(api, sleeps) as gh:
        assert len(await gh.all_items(gh.url("/issues"))) == 1
    assert sleeps == [1.0, 2.0]
    api.fail("/issues$", 503, times=10)
    sleeps.clear()
    async with client(api, sleeps, max_retries=2) as gh:
        with pytest.raises(SourceError, match=r"HTTP 503 .* after 2 retries"):
            await gh.all_items(gh.url("/issues"))
    assert len(sleeps) == 2


@pytest.mark.asyncio
async def test_a_wait_beyond_max_wait_raises_rate_limited_instead_of_sleeping(
    api: StubGitHub,
) -> None:
    reset = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 3600)}
    api.fail("/issues$", 403, reset, message="API rate limit exceeded")
    sleeps = Sleeps()
    async with client(api, sleeps, max_wait=60) as gh:
        with pytest.raises(RateLimited) as e:
            await gh.all_items(gh.url("/issues"))
    assert sleeps == [] and e.value.reset_at == NOW + 3601


@pytest.mark.asyncio
async def test_an_exhausted_budget_makes_the_next_request_wait(api: StubGitHub) -> None:
    api.add_issue(1, "one")
    api.remaining, api.reset_at = 1, int(NOW) + 10  # the first answer says "0 left"
    sleeps = Sleeps()
    async with client(api, sleeps) as gh:
        await gh.all_items(gh.url("/issues"))
        assert sleeps == []
        await gh.all_items(gh.url("/issues"))
    assert sleeps == [11.0]


@pytest.mark.asyncio
async def test_permission_403_and_bad_token_are_errors_that_never_show_the_token(
    api: StubGitHub,
) -> None:
    api.fail("/issues$", 403, message="Resource not accessible by integration")
    sleeps = Sleeps()
    async with client(api, sleeps) as gh:
        with pytest.raises(SourceError, match="forbidden: the token lacks access"):
            await gh.all_items(gh.url("/issues"))
    assert sleeps == []
    api.token = "s3cret-token"
    gh = GitHubClient(api.repo, api_url=api.api_url, token="wrong-token")
    async with gh:
        with pytest.raises(SourceError, match="token was rejected") as e:
            await gh.all_items(gh.url("/issues"))
    assert "wrong-token" not in str(e.value)
    async with GitHubClient(api.repo, api_url=api.api_url, token="s3cret-token") as gh:
        assert await gh.all_items(gh.url("/issues")) == []
    assert api.requests[-1].headers["Authorization"] == "Bearer s3cret-token"


@pytest.mark.asyncio
async def test_enterprise_base_url_with_a_path_prefix() -> None:
    api = StubGitHub(prefix="/api/v3")
    await api.start()
    try:
        api.add_issue(3, "on GHES")
        async with GitHubClient(api.repo, api_url=api.api_url + "/") as gh:
            items = await gh.all_items(gh.url("/issues"))
        assert [i["number"] for i in items] == [3]
        assert api.requests[0].path == "/api/v3/repos/acme/widget/issues"
    finally:
        await api.stop()


@pytest.mark.asyncio
async def test_dropped_connections_are_retried() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json=[{"number": 1}])

    sleeps = Sleeps()
    opt = options(sleeps, transport=httpx.MockTransport(handler))
    async with GitHubClient("o/r", api_url="http://gh.invalid", options=opt) as gh:
        assert await gh.all_items(gh.url("/issues")) == [{"number": 1}]
    assert calls == 3 and sleeps == [1.0, 2.0]


@pytest.mark.asyncio
async def test_a_200_that_is_not_json_is_a_source_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        html = "<html>Down for maintenance</html>"
        return httpx.Response(200, text=html, headers={"content-type": "text/html"})

    opt = options(Sleeps(), transport=httpx.MockTransport(handler))
    async with GitHubClient("o/r", api_url="http://gh.invalid", options=opt) as gh:
        with pytest.raises(SourceError, match="text/html, not JSON"):
            await gh.all_items(gh.url("/issues"))
        with pytest.raises(SourceError, match="not JSON"):
            await gh.issue(7)


# -- the mirror ----------------------------------------------------------------------------------
def world(api: StubGitHub) -> None:
    api.add_issue(1, "Timeout ignored", "The timeout setting is ignored.", labels=("bug",))
    api.add_comment(1, "Same here with widget.toml.")
    api.add_comment(1, "Fixed by setdefault in parse_config.", author="ana")
    api.add_issue(2, "Add a dark theme", "A dark theme please.", pr=True, merged=True)
    api.add_review_comment(2, "Use the palette constant here.", "src/theme.py", 12)
    api.add_issue(3, "Docs typo", "A typo in the guide.", state="closed")


async def mirror(api: StubGitHub, db: StateDB, cfg: IssuesConfig | None = None, **kw: Any) -> Any:
    cfg = cfg or IssuesConfig(github=api.repo, api_url=api.api_url)
    opt_keys = {"per_page", "max_retries"}
    opt = {k: kw.pop(k) for k in list(kw) if k in opt_keys}
    async with client(api, **opt) as gh:
        return await sync_mirror(cfg, db, gh, **kw)


@pytest.mark.asyncio
async def test_first_sync_mirrors_issues_prs_and_both_kinds_of_comments(
    api: StubGitHub, db: StateDB
) -> None:
    world(api)
    rep = await mirror(api, db, now=time.time())
    rows = {r.number: r for r in await db.rows()}
    assert set(rows) == {1, 2, 3} and rep.changed == 3 and not await db.pending()
    assert [c["body"] for c in rows[1].comments] == [
        "Same here with widget.toml.",
        "Fixed by setdefault in parse_config.",
    ]
    assert rows[2].is_pr and rows[2].state == "merged"
    assert rows[2].comments[0]["path"] == "src/theme.py" and rows[2].comments[0]["line"] == 12
    # No comment request for #3 (its count is 0); issue comments of #2 neither (count 0).
    assert len(api.of("/issues/1/comments")) == 1 and not api.of("/issues/3/comments")
    assert len(api.of("/pulls/2/comments")) == 1 and not api.of("/issues/2/comments")
    text = issue_document(row_to_issue(rows[2]), None).text
    assert "PR · merged" in text and "Review comment by @rev on src/theme.py:12:" in text
    assert rows[2].updated_at <= rep.mark <= rows[3].updated_at


@pytest.mark.asyncio
async def test_incremental_sync_asks_since_the_mark_and_refetches_only_what_changed(
    api: StubGitHub, db: StateDB
) -> None:
    world(api)
    await mirror(api, db)
    mark = await db.get(ISSUES_MARK)
    api.requests.clear()
    api.add_comment(3, "Still wrong on the website.")
    api.touch(1, state="closed")
    rep = await mirror(api, db)
    listing = api.of("/issues$")[0]
    assert listing.query["since"] < mark and listing.query["sort"] == "updated"
    assert rep.changed == 2 and rep.comments_fetched == 2
    assert len(api.of("/issues/3/comments")) == 1 and len(api.of("/issues/1/comments")) == 1
    assert not api.of("/pulls/2/comments")
    rows = {r.number: r for r in await db.rows()}
    assert rows[1].state == "closed" and rows[3].comments[-1]["body"].startswith("Still wrong")
    api.touch(1, state="open")  # reopened
    await mirror(api, db)
    assert {r.number: r.state for r in await db.rows()}[1] == "open"


@pytest.mark.asyncio
async def test_an_idle_sync_becomes_free_304s(api: StubGitHub, db: StateDB) -> None:
    world(api)
    await mirror(api, db)
    await mirror(api, db)  # sees the issue at the mark again: unchanged, nothing fetched
    api.requests.clear()
    rep = await mirror(api, db)
    assert rep.changed == 0 and rep.comments_fetched == 0
    assert rep.not_modified == 3  # issues, issue comments, review comments
    assert [r.status for r in api.requests] == [304, 304, 304]
    api.add_issue(4, "New one")
    rep = await mirror(api, db)
    assert rep.changed == 1 and 4 in await db.numbers()


@pytest.mark.asyncio
async def test_an_edited_comment_is_refetched_though_the_issue_did_not_move(
    api: StubGitHub, db: StateDB
) -> None:
    world(api)
    await mirror(api, db)
    cid = api.comments[1][0]["id"]
    api.edit_comment(cid, "Edited: only with widget.toml in the home folder.")
    rep = await mirror(api, db)
    assert rep.changed == 0 and rep.comments_fetched == 1
    rows = {r.number: r for r in await db.rows()}
    assert rows[1].comments[0]["body"].startswith("Edited:")


@pytest.mark.asyncio
async def test_deleted_comments_and_issues_go_at_the_next_full_listing(
    api: StubGitHub, db: StateDB
) -> None:
    world(api)
    t = time.time()
    await mirror(api, db, now=t)
    api.delete_comment(api.comments[1][1]["id"])
    api.delete_issue(3)
    await mirror(api, db, now=t + 3600)  # incremental listings cannot see deletions
    assert len({r.number: r for r in await db.rows()}[1].comments) == 2
    rep = await mirror(api, db, now=t + 25 * 3600)  # full_listing_hours: 24
    rows = {r.number: r for r in await db.rows()}
    assert set(rows) == {1, 2} and rep.removed == 1
    assert [c["body"] for c in rows[1].comments] == ["Same here with widget.toml."]


@pytest.mark.asyncio
async def test_targeted_numbers_refetch_one_issue_and_drop_deleted_ones(
    api: StubGitHub, db: StateDB
) -> None:
    world(api)
    await mirror(api, db)
    api.delete_comment(api.comments[1][0]["id"])  # as a webhook would report
    api.delete_issue(3)
    rep = await mirror(api, db, numbers={1, 3})
    rows = {r.number: r for r in await db.rows()}
    assert set(rows) == {1, 2} and rep.removed == 1
    assert [c["body"] for c in rows[1].comments] == ["Fixed by setdefault in parse_config."]


@pytest.mark.asyncio
async def test_an_interrupted_sync_resumes_without_losing_or_duplicating(
    api: StubGitHub, db: StateDB
) -> None:
    for n in range(1, 8):
        api.add_issue(n, f"issue {n}", f"body {n}")
        api.add_comment(n, f"comment on {n}")

    def break_third_listing(req: Req) -> None:
        if req.path.endswith("/issues") and len(api.of(r"/issues$")) == 3:
            api.fail(r"/issues$", 502, times=99)

    api.hook = break_third_listing
    with pytest.raises(SourceError, match="HTTP 502"):
        await mirror(api, db, per_page=2, max_retries=1)
    api.hook = None
    stored = await db.numbers()
    k = max(stored)
    mark = await db.get(ISSUES_MARK)
    assert stored == set(range(1, k + 1)) and 2 <= k < 7  # each page stored with its mark
    assert mark == api.issues[k]["updated_at"] and len(await db.pending()) == k
    api.faults.clear()
    api.requests.clear()
    rep = await mirror(api, db, per_page=2)
    assert api.of("/issues$")[0].query["since"] < mark  # resumed from the mark, not from scratch
    assert await db.numbers() == set(range(1, 8)) and not await db.pending()
    assert rep.changed == 7 - k  # issue k came back unchanged and was not counted
    for n in range(1, 8):  # every comment list fetched exactly once over both syncs
        assert len(api.of(f"/issues/{n}/comments$")) == 1
    # An interruption while fetching comments keeps the lists already fetched.
    for n in (1, 2):
        api.add_comment(n, "more")
    api.fail(r"/issues/2/comments$", 502, times=99)
    with pytest.raises(SourceError):
        await mirror(api, db, per_page=2, max_retries=1)
    assert [r.number for r in await db.pending()] == [2]
    api.faults.clear()
    api.requests.clear()
    await mirror(api, db, per_page=2)
    assert not api.of("/issues/1/comments$") and len(api.of("/issues/2/comments$")) == 1


@pytest.mark.asyncio
async def test_an_update_during_the_listing_cannot_make_an_issue_slip_between_pages(
    api: StubGitHub, db: StateDB
) -> None:
    for n in range(1, 7):
        api.add_issue(n, f"issue {n}")

    def edit_first_issue(req: Req) -> None:
        if req.path.endswith("/issues") and len(api.of(r"/issues$")) == 2:
            # Issue 1 (already read on page 1) jumps to the end: with page numbers, issue 3
            # would move onto page 1 and never be read.
            api.touch(1, title="issue 1, edited")

    api.hook = edit_first_issue
    await mirror(api, db, per_page=2)
    assert await db.numbers() == set(range(1, 7))
    rows = {r.number: r for r in await db.rows()}
    assert rows[1].data["title"] == "issue 1, edited"


@pytest.mark.asyncio
async def test_filters_skip_comment_fetches_for_issues_that_will_not_be_indexed(
    api: StubGitHub, db: StateDB
) -> None:
    world(api)
    api.add_issue(4, "Question", labels=("question",))
    api.add_comment(4, "How do I?")
    cfg = IssuesConfig(
        github=api.repo, api_url=api.api_url, state="open", pull_requests=False,
        exclude_labels=["question"],
    )  # fmt: skip
    await mirror(api, db, cfg)
    assert await db.numbers() == {1, 2, 3, 4}  # all mirrored: filters may change later
    assert not api.of("/pulls/2/comments") and not api.of("/issues/4/comments")
    assert sorted(r.number for r in await db.pending()) == [2, 3, 4]


# -- configuration -------------------------------------------------------------------------------
def test_issue_source_config_is_checked_and_never_echoes_a_token(tmp_path: Path) -> None:
    from core.config import load_instance
    from core.errors import ConfigError

    f = tmp_path / "x.yaml"
    f.write_text("repo: {path: .}\nissues: {github: acme}\n")
    with pytest.raises(ConfigError, match=r"issues\.github: .*owner/repo"):
        load_instance(f)
    f.write_text("repo: {path: .}\nissues: {github: acme/w, file: i.json}\n")
    with pytest.raises(ConfigError, match="not both"):
        load_instance(f)
    f.write_text("repo: {path: .}\nissues: {github: acme/w, token: [ghp_secret_value]}\n")
    with pytest.raises(ConfigError) as e:
        load_instance(f)
    assert "issues.token" in str(e.value) and "ghp_secret_value" not in str(e.value)
    f.write_text(
        "repo: {path: ., url: null, token: '${NOPE:-}'}\nwebhook_secret: '${NOPE:-}'\n"
        "issues: {github: acme/w, api_url: 'https://ghe.example.com/api/v3/', state: open,"
        " labels: [bug], max_age_days: 30}\n"
    )
    inst = load_instance(f)
    assert inst.repo.token is None and inst.webhook_secret is None
    assert inst.issues.api_url == "https://ghe.example.com/api/v3" and inst.sync_interval == 300


@pytest.mark.asyncio
async def test_an_issue_deleted_before_its_comments_are_fetched_leaves_the_mirror(
    api: StubGitHub, db: StateDB
) -> None:
    world(api)
    api.fail(r"/issues/1/comments", 404, times=5)
    rep = await mirror(api, db)
    rows = {r.number: r for r in await db.rows()}
    assert set(rows) == {2, 3} and not await db.pending()
    assert rep.comments_fetched >= 1  # #2's review comments still came
