"""One instance over several repositories (``repos:``): keys kept apart, per-repository
permalinks, incremental builds and failures per repository, citations that say where."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import (
    FakeApp,
    FakeEmbedder,
    commit_all,
    config_error,
    git,
    make_repo,
    open_live,
    write_files,
)

from core.cli.render import format_status, format_summary, render_sources
from core.config import load_instance

SERVER = {
    "README.md": """
        # Server

        The server answers requests on port 8080.

        ## Deploying

        Deploy the server with docker compose up.
        """,
    "src/app.py": '''
        def handle_request(path):
            """Answer one request for ``path``."""
            return route_table(path)


        def route_table(path):
            return {"/": "home"}.get(path, "missing")
        ''',
}
CLIENT = {
    "README.md": """
        # Client

        The client library calls the server over HTTP.

        ## Retries

        The client retries a failed call three times with backoff.
        """,
    "client/http.py": '''
        def fetch_with_retries(url, retries=3):
            """Fetch ``url``, retrying a failed call."""
            return retries
        ''',
}
ISSUES = {
    "server": [{"number": 12, "title": "Server crashes on empty path",
                "body": "handle_request fails when the path is empty.", "state": "OPEN",
                "labels": [], "comments": [], "url": "https://github.com/acme/server/issues/12",
                "createdAt": "2024-01-01T00:00:00Z", "closedAt": None}],
    "client": [{"number": 12, "title": "Client retries forever",
                "body": "fetch_with_retries never stops retrying.", "state": "OPEN",
                "labels": [], "comments": [], "url": "https://github.com/acme/client/issues/12",
                "createdAt": "2024-01-01T00:00:00Z", "closedAt": None},
               {"number": 42, "title": "Client timeout option",
                "body": "Add a timeout option to the client.", "state": "OPEN",
                "labels": [], "comments": [], "url": "https://github.com/acme/client/issues/42",
                "createdAt": "2024-01-01T00:00:00Z", "closedAt": None}],
}  # fmt: skip


def world(tmp: Path, client_source: str | None = None) -> tuple[dict[str, Path], Path]:
    """Two real git repositories with an issues file each, and an instance over both."""
    repos = {"server": tmp / "server", "client": tmp / "client"}
    make_repo(repos["server"], SERVER)
    make_repo(repos["client"], CLIENT)
    for name, issues in ISSUES.items():
        (tmp / f"{name}-issues.json").write_text(json.dumps(issues))
    inst = tmp / "instances"
    inst.mkdir()
    client = client_source or f"path: {repos['client']}"
    (inst / "product.yaml").write_text(
        "repos:\n"
        f"  - name: server\n    path: {repos['server']}\n"
        "    web_url: https://github.com/acme/server\n"
        f"    issues: {{file: {tmp / 'server-issues.json'}}}\n"
        f"  - name: client\n    {client}\n"
        "    web_url: https://github.com/acme/client\n"
        "    aliases: [sdk]\n"
        f"    issues: {{file: {tmp / 'client-issues.json'}}}\n"
    )
    return repos, inst


@pytest_asyncio.fixture
async def product(tmp_path: Path, fake_embedder: FakeEmbedder) -> Any:
    repos, inst = world(tmp_path)
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder)
    yield {"repos": repos, "app": app, "tmp": tmp_path, "instances": inst}
    await app.close()


# -- configuration -----------------------------------------------------------------------------
def test_config_errors_name_the_entry(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    msg = config_error(tmp_path, (
        "repos:\n"
        "  - {name: a, path: a}\n"
        "  - {name: b, path: b, web_url: ftp://x}\n"
        "  - {name: c, url: https://x/y.git, web_url: 'https://github.com/o/c'}\n"
        "  - {name: 'no good', path: d, web_url: nope}\n"
    ))  # fmt: skip
    assert str(tmp_path / "bad.yaml") in msg
    assert "repos[1].web_url: expected an http(s) URL" in msg
    assert "repos[3].name: use letters" in msg and "repos[3].web_url: expected" in msg
    assert "repos[0]" not in msg and "repos[2]" not in msg
    msg = config_error(tmp_path, "repos:\n  - {name: a}\n")
    assert "repos[0]: Value error" not in msg and "repos[0]: give exactly one of 'path'" in msg
    msg = config_error(tmp_path, "repos:\n  - {path: a}\n")
    assert "repos[0].name: required key is missing" in msg
    msg = config_error(tmp_path, "repo: {path: a}\nrepos:\n  - {name: a, path: a}\n")
    assert "give 'repo' (one repository) or 'repos' (several), not both" in msg


def test_duplicate_names_and_checkouts_are_errors(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    msg = config_error(tmp_path, (
        "repos:\n  - {name: a, path: a}\n  - {name: A, path: ./a/}\n"
        "  - {name: c, url: 'https://github.com/o/c.git', aliases: [a]}\n"
        "  - {name: d, url: 'https://github.com/o/c'}\n"
    ))  # fmt: skip
    assert "repos[1].name: 'A' is already the name or an alias of repos[0]" in msg
    assert "repos[1]: same checkout as repos[0]" in msg
    assert "repos[2].aliases[0]: 'a' is already" in msg
    assert "repos[3]: same checkout as repos[2]" in msg


def test_instance_defaults_are_inherited_and_replaced(tmp_path: Path) -> None:
    for n in ("a", "b"):
        (tmp_path / n).mkdir()
    f = tmp_path / "ok.yaml"
    f.write_text(
        "exclude: ['**/tasks/**']\ndocs: {include: ['**/*.md']}\n"
        "repos:\n  - {name: a, path: a}\n  - {name: b, path: b, exclude: ['x/'], "
        "docs: {include: ['**/*.rst']}}\n"
    )
    from core.config import repo_views

    inst = load_instance(f)
    a, b = repo_views(inst)
    assert (a.repo_name, a.exclude, a.docs.include) == ("a", ["**/tasks/**"], ["**/*.md"])
    assert (b.repo_name, b.exclude, b.docs.include) == ("b", ["x/"], ["**/*.rst"])
    assert inst.repo.path == "a"  # the first entry stands for `repo` where one is expected


# -- one index over both -----------------------------------------------------------------------
@pytest.mark.asyncio
async def test_keys_kept_apart_and_permalinks_per_repo(product: dict[str, Any]) -> None:
    app = product["app"]
    s = await app.index("product")
    assert set(s.repos) == {"server", "client"}
    reader = await open_live(product["tmp"] / "data", "product")
    try:
        units = await reader.units()
        assert {"server:README.md", "client:README.md", "server:issue:12",
                "client:issue:12"} <= set(units)  # fmt: skip
        chunks = await reader.all_chunks()
        shas = {n: git(p, "rev-parse", "HEAD").strip() for n, p in product["repos"].items()}
        for c in chunks:
            assert c.repo in ("server", "client")
            if c.path and c.start_line:
                assert c.url.startswith(f"https://github.com/acme/{c.repo}/blob/{shas[c.repo]}/")
                assert c.commit == shas[c.repo]
        readmes = {c.repo for c in chunks if c.path == "README.md"}
        twelves = {c.repo for c in chunks if c.issue == 12}
        assert readmes == twelves == {"server", "client"}
        syms = await reader.symbols("handle_request")
        assert [(s.repo, s.path) for s in syms] == [("server", "src/app.py")]
    finally:
        await reader.close()
    assert s.repos["server"]["commit"] == shas["server"]
    assert s.repos["client"]["files"] == {"docs": 1, "code": 1, "issues": 2}


@pytest.mark.asyncio
async def test_incremental_reembeds_only_the_changed_repo(
    product: dict[str, Any], fake_embedder: FakeEmbedder
) -> None:
    app = product["app"]
    await app.index("product")
    write_files(product["repos"]["client"], {"client/http.py": '''
        def fetch_with_retries(url, retries=5):
            """Fetch ``url``, retrying a failed call up to five times."""
            return retries
        '''})  # fmt: skip
    commit_all(product["repos"]["client"])
    before = sum(n for n, q in fake_embedder.calls if not q)
    s = await app.index("product")
    embedded = sum(n for n, q in fake_embedder.calls if not q) - before
    assert s.files_read == 1 and s.units_changed == 1
    assert s.repos["client"]["units_changed"] == 1 and s.repos["server"]["units_changed"] == 0
    assert s.repos["server"]["chunks_new"] == 0
    assert embedded == s.chunks_embedded == s.repos["client"]["chunks_new"] == 1
    assert "server: git diff" in s.change_detection and "client: git diff" in s.change_detection
    # Nothing moved since: the live build stays, with every repository's counts.
    live = await app.store.live_id("product")
    again = await app.index("product")
    assert again.kept_live and await app.store.live_id("product") == live
    for name in ("client", "server"):
        r, was = again.repos[name], s.repos[name]
        assert [r[k] for k in ("commit", "files", "chunks")] == [
            was[k] for k in ("commit", "files", "chunks")
        ]
    assert (again.chunks, again.files, again.symbols) == (s.chunks, s.files, s.symbols)

    # An issue event in one repository: docs and code are carried whole (their chunks not even
    # read), with every repository's counts as they were.
    issues = json.loads((product["tmp"] / "client-issues.json").read_text())
    issues[1]["body"] += " The default should be thirty seconds."
    (product["tmp"] / "client-issues.json").write_text(json.dumps(issues))
    event = await app.index("product")
    assert (event.carried, event.units_changed) == (["code", "docs"], 1)
    assert event.repos["client"]["units_changed"] == 1
    for name in ("client", "server"):
        assert event.repos[name]["chunks"] == s.repos[name]["chunks"], name
    assert (event.chunks, event.symbols) == (s.chunks, s.symbols)
    for coll in ("code", "docs"):
        assert event.collection_tokens[coll] == s.collection_tokens[coll], coll
    got = await app.ask("product", "client timeout option thirty seconds", repo="client")
    assert got.sources[0].issue == 42 and got.sources[0].repo == "client"


@pytest.mark.asyncio
async def test_behind_names_the_repository_that_moved(product: dict[str, Any]) -> None:
    """``behind`` (what ``ask`` notes): per repository, its folder's commit against the one the
    live build indexed — only the one that moved."""
    app = product["app"]
    assert await app.behind("product") == []  # no build yet: nothing to be behind
    await app.index("product")
    assert await app.behind("product") == []
    client = product["repos"]["client"]
    old = git(client, "rev-parse", "HEAD").strip()
    write_files(client, {"NOTES.md": "# Notes\n\nA new file.\n"})
    new = commit_all(client)
    assert await app.behind("product") == [f"client is at {new[:7]}, its index at {old[:7]}"]
    await app.index("product")
    assert await app.behind("product") == []


def remote_client(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> tuple[Path, dict[str, Path], FakeApp]:
    """The product world with the client cloned from a ``file://`` remote (which a test can
    take away): the remote's folder, the repositories and an app (the caller closes it)."""
    origin = tmp_path / "client-origin"
    make_repo(origin, CLIENT)
    repos, inst = world(tmp_path, client_source=f"url: file://{origin}")
    return origin, repos, FakeApp(inst, tmp_path / "data", lambda: fake_embedder)


