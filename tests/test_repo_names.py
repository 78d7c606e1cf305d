"""Which repository a question means, in an instance over several: a bare #N that several
have."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FakeApp, FakeEmbedder
from test_multi_repo import world


@pytest.mark.asyncio
async def test_a_bare_number_in_several_repos_means_the_thread_that_fits(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    """#12 is the server's and the client's: the question's own words say which it means, that
    one comes first, and it is the one the issue → code hop follows."""
    _, inst = world(tmp_path)  # test_multi_repo's two repositories, #12 in both
    app = FakeApp(inst, tmp_path / "data", lambda: fake_embedder)
    try:
        await _bare_number(app)
    finally:
        await app.close()


async def _bare_number(app: FakeApp) -> None:
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


def test_the_note_names_every_repository_and_which_came_first() -> None:
    from core.retrieve.narrow import several_note

    signals = {"issues_in_several": {"2281": ["gson", "jsoup", "urfave-cli"]},
               "repo_issues": {"2281": "urfave-cli"}}  # fmt: skip
    assert several_note(signals) == (
        "#2281 is in gson, jsoup and urfave-cli: urfave-cli#2281 fits the question best and "
        "comes first (ask about gson#2281 for another)"
    )
    assert several_note({"issues_in_several": {"12": ["client", "server"]}}) == (
        "#12 is in client and server: all are shown"
    )
    assert several_note({}) == ""
