"""Issue 17, "done when": ``repo-expert`` never prints a traceback for bad input. The corpus of
bad inputs the issue found (and a few of their kin), each fed to the CLI in a subprocess: rc 2,
one line on stderr, naming the file, the key or the argument — and at once (no hang)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SAMPLE_REPO, make_repo
from rigs import cli, one_line

ISSUE = {"number": 1, "title": "t", "body": "b"}
LEVELS = zip("abcdefg", "bcdefgh", strict=True)
BOMB = (
    "a: &a [x,x,x,x,x,x,x,x,x]\n"
    + "".join(f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in LEVELS)
    + "repo: {path: '{repo}'}\n"
)  # 9 ** 8 values from 250 bytes


def issues_json(*items: object) -> bytes:
    return json.dumps(list(items)).encode()


# name -> (what goes where, the command, what the line must name)
#   files: {relative path: bytes}; "{repo}" in an instance file is the sample repository.
CORPUS: dict[str, tuple[dict[str, bytes], list[str], list[str]]] = {
    "instance-not-utf8": (
        {"i/w.yaml": "repo: {path: '{repo}'}\ndescription: caf\xe9\n".encode("latin-1")},
        ["instances"], ["i/w.yaml", "not UTF-8"]),
    "instance-alias-bomb": (
        {"i/w.yaml": BOMB.encode()},
        ["instances"], ["i/w.yaml", "aliases expand"]),
    "instance-deep-yaml": (
        {"i/w.yaml": b"repo: {path: '{repo}'}\nx: " + b"[" * 100_000 + b"]" * 100_000},
        ["instances"], ["i/w.yaml", "nested too deeply"]),
    "instance-unclosed-glob": (
        {"i/w.yaml": b"repo: {path: '{repo}'}\nexclude: ['[abc']\n"},
        ["instances"], ["i/w.yaml", "exclude[0]", "'[abc' matches nothing"]),
    "instance-named-dot-dot": (
        {"i/...yaml": b"repo: {path: '{repo}'}\n"}, ["instances"], ["i/...yaml", "'..'"]),
    "issues-not-utf8": (
        {"issues.json": b'[{"number": 1, "title": "caf\xe9"}]'},
        ["index", "w"], ["issues.json", "not UTF-8"]),
    "issues-200k-deep": (
        {"issues.json": b"[" * 200_000 + b"]" * 200_000},
        ["index", "w"], ["issues.json", "nested too deeply"]),
    "issues-comments-5": (
        {"issues.json": issues_json({**ISSUE, "comments": 5})},
        ["index", "w"], ["issues.json[0].comments", "valid list", "(got 5)"]),
    "issues-labels-3": (
        {"issues.json": issues_json({**ISSUE, "labels": 3})},
        ["index", "w"], ["issues.json[0].labels", "(got 3)"]),
    "issues-labels-a-string": (
        {"issues.json": issues_json({**ISSUE, "labels": "bug"})},
        ["index", "w"], ["issues.json[0].labels", "(got 'bug')"]),
    "issues-duplicate-numbers": (
        {"issues.json": issues_json(ISSUE, {**ISSUE, "title": "again"})},
        ["index", "w"], ["issues.json[1].number", "#1 appears twice (also [0])"]),
    "issues-number-2-to-70": (
        {"issues.json": issues_json({**ISSUE, "number": 2**70})},
        ["index", "w"], ["issues.json[0].number", "less than or equal to"]),
    "issues-number-true": (
        {"issues.json": issues_json({**ISSUE, "number": True})},
        ["index", "w"], ["issues.json[0].number", "valid integer", "(got True)"]),
    "issues-number-1.9": (
        {"issues.json": issues_json({**ISSUE, "number": 1.9})},
        ["index", "w"], ["issues.json[0].number", "(got 1.9)"]),
    "question-empty": ({}, ["ask", "w", ""], ["the question is empty"]),
    "question-100k": ({}, ["ask", "w", "why?" * 25_000], ["100,000 characters long"]),
    "name-leaves-the-data-folder": (
        {}, ["ask", "../../outside", "q"], ["'../../outside'", "letters, digits"]),
    "settings-bad-webhook-cap": (
        {"serve.yaml": b"webhooks: {max_body_bytes: 10}\n"},
        ["serve", "webhooks", "--config", "{tmp}/serve.yaml"],
        ["serve.yaml", "webhooks.max_body_bytes", "greater than or equal to 1024"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus") / "widget"
    make_repo(root, SAMPLE_REPO)
    return root


@pytest.mark.parametrize("case", list(CORPUS))
def test_bad_input_is_one_line_never_a_traceback(tmp_path: Path, repo: Path, case: str) -> None:
    files, args, names = CORPUS[case]
    inst = tmp_path / "i"
    inst.mkdir()
    issues = tmp_path / "issues.json"
    issues.write_bytes(issues_json(ISSUE))
    if not any(f.startswith("i/") for f in files):  # the instance every other case uses
        (inst / "w.yaml").write_text(f"repo: {{path: '{repo}'}}\nissues: {{file: '{issues}'}}\n")
    for rel, content in files.items():
        (tmp_path / rel).write_bytes(content.replace(b"{repo}", str(repo).encode()))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    one_line(cli(inst, tmp_path / "data", *args, timeout=60), *names)
