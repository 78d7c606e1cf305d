"""Scopes and a channel's default repositories, in an instance over several repositories.

``scopes:`` names groups of an instance's repositories; a scope's name filters like a
repository's (``repo:NAME``, ``--repo``, the API's ``repo``), ``repo:all`` keeps every one, and
``access.*.channel_repos`` gives a channel's questions a default filter that a question's own
``repo:`` replaces. The channel default is tested over the wire, through the Slack adapter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import FakeApp, FakeEmbedder, config_error, make_repo
from stub_bot_core import section_texts
from stub_slack_api import StubSlackApi
from test_slack import World, ack_text, command, mention

from core.config import load_instance, scopes
from core.errors import BadQuestion
from core.store.conversations import ConversationStore

REPOS = {
    "server": {
        "README.md": "# Server\n\nThe server retries a failed request twice before it answers "
        "with an error.\n",
        "src/app.py": 'def handle_request(path):\n    """Answer one request."""\n    return path\n',
    },
    "worker": {
        "README.md": "# Worker\n\nThe worker retries a failed job five times with backoff.\n",
        "jobs.py": 'def run_job(job):\n    """Run one job, retrying a failed job."""\n',
    },
    "client": {
        "README.md": "# Client\n\nThe client retries a failed call three times with backoff.\n",
        "client/http.py": 'def fetch(url):\n    """Fetch url, retrying a failed call."""\n',
    },
}
ISSUE = {
    "title": "Retries never stop",
    "body": "A failed call retries forever.",
    "state": "OPEN",
    "labels": [],
    "comments": [],
    "createdAt": "2024-01-01T00:00:00Z",
    "closedAt": None,
}
QUESTION = "how many times does a failed call retry with backoff"


def world(tmp: Path, extra: str = "") -> Path:
    """Three real git repositories, each with an issue #7 (the client also #9), in one instance
    with a scope."""
    inst = tmp / "instances"
    inst.mkdir()
    entries = []
    for name, files in REPOS.items():
        make_repo(tmp / name, files)
        issues = [{**ISSUE, "number": n, "url": f"https://github.com/acme/{name}/issues/{n}"}
                  for n in ([7, 9] if name == "client" else [7])]  # fmt: skip
        (tmp / f"{name}-issues.json").write_text(json.dumps(issues))
        entries.append(f"  - name: {name}\n    path: {tmp / name}\n"
                       f"    web_url: https://github.com/acme/{name}\n"
                       f"    issues: {{file: {tmp / f'{name}-issues.json'}}}\n")  # fmt: skip
    (inst / "product.yaml").write_text(
        "repos:\n" + "".join(entries) + "scopes:\n  backend: [server, Worker]\n" + extra
    )
    return inst


@pytest_asyncio.fixture
async def product(tmp_path: Path, fake_embedder: FakeEmbedder) -> Any:
    inst = world(tmp_path, "access:\n  slack:\n    channel_repos: {CBACK: backend, CSRV: server}\n")
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder)
    await app.index("product")
    yield app
    await app.close()


def test_scopes_and_channel_defaults_are_checked_at_load(tmp_path: Path) -> None:
    inst = world(tmp_path)
    got = load_instance(inst / "product.yaml")
    names = scopes(got)
    assert names["backend"] == ("server", "worker")  # in repos order, an alias-free name each
    assert names["client"] == ("client",) and names["all"] == ("server", "worker", "client")
    repos = (inst / "product.yaml").read_text().split("scopes:")[0]
    msg = config_error(tmp_path, repos + (
        "scopes:\n  backend: [server, nope]\n  client: [client]\n  all: [server]\n  empty: []\n"
        "  'no good': [server]\n"
        "access:\n  discord:\n    channel_repos: {123: frontend}\n"
    ))  # fmt: skip
    assert str(tmp_path / "bad.yaml") in msg
    assert "scopes.backend[1]: 'nope' is no repository of this instance" in msg
    assert "scopes.client: 'client' is already a repository's name" in msg
    assert "scopes.all: 'all' is reserved" in msg
    assert "scopes.empty: expected a list of repository names, got none" in msg
    assert "scopes.no good: use letters" in msg
    assert "access.discord.channel_repos.123: 'frontend' is no repository or scope" in msg
    msg = config_error(tmp_path, repos.replace("name: client", "name: all") + (
        "scopes:\n  py: [server]\n  PY: [worker]\n"
        "access:\n  slack:\n    channel_repos: {C9: all}\n"
    ))  # fmt: skip
    assert "repos[2]: 'all' is reserved (repo:all searches every repository)" in msg
    assert "scopes.PY: the same name as scopes.py (names ignore case)" in msg
    assert "access.slack.channel_repos.C9: 'all' is what a channel without a default" in msg
    one = f"repo: {{path: {tmp_path / 'server'}}}\n"
    msg = config_error(tmp_path, one + "scopes:\n  x: [server]\n")
    assert "scopes: only an instance over several repositories" in msg
    msg = config_error(tmp_path, one + "access:\n  slack:\n    channel_repos: {C1: server}\n")
    assert "access.slack.channel_repos.C1: only an instance over several" in msg


def test_a_discord_channel_id_written_as_a_number_is_its_text() -> None:
    from core.config import AccessConfig

    access = AccessConfig.model_validate(
        {"discord": {"channel_repos": {112233445566778899: "backend"}}}
    )
    assert access.channel_repo("discord", "112233445566778899") == "backend"
    assert access.channel_repo("slack", "112233445566778899") is None


@pytest.mark.asyncio
async def test_a_scope_filters_like_a_repository_and_all_lifts_it(product: FakeApp) -> None:
    plain = await product.search("product", QUESTION, k=6)
    assert plain.sources[0].repo == "client"  # its README says it outright
    assert "filter" not in plain.route
    for found in (await product.search("product", QUESTION, repo="backend"),
                  await product.search("product", f"repo:Backend {QUESTION}")):  # fmt: skip
        assert found.sources and {s.repo for s in found.sources} <= {"server", "worker"}
        assert found.route["filter"] == {"name": "backend", "repos": ["server", "worker"]}
    # Inside a scope, naming one of its repositories still tilts toward it; leading, it is
    # answered from alone, and the filter asked for is still the scope.
    named = await product.search("product", f"repo:backend {QUESTION} (worker)")
    assert named.sources[0].repo == "worker" and {s.repo for s in named.sources} == {"worker"}
    assert named.route["narrowed"]["repo"] == "worker"
    assert named.route["filter"] == {"name": "backend", "repos": ["server", "worker"]}
    # A repository the scope does not keep is not searched for being named.
    outside = await product.search("product", f"repo:backend {QUESTION} (client)")
    assert {s.repo for s in outside.sources} <= {"server", "worker"}
    assert "narrowed" not in outside.route
    every = await product.search("product", f"repo:all {QUESTION}", k=6)
    assert [s.chunk_id for s in every.sources] == [s.chunk_id for s in plain.sources]
    assert every.route["filter"] == {"name": "all", "repos": []}
    ended = await product.search("product", f"{QUESTION}, in repo:all.", k=6)
    assert ended.route["filter"]["name"] == "all"  # the sentence's full stop is no part of it
    with pytest.raises(BadQuestion, match=r"known: client, server, worker; scopes: backend"):
        await product.search("product", QUESTION, repo="frontend")


@pytest.mark.asyncio
async def test_a_bare_number_in_a_scope_is_one_of_its_repositories(product: FakeApp) -> None:
    """#7 is in all three: with the backend scope the issue and the code the hop finds are the
    scope's; with one repository kept, that repository's."""
    q = "where is the bug from issue #7 about a failed call that retries forever?"
    scoped = await product.search("product", q, repo="backend")
    assert scoped.sources and {s.repo for s in scoped.sources} <= {"server", "worker"}
    assert scoped.sources[0].collection == "issues" and scoped.sources[0].issue == 7
    one = await product.search("product", q, repo="client")
    assert {s.repo for s in one.sources} == {"client"} and one.sources[0].issue == 7
    # What the answer says of a #N that several repositories have: only the kept ones.
    plain = await product.ask("product", "is #7 still open?")
    assert "#7 is in client, server and worker" in plain.note
    backend = await product.ask("product", "is #7 still open?", repo="backend")
    assert backend.route["signals"]["issues_in_several"] == {"7": ["server", "worker"]}
    assert "client" not in backend.note and "#7 is in server and worker" in backend.note
    server = await product.ask("product", "is #7 still open?", repo="server")
    assert "is in" not in server.note and server.route["signals"]["repo_issues"] == {"7": "server"}
    # A follow-up's own repo: replaces the one of the turn it follows.
    from core.models import Turn

    turn = [Turn(f"repo:worker {QUESTION}", "The worker retries a failed job five times.")]
    follow = await product.ask("product", "and repo:client with backoff?", conversation=turn)
    assert follow.route["filter"]["name"] == "client"
    assert {s.repo for s in follow.sources} == {"client"}
    # #9 is only the client's: the backend scope answers from its own repositories.
    other = await product.search("product", q.replace("#7", "#9"), repo="backend")
    assert other.sources and {s.repo for s in other.sources} <= {"server", "worker"}


@pytest.mark.asyncio
async def test_a_channel_default_over_the_wire_and_a_question_that_lifts_it(
    tmp_path: Path, product: FakeApp
) -> None:
    stub = StubSlackApi()
    await stub.start()
    store = await ConversationStore.open(tmp_path / "conversations.sqlite")
    w = World({"app": product}, stub, store)
    w.make_bot()
    try:

        async def ask(text: str, channel: str, user: str = "U1") -> list[str]:
            n = len(stub.of("chat.update"))
            assert ack_text(await w.send(command(w, text, channel=channel, user=user))) == ""
            await w.settle()
            return section_texts(stub.of("chat.update")[n]["blocks"])

        scoped = "\n".join(await ask(f"product {QUESTION}", "CBACK"))
        assert "acme/worker" in scoped and "acme/client" not in scoped
        assert ("searched backend (server, worker), this channel's default: add repo:all to "
                "search every repository") in scoped  # fmt: skip
        one = "\n".join(await ask(f"product {QUESTION}", "CSRV"))
        assert "acme/worker" not in one and "acme/client" not in one
        assert "searched server, this channel's default" in one
        lifted = "\n".join(await ask(f"product repo:all {QUESTION}", "CBACK"))
        assert "acme/client" in lifted and "this channel's default" not in lifted
        other = "\n".join(await ask(f"product repo:client {QUESTION}", "CBACK"))
        assert "acme/client" in other and "acme/server" not in other
        elsewhere = "\n".join(await ask(f"product {QUESTION}", "CGEN"))
        assert "acme/client" in elsewhere and "this channel's default" not in elsewhere
        assert "alone" not in elsewhere
        # A question that names the repository that leads says it was searched alone.
        named = "\n".join(await ask(f"product {QUESTION} in the worker", "CGEN", "U2"))
        assert "acme/worker" in named and "acme/client" not in named
        assert ("searched worker alone, the repository the question names: add repo:all to "
                "search beyond it") in named  # fmt: skip
        # A thread that lifted the default keeps it lifted for its follow-ups.
        for text, ts, thread in ((f"product repo:all {QUESTION}", "300.000100", None),
                                 ("and how many times with backoff?", "300.000200",
                                  "300.000100")):  # fmt: skip
            n = len(stub.calls)
            await w.send(mention(text, ts, channel="CBACK", thread_ts=thread, user="U7"))
            await w.settle()
            blocks = [c.args["blocks"] for c in stub.calls[n:] if "blocks" in c.args]
            last = "\n".join(section_texts(blocks[-1]))
            assert "this channel's default" not in last
        assert "acme/client" in last
        # A new question in that thread (no follow-up of the lifted one): the default again.
        n = len(stub.calls)
        await w.send(mention("Where does the server answer one request path?", "300.000300",
                             channel="CBACK", thread_ts="300.000100", user="U7"))  # fmt: skip
        await w.settle()
        blocks = [c.args["blocks"] for c in stub.calls[n:] if "blocks" in c.args]
        # It names the server, which leads: searched alone, inside the channel's default.
        assert ("searched server alone, the repository the question names: add repo:all to "
                "search beyond it; within backend (server, worker), this channel's "
                "default") in "\n".join(
            section_texts(blocks[-1]))  # fmt: skip
    finally:
        assert w.bot is not None
        await w.bot.drain()
        await store.close()
        await stub.stop()


@pytest.mark.asyncio
async def test_a_filter_scores_the_kept_repositories_as_their_own_pool(product: FakeApp) -> None:
    """The candidates of a filtered question are the kept repositories' rows, ranked and
    normalised among themselves (the ranker's features as that repository's own instance
    computes them), not among every repository's."""
    from core.retrieve.analyse import analyse
    from core.retrieve.candidates import find
    from core.retrieve.options import Options
    from core.retrieve.repos import repo_options

    inst = product.instance("product")
    reader = await product.reader("product")
    q = await product.embedder("product").embed_query(QUESTION)
    for repo in ("worker", "backend"):
        opt = repo_options(inst, Options.of(inst.retrieval), repo)
        found = await find(reader, q, QUESTION, analyse(QUESTION, opt.aliases), opt)
        hits = [h for hs in found.hits.values() for h in hs]
        assert hits and all(h.chunk is not None and h.chunk.repo in opt.keep for h in hits)
        for hs in found.hits.values():
            ranks = sorted(h.dense_rank for h in hs if h.dense_rank is not None)
            assert ranks == list(range(len(ranks)))
            lex = [h.lex for h in hs if h.lex]
            assert not lex or max(lex) == pytest.approx(1.0)


