"""An instance over several repositories whose issues come from the GitHub API: each repository
has its own mirror (its own state file locally, the shared store's state named
``{instance}:{repo}`` on PostgreSQL), and a change in one repository's tracker re-embeds only
that thread — on both stores, over the wire against two API stand-ins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import FakeApp, FakeEmbedder, make_repo
from stub_github_api import StubGitHub
from test_multi_repo import CLIENT, SERVER

TOKEN = "ghp_multi_repo_token_0123456789"


@pytest_asyncio.fixture(params=["local", "postgres"])
async def product(
    request: pytest.FixtureRequest, tmp_path: Path, fake_embedder: FakeEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
    monkeypatch.setenv("TEST_GH_TOKEN", TOKEN)
    apis = {"server": StubGitHub("acme/server", token=TOKEN),
            "client": StubGitHub("acme/client", token=TOKEN)}  # fmt: skip
    for api in apis.values():
        await api.start()
    apis["server"].add_issue(12, "Server crashes on empty path", "handle_request fails.")
    apis["client"].add_issue(12, "Client retries forever", "fetch_with_retries never stops.")
    apis["client"].add_issue(42, "Client timeout option", "Add a timeout option.")
    inst = tmp_path / "instances"
    inst.mkdir()
    text = "repos:\n"
    for name, files in (("server", SERVER), ("client", CLIENT)):
        make_repo(tmp_path / name, files)
        text += (
            f"  - name: {name}\n    path: {tmp_path / name}\n"
            f"    web_url: https://github.com/acme/{name}\n"
            f"    issues: {{github: acme/{name}, api_url: '{apis[name].api_url}', "
            "token: '${TEST_GH_TOKEN}'}\n"
        )
    (inst / "product.yaml").write_text(text)
    store = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder, store=store)
    yield {"app": app, "apis": apis, "emb": fake_embedder, "data": tmp_path / "data",
           "store": request.param}  # fmt: skip
    await app.close()
    for api in apis.values():
        await api.stop()


def embedded(emb: FakeEmbedder) -> int:
    return sum(n for n, q in emb.calls if not q)


@pytest.mark.asyncio
async def test_each_repository_has_its_own_mirror_and_only_a_changed_thread_is_embedded(
    product: dict[str, Any],
) -> None:
    app, apis, emb = product["app"], product["apis"], product["emb"]
    first = await app.sync("product")
    assert first.ok, first.errors
    reader = await app.reader("product")
    units = await reader.units()
    assert {"server:issue:12", "client:issue:12", "client:issue:42"} <= set(units)
    for name, api in apis.items():  # each stand-in was asked for its own repository only
        assert api.requests and all(f"/repos/acme/{name}/" in r.path for r in api.requests)

    hits = await app.retrieve("product", "client#12 retries forever")
    first_issue = next(s for s in hits.sources if s.issue is not None)
    assert (first_issue.repo, first_issue.issue) == ("client", 12)

    # A comment on the client's #12: only that thread is fetched again and embedded.
    apis["client"].add_comment(12, "Fixed by bounding fetch_with_retries with max_attempts.")
    emb.calls.clear()
    for api in apis.values():
        api.requests.clear()
    second = await app.sync("product")
    s = second.summary
    assert second.ok and s is not None
    assert s.units_changed == 1 and s.chunks_embedded == embedded(emb) == 1
    # the server's tracker was only listed: none of its threads was fetched again
    assert apis["server"].requests and not any("/issues/12" in r.path
                                               for r in apis["server"].requests)  # fmt: skip
    assert any("/issues/12/comments" in r.path for r in apis["client"].requests)
    answer = await app.ask("product", "client#12: what bounds the retries? max_attempts")
    assert any(src.repo == "client" and src.issue == 12 and "max_attempts" in src.text
               for src in answer.sources)  # fmt: skip

    # The mirrors are apart: the shared store holds one state per repository.
    if product["store"] == "postgres":
        state = app.backend.state
        assert state is not None
        for name, n in (("server", 1), ("client", 2)):
            async with state(f"product:{name}") as db:
                assert (await db.counts())["stored"] == n
    else:
        for name in ("server", "client"):
            assert (product["data"] / "product" / "repos" / name / "state.sqlite").is_file()
