"""The HTTP API over real HTTP on 127.0.0.1: keys and what exists for them, limits, JSON errors,
streamed answers from a streaming model (the LLM stub), follow-ups and feedback in the
conversations store, /metrics, /openapi.json."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from face_rig import ROOT, ApiRig, bearer, keyed
from prom import value
from stub_llm_api import Reply, Request, StubLLMServer, block_number, use_llm

from bot.api import serve_api
from bot.gateway import Rejected, authenticate
from bot.settings import ServeConfig
from core.errors import ConfigError

Rig = Callable[..., Awaitable[ApiRig]]


@pytest_asyncio.fixture
async def rig(sample: dict[str, Any]) -> AsyncIterator[Rig]:
    """``await rig(settings)``: the API server of the sample app (started once per test)."""
    made: list[ApiRig] = []

    async def make(settings: dict[str, Any] | None = None) -> ApiRig:
        made.append(await ApiRig(sample["app"], settings).start())
        return made[-1]

    yield make
    for r in made:
        await r.close()


def other_instances(sample: dict[str, Any]) -> None:
    """Beside widget: ``other`` (public) and ``secret`` (private), on the same repository."""
    d: Path = sample["tmp"] / "instances"
    widget = (d / "widget.yaml").read_text()
    (d / "other.yaml").write_text(widget)
    (d / "secret.yaml").write_text(widget + "access: {private: true}\n")


async def post(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as c:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await c.post(url, content=content, headers=headers or {})


async def get(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as c:
        return await c.get(url, headers=headers or {})


def error(r: httpx.Response) -> tuple[int, str, str]:
    body = r.json()
    assert set(body) == {"error"} and "\n" not in body["error"]["message"], body
    return r.status_code, body["error"]["code"], body["error"]["message"]


@pytest.mark.asyncio
async def test_health_openapi_page_and_every_error_is_one_json_line(rig: Rig) -> None:
    api = await rig()
    assert (await get(api.url + "/healthz")).json() == {"ok": True}
    doc = (await get(api.url + "/openapi.json")).json()
    assert doc["openapi"].startswith("3.1") and {
        "/v1/ask",
        "/v1/search",
        "/v1/feedback",
        "/v1/instances",
        "/metrics",
        "/readyz",
    } <= set(doc["paths"])
    page = await get(api.url + "/")
    assert page.headers["content-type"].startswith("text/html") and "app.js" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert error(await get(api.url + "/nope"))[:2] == (404, "not_found")
    assert error(await get(api.url + "/v1/ask"))[:2] == (405, "method_not_allowed")
    assert error(await post(api.url + "/v1/ask", b"{not json"))[:2] == (400, "invalid_json")
    assert error(await post(api.url + "/v1/ask", [1, 2]))[:2] == (400, "invalid_json")
    status, code, line = error(await post(api.url + "/v1/ask", {"instance": "widget",
                                                                "qestion": "typo"}))  # fmt: skip
    assert (status, code) == (400, "bad_request") and "'qestion'" in line
    status, code, line = error(await post(api.url + "/v1/ask", {"instance": "widget"}))
    assert (status, code, line) == (400, "bad_request", "question must be a non-empty string")
    status, _, line = error(await post(api.url + "/v1/feedback", {"turn": 999, "verdict": "up"}))
    assert status == 404 and "no answer numbered 999" in line
    assert error(await post(api.url + "/v1/feedback", {"turn": 1, "verdict": "meh"}))[0] == 400


@pytest.mark.asyncio
async def test_keys_decide_which_instances_exist(rig: Rig, sample: dict[str, Any]) -> None:
    other_instances(sample)
    api = await rig(keyed({"docs-site": ["widget", "secret"], "ops": ["*"]}))
    ask = api.url + "/v1/ask"
    q = {"instance": "widget", "question": "What is the default timeout?"}
    assert error(await post(ask, q))[:2] == (401, "unauthorized")  # no key
    assert error(await post(ask, q, {"Authorization": "Bearer rx-wrong"}))[:2] == (
        401, "unauthorized"
    )  # fmt: skip
    assert error(await post(ask, q, {"Authorization": "Basic abc"}))[0] == 401
    assert error(await get(api.url + "/v1/instances"))[0] == 401
    assert error(await get(api.url + "/metrics"))[0] == 401
    assert (await get(api.url + "/healthz")).status_code == 200  # no key needed

    listed = await get(api.url + "/v1/instances", bearer("docs-site"))
    assert [i["name"] for i in listed.json()["instances"]] == ["secret", "widget"]
    listed = await get(api.url + "/v1/instances", bearer("ops"))
    assert [i["name"] for i in listed.json()["instances"]] == ["other", "widget"]  # not private
    # A key without the instance gets what a name nobody configured gets: it does not exist.
    absent = error(await post(ask, {**q, "instance": "nobody"}, bearer("ops")))
    hidden = error(await post(ask, {**q, "instance": "secret"}, bearer("ops")))
    assert hidden[:2] == absent[:2] == (404, "not_found") and "nobody" in absent[2]
    assert "secret" in hidden[2] and "private" not in hidden[2]
    hidden = error(await post(api.url + "/v1/search", {"instance": "other", "query": "timeout"},
                              bearer("docs-site")))  # fmt: skip
    assert hidden[:2] == (404, "not_found")

    r = await post(ask, q, bearer("docs-site"))
    assert r.status_code == 200 and r.json()["sources"] and r.json()["commit"] == sample["sha"]
    assert r.json()["instance"] == "widget"


@pytest.mark.asyncio
async def test_without_keys_only_direct_calls_from_127_0_0_1(rig: Rig) -> None:
    api = await rig()
    assert (await get(api.url + "/v1/instances")).status_code == 200
    status, code, line = error(await get(api.url + "/v1/instances",
                                         {"X-Forwarded-For": "203.0.113.9"}))  # fmt: skip
    assert (status, code) == (403, "forbidden") and "only 127.0.0.1" in line
    here = {"host": f"127.0.0.1:{api.server.port}"} if api.server else {}
    # DNS rebinding (another name for 127.0.0.1) and a cross-site page: refused.
    for headers in ({"Host": "evil.example:80"}, {"Origin": "http://evil.example"}):
        assert error(await get(api.url + "/v1/instances", headers))[:2] == (403, "forbidden")
    same_page = {"Origin": api.url}
    assert (await get(api.url + "/v1/instances", same_page)).status_code == 200
    cfg = ServeConfig()
    with pytest.raises(Rejected, match=r"only 127\.0\.0\.1"):
        authenticate(cfg, here, "192.0.2.7")
    assert authenticate(cfg, {"host": "[::1]:8000"}, "::1").name == "local"
    assert authenticate(cfg, {"host": "localhost"}, "127.0.0.1").name == "local"
    with pytest.raises(Rejected):
        authenticate(cfg, here, None)


@pytest.mark.asyncio
async def test_bodies_questions_k_and_rate_are_capped(rig: Rig) -> None:
    api = await rig({"api": {"max_body_bytes": 2048, "max_question_chars": 100},
                     "rate_limit": 2})  # fmt: skip
    ask = api.url + "/v1/ask"
    status, code, line = error(await post(ask, {"instance": "widget", "question": "x" * 5000}))
    assert (status, code) == (413, "too_large") and "2048 bytes" in line

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: aiohttp's own cap
        yield b'{"instance": "widget", "question": "'
        for _ in range(10):
            yield b"y" * 500
        yield b'"}'

    async with httpx.AsyncClient() as c:
        r = await c.post(ask, content=chunked())
    assert error(r)[:2] == (413, "too_large")
    status, code, line = error(await post(ask, {"instance": "widget", "question": "q" * 101}))
    assert (status, code, line) == (413, "too_long", "question is longer than 100 characters")
    search = api.url + "/v1/search"
    for k in (0, 99, "3", True):
        assert (
            error(await post(search, {"instance": "widget", "query": "timeout", "k": k}))[0] == 400
        )
    bad = await post(search, {"instance": "widget", "query": "timeout", "collection": "wiki"})
    assert error(bad)[0] == 400
    ok = await post(
        search, {"instance": "widget", "query": "timeout", "k": 2, "collection": "docs"}
    )
    assert ok.status_code == 200 and {s["collection"] for s in ok.json()["sources"]} == {"docs"}
    assert len(ok.json()["sources"]) <= 2
    for q in ("timeout?", "config?"):  # searches above did not count
        assert (await post(ask, {"instance": "widget", "question": q})).status_code == 200
    status, code, line = error(await post(ask, {"instance": "widget", "question": "theme?"}))
    assert (status, code) == (429, "rate_limited") and "try again" in line


@pytest.mark.asyncio
async def test_follow_ups_and_feedback_are_stored_with_the_bots(
    rig: Rig, sample: dict[str, Any]
) -> None:
    api = await rig(keyed({"docs-site": ["*"], "ops": ["*"]}))
    ask = api.url + "/v1/ask"
    first = (await post(ask, {"instance": "widget", "question": "What is the default timeout?"},
                        bearer("docs-site"))).json()  # fmt: skip
    conv = first["conversation"]
    follow = (await post(ask, {"instance": "widget", "question": "and where is it set?",
                               "conversation": conv}, bearer("docs-site"))).json()  # fmt: skip
    assert follow["conversation"] == conv and follow["turn"] > first["turn"]
    assert api.store is not None
    history = await api.store.history("api", f"docs-site/{conv}")
    assert [t.question for t in history] == ["What is the default timeout?", "and where is it set?"]
    assert follow["route"]["query"].startswith("What is the default timeout?")  # joined
    bad = await post(ask, {"instance": "widget", "question": "x?", "conversation": "../../etc"},
                     bearer("docs-site"))  # fmt: skip
    assert error(bad)[:2] == (400, "bad_request")
    # Feedback: on one's own answers only (another key's turn does not exist for it).
    fb = api.url + "/v1/feedback"
    theirs = await post(fb, {"turn": first["turn"], "verdict": "up"}, bearer("ops"))
    assert error(theirs)[:2] == (404, "not_found")
    ok = await post(fb, {"turn": first["turn"], "verdict": "up"}, bearer("docs-site"))
    assert ok.json() == {"turn": first["turn"], "verdict": "up"}
    web = await post(ask, {"instance": "widget", "question": "Which themes ship?"},
                     {**bearer("ops"), "X-Repo-Expert-Client": "web"})  # fmt: skip
    await post(fb, {"turn": web.json()["turn"], "verdict": "down"}, bearer("ops"))
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "core.cli", "--instances", str(sample["tmp"] / "instances"),
         "--data", str(sample["tmp"] / "data"), "feedback", "widget", "--json"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=True,
    )  # fmt: skip
    records = json.loads(out.stdout)
    assert [(r["platform"], r["user"], r["verdict"]) for r in records] == [
        ("web", "ops", "down"), ("api", "docs-site", "up")
    ]  # fmt: skip
    assert records[1]["question"] == "What is the default timeout?"


def timeout_reply(req: Request) -> Reply:
    n = block_number(req, "thirty seconds")
    return Reply(f"The default timeout is thirty seconds [{n}]. It is set in widget.toml, in "
                 f"the network section [{n}].", gap=0.15)  # fmt: skip


@pytest.mark.asyncio
async def test_a_streamed_answer_arrives_as_events_before_the_answer_is_done(
    rig: Rig, sample: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = StubLLMServer()
    await stub.start()
    try:
        use_llm(sample, stub, "openai", monkeypatch)
        stub.responder = timeout_reply
        api = await rig()
        q = {"instance": "widget", "question": "What is the default timeout?", "stream": True}
        events: list[tuple[float, str, Any]] = []
        async with httpx.AsyncClient(timeout=60) as c:
            async with c.stream("POST", api.url + "/v1/ask", json=q) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                kind = ""
                async for line in r.aiter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: "):
                        events.append((time.monotonic(), kind, json.loads(line[6:])))
        kinds = [k for _, k, _ in events]
        assert kinds[-1] == "answer" and kinds.count("answer") == 1 and kinds.count("text") >= 3
        texts = [d["text"] for _, k, d in events if k == "text"]
        assert all(b.startswith(a) and b != a for a, b in pairwise(texts))
        assert events[-1][0] - events[0][0] > 0.5  # the first text came long before the answer
        final = events[-1][2]
        assert final["backend"] != "extractive" and final["answer"].startswith("The default")
        assert final["sources"] and "[1]" in final["answer"] and final["turn"] >= 1
        assert stub.requests[-1].body.get("stream") is True
        # The same question without stream: one JSON answer, the same checked text.
        plain = (await post(api.url + "/v1/ask", {**q, "stream": False})).json()
        assert plain["answer"] == final["answer"]
        # A bad request is refused before any stream starts: a JSON error with its status.
        r2 = await post(api.url + "/v1/ask", {**q, "instance": "nobody"})
        assert error(r2)[:2] == (404, "not_found")
    finally:
        await stub.stop()


@pytest.mark.asyncio
async def test_metrics_count_requests_answers_and_feedback(
    rig: Rig, sample: dict[str, Any]
) -> None:
    other_instances(sample)
    api = await rig(keyed({"docs-site": ["widget"]}))
    key = bearer("docs-site")
    for _ in range(2):
        await get(api.url + "/v1/instances", key)
    await get(api.url + "/v1/nothing", key)
    ask = {"instance": "widget", "question": "themes?"}
    answer = (await post(api.url + "/v1/ask", ask, key)).json()
    await post(api.url + "/v1/feedback", {"turn": answer["turn"], "verdict": "up"}, key)
    assert (await get(api.url + "/metrics")).status_code == 401  # a key is needed
    r = await get(api.url + "/metrics", key)
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = r.text
    get_ = "repo_expert_http_requests_total"
    assert value(text, get_, method="GET", route="/v1/instances", status="200") == 2
    assert value(text, get_, method="GET", route="other", status="404") == 1
    assert value(text, "repo_expert_questions_total", platform="api", outcome="answered") == 1
    assert value(text, "repo_expert_answer_seconds_count", platform="api") == 1
    assert value(text, "repo_expert_feedback_total", verdict="up") == 1
    assert value(text, "repo_expert_http_request_seconds_count", route="/v1/ask") == 1
    assert value(text, "repo_expert_answers_in_progress") == 0
    age = value(text, "repo_expert_index_age_seconds", instance="widget")
    assert age is not None and 0 <= age < 600  # built by the question
    assert "secret" not in text and "other" not in text.replace('route="other"', "")
    ready = await get(api.url + "/readyz")  # no key needed: counts, never names
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "instances": 3, "indexed": 1, "problems": []}


@pytest.mark.asyncio
async def test_a_port_in_use_or_no_instances_is_one_line(sample: dict[str, Any]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            await serve_api(sample["app"], ServeConfig(), "127.0.0.1", port)
    for f in (sample["tmp"] / "instances").glob("*.yaml"):
        f.unlink()
    with pytest.raises(ConfigError, match="no instance files to serve"):
        await serve_api(sample["app"], ServeConfig(), "127.0.0.1", 0)