@pytest.mark.asyncio
async def test_the_api_and_mcp_take_a_scope_and_list_it(tmp_path: Path, product: FakeApp) -> None:
    """The HTTP API's ask (plain and streamed) and search, and MCP's ask through the SDK's own
    client, keep a scope's repositories; the instance listing shows the scopes."""
    import httpx
    from face_rig import ApiRig
    from mcp import Client

    from bot.gateway import Gateway
    from bot.mcp import build_server
    from bot.settings import ServeConfig

    api = await ApiRig(product).start()
    try:
        async with httpx.AsyncClient(timeout=60) as c:
            listed = (await c.get(api.url + "/v1/instances")).json()["instances"]
            assert listed[0]["scopes"] == {"backend": ["server", "worker"]}
            body = {"instance": "product", "question": QUESTION}
            r = await c.post(api.url + "/v1/ask", json={**body, "repo": "backend"})
            assert r.status_code == 200, r.text
            got = r.json()
            assert got["sources"] and {s["repo"] for s in got["sources"]} <= {"server", "worker"}
            assert got["route"]["filter"] == {"name": "backend", "repos": ["server", "worker"]}
            # The answer's own lines name each source's repository too.
            assert "• worker: README.md › Worker: " in got["answer"]
            assert "this channel's default" not in got["note"]  # asked for, not a default
            # The caller's scope, a question naming the worker (which leads): the worker alone,
            # and the search says so; repo:all in the query searches the whole scope.
            named = {"instance": "product", "query": f"{QUESTION} (worker)", "repo": "backend"}
            got = (await c.post(api.url + "/v1/search", json=named)).json()
            assert {s["repo"] for s in got["sources"]} == {"worker"}
            assert got["narrowed"]["repo"] == "worker"
            whole = {**named, "query": f"repo:all {QUESTION} (worker)"}
            got = (await c.post(api.url + "/v1/search", json=whole)).json()
            assert "narrowed" not in got and got["sources"]
            assert {s["repo"] for s in got["sources"]} <= {"server", "worker"}
            alone = (await c.post(api.url + "/v1/search", json=named)).json()["sources"]
            assert got["sources"][0]["score"] != alone[0]["score"]  # the scope's pool, tilted
            got = (await c.post(api.url + "/v1/search", json={**named, "repo": None,
                                                              "query": QUESTION})).json()
            assert "narrowed" not in got  # names none
            r = await c.post(api.url + "/v1/ask", json={**body, "repo": "client", "stream": True})
            assert r.status_code == 200 and '"repo": "client"' in r.text
            assert '"repo": "server"' not in r.text and '"repo": "worker"' not in r.text
            for bad, why in ((7, "repo must be a repository or scope name"),
                             ("nope", "no such repository")):  # fmt: skip
                r = await c.post(api.url + "/v1/ask", json={**body, "repo": bad, "stream": True})
                assert r.status_code == 400 and why in r.json()["error"]["message"]
    finally:
        await api.close()
    store = await ConversationStore.open(tmp_path / "mcp.sqlite")
    try:
        gw = Gateway(product, store, ServeConfig(), product.load_instances())
        async with Client(build_server(gw)) as client:
            res = await client.call_tool("ask", {"instance": "product", "question": QUESTION,
                                                 "repo": "backend"})  # fmt: skip
            got = json.loads(res.content[0].text)
            assert got["sources"] and {s["repo"] for s in got["sources"]} <= {"server", "worker"}
    finally:
        await store.close()


