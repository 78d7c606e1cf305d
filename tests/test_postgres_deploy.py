"""Several processes on one PostgreSQL store, as a deployment runs them: bot replicas answering
from the same build and following a swap, index workers that can be killed mid-build, two
workers that never build one instance at once, conversations shared between bot processes.
The other processes are real children (tests/pg_child.py) where it matters."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import FakeApp, commit_all, write_files

from core.index.worker import run_worker
from core.service import SyncRequest

CHILD = Path(__file__).resolve().parent / "pg_child.py"


def child(mode: str, url: str, tmp: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, url, str(tmp)], cwd=CHILD.parent.parent,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def child_json(mode: str, url: str, tmp: Path) -> dict[str, Any]:
    proc = child(mode, url, tmp)
    out, err = await asyncio.to_thread(proc.communicate, timeout=120)
    assert proc.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


async def until(check: Any, within: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.asyncio
async def test_two_processes_answer_from_one_build_and_follow_the_swap(
    sample: dict[str, Any], pg_url: str
) -> None:
    tmp = sample["tmp"]
    a = FakeApp(tmp / "instances", tmp / "data-a", store=pg_url)
    try:
        await a.index("widget")
        first = await a.store.live_id("widget")
        other = await child_json("ask", pg_url, tmp)  # another process, its own data folder
        assert other["build"] == first and "src/widget/config.py" in other["paths"]
        write_files(sample["repo"], {"src/widget/loader.py": "def parse_config_fast(p):\n"
                                     "    return parse_config(p)\n"})  # fmt: skip
        commit_all(sample["repo"])
        await a.index("widget")
        second = await a.store.live_id("widget")
        assert second != first
        other = await child_json("ask", pg_url, tmp)  # the swap is seen without a restart
        assert other["build"] == second
        assert (await a.reader("widget")).build_id == second
    finally:
        await a.close()


@pytest.mark.asyncio
async def test_a_worker_killed_mid_build_leaves_the_live_build_and_the_job_is_retried(
    sample: dict[str, Any], pg_url: str
) -> None:
    tmp = sample["tmp"]
    a = FakeApp(tmp / "instances", tmp / "data-a", store=pg_url)
    proc = None
    try:
        await a.index("widget")
        first = await a.store.live_id("widget")
        write_files(sample["repo"], {"src/widget/extra.py": "def zebra_stripes():\n"
                                     "    return 'zebra'\n"})  # fmt: skip
        commit_all(sample["repo"])
        job = await a.enqueue("widget", SyncRequest())
        proc = child("worker", pg_url, tmp)
        marker = tmp / "embedding"

        async def embedding() -> bool:
            assert proc is not None and proc.poll() is None, proc.stderr.read() if proc else ""
            return marker.exists()

        await until(embedding, 90, "the child worker to start embedding")
        (running,) = await a.backend.jobs.jobs("widget")
        assert running["state"] == "running" and running["attempts"] == 1
        os.kill(proc.pid, signal.SIGKILL)  # mid-build: its transaction never commits
        await asyncio.to_thread(proc.wait, 30)
        assert await a.store.live_id("widget") == first  # the previous build still serves
        answer = await a.ask("widget", "what does parse_config return?")
        assert answer.sources and (await a.reader("widget")).build_id == first
        # The dead worker's session is gone: its job goes back to the queue ...
        assert await until(a.backend.jobs.reclaim, 30, "the dead worker's job") == [job]
        # ... and another worker runs it to the end.
        assert await run_worker(a, a.backend.jobs, once=True) == 1
        (done,) = await a.backend.jobs.jobs("widget")
        assert (done["id"], done["state"], done["attempts"]) == (job, "done", 2)
        assert await a.store.live_id("widget") not in (None, first)
        reader = await a.reader("widget")
        assert "src/widget/extra.py" in await reader.units()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await a.close()


class Recording(FakeApp):
    """A worker's service that records when each of its syncs ran."""

    def __init__(self, *args: Any, runs: list[tuple[str, str, float, float]], who: str,
                 **kw: Any) -> None:  # fmt: skip
        super().__init__(*args, **kw)
        self.runs, self.who = runs, who

    async def sync(self, name: str, request: SyncRequest | None = None, **kw: Any) -> Any:
        t0 = time.monotonic()
        await asyncio.sleep(0.5)  # a slow build: the other worker has time to try
        try:
            return await super().sync(name, request, **kw)
        finally:
            self.runs.append((name, self.who, t0, time.monotonic()))


@pytest.mark.asyncio
async def test_two_workers_never_build_one_instance_at_once(
    sample: dict[str, Any], pg_url: str
) -> None:
    tmp = sample["tmp"]
    text = (tmp / "instances" / "widget.yaml").read_text()
    (tmp / "instances" / "gadget.yaml").write_text(text)  # a second instance, same sources
    runs: list[tuple[str, str, float, float]] = []
    workers = [
        Recording(tmp / "instances", tmp / f"data-{w}", store=pg_url, runs=runs, who=w)
        for w in ("w1", "w2")
    ]
    stop = asyncio.Event()
    try:
        await workers[0].enqueue("widget")
        await workers[0].enqueue("gadget")
        tasks = [asyncio.create_task(run_worker(w, w.backend.jobs, stop=stop, poll=0.1))
                 for w in workers]  # fmt: skip

        async def widget_running() -> bool:
            jobs = await workers[0].backend.jobs.jobs("widget")
            return any(j["state"] == "running" for j in jobs)

        await until(widget_running, 30, "the first widget job")
        again = await workers[1].enqueue("widget", SyncRequest(full=True))  # while it runs

        async def all_done() -> bool:
            jobs = await workers[0].backend.jobs.jobs()
            return len(jobs) == 3 and all(j["state"] == "done" for j in jobs)

        await until(all_done, 90, "every job to finish")
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        stop.set()
        for w in workers:
            await w.close()
    widget = sorted((r for r in runs if r[0] == "widget"), key=lambda r: r[2])
    assert len(widget) == 2 and widget[0][3] <= widget[1][2], widget  # one after the other
    (gadget,) = [r for r in runs if r[0] == "gadget"]
    assert gadget[1] != widget[0][1]  # the other worker took the other instance meanwhile
    assert gadget[2] < widget[0][3] and widget[0][2] < gadget[3]
    assert again > 0


@pytest.mark.asyncio
async def test_conversations_written_by_one_bot_process_are_read_by_another(
    sample: dict[str, Any], pg_url: str
) -> None:
    tmp = sample["tmp"]
    written = await child_json("converse", pg_url, tmp)
    app = FakeApp(tmp / "instances", tmp / "data-bot2", store=pg_url)
    try:
        store = await app.conversations(tmp / "unused.sqlite")
        assert [t.question for t in await store.history("slack", "T1:C1:1.0")] == ["how?"]
        assert await store.thread_instance("slack", "T1:C1:1.0") == "widget"
        (fb,) = await store.feedback("widget")
        assert (fb.turn_id, fb.user, fb.verdict) == (written["turn"], "U2", "down")
        await store.close()
        assert not (tmp / "unused.sqlite").exists()
    finally:
        await app.close()
