"""Pull requests' changed files and the issues they close, from the gh JSON shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.ingest.issues import Issue, closing_refs, issue_document, load_issues_file


def parse_issues(tmp: Path, *items: dict[str, Any]) -> list[Issue]:
    """The items as an issues file reads them (the loader every instance uses)."""
    f = tmp / "issues.json"
    f.write_text(json.dumps(list(items)))
    return load_issues_file(f)


def test_gh_json_files_and_closing_references(tmp_path: Path) -> None:
    pr, issue = parse_issues(
        tmp_path,
        {
            "number": 9, "title": "Apply the timeout", "url": "https://github.com/o/r/pull/9",
            "body": "This fixes #42 and closes #7. See #3 (not closed).",
            "files": [{"path": "src/config.py", "additions": 3}, {"path": "README.md"}],
            "closingIssuesReferences": [{"number": 5}],
        },
        {"number": 42, "title": "t", "body": "fixes #1"},
    )  # fmt: skip
    assert pr.is_pr and pr.files == ("src/config.py", "README.md")
    assert pr.fixes == (5, 42, 7)  # the API's references first, then the body's keywords
    doc = issue_document(pr, None)
    assert (
        "Fixes: #5, #42, #7" in doc.text and "Files changed: src/config.py, README.md" in doc.text
    )
    assert doc.files == pr.files and doc.fixes == pr.fixes
    assert issue.fixes == () and not issue.is_pr  # an issue's text closes nothing


def test_closing_keywords() -> None:
    assert closing_refs("Fixes #12, resolves #3; Closed: #4. fix#5 prefix#6") == (12, 3, 4)
    assert closing_refs("relates to #9") == ()
