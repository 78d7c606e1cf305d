"""The ``repo-expert`` command line: instances, index, ask, eval, sync, status, serve, worker.

This is an entry point: it alone configures logging (quiet by default, ``-v`` for progress
details, ``-vv`` for debug) and turns a :class:`RepoExpertError` into one line on stderr. The
commands are in ``commands.py``, what they print in ``render.py``, the ``sync --watch`` loop in
``watch.py``; ``serve`` is here because it is the one place in ``core/`` that starts the faces in
``bot/`` (lazily, inside the command).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from core.cli import commands as c
from core.config import Settings
from core.errors import RepoExpertError
from core.service import RepoExpert

log = logging.getLogger("repo_expert")


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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="repo-expert",
        description="An expert on your repositories that cites its sources.",
    )
    p.add_argument("--instances", help="instances folder (env REPO_EXPERT_INSTANCES; ./instances)")
    p.add_argument("--data", help="data folder (env REPO_EXPERT_DATA; ./.repo-expert)")
    p.add_argument(
        "--store", help="where the index, state and conversations live: local (the files under "
        "the data folder) or a postgresql:// URL shared by every process (env REPO_EXPERT_STORE)"
    )  # fmt: skip
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("instances", help="list and validate the configured instances")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=c.cmd_instances)

    s = sub.add_parser("index", help="build or incrementally update an instance's index")
    s.add_argument("name")
    s.add_argument("--full", action="store_true", help="rebuild from scratch")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=c.cmd_index)

    s = sub.add_parser("ask", help="ask a question; the answer cites numbered sources")
    s.add_argument("name")
    s.add_argument("question")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=c.cmd_ask)

    s = sub.add_parser(
        "eval", help="hit@1 / hit@k / MRR on a question file: of retrieval, and (--cited) of the "
        "sources the answers cite"
    )  # fmt: skip
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
    s.add_argument(
        "--cited",
        action="store_true",
        help="also score what a person sees: the sources each answer cites, in citation order "
        "(as `ask --json` returns them), and whether the answer and its cited sources hold the "
        "question's answer_facts; with --compare, for every system (cited.md/cited.png)",
    )
    s.add_argument("--split", choices=["tune", "report"], help="only the questions of this split")
    s.add_argument("--report", help="folder for compare.md/compare.png (default: data/NAME/eval)")
    s.add_argument(
        "--judge",
        action="store_true",
        help="also answer each question and judge faithfulness and answer_facts coverage "
        "(an LLM judge if the instance has an llm, else the sentence-support check)",
    )
    s.set_defaults(fn=c.cmd_eval)

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
    s.set_defaults(fn=c.cmd_sync)

    s = sub.add_parser(
        "status", help="indexed commit, chunks, last sync and error, issues high-water mark"
    )
    s.add_argument("name", nargs="?")
    s.add_argument("--all", action="store_true", help="every instance (the default)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=c.cmd_status)

    s = sub.add_parser(
        "worker", help="take index/sync jobs from the shared store's queue (PostgreSQL) and run "
        "them, until stopped"
    )  # fmt: skip
    s.add_argument("--instance", action="append", default=[], help="only jobs of this instance "
                   "(repeatable)")  # fmt: skip
    s.add_argument("--poll", type=float, default=2.0, help="seconds between looks at the queue "
                   "when no notification came (default 2)")  # fmt: skip
    s.add_argument("--once", action="store_true", help="exit when no job is queued")
    s.add_argument("--json", action="store_true", help="one JSON object per job")
    s.set_defaults(fn=c.cmd_worker)

    s = sub.add_parser("feedback", help="print the 👍/👎 feedback given in Slack on an instance")
    s.add_argument("name")
    s.add_argument("--db", help="conversations database (default {data}/conversations.sqlite)")
    s.add_argument("--limit", type=int, default=100, help="newest N (default 100)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=c.cmd_feedback)
    return p


async def _run(args: argparse.Namespace) -> int:
    app = RepoExpert(Settings.from_env(args.instances, args.data, args.store))
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
