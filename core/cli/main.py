"""The ``repo-expert`` command line: instances, index, ask, eval, sync, status, serve.

This is an entry point: it alone configures logging (quiet by default, ``-v`` for progress
details, ``-vv`` for debug) and turns a :class:`RepoExpertError` into one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from core.answer.extractive import render_answer
from core.answer.support import embedding_similarity
from core.config.schema import Settings
from core.errors import IndexError_, RepoExpertError
from core.eval.judge import make_judge
from core.eval.metrics import load_questions, run_eval, run_judged
from core.index.build import Summary
from core.service import RepoExpert

log = logging.getLogger("repo_expert")


class ProgressBar:
    """Indexing progress on stderr: chunking, then embedding with embeddings/s."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.stage = ""
        self.last = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if stage != self.stage:
            if self.stage and self.tty:
                self.stream.write("\n")
            self.stage, self.t0 = stage, now
        if not self.tty and done not in (0, total) and now - self.last < 5:
            return  # in logs, a line every few seconds is enough
        self.last = now
        width = 30
        filled = int(width * done / total) if total else width
        bar = "█" * filled + "·" * (width - filled)
        rate = done / (now - self.t0) if now > self.t0 and done else 0.0
        unit = "files" if stage == "chunk" else "embeddings"
        msg = f"{stage:<6}[{bar}] {done}/{total} {unit} {rate:.1f}/s"
        if self.tty:
            self.stream.write("\r" + msg)
            if done >= total:
                self.stream.write("\n")
                self.stage = ""
        else:
            self.stream.write(msg + "\n")
        self.stream.flush()


def format_summary(s: Summary) -> str:
    chunks = ", ".join(f"{c} {n}" for c, n in s.chunks.items())
    files = ", ".join(f"{c} {n}" for c, n in s.files.items()) or "none"
    excluded = sum(s.excluded.values())
    lines = [
        f"indexed {s.instance} at {s.commit[:12] if s.commit else '(not a git commit)'}",
        f"  units:      {files}  (changed {s.units_changed}, reused {s.units_reused}, "
        f"deleted {s.units_deleted})",
        f"  chunks:     {chunks}  (embedded now: {s.chunks_embedded})",
        f"  symbols:    {s.symbols}",
        f"  largest chunk: {s.largest_chunk_tokens} tokens; over the {s.window}-token window: "
        f"{s.over_window}",
        f"  excluded:   {excluded} files"
        + "".join(f"\n    {n:>5}  {why}" for why, n in sorted(s.excluded.items())),
        f"  time:       {s.seconds:.1f}s (embedding {s.embed_seconds:.1f}s)",
    ]
    if s.rebuilt_reason:
        lines.append(f"  rebuilt:    {s.rebuilt_reason}")
    return "\n".join(lines)


async def cmd_instances(app: RepoExpert, args: argparse.Namespace) -> int:
    insts = app.load_instances()
    if args.json:
        listing = {
            n: {"file": str(i.source_file), "description": i.description,
                "indexed": app.has_index(n)}
            for n, i in insts.items()
        }  # fmt: skip
        print(json.dumps(listing, indent=2))
        return 0
    if not insts:
        print(f"no instances in {app.settings.instances_dir}")
    for n, i in insts.items():
        state = "indexed" if app.has_index(n) else "not indexed"
        print(f"{n:<24} {state:<12} {i.source_file}  {i.description}")
    return 0


async def cmd_index(app: RepoExpert, args: argparse.Namespace) -> int:
    progress = None if args.quiet else ProgressBar()
    summary = await app.index(args.name, progress=progress, full=args.full)
    print(json.dumps(summary.to_json(), indent=2) if args.json else format_summary(summary))
    return 0


async def _ensure_index(app: RepoExpert, name: str) -> None:
    """``ask`` and ``eval`` build the index when there is none, or when another embedder built
    it (an upgrade): a person at a terminal would run ``index`` next anyway. (A bot refuses the
    old index instead: it must not stall a channel for a rebuild.)"""
    if not app.has_index(name):
        reason = f"no index for {name} yet: building it first"
    else:
        try:
            await app.reader(name)
            return
        except IndexError_ as e:
            reason = f"{e} — rebuilding it now"
    print(reason, file=sys.stderr)
    s = await app.index(name, progress=ProgressBar())
    print(format_summary(s), file=sys.stderr)


