"""The commands of ``repo-expert``: each maps its arguments to :class:`RepoExpert` calls and
prints the result (``--json`` or :mod:`core.cli.render`). ``serve`` lives with the parser, the
one place allowed to reach up to the faces."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from core.answer import LLMAnswerer
from core.answer.support import embedding_similarity
from core.cli.feedback import format_unanswered, unanswered_json, write_skeleton
from core.cli.render import ProgressBar, format_status, format_summary, render_answer
from core.cli.watch import Queued, watch
from core.config import redact
from core.errors import IndexError_, RepoExpertError
from core.eval.judge import make_judge
from core.eval.metrics import load_questions, run_cited, run_eval, run_judged
from core.extras import need
from core.index.sync import SyncReport
from core.ingest.gather import SyncRequest
from core.service import RepoExpert, checked_question
from core.store.conversations import Unanswered


async def cmd_instances(app: RepoExpert, args: argparse.Namespace) -> int:
    insts = app.load_instances()
    if args.json:
        listing = {
            n: {"file": str(i.source_file), "description": i.description,
                "indexed": await app.has_index(n)}
            for n, i in insts.items()
        }  # fmt: skip
        print(json.dumps(listing, indent=2))
        return 0
    if not insts:
        print(f"no instances in {app.settings.instances_dir}")
    for n, i in insts.items():
        state = "indexed" if await app.has_index(n) else "not indexed"
        print(f"{n:<24} {state:<12} {i.source_file}  {i.description}")
    return 0


async def cmd_index(app: RepoExpert, args: argparse.Namespace) -> int:
    progress = None if args.quiet or args.json else ProgressBar()
    report = await app.sync(args.name, SyncRequest(full=args.full), progress=progress)
    assert report.summary is not None
    s = report.summary
    print(json.dumps(s.to_json(), indent=2) if args.json else format_summary(s))
    # What the build went on without (a repository that could not be fetched, GitHub's API):
    # recorded for `status`, and said here.
    for e in report.errors:  # redacted by the sync (core/index/sync.py)
        print(f"repo-expert: {e}", file=sys.stderr)
    return 1 if report.errors else 0


async def _ensure_index(app: RepoExpert, name: str, quiet: bool = False) -> None:
    """``ask`` and ``eval`` build the index when there is none, or when another embedder built
    it (an upgrade): a person at a terminal would run ``index`` next anyway. (A bot refuses the
    old index instead: it must not stall a channel for a rebuild.)"""
    if not await app.has_index(name):
        reason = f"no index for {name} yet: building it first"
    else:
        try:
            await app.reader(name)
            return
        except IndexError_ as e:
            reason = f"{e} — rebuilding it now"
    print(reason, file=sys.stderr)
    s = await app.index(name, progress=ProgressBar(enabled=False if quiet else None))
    print(format_summary(s), file=sys.stderr)


async def cmd_ask(app: RepoExpert, args: argparse.Namespace) -> int:
    checked_question(args.question)  # an empty or overlong question: one line, nothing built
    await _ensure_index(app, args.name, quiet=args.json)
    for line in await app.behind(args.name):  # the answer cites the index's commit, not HEAD
        print(f"note: {line} — `repo-expert index {args.name}` brings it up to date",
              file=sys.stderr)  # fmt: skip
    answer = await app.ask(args.name, args.question, repo=args.repo)
    if args.json:
        print(json.dumps(answer.to_json(), ensure_ascii=False, indent=2))
    else:
        print(render_answer(answer))
    return 0


async def _compare(app: RepoExpert, args: argparse.Namespace, questions: list[Any]) -> int:
    from core.eval import compare

    compare.need_chart()  # before the long part, not after it
    out = Path(args.report) if args.report else app.layout.eval_reports(args.name)
    levels = [False, True] if args.cited else [False]
    runs = {cited: await compare.compare(app, args.name, questions, args.k, cited=cited)
            for cited in levels}  # fmt: skip
    files = {cited: "cited" if cited else "compare" for cited in levels}
    texts = {cited: compare.markdown(reports, args.k) for cited, reports in runs.items()}

    def write() -> None:
        out.mkdir(parents=True, exist_ok=True)
        for cited, reports in runs.items():
            (out / f"{files[cited]}.md").write_text(texts[cited])
            compare.chart(reports, args.k, out / f"{files[cited]}.png")

    await asyncio.to_thread(write)
    if args.json:
        body = {("cited" if c else "retrieval"): compare.to_json(r) for c, r in runs.items()}
        print(json.dumps(body if args.cited else body["retrieval"], indent=2, ensure_ascii=False))
    else:
        print("\n".join(texts.values()))
        print("written: " + ", ".join(str(out / f"{f}.{x}") for f in files.values()
                                      for x in ("md", "png")))  # fmt: skip
    return 0


def _select(questions: list[Any], split: str | None) -> list[Any]:
    if split is None:
        return questions
    chosen = [q for q in questions if q.split == split]
    if not chosen:
        raise RepoExpertError(f"no question of the file has split: {split}")
    return chosen


async def cmd_eval(app: RepoExpert, args: argparse.Namespace) -> int:
    questions = _select(load_questions(Path(args.questions)), args.split)
    await _ensure_index(app, args.name, quiet=args.json)
    if args.compare:
        return await _compare(app, args, questions)

    async def fn(q: str) -> Any:
        return await app.retrieve(args.name, q, k=args.k)

    report = await run_eval(questions, fn, args.k)
    reports = [report]
    if args.cited:  # what a person sees: the answer's cited sources, as `ask --json` gives them
        reports.append(await run_cited(questions, lambda q: app.ask(args.name, q), args.k))
    if not args.judge:
        if args.json:
            body = {"retrieval": report.to_json(), "cited": reports[-1].to_json()}
            print(json.dumps(body if args.cited else report.to_json(), indent=2))
        else:
            print("\n\n".join(r.table() for r in reports))
        return 0
    # Answer each question through the service (the instance's llm and retrieval.k) and judge
    # it on the evidence its answerer saw.
    svc = app.embedder(args.name)
    answerer = app.answerer_for(args.name)
    judge = make_judge(
        app.instance(args.name).llm,
        embedding_similarity(partial(app.question_vector, args.name), svc.embed_passages),
        chat=answerer.model if isinstance(answerer, LLMAnswerer) else None,
    )  # fmt: skip
    judged = await run_judged(questions, lambda q: app.ask(args.name, q), judge)
    if args.json:
        print(json.dumps({**report.to_json(), "judge": judged.to_json()}, indent=2,
                         ensure_ascii=False))  # fmt: skip
    else:
        print(f"{report.table()}\n\n{judged.table()}")
    return 0


def _names(app: RepoExpert, args: argparse.Namespace) -> list[str]:
    if args.all or not args.name:
        names = list(app.load_instances())
        if not names:
            raise RepoExpertError(f"no instances in {app.settings.instances_dir}")
        return names
    app.instance(args.name)  # an unknown name fails here, with the known ones
    return [args.name]


async def watch_serving_health(
    app: RepoExpert, names: list[str], show: Any, interval: float | None, port: int | None
) -> None:
    """``sync --watch``, with the health server when a port is given (or ``$PORT`` is set)."""
    port = port or (int(os.environ["PORT"]) if os.environ.get("PORT") else None)
    if port is None:
        await watch(app, names, show, interval=interval)
        return
    need("aiohttp", "api", "sync --watch --health-port")
    from core.ops.health import Probe, start_health_server

    probe = Probe(app, names)
    runner = await start_health_server(probe, "0.0.0.0", port)

    def counted(name: str, r: SyncReport | Queued | BaseException) -> None:
        outcome = "queued" if isinstance(r, Queued) else "ok" if isinstance(r, SyncReport) and \
            r.ok else "failed"  # fmt: skip
        probe.metrics.syncs.labels(outcome).inc()
        if isinstance(r, BaseException):
            probe.metrics.error(r)
        show(name, r)

    try:
        await watch(app, names, counted, interval=interval)
    finally:
        await runner.cleanup()


async def cmd_sync(app: RepoExpert, args: argparse.Namespace) -> int:
    if not args.name and not args.all:
        raise RepoExpertError("name an instance, or give --all")
    names = _names(app, args)

    def show(name: str, r: SyncReport | Queued | BaseException) -> None:
        if isinstance(r, SyncReport | Queued):
            print(json.dumps(r.to_json()) if args.json else r.line(), flush=True)
        else:
            print(f"sync of {name} failed: {redact(str(r))}", file=sys.stderr, flush=True)

    if args.watch:
        await watch_serving_health(app, names, show, args.interval, args.health_port)
        return 0
    failed = 0
    for name in names:
        try:
            r = await app.sync(
                name, SyncRequest(full=args.full, refetch_issues=args.refetch_issues),
                progress=None if args.quiet or args.json else ProgressBar(),
            )  # fmt: skip
        except RepoExpertError as e:
            show(name, e)
            failed += 1
            continue
        show(name, r)
        failed += not r.ok
    return 1 if failed else 0


async def cmd_status(app: RepoExpert, args: argparse.Namespace) -> int:
    statuses = [await app.status(n) for n in _names(app, args)]
    if args.json:
        print(json.dumps(statuses, indent=2))
    else:
        print("\n\n".join(format_status(s) for s in statuses))
    return 0


async def cmd_worker(app: RepoExpert, args: argparse.Namespace) -> int:
    from core.index.worker import run_worker

    if app.backend.jobs is None:
        raise RepoExpertError(
            "a worker takes jobs from a shared store: set --store postgresql://… or "
            "REPO_EXPERT_STORE (with the local store, `sync --watch` syncs by itself)"
        )
    names = [app.instance(n).name for n in args.instance] or None  # unknown names fail here

    def show(job: int, name: str, r: SyncReport | BaseException) -> None:
        if isinstance(r, SyncReport):
            line = (
                json.dumps({"job": job, **r.to_json()}) if args.json else f"job {job}: {r.line()}"
            )
            print(line, flush=True)
        else:
            print(f"job {job}: sync of {name} failed: {r}", file=sys.stderr, flush=True)

    print(f"worker: taking jobs from {app.backend.where}", file=sys.stderr, flush=True)
    await run_worker(app, app.backend.jobs, poll=args.poll, instances=names, once=args.once,
                     on_job=show)  # fmt: skip
    return 0


async def unanswered(app: RepoExpert, args: argparse.Namespace, path: Path, found: bool) -> int:
    """``feedback NAME --unanswered`` / ``--export-eval FILE`` (``feedback.py``)."""
    records: list[Unanswered] = []
    if found:
        store = await app.conversations(path)
        try:
            records = await store.unanswered(args.name, args.limit)
        finally:
            await store.close()
    if args.export_eval:
        n = write_skeleton(Path(args.export_eval), args.name, records)
        print(f"wrote {n} question(s) to {args.export_eval}: fill each gold, then "
              f"repo-expert eval {args.name} --questions {args.export_eval}")  # fmt: skip
    elif args.json:
        print(unanswered_json(records))
    else:
        print(format_unanswered(args.name, records))
    return 0


async def cmd_feedback(app: RepoExpert, args: argparse.Namespace) -> int:
    app.instance(args.name)  # an unknown name fails here, with the known ones
    path = Path(args.db) if args.db else app.layout.conversations
    records = []
    found = app.backend.shared or path.exists()
    if args.unanswered or args.export_eval:
        return await unanswered(app, args, path, found)
    if found:
        store = await app.conversations(path)
        try:
            records = await store.feedback(args.name, args.limit)
        finally:
            await store.close()
    if args.json:
        print(json.dumps([r.to_json() for r in records], ensure_ascii=False, indent=2))
        return 0
    if not records:
        where = app.backend.where if app.backend.shared else path
        print(f"no feedback on {args.name} yet ({where})")
        return 0
    up = sum(r.verdict == "up" for r in records)
    print(f"{args.name}: {up} 👍  {len(records) - up} 👎  (newest first)")
    for r in records:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created))
        mark = "👍" if r.verdict == "up" else "👎"
        answer = " ".join(r.answer.split())
        print(f"\n{when}  {mark}  {r.platform} user {r.user}  (turn {r.turn_id})")
        print(f"  Q: {r.question}")
        print(f"  A: {answer[:300] + ' …' if len(answer) > 300 else answer}")
        for s in r.sources:
            print(f"     [{s.get('n')}] {s.get('url') or s.get('path') or s.get('title')}")
    return 0


async def cmd_api_key(app: RepoExpert, args: argparse.Namespace) -> int:
    import secrets

    from core.config import ApiKey, hash_key

    key = "rx-" + secrets.token_urlsafe(32)
    names = [n.strip() for n in args.key_instances.split(",") if n.strip()]
    entry = ApiKey(name=args.name, sha256=hash_key(key), instances=names or ["*"])
    print(f"API key for {entry.name} (shown only now; give it to the caller):\n  {key}\n")
    print("Add it to the settings file (serve --config FILE), under api.keys:")
    print(f"  - {json.dumps(entry.model_dump(), ensure_ascii=False)}")
    return 0
