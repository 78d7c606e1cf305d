"""The sentence support check: what it flags, what it lets through, and why."""

from __future__ import annotations

import numpy as np
import pytest

from core.answer.support import check_support, split_sentences
from core.models import Source

README = Source(
    collection="docs", title="Widget › Configuration", url="u1", score=1.0, path="README.md",
    text="README.md › Widget › Configuration\nThe timeout option sets how long a request may "
    "take. The default timeout is thirty seconds. Set it in widget.toml under the network "
    "section.",
)  # fmt: skip
ISSUE = Source(
    collection="issues", title="#42 Timeout ignored", url="u2", score=0.9, issue=42,
    text="#42 Timeout ignored when parse_config reads widget.toml\nIssue · closed · bug\n\n"
    "The timeout setting in widget.toml is ignored: requests hang forever. Fixed in "
    "parse_config by setdefault.",
)  # fmt: skip


async def verdicts(text: str, sources: list[Source] | None = None, **kw) -> list[tuple[str, str]]:
    rep = await check_support(text, sources or [README, ISSUE], **kw)
    return [(s.text, s.reason) for s in rep.sentences]


@pytest.mark.asyncio
async def test_supported_paraphrase_and_invented_fact() -> None:
    rep = await check_support(
        "The timeout option limits how long a request may take [1]. Widget stores charts in a "
        "PostgreSQL cluster [1]. Requests hung forever because widget.toml was ignored [2].",
        [README, ISSUE],
    )
    assert [s.supported for s in rep.sentences] == [True, False, True]
    bad = rep.unsupported[0]
    assert bad.reason == "low overlap" and bad.lexical < 0.5 and bad.cited == [1]
    assert rep.score() == pytest.approx(2 / 3)


@pytest.mark.asyncio
async def test_numbers_must_match_and_number_words_count() -> None:
    assert await verdicts("The default timeout is 30 seconds [1].") == [
        ("The default timeout is 30 seconds [1].", "")
    ]
    rep = await check_support("The default timeout is 60 seconds [1].", [README])
    assert rep.unsupported[0].missing_numbers == ["60"]
    assert rep.unsupported[0].reason == "wrong or unknown number"


@pytest.mark.asyncio
async def test_citing_the_wrong_source_is_flagged() -> None:
    # True of source 2, cited to source 1.
    rep = await check_support("parse_config fixed it with setdefault [1].", [README, ISSUE])
    assert not rep.sentences[0].supported
    rep = await check_support("parse_config fixed it with setdefault [2].", [README, ISSUE])
    assert rep.sentences[0].supported


@pytest.mark.asyncio
async def test_a_citation_at_the_end_of_a_paragraph_covers_it() -> None:
    rep = await check_support(
        "The timeout option sets how long a request may take. The default is thirty seconds [1]."
        "\n\nWidget also exports charts to PDF and PowerPoint files.",
        [README],
    )
    first, second, third = rep.sentences
    assert first.cited == [1] and first.supported  # inherited from the next sentence
    assert second.supported
    assert third.cited == [] and not third.supported and third.reason == "no citation"


@pytest.mark.asyncio
async def test_non_claims_code_and_headings_are_not_checked() -> None:
    text = "## Answer\nHere is how:\n```toml\ntimeout = 99\n```\n- Set it in widget.toml [1]."
    assert await verdicts(text, [README]) == [("Set it in widget.toml [1].", "")]
    assert split_sentences("First one. Second one [1].\n\n* third") == [
        ["First one.", "Second one [1]."],
        ["third"],
    ]


@pytest.mark.asyncio
async def test_semantic_rescue_only_for_low_overlap_and_failures_are_tolerated() -> None:
    spanish = "El tiempo de espera predeterminado limita cada petición [1]."
    seen: list[list[str]] = []

    async def close(sentences: list[str], passages: list[str]) -> np.ndarray:
        seen.append(sentences)
        return np.full((len(sentences), len(passages)), 0.9)

    rep = await check_support(f"{spanish} El valor es 60 segundos [1].", [README], close)
    assert [s.supported for s in rep.sentences] == [True, False]
    assert rep.sentences[0].semantic == pytest.approx(0.9)
    assert seen == [["El tiempo de espera predeterminado limita cada petición."]]  # not the "60"

    async def far(sentences: list[str], passages: list[str]) -> np.ndarray:
        return np.full((len(sentences), len(passages)), 0.5)

    rep = await check_support(spanish, [README], far)
    assert rep.sentences[0].reason == "other language than its source: not verified"

    async def broken(sentences: list[str], passages: list[str]) -> np.ndarray:
        raise RuntimeError("model gone")

    rep = await check_support(spanish, [README], broken)
    assert not rep.sentences[0].supported and rep.sentences[0].semantic is None


@pytest.mark.asyncio
async def test_no_claims_means_no_score() -> None:
    assert (await check_support("", [README])).score() is None
    assert (await check_support("Sure.", [README])).score() is None