async def cmd_ask(app: RepoExpert, args: argparse.Namespace) -> int:
    await _ensure_index(app, args.name)
    answer = await app.ask(args.name, args.question)
    if args.json:
        print(json.dumps(answer.to_json(), ensure_ascii=False, indent=2))
    else:
        print(render_answer(answer))
    return 0


async def _compare(app: RepoExpert, args: argparse.Namespace, questions: list[Any]) -> int:
    from core.eval import compare

    reports = await compare.compare(app, args.name, questions, args.k)
    out = Path(args.report or app.settings.data_dir / args.name / "eval")
    md = compare.markdown(reports, args.k)

    def write() -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.md").write_text(md)
        compare.chart(reports, args.k, out / "compare.png")

    await asyncio.to_thread(write)
    if args.json:
        print(json.dumps(compare.to_json(reports), indent=2, ensure_ascii=False))
    else:
        print(md)
        print(f"written: {out / 'compare.md'}, {out / 'compare.png'}")
    return 0


async def cmd_eval(app: RepoExpert, args: argparse.Namespace) -> int:
    questions = load_questions(Path(args.questions))
    await _ensure_index(app, args.name)
    if args.compare:
        return await _compare(app, args, questions)

    async def fn(q: str) -> Any:
        return await app.retrieve(args.name, q, k=args.k)

    report = await run_eval(questions, fn, args.k)
    if not args.judge:
        print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
        return 0
    # Answer each question through the service (the instance's llm and retrieval.k) and judge
    # it on the evidence its answerer saw.
    svc = app.embedder(args.name)
    judge = make_judge(
        app.instance(args.name).llm, embedding_similarity(svc.embed_query, svc.embed_passages)
    )
    judged = await run_judged(questions, lambda q: app.ask(args.name, q), judge)
    if args.json:
        print(json.dumps({**report.to_json(), "judge": judged.to_json()}, indent=2,
                         ensure_ascii=False))  # fmt: skip
    else:
        print(f"{report.table()}\n\n{judged.table()}")
    return 0


async def cmd_serve(app: RepoExpert, args: argparse.Namespace) -> int:
    if args.platform == "webhooks":
        from bot.webhooks import serve_webhooks

        await serve_webhooks(app, args.host, args.port)
        return 0
    # The chat faces build on core; this entry point is the one place that reaches up to them.
    from bot.serve import serve
    from bot.settings import load_serve_config

    await serve(args.platform, app, load_serve_config(args.config))
    return 0


def _names(app: RepoExpert, args: argparse.Namespace) -> list[str]:
    if args.all or not args.name:
        names = list(app.load_instances())
        if not names:
            raise RepoExpertError(f"no instances in {app.settings.instances_dir}")
        return names
    app.instance(args.name)  # an unknown name fails here, with the known ones
    return [args.name]