@pytest.mark.asyncio
async def test_one_repo_failing_to_fetch_leaves_the_others_served(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    origin, repos, app = remote_client(tmp_path, fake_embedder)
    try:
        await app.index("product")
        found = await app.search("product", "client retries a failed call three times")
        assert any(s.repo == "client" for s in found.sources)
        shutil.rmtree(origin)  # the client's remote is gone: its fetch fails
        write_files(repos["server"], {"NEWS.md": "# News\n\nThe server now speaks HTTP/2.\n"})
        commit_all(repos["server"])
        report = await app.sync("product")
        assert not report.ok and any(e.startswith("client: repository: cannot fetch")
                                     for e in report.errors)  # fmt: skip
        assert report.summary is not None
        assert report.summary.repos["server"]["units_changed"] == 1
        found = await app.search("product", "server speaks HTTP/2")
        assert found.sources[0].repo == "server" and found.sources[0].path == "NEWS.md"
        found = await app.search("product", "client retries a failed call three times")
        assert any(s.repo == "client" for s in found.sources)  # still served from its clone
        st = await app.status("product")
        by = {r["name"]: r for r in st["repos"]}
        assert "cannot fetch" in by["client"]["last_error"] and by["server"]["last_error"] is None
        assert "cannot fetch" in st["last_error"]
        text = format_status(st)
        assert "repo server: " in text and "repo client: file://" in text
        assert "error: repository: cannot fetch" in text
        assert "\n  server: at " in format_summary(report.summary)
        # A repository that was never had at all (a first clone that fails) is left out.
        shutil.rmtree(tmp_path / "data" / "product" / "repos" / "client")
        report = await app.sync("product")
        assert report.summary is not None and report.summary.repos["client"]["stale"]
        found = await app.search("product", "client retries a failed call three times")
        assert any(s.repo == "client" for s in found.sources)  # kept from the live build
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_fetch_error_that_clears_leaves_status_too(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    """A repository's error is recorded in the build its update wrote; the next update that
    reads it again writes a build without it, though nothing else changed — only then is a
    no-change update's live build kept."""
    origin, _, app = remote_client(tmp_path, fake_embedder)
    try:
        await app.index("product")
        origin.rename(tmp_path / "away")
        assert not (await app.sync("product")).ok
        (tmp_path / "away").rename(origin)
        back = await app.sync("product")
        assert back.ok and back.summary is not None and not back.summary.kept_live
        st = await app.status("product")
        assert [r["last_error"] for r in st["repos"]] == [None, None]
        again = await app.sync("product")
        assert again.summary is not None and again.summary.kept_live
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_sources_carry_repo_and_labels_show_it(product: dict[str, Any]) -> None:
    app = product["app"]
    await app.index("product")
    answer = await app.ask("product", "how do I deploy the server with docker compose?")
    src = answer.sources[0]
    assert src.repo == "server" and src.to_json()["repo"] == "server"
    assert src.location().startswith("server: README.md:")
    issue = next(s for s in (await app.search("product", "client retries forever")).sources
                 if s.issue is not None)  # fmt: skip
    assert issue.location() == "client#12"
    assert "client#12 Client retries forever" in render_sources([issue])


# -- issue references, routing, the filter -----------------------------------------------------
@pytest.mark.asyncio
async def test_issue_refs_resolve_per_repo(product: dict[str, Any]) -> None:
    app = product["app"]
    await app.index("product")
    for q in ("is client#12 still open?", "is issue 12 in client still open?",
              "¿sigue abierta la incidencia 12 del client?"):  # fmt: skip
        found = await app.search("product", q)
        assert found.route["signals"]["repo_issues"] == {"12": "client"}, q
        assert [e["why"] for e in found.route["exact"]["issues"]] == ["issue #12 in client"]
        issues = [s for s in found.sources if s.issue == 12]
        assert [s.repo for s in issues] == ["client"], q
    found = await app.search("product", "what is sdk#42 about?")  # an alias
    assert [(s.repo, s.issue) for s in found.sources if s.issue is not None][:1] == [("client", 42)]
    answer = await app.ask("product", "what is #12 about?")  # bare: both, and says so
    assert {s.repo for s in answer.sources if s.issue == 12} == {"server", "client"}
    first = next(s.repo for s in answer.sources if s.issue == 12)
    other = ({"server", "client"} - {first}).pop()
    assert answer.note == (f"#12 is in client and server: {first}#12 fits the question best and "
                           f"comes first (ask about {other}#12 for another)")  # fmt: skip


@pytest.mark.asyncio
async def test_naming_a_repo_tilts_and_repo_filters(product: dict[str, Any]) -> None:
    app = product["app"]
    await app.index("product")
    q = "what does the README say?"  # both READMEs fit equally well
    plain = await app.search("product", q, k=2)
    server = await app.search("product", f"{q} (server)", k=2)
    client = await app.search("product", f"{q} (client)", k=2)
    assert server.sources[0].repo == "server" and client.sources[0].repo == "client"
    assert server.route["signals"]["repos"] == ["server"]
    assert {s.repo for s in plain.sources} == {"server", "client"}
    # The named repository leads, so the question is answered from it alone, as repo:server
    # would (core/retrieve/narrow.py), and the route says why.
    assert {s.repo for s in server.sources} == {"server"}
    assert server.route["narrowed"]["repo"] == "server" and "filter" not in server.route
    assert ("repository server named: answered from it alone"
            in server.route["sources"][0]["why"])  # fmt: skip
    alone = await app.search("product", f"{q} (server)", k=2, repo="server")
    assert [s.chunk_id for s in server.sources] == [s.chunk_id for s in alone.sources]
    assert "narrowed" not in alone.route  # already one repository: nothing to narrow
    said = await app.ask("product", f"{q} (server)")
    assert said.note == ("searched server alone, the repository the question names: add "
                         "repo:all to search beyond it")  # fmt: skip
    # A follow-up is searched with the turn it follows, which named the server.
    from core.models import Turn

    follow = await app.ask("product", "and what else does it say?",
                           conversation=[Turn(f"{q} (server)", said.text)])  # fmt: skip
    assert follow.route["narrowed"]["repo"] == "server"
    assert {s.repo for s in follow.sources} == {"server"}
    # … and one that names another repository itself is about that one.
    other = await app.ask("product", "and in the client?",
                          conversation=[Turn(f"{q} (server)", said.text)])  # fmt: skip
    assert other.route["query"] == f"{q} (server) and in the client?"
    assert other.route["narrowed"]["repo"] == "client"
    assert {s.repo for s in other.sources} == {"client"}
    # A named issue of the named repository: the issue → code hop, inside it.
    hop = await app.search("product", "where is the bug from server#12?")
    assert hop.route["narrowed"]["repo"] == "server" and hop.route["signals"]["issue_to_code"]
    assert [(s.repo, s.issue) for s in hop.sources if s.issue is not None][:1] == [("server", 12)]
    assert {s.repo for s in hop.sources} == {"server"}
    assert (await app.ask("product", q)).note == ""
    # A tilt, not a filter: the client's retry docs still answer a question naming the server,
    # and then nothing is narrowed.
    tilted = await app.search("product", "how many times does a failed call retry with backoff"
                              " (asked about the server)", k=3)  # fmt: skip
    assert tilted.sources[0].repo == "client" and "narrowed" not in tilted.route
    assert tilted.route["signals"]["repos"] == ["server"]
    both = await app.search("product", f"{q} (server or client?)", k=2)
    assert both.route["signals"]["repos"] == ["server", "client"] and "narrowed" not in both.route
    # repo:all searches every repository, as asked: the tilt alone.
    every = await app.search("product", f"repo:all {q} (server)", k=2)
    assert every.sources[0].repo == "server" and "narrowed" not in every.route
    assert every.route["filter"] == {"name": "all", "repos": []}
    # The filter: `repo=` (CLI --repo, API/MCP) and `repo:NAME` in the question (the bots).
    only = await app.search("product", "how many times does a failed call retry", repo="server")
    assert only.sources and {s.repo for s in only.sources} == {"server"}
    answer = await app.ask("product", "repo:server how many times does a failed call retry")
    assert answer.sources and {s.repo for s in answer.sources} == {"server"}
    assert answer.route.get("query") is None and "repo:" not in answer.text
    from core.errors import BadQuestion

    with pytest.raises(BadQuestion, match="no such repository in this instance"):
        await app.search("product", "anything", repo="nope")


@pytest.mark.asyncio
async def test_naming_only_tilts_with_named_repo_alone_off(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    _, inst = world(tmp_path)
    text = (inst / "product.yaml").read_text()
    (inst / "tilt.yaml").write_text(text + "retrieval: {named_repo_alone: false}\n")
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder)
    try:
        await app.index("product")
        await app.index("tilt")
        q = "what does the README say? (server)"
        found = await app.search("tilt", q, k=2)
        assert found.sources[0].repo == "server" and "narrowed" not in found.route
        assert "repository server named" in found.route["sources"][0]["why"]
        # The narrowed retrieval keeps the first pass's top score, as the whole instance ranked
        # it (what a support channel's min_score is compared with: bot/support.py).
        narrowed = await app.search("product", q, k=2)
        assert narrowed.route["narrowed"]["first_score"] == found.sources[0].score
        assert narrowed.sources[0].score != found.sources[0].score  # the tilt is not in it
    finally:
        await app.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["local", "postgres"])
async def test_a_named_repo_that_leads_is_searched_as_its_filter_on_both_stores(
    tmp_path: Path, fake_embedder: FakeEmbedder, backend: str, request: pytest.FixtureRequest
) -> None:
    """Narrowing is the filter's path on either store: the same sources, in the same order,
    with the same scores as ``repo=server`` for the same text."""
    _, inst = world(tmp_path)
    store = request.getfixturevalue("pg_url") if backend == "postgres" else None
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder, store=store)
    try:
        await app.index("product")
        for q in ("what does the README say? (server)",
                  "the server crashes when the path is empty, where is that handled?"):  # fmt: skip
            named = await app.search("product", q, k=4)
            kept = await app.search("product", q, k=4, repo="server")
            assert named.route["narrowed"]["repo"] == "server", q
            assert [(s.repo, s.path, s.issue, s.start_line) for s in named.sources] == [
                (s.repo, s.path, s.issue, s.start_line) for s in kept.sources], q  # fmt: skip
            assert [s.score for s in named.sources] == pytest.approx(
                [s.score for s in kept.sources], rel=1e-6), q  # fmt: skip
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_support_channel_judges_a_narrowed_question_by_its_first_pass(
    tmp_path: Path, product: dict[str, Any]
) -> None:
    """min_score is compared with the first source's score as the whole instance ranked it
    (route.narrowed.first_score), not with the narrowed retrieval's own top score."""
    from bot.common import ChatCore
    from bot.settings import ServeConfig
    from bot.support import Support
    from core.store.conversations import ConversationStore

    app = product["app"]
    await app.index("product")
    q = "what does the README say? (server)"
    narrowed = await app.search("product", q)
    first, own = narrowed.route["narrowed"]["first_score"], narrowed.sources[0].score
    assert first != own
    store = await ConversationStore.open(tmp_path / "c.sqlite")
    try:
        core = ChatCore(app, store, ServeConfig())
        for min_score in ((first + own) / 2, min(first, own) - 1.0):
            settings = ServeConfig.model_validate({"support": {"channels": [
                {"platform": "slack", "channel": "C1", "min_score": min_score}]}}).support
            support = Support(settings, "slack")
            ch = support.channel("C1")
            assert ch is not None
            found = await support.confident(core, "product", q, ch)
            assert (found is not None) == (first >= min_score), (first, own, min_score)
    finally:
        await store.close()


