"""The bots as processes, the way a platform runs them: ``repo-expert serve slack`` in Socket
Mode and ``serve discord`` in real subprocesses (the real Bolt app and Socket Mode client, the
real discord.py client and gateway connection, pointed at the local Slack and Discord
stand-ins; answers by a slow model, the LLM stand-in), their health servers over real HTTP on
127.0.0.1, JSON log lines, and SIGTERM: Slack's socket closes first, the answer in progress
finishes within ``drain_seconds`` — or, past it, its "Searching …" message (Discord: its
thread) says the bot restarted; none is left behind; the connections close with code 1000.
``sync --watch`` serves the same health routes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from face_rig import ROOT, SERVE_FAKE, fake_serve_argv, free_port
from prom import value
from stub_llm_api import Reply, StubLLMServer, use_llm
from stub_slack_api import StubSlackApi

BOT_TOKEN, APP_TOKEN = "xoxb-running-test-token", "xapp-running-test-token"
ANSWER = "The default timeout is thirty seconds [1]."


def command_envelope(n: int, text: str) -> dict[str, Any]:
    payload = {"token": "legacy", "team_id": "T1", "team_domain": "acme", "channel_id": "CGEN",
               "channel_name": "general", "user_id": "U1", "user_name": "u1",
               "command": "/repo", "text": text, "api_app_id": "A1",
               "trigger_id": f"9.9.{n}", "response_url": "http://127.0.0.1:9/unused"}  # fmt: skip
    return {"envelope_id": f"env-{n}", "type": "slash_commands",
            "accepts_response_payload": True, "payload": payload}  # fmt: skip


async def until(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


class Process:
    """A subprocess whose stderr is collected as it comes (so a full pipe never blocks it)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc, self.lines = proc, []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.lines.append(line.decode("utf-8", "replace").rstrip("\n"))

    async def stop(self, sig: int = signal.SIGTERM, within: float = 40) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        rc = await asyncio.wait_for(self.proc.wait(), within)
        await self._reader
        return rc

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


async def spawn(argv: list[str], env: dict[str, str]) -> Process:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    return Process(proc)


async def ready_within(http: httpx.AsyncClient, base: str, seconds: float) -> Any:
    """The /readyz body once it says 200 (the last answer in the failure otherwise)."""
    deadline, last = time.monotonic() + seconds, "no answer"
    while time.monotonic() < deadline:
        try:
            r = await http.get(base + "/readyz")
            if r.status_code == 200:
                return r.json()
            last = r.text
        except httpx.TransportError as e:
            last = repr(e)
        await asyncio.sleep(0.05)
    raise AssertionError(f"not ready within {seconds} s: {last}")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "DISCORD_"))}
    env.pop("PORT", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **extra}


@pytest.mark.asyncio
@pytest.mark.parametrize("outcome", ["finishes", "cut_short"])
async def test_socket_mode_process_health_json_logs_and_sigterm_drain(
    outcome: str, sample: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slack, llm = StubSlackApi(), StubLLMServer()
    await slack.start()
    await llm.start()
    delay, grace = (2.0, 20.0) if outcome == "finishes" else (30.0, 0.5)
    llm.default = Reply(text=ANSWER, delay=delay)
    use_llm(sample, llm, "openai", monkeypatch, timeout=60)
    settings = tmp_path / "serve.yaml"
    settings.write_text(yaml.safe_dump({"slack": {"api_url": slack.base_url, "stream_interval": 0},
                                        "drain_seconds": grace}))  # fmt: skip
    port = free_port()
    argv = fake_serve_argv(sample["tmp"] / "instances", sample["tmp"] / "data", "slack",
                           "--config", str(settings), "--health-port", str(port),
                           "--log-format", "json")  # fmt: skip
    env = child_env(SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_APP_TOKEN=APP_TOKEN,
                    STUB_LLM_KEY=os.environ["STUB_LLM_KEY"])  # fmt: skip
    p = await spawn(argv, env)
    base = f"http://127.0.0.1:{port}"
    try:
        await until(lambda: slack.socket_open.is_set() or p.proc.returncode is not None, 60,
                    "the Socket Mode connection")  # fmt: skip
        assert slack.socket_open.is_set(), "\n".join(p.lines)
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(base + "/healthz")).json() == {"ok": True}
            ready = await ready_within(http, base, 5)  # "connected" comes just after the hello
            assert ready == {"ready": True, "instances": 1, "indexed": 0, "problems": []}

            await slack.push(command_envelope(1, "what is the default timeout?"))
            await until(lambda: llm.requests, 60, "the model to be asked")
            metrics = (await http.get(base + "/metrics")).text
            assert value(metrics, "repo_expert_answers_in_progress") == 1
        status = [c for c in slack.calls if c.method == "chat.postMessage"
                  and "Searching" in str(c.args.get("text"))]  # fmt: skip
        assert len(status) == 1
        signalled = time.monotonic()
        rc = await p.stop()
    finally:
        p.kill()
        await slack.stop()
        await llm.stop()
    assert rc == 143, "\n".join(p.lines)
    # The Socket Mode connection was closed by the app, cleanly, right away.
    assert slack.socket_closed.is_set() and slack.close_code == 1000
    assert slack.closed_at - signalled < 3
    # The "Searching …" message is the only one ever edited, and it was: never left behind.
    searching_ts = status[0].reply["ts"]
    updates = [c for c in slack.calls if c.method == "chat.update"]
    assert updates and {c.args["ts"] for c in updates} == {searching_ts}, "left behind"
    last = updates[-1]
    shown = json.dumps(last.args, ensure_ascii=False)
    if outcome == "finishes":
        assert last.at > slack.closed_at  # answered after the socket closed: drained
        assert "thirty seconds" in shown
    else:
        assert "restarted before this answer was finished" in shown
        assert last.at - signalled < 10  # the grace, not the model's 30 s
    logs = [json.loads(line) for line in p.lines if line.strip()]  # every line is JSON
    assert {"time", "level", "logger", "message"} <= set(logs[0])
    text = "\n".join(str(entry) for entry in logs)
    assert "SIGTERM: shutting down" in text and "Socket Mode connection closed" in text
    assert BOT_TOKEN not in text and APP_TOKEN not in text
    assert "will be unused" not in text  # Bolt's warning on every start is gone


