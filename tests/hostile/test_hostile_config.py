"""Issue 17, items 10 and 13 (instance files): a YAML alias bomb, a file that is not UTF-8,
nesting past Python's stack and a glob that can match nothing are each one line naming the file
and key, at once — through ``repo-expert instances`` in a subprocess."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rigs import FAKE_CLI, ROOT, one_line

# 9 ** 8 = 43 million strings from 330 bytes; the alias bound refuses it before anything expands.
BOMB = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]"
            for p, c in zip("abcdefg", "bcdefgh", strict=True)
        ),
        "repo: {path: .}",
    ]
)


def limited_cli(inst: Path, *args: str, mem_mb: int = 1024) -> subprocess.CompletedProcess[str]:
    """The CLI with its address space capped: a blow-up fails there, not on this machine."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb * 2**20, mem_mb * 2**20))

    return subprocess.run(
        [sys.executable, str(FAKE_CLI), "--instances", str(inst), "--data", str(inst / "d"),
         *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT, preexec_fn=cap,
    )  # fmt: skip


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    f = tmp_path / "bomb.yaml"
    f.write_text(BOMB)
    assert len(BOMB) < 500
    t = time.perf_counter()
    r = limited_cli(tmp_path, "instances")
    assert time.perf_counter() - t < 20
    one_line(r, str(f), "aliases expand to more than 100000 values")


def test_a_few_aliases_are_still_fine(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "ok.yaml").write_text(
        "repo: {path: repo}\nexclude: &ex ['**/tasks/**']\ncode: {include: *ex}\n"
    )
    r = limited_cli(tmp_path, "instances")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("name", "content", "names"),
    [
        ("latin1", "repo: {path: .}\ndescription: caf\xe9\n".encode("latin-1"),
         ["not UTF-8", "byte 32"]),
        ("deep", b"repo: {path: .}\nx: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
         ["not valid YAML", "nested too deeply"]),
        ("unclosed", b"repo: [unclosed\n", ["not valid YAML (line 2, column 1)"]),
        ("glob", b"repo: {path: .}\nexclude: ['docs/[abc']\n",
         ["exclude[0]", "'docs/[abc' matches nothing", "unclosed '['"]),
        ("glob2", b"repo: {path: .}\ndocs: {include: ['**/*.md', 'x\\']}\n",
         ["docs.include[1]", "not a valid glob"]),
        ("badtype", b"repo: {path: .}\nretrieval: {k: many}\n", ["retrieval.k", "'many'"]),
    ],
    ids=["latin1", "deep", "unclosed", "glob", "glob2", "badtype"],
)  # fmt: skip
def test_a_bad_instance_file_is_one_line(
    tmp_path: Path, name: str, content: bytes, names: list[str]
) -> None:
    f = tmp_path / f"{name}.yaml"
    f.write_bytes(content)
    one_line(limited_cli(tmp_path, "instances"), str(f), *names)