@pytest.mark.asyncio
async def test_the_apis_default_repo_is_a_default_as_a_channels(product: FakeApp) -> None:
    """``default_repo`` (what the web page's *Search in* sends): a question that says
    ``repo:`` itself, and its follow-ups, search as they say; ``repo`` wins over it."""
    import httpx
    from face_rig import ApiRig

    api = await ApiRig(product).start()
    try:
        async with httpx.AsyncClient(timeout=60) as c:
            body = {"instance": "product", "question": QUESTION}
            dflt = {**body, "default_repo": "backend"}
            got = (await c.post(api.url + "/v1/ask", json=dflt)).json()
            assert got["route"]["filter"]["name"] == "backend"
            lifted = (await c.post(api.url + "/v1/ask", json={
                **dflt, "question": f"repo:all {QUESTION}"})).json()  # fmt: skip
            assert "client" in {s["repo"] for s in lifted["sources"]}
            follow = (await c.post(api.url + "/v1/ask", json={
                **dflt, "question": "and how many times with backoff?",
                "conversation": lifted["conversation"]})).json()  # fmt: skip
            assert follow["route"]["filter"]["name"] == "all"
            assert "client" in {s["repo"] for s in follow["sources"]}
            again = (await c.post(api.url + "/v1/ask", json={**dflt, "repo": "client"})).json()
            assert {s["repo"] for s in again["sources"]} == {"client"}  # repo wins over it
            bad = await c.post(api.url + "/v1/ask", json={**body, "default_repo": "nope",
                                                          "stream": True})  # fmt: skip
            assert bad.status_code == 400 and "no such repository" in bad.json()["error"]["message"]
    finally:
        await api.close()


