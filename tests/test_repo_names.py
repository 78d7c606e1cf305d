"""Which repository a question means, in an instance over several: a bare #N that several
have; how deep a repository filter looks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import FakeApp, FakeEmbedder
from test_multi_repo import world

from core.config import RetrievalConfig
from core.retrieve.options import MAX_CANDIDATES, Options


@pytest_asyncio.fixture
async def product(tmp_path: Path, fake_embedder: FakeEmbedder) -> Any:
    repos, inst = world(tmp_path)
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder)
    yield {"repos": repos, "app": app, "tmp": tmp_path, "instances": inst}
    await app.close()


@pytest.mark.asyncio
async def test_a_bare_number_in_several_repos_means_the_thread_that_fits(
    product: dict[str, Any],
) -> None:
    """#12 is the server's and the client's: the question's own words say which it means, that
    one comes first, and it is the one the issue → code hop follows."""
    app = product["app"]
    await app.index("product")
    for q, repo in (
        ("is #12 still open, the one where the server crashes on an empty path?", "server"),
        ("is #12 still open, the one where the client retries forever?", "client"),
    ):
        found = await app.search("product", q)
        assert found.route["signals"]["issues_in_several"] == {"12": ["client", "server"]}
        assert found.route["signals"]["repo_issues"] == {"12": repo}, q
        assert [s.repo for s in found.sources if s.issue == 12][:1] == [repo], q
    found = await app.search("product", "where is the bug from #12 (fetch_with_retries never "
                                        "stops retrying)?")  # fmt: skip
    assert found.route["signals"]["issue_to_code"]
    assert [(s.repo, s.issue) for s in found.sources if s.issue is not None] == [("client", 12)]
    assert [s.path for s in found.sources if s.collection == "code"][:1] == ["client/http.py"]


def test_deeper_counts_repositories_and_is_capped() -> None:
    one = Options.of(RetrievalConfig())
    assert one.deeper() is one  # one repository: nothing to go deeper for
    two = dataclasses.replace(one, aliases={"a": "a", "sdk": "b", "b": "b"})
    assert two.deeper().config.candidates == one.config.candidates * 2
    many = dataclasses.replace(one, aliases={str(i): str(i) for i in range(1000)})
    assert many.deeper().config.candidates == MAX_CANDIDATES