@pytest.mark.asyncio
async def test_a_bare_number_asked_of_the_named_repository_says_which_is_shown(
    product: dict[str, Any],
) -> None:
    app = product["app"]
    await app.index("product")
    answer = await app.ask("product", "is #12 still open, where the server crashes on an "
                                      "empty path?")  # fmt: skip
    assert answer.route["narrowed"]["repo"] == "server"
    issues = [(s.repo, s.issue) for s in answer.sources if s.issue is not None]
    assert issues[:1] == [("server", 12)]
    assert answer.note == (
        "#12 is in client and server: server#12 is shown (ask about client#12 for another); "
        "searched server alone, the repository the question names: add repo:all to search "
        "beyond it"
    )


@asynccontextmanager
async def server_beside(
    tmp: Path, repos: dict[str, Path], inst: Path, embedder: FakeEmbedder
) -> AsyncIterator[FakeApp]:
    """An app over ``world``'s instance and the server's own one-repository instance, both
    indexed (what a filter to the server should search as)."""
    (inst / "server.yaml").write_text(
        f"repo: {{path: {repos['server']}}}\nweb_url: https://github.com/acme/server\n"
        f"issues: {{file: {tmp / 'server-issues.json'}}}\n"
    )
    app = FakeApp(inst, tmp / "data", lambda: embedder)
    try:
        await app.index("product")
        await app.index("server")
        yield app
    finally:
        await app.close()


