"""Issue 17, item 4 and the Slack API base URL: a signed request replayed (or retried by Slack)
is answered once; ``slack.api_url`` points the whole bot — ``repo-expert serve slack`` in a
process of its own — at a local stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
import pytest_asyncio
from face_rig import ROOT, fake_serve_argv
from helpers import sample_world
from rigs import SlackRig, close_slack, slack_rig
from stub_bot_core import add_instances
from stub_slack_api import StubSlackApi


@pytest_asyncio.fixture
async def slack(sample: dict[str, Any]) -> AsyncIterator[SlackRig]:
    rig, _ = await slack_rig(sample)
    yield rig
    await close_slack(rig)


def answers(rig: SlackRig) -> int:
    """Answers given: "Searching …" messages posted in a thread."""
    return sum(1 for a in rig.stub.of("chat.postMessage") if str(a.get("text")).startswith(
        "Searching"))  # fmt: skip


@pytest.mark.asyncio
async def test_a_replayed_slash_command_is_answered_once(slack: SlackRig) -> None:
    req = slack.command("what is the default timeout?", trigger="13.37.42")
    for _ in range(3):  # the same signed bytes, inside the 5-minute window
        resp = await slack.send(req)
        assert resp.status == 200
    await slack.settle()
    assert answers(slack) == 1
    await slack.send(slack.command("what is the default timeout?", trigger="13.37.43"))
    await slack.settle()
    assert answers(slack) == 2  # another invocation is another question


@pytest.mark.asyncio
async def test_a_retried_or_replayed_event_is_answered_once(slack: SlackRig) -> None:
    first = slack.mention("what is the default timeout?", "100.000100", event_id="Ev17")
    assert (await slack.send(first)).status == 200
    retried = {"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"}
    retry = slack.mention("what is the default timeout?", "100.000100", "Ev17", **retried)
    assert (await slack.send(retry)).status == 200
    assert (await slack.send(first)).status == 200  # a replay of the original
    await slack.settle()
    assert answers(slack) == 1


# -- slack.api_url: the bot in its own process, against the stand-in ---------------------------
@pytest.mark.asyncio
async def test_serve_slack_talks_to_the_configured_api_url(tmp_path: Path) -> None:
    _, _, inst = sample_world(tmp_path)
    add_instances({"tmp": tmp_path})
    stub = StubSlackApi()
    await stub.start()
    settings = tmp_path / "serve.yaml"
    settings.write_text(f"slack: {{mode: socket, api_url: '{stub.base_url.rstrip('/')}'}}\n")
    env = {**os.environ, "SLACK_BOT_TOKEN": "xoxb-t", "SLACK_APP_TOKEN": "xapp-t"}
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = await asyncio.create_subprocess_exec(
            *fake_serve_argv(inst, tmp_path / "data", "slack", "--config", str(settings)),
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        await asyncio.wait_for(stub.socket_open.wait(), 30)
        assert stub.of("auth.test") and stub.of("apps.connections.open")
        body = SlackRig.command_body(stub_rig(stub), "what is the default timeout?")
        envelope = {
            "envelope_id": "env-1",
            "type": "slash_commands",
            "accepts_response_payload": True,
            "payload": dict(parse_qsl(body)),
        }
        await stub.push(envelope)
        deadline = time.monotonic() + 30
        while not stub.of("chat.update"):
            assert time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.05)
    finally:
        proc.terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 20)
        await stub.stop()
    (update,) = stub.of("chat.update")
    assert "thirty seconds" in str(update["blocks"])
    assert "Traceback" not in log.read_text()


def stub_rig(stub: StubSlackApi) -> Any:
    """Enough of a SlackRig for ``command_body`` (it only needs the stub's response URL)."""
    rig = SlackRig.__new__(SlackRig)
    rig.stub = stub
    return rig


@pytest.mark.parametrize("url", ["slack.com/api", "ftp://x/api/", "https://"])
def test_a_bad_api_url_is_refused_with_the_key(tmp_path: Path, url: str) -> None:
    from rigs import one_line

    _, _, inst = sample_world(tmp_path)
    settings = tmp_path / "serve.yaml"
    settings.write_text(f"slack: {{api_url: '{url}'}}\n")
    env = {**os.environ, "SLACK_BOT_TOKEN": "xoxb-t", "SLACK_APP_TOKEN": "xapp-t"}
    r = subprocess.run(
        fake_serve_argv(inst, tmp_path / "data", "slack", "--config", str(settings)),
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT, env=env,
    )  # fmt: skip
    one_line(r, str(settings), "slack.api_url", "http(s) URL")
