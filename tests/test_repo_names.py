"""Which repository a question means, in an instance over several: a bare #N that several
have, a repository name that is an ordinary word of the instance, the depth of a filter."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import FakeApp, FakeEmbedder, make_repo
from test_multi_repo import world

from core.config import RetrievalConfig, common_names
from core.retrieve.options import MAX_CANDIDATES, Options
from core.retrieve.repos import named


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


def test_common_names_are_words_most_other_repositories_use() -> None:
    names = {"just": "just", "rack": "rack", "x1": "x1", "x2": "x2", "x3": "x3", "cmd": "just"}
    texts = [("x1", "I just want it"), ("x2", "Just run it."), ("x3", "just-in-time is not it"),
             ("x1", "uses rack middleware"), ("just", "just is a command runner; cmd too"),
             ("x2", "a cmd line")]  # fmt: skip
    # "just": in x1's and x2's (x3's is part of "just-in-time"): 2 of the 4 others, half.
    # "rack": one other. "cmd": its own repository's text and x2's: one other.
    assert common_names(texts, names) == ["just"]
    assert common_names(texts[:1], names) == []  # one other repository is never enough
    assert common_names([("server", "the client calls"), ("client", "the server")],
                        {"server": "server", "client": "client"}) == []  # fmt: skip


def test_a_common_name_names_its_repository_only_as_code() -> None:
    aliases = {"just": "just", "yargs": "yargs"}
    assert named("I just want yargs to stop", aliases) == ["just", "yargs"]
    assert named("I just want yargs to stop", aliases, {"just"}) == ["yargs"]
    assert named("how does `just` pass signals?", aliases, {"just"}) == ["just"]


RUNNER = {"README.md": "# just\n\njust is a command runner: recipes in a justfile.\n",
          "src/run.py": "def run_recipe(name):\n    return name\n"}  # fmt: skip


@pytest.mark.asyncio
async def test_a_repository_named_by_an_ordinary_word(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    """Three repositories, two of whose texts say "just" as a word: the build records the name
    as common, and "I just want …" tilts toward no repository while `just` still names it."""
    repos, inst = world(tmp_path)
    make_repo(tmp_path / "just", RUNNER)
    (repos["server"] / "README.md").write_text("# Server\n\nJust run it on port 8080.\n")
    (repos["client"] / "README.md").write_text("# Client\n\nIt just retries a failed call.\n")
    for r in ("server", "client"):
        make_repo(repos[r], {})  # commit the new README
    text = (inst / "product.yaml").read_text()
    (inst / "product.yaml").write_text(text + f"  - name: just\n    path: {tmp_path / 'just'}\n")
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder)
    try:
        await app.index("product")
        assert (await app.reader("product")).meta["common_names"] == ["just"]
        found = await app.search("product", "I just want the client to retry")
        assert found.route["signals"]["repos"] == ["client"]
        found = await app.search("product", "how does `just` run a recipe?")
        assert found.route["signals"]["repos"] == ["just"]
    finally:
        await app.close()


def test_deeper_counts_repositories_and_is_capped() -> None:
    one = Options.of(RetrievalConfig())
    assert one.deeper() is one  # one repository: nothing to go deeper for
    two = dataclasses.replace(one, aliases={"a": "a", "sdk": "b", "b": "b"})
    assert two.deeper().config.candidates == one.config.candidates * 2
    many = dataclasses.replace(one, aliases={str(i): str(i) for i in range(1000)})
    assert many.deeper().config.candidates == MAX_CANDIDATES