def _drive_scopes(url: str, tmp: Path) -> dict[str, Any]:
    """The web page in a real browser: the scope picker of an instance over several
    repositories, and sources labelled with their repository."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait
    from test_web import chrome

    d = chrome(tmp / "profile")
    seen: dict[str, Any] = {}
    try:
        wait = WebDriverWait(d, 60)
        d.get(url + "/")
        wait.until(lambda d: not d.find_element(By.ID, "scope-field").get_attribute("hidden"))
        seen["info"] = d.find_element(By.ID, "instance-info").text
        pick = Select(d.find_element(By.ID, "scope"))
        seen["options"] = [(o.get_attribute("value"), o.text) for o in pick.options]
        seen["labelled"] = d.execute_script(
            "return [...document.querySelectorAll('select')].every((e) => e.labels.length > 0)"
        )
        pick.select_by_value("backend")
        d.find_element(By.ID, "question").send_keys(QUESTION, Keys.ENTER)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".turn .sources .source"))
        seen["status"] = d.find_element(By.ID, "status").text
        seen["sources"] = [e.text for e in d.find_elements(By.CSS_SELECTOR, ".sources .source")]
        pick.select_by_value("")
        d.find_element(By.ID, "question").send_keys(QUESTION, Keys.ENTER)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn .feedback")) == 2)
        last = d.find_elements(By.CSS_SELECTOR, ".turn")[-1]
        seen["all"] = [e.text for e in last.find_elements(By.CSS_SELECTOR, ".sources .source")]
        # The picker is a default: a question's own repo: is searched as it says.
        pick.select_by_value("backend")
        d.find_element(By.ID, "question").send_keys(f"repo:client {QUESTION}", Keys.ENTER)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn .feedback")) == 3)
        last = d.find_elements(By.CSS_SELECTOR, ".turn")[-1]
        seen["own"] = [e.text for e in last.find_elements(By.CSS_SELECTOR, ".sources .source")]
        # … and so is a follow-up of it: the thread said where to look.
        d.find_element(By.ID, "question").send_keys("and how many times with backoff?", Keys.ENTER)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn .feedback")) == 4)
        last = d.find_elements(By.CSS_SELECTOR, ".turn")[-1]
        seen["follow"] = [e.text for e in last.find_elements(By.CSS_SELECTOR, ".sources .source")]
    finally:
        d.quit()
    return seen


@pytest.mark.asyncio
async def test_the_web_page_picks_a_scope_in_a_real_browser(
    tmp_path: Path, product: FakeApp
) -> None:
    import asyncio

    from face_rig import ApiRig

    api = await ApiRig(product).start()
    try:
        seen = await asyncio.to_thread(_drive_scopes, api.url, tmp_path)
    finally:
        await api.close()
    assert seen["options"] == [
        ("", "All repositories"),
        ("backend", "backend (server, worker)"),
        ("server", "server"),
        ("worker", "worker"),
        ("client", "client"),
    ]
    assert seen["labelled"] and seen["status"].startswith("Answered")
    assert seen["info"].endswith("3 repositories, each indexed at its own commit")
    assert seen["sources"] and all(s.startswith(("server: ", "worker: ", "server#", "worker#"))
                                   for s in seen["sources"])  # fmt: skip
    assert any(s.startswith("client: ") for s in seen["all"])  # every repository again
    assert seen["own"] and all(s.startswith(("client: ", "client#")) for s in seen["own"])
    assert seen["follow"] and all(s.startswith(("client: ", "client#")) for s in seen["follow"])
