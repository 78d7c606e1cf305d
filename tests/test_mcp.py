"""``repo-expert serve mcp`` through the official SDK's own client: over stdio (the client starts
the server process, as Claude Code or Cursor do) and over streamable HTTP (with API keys). The
server runs the real command line on the fake embedder (tests/serve_fake.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import pytest_asyncio
from face_rig import ROOT, bearer, fake_serve_argv, free_port, keyed, with_links
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from prom import value

from bot.mcp import parse_address
from core.errors import ConfigError
from core.service import RepoExpert
from core.store.conversations import ConversationStore

TOOLS = {"list_instances", "search", "ask", "read_source", "feedback"}
REFUSED = {
    "../outside/secret.md": "would leave the repository",
    "/etc/passwd": "absolute paths are not allowed",
    "leak.md": "not an indexed file",  # a symbolic link to a file outside the repository
    "linked/secret.md": "not an indexed file",  # through a linked folder
    "tasks/internal.md": "not an indexed file",  # excluded by the instance file
    "vendor/lib.py": "not an indexed file",  # a built-in exclude
}


@pytest_asyncio.fixture
async def world(sample: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The sample repository with symbolic links, indexed (here, on the fake embedder), and a
    second instance ``other``; the conversations store the server will write to."""
    sample["sha"] = with_links(sample)
    d: Path = sample["tmp"] / "instances"
    (d / "other.yaml").write_text((d / "widget.yaml").read_text())
    app: RepoExpert = sample["app"]
    await app.index("widget")
    yield sample


def data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    out: dict[str, Any] = result.structured_content
    assert json.loads(result.content[0].text) == out  # the text block carries the same JSON
    return out


def refusal(result: Any) -> str:
    assert result.is_error
    text: str = result.content[0].text
    assert "\n" not in text and "Traceback" not in text
    return text