@pytest.mark.asyncio
async def test_a_filter_to_one_repo_ranks_as_its_own_instance(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    """``repo:server`` in the instance over both ranks the server's sources with the scores the
    server's own instance gives them: BM25 and coverage use the server's statistics, not both
    repositories' (the learned ranker was fitted on one-repository instances). In this small
    world coverage is what would differ; BM25's own check is the store contract's
    (``test_a_filter_scores_as_its_repositories_own_build``)."""
    repos, inst = world(tmp_path)
    async with server_beside(tmp_path, repos, inst, fake_embedder) as app:
        for q in ("how does the server answer a request on a path?",
                  "deploy the server with docker compose",
                  "the server crashes when the path is empty"):  # fmt: skip
            own = await app.search("server", q, k=6)
            kept = await app.search("product", q, k=6, repo="server")
            assert [(s.path, s.issue, s.start_line) for s in kept.sources] == [
                (s.path, s.issue, s.start_line) for s in own.sources], q  # fmt: skip
            assert [s.score for s in kept.sources] == pytest.approx(
                [s.score for s in own.sources], rel=1e-6), q  # fmt: skip


@pytest.mark.asyncio
async def test_a_filter_names_what_its_repo_names(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    """What a filtered question names outright — a definition, an issue — is found among the
    kept repository's own, as its own instance finds it: the client also defines
    ``HandleRequest`` (spelled as asked, which over both repositories leaves the server's
    ``handle_request`` out) and has an issue #12 of its own."""
    repos, inst = world(tmp_path)
    write_files(repos["client"], {"client/serve.py": """
        def HandleRequest(path):
            return path
        """})  # fmt: skip
    git(repos["client"], "add", "-A")
    git(repos["client"], "commit", "-q", "-m", "serve")
    async with server_beside(tmp_path, repos, inst, fake_embedder) as app:
        for q in ("what does HandleRequest return?", "is #12 still open?"):
            own = await app.search("server", q, k=6)
            kept = await app.search("product", q, k=6, repo="server")
            whys = {c: [e["why"] for e in es] for c, es in own.route["exact"].items()}
            assert {c: [e["why"].removesuffix(" in server") for e in es]  # says which, here
                    for c, es in kept.route["exact"].items()} == whys  # fmt: skip
            assert whys, q
            assert [(s.path, s.issue) for s in kept.sources] == [
                (s.path, s.issue) for s in own.sources], q  # fmt: skip
        every = await app.search("product", "what does HandleRequest return?")
        assert [e["why"] for e in every.route["exact"]["code"]] == ["defines HandleRequest"]


@pytest.mark.asyncio
async def test_read_source_names_the_repo(product: dict[str, Any]) -> None:
    from core.errors import PathNotAllowed

    app = product["app"]
    await app.index("product")
    part = await app.read_source("product", "server:src/app.py", 1, 2)
    assert "def handle_request" in part.text
    sha = git(product["repos"]["server"], "rev-parse", "HEAD").strip()
    assert part.url == f"https://github.com/acme/server/blob/{sha}/src/app.py#L1-L2"
    with pytest.raises(PathNotAllowed, match="REPO:PATH"):
        await app.read_source("product", "src/app.py")


def test_eval_gold_may_name_the_repo() -> None:
    from core.eval.metrics import Gold, is_hit
    from core.models import Source

    def src(repo: str, path: str | None = None, issue: int | None = None) -> Source:
        return Source("docs", "t", "u", "x", 0.0, path=path, issue=issue, repo=repo)

    gold = Gold(paths=["server:README.md", "docs/a.md"], issues=["client#12", 7])
    assert is_hit(src("server", "README.md"), gold) and not is_hit(src("client", "README.md"), gold)
    assert is_hit(src("client", "docs/a.md"), gold)  # a bare path: any repository
    assert is_hit(src("client", issue=12), gold) and not is_hit(src("server", issue=12), gold)
    assert is_hit(src("server", issue=7), gold)
    assert is_hit(src("", "README.md"), gold) and is_hit(src("", issue=12), gold)  # one repo
    with pytest.raises(ValueError, match="REPO#NUMBER"):
        Gold(issues=["client:12"])


@pytest.mark.asyncio
async def test_api_search_takes_repo(product: dict[str, Any]) -> None:
    import httpx
    from face_rig import ApiRig

    app = product["app"]
    await app.index("product")
    api = await ApiRig(app).start()
    try:
        async with httpx.AsyncClient(timeout=60) as c:
            body = {"instance": "product", "query": "how many times does a call retry"}
            r = await c.post(api.url + "/v1/search", json={**body, "repo": "server"})
            assert r.status_code == 200, r.text
            assert {s["repo"] for s in r.json()["sources"]} == {"server"}
            r = await c.post(api.url + "/v1/search", json={**body, "repo": "nope"})
            assert r.status_code == 400 and "no such repository" in r.json()["error"]["message"]
    finally:
        await api.close()


def test_slots_shared_by_repository_fit() -> None:
    """A repository with nothing relevant gets no slot; two that fit share them."""
    from core.models import Chunk
    from core.retrieve.fusion import Candidate
    from core.retrieve.search import select_by_repo

    def cand(repo: str, row: int, score: float) -> Candidate:
        ch = Chunk("docs", f"{repo}:f{row}.md", "t", "t", 1, path=f"f{row}.md", repo=repo)
        return Candidate("docs", row, score, chunk=ch)

    strong = [cand("a", i, 0.9 - i * 0.01) for i in range(6)]
    weak = [cand("b", 10 + i, 0.2 - i * 0.01) for i in range(6)]
    chosen, slots = select_by_repo({"docs": strong + weak}, 6, 0.5)
    assert {h.chunk.repo for h in chosen if h.chunk} == {"a"} and slots == {"docs": 6}
    even = [cand("b", 10 + i, 0.9 - i * 0.01 - 0.005) for i in range(6)]
    chosen, _ = select_by_repo({"docs": strong + even}, 6, 0.5)
    assert sorted(h.chunk.repo for h in chosen if h.chunk) == ["a", "a", "a", "b", "b", "b"]
    # One that fits a little less still gets its share, where one ranked list gives it none.
    from core.retrieve.fusion import select

    close = [cand("b", 10, 0.849), *(cand("b", 11 + i, 0.5 - i * 0.01) for i in range(5))]
    plain, _ = select({"docs": strong + close}, 6, 0.5)
    assert {h.chunk.repo for h in plain if h.chunk} == {"a"}
    chosen, _ = select_by_repo({"docs": strong + close}, 6, 0.5)
    got = [h.chunk.repo for h in chosen if h.chunk]
    assert got.count("b") >= 1 and got.count("a") > got.count("b")


@pytest.mark.asyncio
async def test_pull_request_links_stay_in_their_repo(product: dict[str, Any]) -> None:
    """Both repositories have a pull request #30 that fixes their own #12: "where was client#12
    fixed?" follows the client's, to the client's file only."""
    tmp = product["tmp"]
    for name, path in (("server", "src/app.py"), ("client", "client/http.py")):
        issues = [*ISSUES[name], {
            "number": 30, "title": f"Fix {name} bug", "body": "Fixes #12", "state": "MERGED",
            "labels": [], "comments": [], "files": [{"path": path}],
            "url": f"https://github.com/acme/{name}/pull/30",
            "createdAt": "2024-01-02T00:00:00Z", "closedAt": "2024-01-03T00:00:00Z"}]  # fmt: skip
        (tmp / f"{name}-issues.json").write_text(json.dumps(issues))
    app = product["app"]
    await app.index("product")
    found = await app.retrieve("product", "where was the bug of client#12 fixed?")
    changed = [e for c in ("code", "docs") for e in found.route["exact"].get(c, [])
               if e["why"] == "changed by #30"]  # fmt: skip
    reader = await app.reader("product")
    rows = await reader.chunks("code", [e["row"] for e in changed])
    assert rows and {(c.repo, c.path) for c in rows.values()} == {("client", "client/http.py")}


def test_webhooks_sync_an_instance_for_any_of_its_repos(tmp_path: Path) -> None:
    from bot.webhooks import repo_names, request_for

    (tmp_path / "server").mkdir()
    f = tmp_path / "product.yaml"
    f.write_text(
        "repos:\n"
        "  - {name: server, path: server, web_url: 'https://github.com/acme/server', "
        "issues: {github: acme/server}}\n"
        "  - {name: client, url: 'https://github.com/acme/client.git', ref: main}\n"
    )
    inst = load_instance(f)
    assert repo_names(inst) == {"acme/server", "acme/client"}

    def push(repo: str, ref: str) -> dict[str, Any]:
        return {"ref": ref, "repository": {"full_name": repo, "default_branch": "trunk"}}

    got = request_for(inst, "push", push("acme/client", "refs/heads/main"))
    assert got is not None and got.repo and not got.issues
    assert request_for(inst, "push", push("acme/client", "refs/heads/dev")) is None
    assert request_for(inst, "push", push("acme/server", "refs/heads/trunk")) is not None
    issue = {"action": "edited", "issue": {"number": 5}}
    got = request_for(inst, "issues", {**issue, "repository": {"full_name": "acme/server"}})
    assert got is not None and got.numbers == {5}
    assert (
        request_for(inst, "issues", {**issue, "repository": {"full_name": "acme/client"}}) is None
    )


@pytest.mark.asyncio
async def test_describe_lists_each_repo(product: dict[str, Any]) -> None:
    app = product["app"]
    await app.index("product")
    d = await app.describe("product")
    shas = {n: git(p, "rev-parse", "HEAD").strip() for n, p in product["repos"].items()}
    assert d["repos"] == [
        {
            "name": "server",
            "repository": "https://github.com/acme/server",
            "commit": shas["server"],
        },
        {
            "name": "client",
            "repository": "https://github.com/acme/client",
            "commit": shas["client"],
        },
    ]


@pytest.mark.asyncio
async def test_the_filter_holds_through_the_issue_to_code_hop(product: dict[str, Any]) -> None:
    app = product["app"]
    await app.index("product")
    found = await app.search("product", "repo:client where is the bug from #12?")
    assert found.route["signals"]["issue_to_code"]
    assert found.sources and {s.repo for s in found.sources} == {"client"}
    assert [s.issue for s in found.sources if s.issue is not None] == [12]