async def cmd_sync(app: RepoExpert, args: argparse.Namespace) -> int:
    from core.index.sync import SyncReport, watch

    if not args.name and not args.all:
        raise RepoExpertError("name an instance, or give --all")
    names = _names(app, args)

    def show(name: str, r: SyncReport | BaseException) -> None:
        if isinstance(r, SyncReport):
            print(json.dumps(r.to_json()) if args.json else r.line(), flush=True)
        else:
            print(f"sync of {name} failed: {r}", file=sys.stderr, flush=True)

    if args.watch:
        await watch(app, names, show, interval=args.interval)
        return 0
    failed = 0
    for name in names:
        try:
            r = await app.sync(
                name, full=args.full, refetch_issues=args.refetch_issues,
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
    from core.index.sync import format_status

    statuses = [await app.status(n) for n in _names(app, args)]
    if args.json:
        print(json.dumps(statuses, indent=2))
    else:
        print("\n\n".join(format_status(s) for s in statuses))
    return 0


async def cmd_feedback(app: RepoExpert, args: argparse.Namespace) -> int:
    from core.store.conversations import ConversationStore, default_path

    app.instance(args.name)  # an unknown name fails here, with the known ones
    path = Path(args.db) if args.db else default_path(app.settings.data_dir)
    records = []
    if path.exists():
        store = await ConversationStore.open(path)
        try:
            records = await store.feedback(args.name, args.limit)
        finally:
            await store.close()
    if args.json:
        print(json.dumps([r.to_json() for r in records], ensure_ascii=False, indent=2))
        return 0
    if not records:
        print(f"no feedback on {args.name} yet ({path})")
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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="repo-expert",
        description="An expert on your repositories that cites its sources.",
    )
    p.add_argument("--instances", help="instances folder (env REPO_EXPERT_INSTANCES; ./instances)")
    p.add_argument("--data", help="data folder (env REPO_EXPERT_DATA; ./.repo-expert)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("instances", help="list and validate the configured instances")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_instances)

    s = sub.add_parser("index", help="build or incrementally update an instance's index")
    s.add_argument("name")
    s.add_argument("--full", action="store_true", help="rebuild from scratch")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=cmd_index)

    s = sub.add_parser("ask", help="ask a question; the answer cites numbered sources")
    s.add_argument("name")
    s.add_argument("question")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_ask)

    s = sub.add_parser("eval", help="retrieval hit@k / MRR on a question file")
    s.add_argument("name")
    s.add_argument("--questions", required=True, help="YAML question file")
    s.add_argument("-k", type=int, default=6)
    s.add_argument("--json", action="store_true")
    s.add_argument(
        "--compare",
        action="store_true",
        help="run grep, bm25, dense, rrf and the full system side by side; writes a Markdown "
        "table and a bar chart",
    )
    s.add_argument("--report", help="folder for compare.md/compare.png (default: data/NAME/eval)")
    s.add_argument(
        "--judge",
        action="store_true",
        help="also answer each question and judge faithfulness and answer_facts coverage "
        "(an LLM judge if the instance has an llm, else the sentence-support check)",
    )
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser(
        "serve",
        help="run the Slack and/or Discord bot (tokens from the environment; see README), or "
        "the GitHub webhook receiver",
    )
    s.add_argument(
        "platform",
        choices=["slack", "discord", "all", "webhooks"],
        help="all: Slack and Discord in one process; webhooks: the GitHub webhook receiver",
    )
    s.add_argument("--config", help="bot settings YAML (env REPO_EXPERT_SERVE_CONFIG)")
    s.add_argument("--host", default="0.0.0.0", help="webhooks: address to listen on")
    s.add_argument("--port", type=int, help="webhooks: port (default $PORT or 8080)")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser(
        "sync",
        help="fetch the repository and GitHub issues, then update the index incrementally",
    )
    s.add_argument("name", nargs="?")
    s.add_argument("--all", action="store_true", help="every instance")
    s.add_argument("--watch", action="store_true", help="repeat every interval until stopped")
    s.add_argument(
        "--interval", type=float, help="seconds between syncs (default: each instance's "
        "sync_interval, 300)"
    )  # fmt: skip
    s.add_argument("--full", action="store_true", help="rebuild the index from scratch")
    s.add_argument(
        "--refetch-issues",
        action="store_true",
        help="list every issue again (drops deleted and transferred ones from the mirror)",
    )
    s.add_argument("--json", action="store_true", help="one JSON object per sync")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=cmd_sync)

    s = sub.add_parser(
        "status", help="indexed commit, chunks, last sync and error, issues high-water mark"
    )
    s.add_argument("name", nargs="?")
    s.add_argument("--all", action="store_true", help="every instance (the default)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("feedback", help="print the 👍/👎 feedback given in Slack on an instance")
    s.add_argument("name")
    s.add_argument("--db", help="conversations database (default {data}/conversations.sqlite)")
    s.add_argument("--limit", type=int, default=100, help="newest N (default 100)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_feedback)
    return p


async def _run(args: argparse.Namespace) -> int:
    app = RepoExpert(Settings.from_env(args.instances, args.data))
    try:
        return int(await args.fn(app, args))
    finally:
        await app.close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_run(args))
    except RepoExpertError as e:
        print(f"repo-expert: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("repo-expert: interrupted; the previous index is still in place", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
