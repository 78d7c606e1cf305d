"""Issue 17, item 3: the webhook receiver costs a caller without the secret next to nothing, and
a signed but malformed delivery is a 400 — ``repo-expert serve webhooks`` in a process of its own
(the fake embedder), driven over raw sockets and HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from face_rig import ROOT, fake_serve_argv, free_port
from helpers import sample_world

from bot.webhooks import signature

SECRET = "hook-secret-17"
MB = 1024 * 1024


class Receiver:
    def __init__(self, proc: asyncio.subprocess.Process, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}/webhooks/github"

    def peak_rss_mb(self) -> float:
        """The server's peak resident memory (VmHWM), in MB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmHWM")

    async def raw(self, head: dict[str, str], body: bytes, length: int) -> tuple[
        asyncio.StreamReader, asyncio.StreamWriter]:  # fmt: skip
        """A POST announcing ``length`` bytes, of which only ``body`` is sent."""
        r, w = await asyncio.open_connection("127.0.0.1", self.port)
        lines = ["POST /webhooks/github HTTP/1.1", "Host: 127.0.0.1",
                 f"Content-Length: {length}", "Content-Type: application/json",
                 *(f"{k}: {v}" for k, v in head.items()), "", ""]  # fmt: skip
        w.write("\r\n".join(lines).encode() + body)
        await w.drain()
        return r, w

    async def post(self, body: bytes, event: str = "push", **headers: str) -> httpx.Response:
        h = {"X-GitHub-Event": event, "Content-Type": "application/json", **headers}
        async with httpx.AsyncClient(timeout=20) as c:
            return await c.post(self.url, content=body, headers=h)

    async def signed(self, payload: Any, event: str = "push") -> httpx.Response:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return await self.post(body, event, **{"X-Hub-Signature-256": signature(SECRET, body)})


@pytest_asyncio.fixture
async def receiver(tmp_path: Path) -> AsyncIterator[Receiver]:
    _, _, inst = sample_world(tmp_path)
    f = inst / "widget.yaml"
    f.write_text(f.read_text() + f"webhook_secret: {SECRET}\n")
    settings = tmp_path / "serve.yaml"
    settings.write_text("webhooks: {max_body_bytes: 1048576, read_timeout: 1.0}\n")
    port, log = free_port(), tmp_path / "server.log"
    argv = fake_serve_argv(inst, tmp_path / "data", "webhooks", "--config", str(settings),
                           "--host", "127.0.0.1", "--port", str(port))  # fmt: skip
    with log.open("w") as out:
        proc = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, stdout=out,
                                                    stderr=subprocess.STDOUT)  # fmt: skip
    rec = Receiver(proc, port, log)
    try:
        for _ in range(200):
            with contextlib.suppress(httpx.HTTPError):
                async with httpx.AsyncClient() as c:
                    if (await c.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                        break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(log.read_text())
        yield rec
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)
    assert "Traceback" not in log.read_text(), log.read_text()


async def status_line(reader: asyncio.StreamReader, within: float) -> str:
    return (await asyncio.wait_for(reader.readline(), within)).decode().strip()


async def closed(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
        return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True


@pytest.mark.asyncio
async def test_unsigned_posts_announcing_24_mb_are_refused_before_the_body(
    receiver: Receiver,
) -> None:
    base = receiver.peak_rss_mb()
    conns = [await receiver.raw({}, b"x" * (256 * 1024), 24 * MB) for _ in range(16)]
    t = time.perf_counter()
    lines = await asyncio.gather(*(status_line(r, 5) for r, _ in conns))
    assert set(lines) == {"HTTP/1.1 401 Unauthorized"}, lines
    assert time.perf_counter() - t < 3
    assert all(await asyncio.gather(*(closed(r, 5) for r, _ in conns)))  # no 24 MB wait
    for _, w in conns:
        w.close()
    assert receiver.peak_rss_mb() - base < 40, (base, receiver.peak_rss_mb())


@pytest.mark.asyncio
async def test_an_oversized_or_slow_body_is_refused_and_its_connection_closed(
    receiver: Receiver,
) -> None:
    looks_signed = {"X-Hub-Signature-256": "sha256=" + "0" * 64, "X-GitHub-Event": "push"}
    r, w = await receiver.raw(looks_signed, b"", 20 * MB)  # over max_body_bytes (1 MB)
    assert await status_line(r, 3) == "HTTP/1.1 413 Request Entity Too Large"
    assert await closed(r, 5)
    w.close()
    # 200 connections announcing a body within the cap, sending one byte each.
    conns = [await receiver.raw(looks_signed, b"{", 512 * 1024) for _ in range(200)]
    t = time.perf_counter()
    lines = await asyncio.gather(*(status_line(r, 10) for r, _ in conns))
    assert set(lines) == {"HTTP/1.1 408 Request Timeout"}, set(lines)
    assert all(await asyncio.gather(*(closed(r, 10) for r, _ in conns)))
    assert time.perf_counter() - t < 10  # read_timeout 1 s + the linger, not "forever"
    for _, w in conns:
        w.close()


@pytest.mark.asyncio
async def test_the_body_cap_is_a_setting(receiver: Receiver) -> None:
    big = {"ref": "refs/heads/main", "pad": "x" * (MB + 10)}
    assert (await receiver.signed(big)).status_code == 413
    ok = await receiver.signed({"zen": "ok"}, event="ping")
    assert ok.status_code == 200 and ok.json()["instances"] == ["widget"]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "payload",
    [
        {"ref": "refs/heads/main", "repository": "x"},
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b"\xff\xfe not json",
    ],
    ids=["repository-string", "deep-list", "deep-object", "not-utf8"],
)
async def test_a_signed_malformed_delivery_is_a_400(receiver: Receiver, payload: Any) -> None:
    r = await receiver.signed(payload)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    assert r.json()["error"].startswith("payload: ")
