"""A local stand-in for LLM APIs: an HTTP server on 127.0.0.1 that speaks the OpenAI
chat-completions (``POST /v1/chat/completions``) and Anthropic Messages (``POST /v1/messages``)
wire formats, so the real ``openai`` and ``anthropic`` SDKs can be pointed at it with
``base_url``.

It records every request (path, headers, JSON body) and answers from a script: a list of
:class:`Reply` consumed one per request, then ``default``; or a ``responder`` function of the
request. A reply can be an error status with a body, or a delay (for timeouts).

A request with ``"stream": true`` is answered in the API's server-sent events (OpenAI
``chat.completion.chunk`` lines ending ``data: [DONE]``; Anthropic ``message_start`` …
``message_stop``), the text in pieces of a few words (:func:`pieces`), ``gap`` seconds apart;
``cut`` breaks the connection off halfway through the stream.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from stub_http import LocalServer


@dataclass
class Reply:
    text: str = ""
    status: int = 200
    error: str = "stub error"  # message in the error body, for status >= 400
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    gap: float = 0.0  # seconds between streamed events
    cut: bool = False  # a stream breaks off halfway (the connection is dropped)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    peer: Any = None  # the client's (host, port): one port for requests on one connection

    @property
    def system(self) -> str:
        """The system prompt, whichever wire format carried it."""
        if "system" in self.body:
            sys_ = self.body["system"]
            return sys_ if isinstance(sys_, str) else "".join(b.get("text", "") for b in sys_)
        return "".join(m["content"] for m in self.body["messages"] if m["role"] == "system")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for m in self.body["messages"] if m["role"] != "system"]

    @property
    def last_user(self) -> str:
        content = [m for m in self.messages if m["role"] == "user"][-1]["content"]
        return content if isinstance(content, str) else "".join(b["text"] for b in content)


class StubLLMServer(LocalServer):
    """Both wire formats on one local server (``LocalServer``: aiohttp on 127.0.0.1)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Request] = []
        self.errors: list[str] = []  # exceptions raised by ``responder``
        self.script: list[Reply] = []
        self.default = Reply(text="(stub: no reply scripted)")
        self.responder: Callable[[Request], Reply] | None = None

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{path:.*}", self.handle)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, path_suffix: str = "") -> int:
        return sum(r.path.endswith(path_suffix) for r in self.requests)

    def _reply(self, req: Request) -> Reply:
        try:
            if self.responder is not None:
                return self.responder(req)
            return self.script.pop(0) if self.script else self.default
        except Exception as e:  # a test's responder failed: say so, don't hang up
            self.errors.append(f"{type(e).__name__}: {e}")
            return Reply(status=400, error=f"stub responder failed: {e}")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw or b"{}")
        path = request.path
        peer = request.transport.get_extra_info("peername") if request.transport else None
        req = Request(path, {k.lower(): v for k, v in request.headers.items()}, body,
                      time.monotonic(), peer)  # fmt: skip
        self.requests.append(req)
        reply = self._reply(req)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if body.get("stream") and reply.status < 400 and path.endswith(_ROUTES):
            return await self._stream(request, reply, body)
        if path.endswith("/chat/completions"):
            payload = _openai(reply, body)
        elif path.endswith("/messages"):
            payload = _anthropic(reply, body)
        else:
            reply, payload = Reply(status=404), {"error": {"message": "no such route"}}
        return web.json_response(payload, status=reply.status, headers=reply.headers)

    async def _stream(
        self, request: web.Request, reply: Reply, body: dict[str, Any]
    ) -> web.StreamResponse:
        openai = request.path.endswith("/chat/completions")
        events = (_openai_events if openai else _anthropic_events)(reply, body)
        if reply.cut:
            events = events[: len(events) // 2]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", **reply.headers})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for ev in events:
            await resp.write(ev.encode())
            if reply.gap:
                await asyncio.sleep(reply.gap)
        if reply.cut:  # no last chunk: the client sees the body end too soon
            assert request.transport is not None
            request.transport.abort()
            return resp
        await resp.write_eof()
        return resp


_ROUTES = ("/chat/completions", "/messages")


def _openai(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    if reply.status >= 400:
        return {"error": {"message": reply.error, "type": "server_error", "code": None}}
    return {
        "id": "chatcmpl-stub", "object": "chat.completion", "created": 0,
        "model": body.get("model", "stub"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply.text}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


def _anthropic(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    if reply.status >= 400:
        return {"type": "error", "error": {"type": "api_error", "message": reply.error}}
    return {
        "id": "msg_stub", "type": "message", "role": "assistant",
        "model": body.get("model", "stub"),
        "content": [{"type": "text", "text": reply.text}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }  # fmt: skip


def pieces(text: str, words: int = 2) -> list[str]:
    """``text`` in the pieces a stub stream sends: ``words`` words each, spacing kept."""
    tokens = re.findall(r"\s*\S+\s*", text) or [text]
    return ["".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


def _sse(data: dict[str, Any] | str, event: str | None = None) -> str:
    line = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "") + f"data: {line}\n\n"


def _openai_events(reply: Reply, body: dict[str, Any]) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return _sse({
            "id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0,
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })  # fmt: skip

    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": p}) for p in pieces(reply.text)),
        chunk({}, "stop"),
        _sse("[DONE]"),
    ]


def _anthropic_events(reply: Reply, body: dict[str, Any]) -> list[str]:
    start = {
        "id": "msg_stub", "type": "message", "role": "assistant",
        "model": body.get("model", "stub"), "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
    }  # fmt: skip
    return [
        _sse({"type": "message_start", "message": start}, "message_start"),
        _sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            "content_block_start",
        ),
        _sse({"type": "ping"}, "ping"),
        *(
            _sse(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": p},
                },
                "content_block_delta",
            )
            for p in pieces(reply.text)
        ),
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
            "message_delta",
        ),
        _sse({"type": "message_stop"}, "message_stop"),
    ]


_BLOCK = re.compile(r"<source ([^>]*)>\n(.*?)\n</source>", re.S)
_ATTR = re.compile(r'(\w+)="([^"]*)"')


def source_blocks(text: str) -> list[tuple[dict[str, str], str]]:
    """The ``<source …>`` blocks of a prompt: (attributes, body), in order."""
    return [(dict(_ATTR.findall(m.group(1))), m.group(2)) for m in _BLOCK.finditer(text)]


def block_number(req: Request, needle: str) -> int:
    """The number of the first source block whose location or body contains ``needle``."""
    for attrs, body in source_blocks(req.last_user):
        if needle in attrs.get("location", "") or needle in body:
            return int(attrs["n"])
    raise AssertionError(f"no source block with {needle!r} in the prompt")


KEY = "sk-test-0123456789SECRET"


def use_llm(sample: dict[str, Any], stub: StubLLMServer, provider: str, monkeypatch: Any,
            **extra: Any) -> Any:  # fmt: skip
    """Point the sample instance at the stub server with ``provider``'s wire format."""
    monkeypatch.setenv("STUB_LLM_KEY", KEY)
    base = stub.url + "/v1" if provider == "openai" else stub.url
    llm = {"provider": provider, "base_url": base, "api_key": "${STUB_LLM_KEY}",
           "model": "stub-model", "retry_backoff": 0.01, "timeout": 2, **extra}  # fmt: skip
    f: Path = sample["tmp"] / "instances" / "widget.yaml"
    f.write_text(f.read_text() + f"llm: {json.dumps(llm)}\n")
    return sample["app"]