async def exercise(client: Client, sha: str) -> int:
    """List the tools and call each; returns the turn of the answer given 👍."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.description and len(t.description) > 40 and t.input_schema["type"] == "object"
    assert tools["search"].input_schema["required"] == ["instance", "query"]
    assert set(tools["read_source"].input_schema["properties"]) == {
        "instance", "path", "start_line", "end_line"
    }  # fmt: skip

    listed = data(await client.call_tool("list_instances", {}))["instances"]
    widget = next(i for i in listed if i["name"] == "widget")
    assert widget["commit"] == sha and widget["repository"] == "https://github.com/acme/widget"

    found = data(await client.call_tool("search", {"instance": "widget", "query": "timeout",
                                                   "collection": "docs", "k": 3}))  # fmt: skip
    assert found["commit"] == sha and 1 <= len(found["sources"]) <= 3
    s = found["sources"][0]
    assert s["n"] == 1 and s["collection"] == "docs" and f"/blob/{sha}/" in s["url"] and s["text"]

    q = {"instance": "widget", "question": "What is the default timeout?"}
    answer = data(await client.call_tool("ask", q))
    assert answer["commit"] == sha and answer["sources"] and "[1]" in answer["answer"]
    follow = data(
        await client.call_tool(
            "ask",
            {
                "instance": "widget",
                "question": "and where?",
                "conversation": answer["conversation"],
            },
        )
    )
    assert follow["conversation"] == answer["conversation"]

    lines = data(
        await client.call_tool(
            "read_source",
            {"instance": "widget", "path": "README.md", "start_line": 1, "end_line": 3},
        )
    )
    assert lines["commit"] == sha and lines["text"].startswith("# Widget")
    assert lines["url"].endswith(f"/blob/{sha}/README.md#L1-L3") and lines["next_start_line"] == 4
    for path, why in REFUSED.items():
        text = refusal(await client.call_tool("read_source", {"instance": "widget", "path": path}))
        assert "path_not_allowed" in text and why in text, (path, text)
        assert "hunter2" not in text

    assert "not_found" in refusal(await client.call_tool("search", {"instance": "nobody",
                                                                    "query": "x"}))  # fmt: skip
    ok = data(await client.call_tool("feedback", {"turn": answer["turn"], "verdict": "up"}))
    assert ok == {"turn": answer["turn"], "verdict": "up"}
    return int(answer["turn"])


@pytest.mark.asyncio
async def test_mcp_over_stdio_with_the_sdks_client(world: dict[str, Any]) -> None:
    tmp: Path = world["tmp"]
    argv = fake_serve_argv(tmp / "instances", tmp / "data", "mcp")
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(ROOT))
    with (tmp / "stderr.log").open("w") as err:
        async with Client(stdio_client(params, errlog=err), read_timeout_seconds=60) as client:
            turn = await exercise(client, world["sha"])
    store = await ConversationStore.open(world["app"].layout.conversations)
    try:
        [rec] = await store.feedback("widget")
        assert (rec.turn_id, rec.platform, rec.user, rec.verdict) == (turn, "mcp", "stdio", "up")
    finally:
        await store.close()


@pytest.mark.asyncio
async def test_mcp_over_http_with_api_keys(world: dict[str, Any]) -> None:
    tmp: Path = world["tmp"]
    config = tmp / "serve.yaml"
    config.write_text(json.dumps(keyed({"docs-site": ["widget"]})))
    port = free_port()
    argv = fake_serve_argv(tmp / "instances", tmp / "data", "mcp", "--http",
                           f"127.0.0.1:{port}", "--config", str(config))  # fmt: skip
    log = (tmp / "server.log").open("w")
    proc = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, stdout=log,
                                                stderr=subprocess.STDOUT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as c:
            for _ in range(300):
                try:
                    if (await c.get(base + "/healthz")).json() == {"ok": True}:
                        break
                except httpx.TransportError:
                    pass
                assert proc.returncode is None, (tmp / "server.log").read_text()
                await asyncio.sleep(0.1)
            for headers in ({}, {"Authorization": "Bearer rx-wrong"}):
                r = await c.post(base + "/mcp", json={}, headers=headers)
                assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        http = httpx2.AsyncClient(headers=bearer("docs-site"), timeout=httpx2.Timeout(30, read=120))
        async with http, Client(streamable_http_client(base + "/mcp", http_client=http)) as client:
            listed = data(await client.call_tool("list_instances", {}))["instances"]
            assert [i["name"] for i in listed] == ["widget"]  # the key's instances only
            hidden = refusal(await client.call_tool("search", {"instance": "other", "query": "x"}))
            assert hidden == refusal(await client.call_tool("search", {"instance": "nobody",
                                                                       "query": "x"})).replace(
                "nobody", "other"
            )  # fmt: skip
            turn = await exercise(client, world["sha"])
        async with httpx.AsyncClient() as c:  # the health routes, beside /mcp
            ready = await c.get(base + "/readyz")  # no key needed: counts only
            assert ready.status_code == 200 and ready.json()["ready"] is True
            assert (await c.get(base + "/metrics")).status_code == 401
            text = (await c.get(base + "/metrics", headers=bearer("docs-site"))).text
        assert value(text, "repo_expert_questions_total", platform="mcp", outcome="answered")
        assert value(text, "repo_expert_index_age_seconds", instance="widget") is not None
        assert 'instance="other"' not in text  # not the key's
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        log.close()
    store = await ConversationStore.open(world["app"].layout.conversations)
    try:
        [rec] = await store.feedback("widget")
        assert (rec.turn_id, rec.platform, rec.user) == (turn, "mcp", "docs-site")
    finally:
        await store.close()
    assert "rx-docs-site-key" not in (tmp / "server.log").read_text()  # never logged


def test_the_http_address_and_a_missing_instances_folder_are_one_line(tmp_path: Path) -> None:
    assert parse_address("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_address("[::1]:80") == ("::1", 80)
    for bad in ("8765", "host:", "host:99999", ":80"):
        with pytest.raises(ConfigError, match="expected HOST:PORT"):
            parse_address(bad)
    (tmp_path / "instances").mkdir()
    r = subprocess.run(
        fake_serve_argv(tmp_path / "instances", tmp_path / "data", "mcp"),
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().endswith("no instance files to serve")
    assert r.stdout == "" and "Traceback" not in r.stderr