@pytest.mark.asyncio
async def test_sync_watch_serves_health_and_metrics_and_stops_on_sigterm(
    sample: dict[str, Any],
) -> None:
    port = free_port()
    argv = [sys.executable, str(SERVE_FAKE), "--instances", str(sample["tmp"] / "instances"),
            "--data", str(sample["tmp"] / "data"), "sync", "widget", "--watch", "--interval",
            "3600", "--health-port", str(port)]  # fmt: skip
    p = await spawn(argv, child_env())
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            metrics = ""
            for _ in range(600):  # the first sync builds the index
                try:
                    metrics = (await http.get(base + "/metrics")).text
                except httpx.TransportError:
                    metrics = ""
                if value(metrics, "repo_expert_syncs_total", outcome="ok"):
                    break
                assert p.proc.returncode is None, "\n".join(p.lines)
                await asyncio.sleep(0.1)
            assert value(metrics, "repo_expert_syncs_total", outcome="ok") == 1, metrics
            age = value(metrics, "repo_expert_index_age_seconds", instance="widget")
            assert age is not None and 0 <= age < 120
            ready = await http.get(base + "/readyz")
            assert ready.status_code == 200
            assert ready.json() == {"ready": True, "instances": 1, "indexed": 1, "problems": []}
            assert (await http.get(base + "/healthz")).json() == {"ok": True}
        rc = await p.stop()
    finally:
        p.kill()
    assert rc == 143, "\n".join(p.lines)
    assert any("stopped (SIGTERM)" in line or "SIGTERM" in line for line in p.lines)


