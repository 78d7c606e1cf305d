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

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


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


class StubLLMServer:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.errors: list[str] = []  # exceptions raised by ``responder``
        self.script: list[Reply] = []
        self.default = Reply(text="(stub: no reply scripted)")
        self.responder: Callable[[Request], Reply] | None = None
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                req = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                              time.monotonic())  # fmt: skip
                with stub._lock:
                    stub.requests.append(req)
                    try:
                        if stub.responder is not None:
                            reply = stub.responder(req)
                        else:
                            reply = stub.script.pop(0) if stub.script else stub.default
                    except Exception as e:  # a test's responder failed: say so, don't hang up
                        stub.errors.append(f"{type(e).__name__}: {e}")
                        reply = Reply(status=400, error=f"stub responder failed: {e}")
                if reply.delay:
                    time.sleep(reply.delay)
                if (
                    body.get("stream")
                    and reply.status < 400
                    and self.path.endswith(("/chat/completions", "/messages"))
                ):
                    self._stream(reply, body)
                    return
                if self.path.endswith("/chat/completions"):
                    payload = _openai(reply, body)
                elif self.path.endswith("/messages"):
                    payload = _anthropic(reply, body)
                else:
                    reply, payload = Reply(status=404), {"error": {"message": "no such route"}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def _stream(self, reply: Reply, body: dict[str, Any]) -> None:
                openai = self.path.endswith("/chat/completions")
                events = (_openai_events if openai else _anthropic_events)(reply, body)
                if reply.cut:
                    events = events[: len(events) // 2]
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    for ev in events:
                        data = ev.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        if reply.gap:
                            time.sleep(reply.gap)
                    if reply.cut:  # no last chunk: the client sees the body end too soon
                        self.close_connection = True
                        return
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StubLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def count(self, path_suffix: str = "") -> int:
        return sum(r.path.endswith(path_suffix) for r in self.requests)


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
