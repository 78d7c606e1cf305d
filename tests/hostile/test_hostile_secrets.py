"""Issue 17, item 5: a token GitHub echoes in an error body reaches no output — not stderr, not
``status --json``, not the logs, not the state file — the CLI in a subprocess against the stub
GitHub API."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from helpers import sample_world
from rigs import FAKE_CLI, ROOT
from stub_github_api import StubGitHub

TOKEN = "ghp_EchoedBack0123456789abcdef"


async def run_cli(inst: Path, data: Path, *args: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(FAKE_CLI), "--instances", str(inst),
        "--data", str(data), *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return int(proc.returncode or 0), out.decode() + err.decode()


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["instance-file", "environment"])
async def test_a_token_echoed_by_github_is_never_shown_or_stored(
    tmp_path: Path, where: str
) -> None:
    _, _, inst = sample_world(tmp_path)
    api = StubGitHub()
    await api.start()
    try:
        api.fail(r"/issues$", 401, times=10, message=f"Bad credentials: Bearer {TOKEN}")
        token = "token: '${GH_TEST_TOKEN}', " if where == "instance-file" else ""
        (inst / "widget.yaml").write_text(
            (inst / "widget.yaml").read_text().split("issues:")[0]
            + f"issues: {{github: acme/widget, {token}api_url: '{api.api_url}'}}\n"
        )
        var = "GH_TEST_TOKEN" if where == "instance-file" else "GITHUB_TOKEN"
        env = {**os.environ, var: TOKEN}
        data = tmp_path / "data"
        outputs = []
        for args in (["-v", "sync", "widget", "-q"], ["-v", "index", "widget", "-q"],
                     ["sync", "widget", "--json"], ["status", "--json"], ["status"]):  # fmt: skip
            rc, text = await run_cli(inst, data, *args, env=env)
            assert "Traceback" not in text and rc in (0, 1), (rc, text)  # 1: sync had errors
            outputs.append(text)
        assert any("Bad credentials" in o for o in outputs)  # the error itself is reported
        assert api.requests and api.requests[0].headers.get("Authorization") == f"Bearer {TOKEN}"
    finally:
        await api.stop()
    for o in outputs:
        assert TOKEN not in o, o
    for f in data.rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f