@pytest.mark.asyncio
async def test_a_health_port_in_use_is_one_line(sample: dict[str, Any]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [sys.executable, "-m", "core.cli", "--instances", str(sample["tmp"] / "instances"),
                "--data", str(sample["tmp"] / "data"), "sync", "widget", "--watch",
                "--health-port", str(port)]  # fmt: skip
        p = await spawn(argv, child_env())
        rc = await asyncio.wait_for(p.proc.wait(), 60)
        await p._reader
    assert rc == 2 and p.lines == [f"repo-expert: health server: cannot listen on 0.0.0.0:{port}: "
                                   "Address already in use"]  # fmt: skip


@pytest.mark.asyncio
async def test_readiness_waits_for_connections_and_names_an_unreachable_store(
    sample: dict[str, Any],
) -> None:
    from aiohttp import web
    from stub_http import LocalServer

    from core.ops.health import Probe

    broken = {"on": False}

    async def store_check() -> None:
        if broken["on"]:
            raise OSError(f"cannot reach postgresql://rx:{BOT_TOKEN}@db/rx")

    probe = Probe(sample["app"], ["widget"])
    probe.check("conversations store", store_check)
    probe.waiting("discord")
    app = web.Application()
    probe.add_routes(app)
    server = LocalServer(app)
    await server.start()
    os.environ["SLACK_BOT_TOKEN"] = BOT_TOKEN  # a known secret: redacted from the line
    try:
        async with httpx.AsyncClient() as http:
            r = await http.get(server.address("/readyz"))
            assert r.status_code == 503
            assert r.json()["problems"] == ["discord: not connected"]
            probe.up("discord")
            assert (await http.get(server.address("/readyz"))).status_code == 200
            broken["on"] = True
            r = await http.get(server.address("/readyz"))
            assert r.status_code == 503
            (line,) = r.json()["problems"]
            assert line.startswith("conversations store: cannot reach") and BOT_TOKEN not in line
            assert (await http.get(server.address("/healthz"))).status_code == 200  # alive
    finally:
        os.environ.pop("SLACK_BOT_TOKEN", None)
        await server.stop()


def test_json_log_lines_are_redacted_tracebacks_included(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from core.ops.logs import JsonFormatter

    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    try:
        raise ValueError(f"bad token {BOT_TOKEN}")
    except ValueError:
        import sys as _sys

        rec = logging.LogRecord("bot.slack", logging.ERROR, __file__, 1, "failed with %s",
                                (BOT_TOKEN,), _sys.exc_info())  # fmt: skip
    out = json.loads(JsonFormatter().format(rec))
    assert out["level"] == "error" and out["logger"] == "bot.slack"
    assert out["message"] == "failed with ***" and "ValueError: bad token ***" in out["exc"]
    assert BOT_TOKEN not in json.dumps(out)


@pytest.mark.asyncio
@pytest.mark.parametrize("outcome", ["finishes", "cut_short"])
async def test_discord_process_readiness_and_sigterm_drain(
    outcome: str, sample: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stub_bot_core import GENERAL
    from stub_discord_api import BOT_ID, StubDiscordApi, message_payload, user_payload

    api, llm = StubDiscordApi(), StubLLMServer()
    api.guild_channels = [GENERAL]
    await api.start()
    await llm.start()
    delay, grace = (2.0, 20.0) if outcome == "finishes" else (30.0, 0.5)
    llm.default = Reply(text=ANSWER, delay=delay)
    use_llm(sample, llm, "openai", monkeypatch, timeout=60)
    settings = tmp_path / "serve.yaml"
    gateway = f"ws://127.0.0.1:{api.port}/gateway"
    settings.write_text(yaml.safe_dump({"discord": {"api_url": api.base, "gateway_url": gateway,
                                                    "stream_interval": 0},
                                        "drain_seconds": grace}))  # fmt: skip
    port = free_port()
    argv = fake_serve_argv(sample["tmp"] / "instances", sample["tmp"] / "data", "discord",
                           "--config", str(settings), "--health-port", str(port))  # fmt: skip
    token = "discord-running-test-token"
    p = await spawn(argv, child_env(DISCORD_TOKEN=token, STUB_LLM_KEY=os.environ["STUB_LLM_KEY"]))
    base = f"http://127.0.0.1:{port}"
    mid = 150000000000000001
    try:
        await until(lambda: api.identified.is_set() or p.proc.returncode is not None, 60,
                    "the gateway IDENTIFY")  # fmt: skip
        assert api.identified.is_set(), "\n".join(p.lines)
        async with httpx.AsyncClient(timeout=10) as http:
            await ready_within(http, base, 10)  # ready once the guild arrived (on_ready)
        bot = user_payload(BOT_ID, "repo-expert", bot=True)
        ana = user_payload(110000000000000042, "ana")
        await api.dispatch("MESSAGE_CREATE", message_payload(
            mid, GENERAL, f"<@{BOT_ID}> what is the default timeout?", ana, [bot]))  # fmt: skip
        await until(lambda: llm.requests, 60, "the model to be asked")
        signalled = time.monotonic()
        rc = await p.stop()
    finally:
        p.kill()
        await api.stop()
        await llm.stop()
    assert rc == 143, "\n".join(p.lines)
    assert api.gateway_closed.is_set() and api.close_code == 1000  # closed cleanly
    sent = [c for c in api.calls if c.method == "POST" and c.path == f"/channels/{mid}/messages"]
    assert sent, "nothing was said in the thread"
    last = sent[-1]
    if outcome == "finishes":
        assert "thirty seconds" in last.body["content"] and last.at > signalled
        assert api.closed_at >= last.at  # answered, then disconnected
    else:
        assert "restarted before this answer was finished" in last.body["content"]
        assert last.at - signalled < 10
    assert token not in "\n".join(p.lines)


@pytest.mark.asyncio
@pytest.mark.parametrize("platform", ["api", "webhooks"])
async def test_http_processes_are_ready_then_stop_on_sigterm(
    platform: str, sample: dict[str, Any]
) -> None:
    inst = sample["tmp"] / "instances" / "widget.yaml"
    inst.write_text(inst.read_text() + "webhook_secret: a-test-secret\n")
    port = free_port()
    argv = fake_serve_argv(sample["tmp"] / "instances", sample["tmp"] / "data", platform,
                           "--host", "127.0.0.1", "--port", str(port))  # fmt: skip
    p = await spawn(argv, child_env())
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            body = await ready_within(http, f"http://127.0.0.1:{port}", 30)
            assert body == {"ready": True, "instances": 1, "indexed": 0, "problems": []}
        rc = await p.stop(within=20)
    finally:
        p.kill()
    assert rc == 143, "\n".join(p.lines)
    assert any("SIGTERM: shutting down" in line for line in p.lines)
