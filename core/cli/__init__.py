"""The ``repo-expert`` command line: init, instances, index, ask, eval, sync, status, serve,
worker, feedback, api-key.

This is an entry point: it alone configures logging (quiet by default, ``-v`` for progress
details, ``-vv`` for debug) and turns a :class:`RepoExpertError` into one line on stderr. The
commands are in ``commands.py`` (``init`` in ``init.py``), what they print in ``render.py``, the
``sync --watch`` loop in ``watch.py``. The global flags are accepted before or after the command.
``serve`` is here because it is the one place in ``core/`` that starts the faces in ``bot/``
(lazily, inside the command, once the extra they need is known to be installed).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sqlite3
import sys
import textwrap
from importlib import metadata

import core
from core.cli import commands as c
from core.cli.init import cmd_init
from core.config import Settings, redact
from core.errors import RepoExpertError
from core.extras import need
from core.ops.logs import formatter
from core.service import RepoExpert

log = logging.getLogger("repo_expert")


# What `serve PLATFORM` needs beyond the default install: (module, extra) — checked before a face
# is imported, so a missing package is one line naming the extra.
SERVE_NEEDS: dict[str, list[tuple[str, str]]] = {
    "slack": [("slack_bolt", "slack"), ("slack_sdk", "slack"), ("aiohttp", "slack")],
    "discord": [("discord", "discord")],
    "all": [("slack_bolt", "slack"), ("slack_sdk", "slack"), ("discord", "discord")],
    "api": [("aiohttp", "api")],
    "webhooks": [("aiohttp", "api")],
    "mcp": [("mcp", "mcp"), ("uvicorn", "mcp")],
}


async def cmd_serve(app: RepoExpert, args: argparse.Namespace) -> int:
    for module, extra in SERVE_NEEDS[args.platform]:
        need(module, extra, f"serve {args.platform}")
    # The faces build on core; this entry point is the one place that reaches up to them.
    from bot.settings import load_serve_config

    config = load_serve_config(args.config)
    if args.platform == "webhooks":
        from bot.webhooks import serve_webhooks

        await serve_webhooks(app, args.host, args.port, settings=config.webhooks)
    elif args.platform == "api":
        from bot.api import serve_api

        await serve_api(app, config, args.host, args.port)
    elif args.platform == "mcp":
        from bot.mcp import serve_mcp

        await serve_mcp(app, config, args.http)
    else:
        from bot.serve import serve

        await serve(args.platform, app, config, health=args.health_port)
    return 0


EXAMPLES = """\
examples:
  repo-expert init widget ../widget              # write instances/widget.yaml from a checkout
  repo-expert init cli https://github.com/urfave/cli.git
  repo-expert index widget                       # build (or update) its index
  repo-expert ask widget "where is the timeout set?"
  repo-expert ask widget "¿dónde se configura el tiempo de espera?" --json
  repo-expert eval widget --questions questions.yaml --compare
  repo-expert sync --all --watch                 # keep every instance fresh
  repo-expert serve slack --instances /srv/instances -v

Global flags (--instances, --data, --store, -v, --log-format) go anywhere on the line.
`repo-expert COMMAND --help` explains each command. README: configuration, the bots, the API,
MCP."""


def _globals(instances: bool = True) -> argparse.ArgumentParser:
    """The flags every command takes, before or after its name. ``default=SUPPRESS``: a flag
    given on either side is kept, not overwritten by the other side's default."""
    g = argparse.ArgumentParser(add_help=False)
    if instances:  # api-key has an --instances of its own (the key's)
        g.add_argument(
            "--instances", metavar="DIR", default=argparse.SUPPRESS,
            help="the folder of instance files (env REPO_EXPERT_INSTANCES; default ./instances)",
        )  # fmt: skip
    g.add_argument(
        "--data", metavar="DIR", default=argparse.SUPPRESS,
        help="the data folder: indexes, state, caches (env REPO_EXPERT_DATA; default "
        ".repo-expert inside the instances folder; never indexed)",
    )  # fmt: skip
    g.add_argument(
        "--store", metavar="URL", default=argparse.SUPPRESS,
        help="where the index, state and conversations live: local (the files under the data "
        "folder) or a postgresql:// URL shared by every process (env REPO_EXPERT_STORE)",
    )  # fmt: skip
    g.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS,
        help="more log output on stderr: -v progress details, -vv debug",
    )  # fmt: skip
    g.add_argument(
        "--log-format", choices=["text", "json"], default=argparse.SUPPRESS,
        help="log lines as text (default) or one JSON object per line for log shippers; "
        "secrets are redacted in both",
    )  # fmt: skip
    return g


def parser() -> argparse.ArgumentParser:
    glob = _globals()
    p = argparse.ArgumentParser(
        prog="repo-expert",
        description="An expert on your repositories that cites its sources.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[glob],
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def command(name: str, help: str, examples: str, parents: argparse.ArgumentParser = glob
                ) -> argparse.ArgumentParser:  # fmt: skip
        return sub.add_parser(
            name, help=help, description=textwrap.fill(help, 88), parents=[parents],
            epilog="examples:\n" + examples, formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip

    name_help = "the instance: the name of its file in the instances folder, without .yaml"
    json_help = "print JSON instead of text"

    s = command(
        "init",
        "write NAME.yaml for a repository (a local checkout or a git URL): "
        "include globs for the languages found, excludes, web_url and GitHub issues "
        "from the origin remote; validate it and print the next command",
        "  repo-expert init widget ../widget\n"
        "  repo-expert init cli https://github.com/urfave/cli.git --ref main\n"
        "  repo-expert --instances /srv/instances init docs /srv/checkouts/docs --force",
    )
    s.add_argument("name", help="the instance name (letters, digits, '.', '_', '-'); the file "
                   "is NAME.yaml")  # fmt: skip
    s.add_argument("source", metavar="PATH|URL", help="a local folder (a git checkout or not), "
                   "or a git URL to clone (https, ssh, file)")  # fmt: skip
    s.add_argument("--ref", help="with a URL: the branch or tag to index (default: its HEAD)")
    s.add_argument("--force", action="store_true", help="overwrite an existing NAME.yaml")
    s.set_defaults(fn=cmd_init)

    s = command(
        "instances",
        "list and validate every instance file (every problem of every file in one run)",
        "  repo-expert instances\n  repo-expert instances --json",
    )
    s.add_argument("--json", action="store_true", help=json_help)
    s.set_defaults(fn=c.cmd_instances)

    s = command(
        "index",
        "build or incrementally update an instance's index; prints a summary",
        "  repo-expert index widget\n  repo-expert index widget --full --json",
    )
    s.add_argument("name", help=name_help)
    s.add_argument("--full", action="store_true", help="rebuild from scratch")
    s.add_argument("--json", action="store_true", help="print the summary as JSON (no progress)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(fn=c.cmd_index)

    s = command(
        "ask",
        "ask a question; the answer cites numbered sources (builds the index "
        "first if there is none)",
        '  repo-expert ask widget "what is the default timeout?"\n'
        '  repo-expert ask widget "¿cómo ejecuto las pruebas?" --json',
    )
    s.add_argument("name", help=name_help)
    s.add_argument("question", help="the question, in any language (quote it)")
    s.add_argument("--json", action="store_true", help="print the answer object (README)")
    s.add_argument(
        "--repo",
        metavar="NAME",
        help="an instance over several repositories: sources from this one only, or from a "
        "scope's (scopes:) (a question naming one of them is searched in it alone when it leads; "
        "repo:all in the question: the whole of NAME)",
    )
    s.set_defaults(fn=c.cmd_ask)

    s = command(
        "eval",
        "hit@1 / hit@k / MRR on a question file: of retrieval, and (--cited) of "
        'the sources the answers cite (the file format: README, "Evaluating")',
        "  repo-expert eval widget --questions questions.yaml\n"
        "  repo-expert eval widget --questions questions.yaml --judge --json\n"
        "  repo-expert eval widget --questions questions.yaml --compare --report out/",
    )
    s.add_argument("name", help=name_help)
    s.add_argument("--questions", required=True, metavar="FILE", help="the YAML question file")
    s.add_argument("-k", type=int, default=6, help="sources scored per question (default 6)")
    s.add_argument("--json", action="store_true", help=json_help)
    s.add_argument(
        "--compare",
        action="store_true",
        help="run grep, bm25, dense, rrf and the full system side by side; writes a Markdown "
        "table and a bar chart (the chart needs the eval extra)",
    )
    s.add_argument(
        "--cited",
        action="store_true",
        help="also score what a person sees: the sources each answer cites, in citation order "
        "(as `ask --json` returns them), and whether the answer and its cited sources hold the "
        "question's answer_facts; with --compare, for every system (cited.md/cited.png)",
    )
    s.add_argument("--split", choices=["tune", "report"], help="only the questions of this split")
    s.add_argument(
        "--report",
        metavar="DIR",
        help="folder for compare.md/compare.png (default: DATA/NAME/eval)",
    )
    s.add_argument(
        "--judge",
        action="store_true",
        help="also answer each question and judge faithfulness and answer_facts coverage "
        "(an LLM judge if the instance has an llm, else the sentence-support check)",
    )
    s.set_defaults(fn=c.cmd_eval)

    s = command(
        "serve",
        "run the Slack and/or Discord bot (tokens from the environment; see README), the "
        "GitHub webhook receiver, the HTTP API with its web page, or the MCP server; each "
        "needs its extra (e.g. pip install 'repo-expert[slack]')",
        "  SLACK_BOT_TOKEN=… SLACK_APP_TOKEN=… repo-expert serve slack\n"
        "  repo-expert serve api --port 8000 --config serve.yaml\n"
        "  repo-expert serve mcp --http 127.0.0.1:8765",
    )
    s.add_argument(
        "platform",
        choices=["slack", "discord", "all", "webhooks", "api", "mcp"],
        help="all: Slack and Discord in one process; webhooks: the GitHub webhook receiver; "
        "api: the HTTP API and the web page at /; mcp: the MCP server (stdio, or --http)",
    )
    s.add_argument(
        "--config", metavar="FILE", help="settings YAML of the faces (env REPO_EXPERT_SERVE_CONFIG)"
    )
    s.add_argument("--host", default="0.0.0.0", help="webhooks, api: address to listen on")
    s.add_argument("--port", type=int, help="webhooks, api: port (default $PORT, else 8080 / 8000)")
    s.add_argument(
        "--http", metavar="HOST:PORT", help="mcp: serve streamable HTTP at http://HOST:PORT/mcp "
        "instead of stdio"
    )  # fmt: skip
    s.add_argument(
        "--health-port", type=int, metavar="PORT", help="slack (Socket Mode), discord, all: "
        "serve /healthz, /readyz and /metrics on this port (default: health.port of the "
        "settings, else $PORT when set)",
    )  # fmt: skip
    s.set_defaults(fn=cmd_serve)

    s = command(
        "sync",
        "fetch the repository and GitHub issues, then update the index incrementally",
        "  repo-expert sync widget\n  repo-expert sync --all --watch "
        "--interval 600\n  repo-expert sync widget --refetch-issues --json",
    )
    s.add_argument("name", nargs="?", help=name_help + " (or --all)")
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
    s.add_argument(
        "--health-port", type=int, metavar="PORT", help="with --watch: serve /healthz, /readyz "
        "and /metrics on this port (default $PORT when set; needs the api extra)",
    )  # fmt: skip
    s.set_defaults(fn=c.cmd_sync)

    s = command(
        "status",
        "indexed commit, chunks, last sync and error, issues high-water mark",
        "  repo-expert status\n  repo-expert status widget --json",
    )
    s.add_argument("name", nargs="?", help=name_help + " (default: every instance)")
    s.add_argument("--all", action="store_true", help="every instance (the default)")
    s.add_argument("--json", action="store_true", help=json_help)
    s.set_defaults(fn=c.cmd_status)

    s = command(
        "worker",
        "take index/sync jobs from the shared store's queue (PostgreSQL: --store or "
        "REPO_EXPERT_STORE) and run them, until stopped",
        "  REPO_EXPERT_STORE=postgresql://rx@db/rx repo-expert worker\n"
        "  repo-expert --store postgresql://rx@db/rx worker --instance widget --once --json",
    )
    s.add_argument("--instance", action="append", default=[], help="only jobs of this instance "
                   "(repeatable)")  # fmt: skip
    s.add_argument("--poll", type=float, default=2.0, help="seconds between looks at the queue "
                   "when no notification came (default 2)")  # fmt: skip
    s.add_argument("--once", action="store_true", help="exit when no job is queued")
    s.add_argument("--json", action="store_true", help="one JSON object per job")
    s.set_defaults(fn=c.cmd_worker)

    s = command(
        "feedback",
        "print the 👍/👎 given on an instance's answers (bots, API, page, MCP); with "
        "--unanswered the questions that got no answer or a 👎, with --export-eval those as an "
        "eval question file to fill in",
        "  repo-expert feedback widget --limit 20\n"
        "  repo-expert feedback widget --unanswered\n"
        "  repo-expert feedback widget --export-eval next-eval.yaml",
    )
    s.add_argument("name", help=name_help)
    s.add_argument(
        "--db", metavar="FILE", help="conversations database (default DATA/conversations.sqlite)"
    )
    s.add_argument("--limit", type=int, default=100, help="newest N (default 100)")
    s.add_argument("--unanswered", action="store_true", help="list the questions that got no "
                   "answer or a 👎 instead")  # fmt: skip
    s.add_argument(
        "--export-eval", metavar="FILE", help="write those questions as an eval question file "
        "(gold left empty for a person to fill; README, \"Evaluating\")"
    )  # fmt: skip
    s.add_argument("--json", action="store_true", help=json_help)
    s.set_defaults(fn=c.cmd_feedback)

    s = command(
        "api-key", "make an API key for `serve api` / `serve mcp --http`: prints the key (once) "
        "and the line of the settings file that stores its hash",
        "  repo-expert api-key docs-site --instances widget,cli", parents=_globals(False),
    )  # fmt: skip
    s.add_argument("name", help="who holds it (recorded as the user of its questions)")
    s.add_argument(
        "--instances", dest="key_instances", default="*", metavar="A,B",
        help="here: the comma-separated instances the key may use (default '*': every "
        "instance that is not private); the instances folder goes before the command",
    )  # fmt: skip
    s.set_defaults(fn=c.cmd_api_key)
    return p


def version() -> str:
    try:
        return metadata.version("repo-expert")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return core.__version__


class Terminated(Exception):
    """SIGTERM arrived: the command was cancelled and has cleaned up (servers drained)."""


async def run_command(app: RepoExpert, args: argparse.Namespace) -> int:
    """Run the parsed command on ``app`` (closed afterwards). SIGTERM (a platform stopping the
    process) cancels the command, so every ``finally`` runs: the bots close their connections
    and drain the answers in progress (serve's ``drain_seconds``), servers stop, stores close;
    then :class:`Terminated` is raised."""
    main, loop = asyncio.current_task(), asyncio.get_running_loop()
    terminated = False

    def on_term() -> None:
        nonlocal terminated
        if not terminated and main is not None:
            terminated = True
            log.info("SIGTERM: shutting down")
            main.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
        pass
    try:
        return int(await args.fn(app, args))
    except asyncio.CancelledError:
        if terminated:
            raise Terminated from None
        raise
    finally:
        try:
            await app.close()
        finally:
            loop.remove_signal_handler(signal.SIGTERM)


async def _run(args: argparse.Namespace) -> int:
    app = RepoExpert(Settings.from_env(getattr(args, "instances", None),
                                       getattr(args, "data", None),
                                       getattr(args, "store", None)))  # fmt: skip
    return await run_command(app, args)


def setup_logging(args: argparse.Namespace) -> None:
    """Quiet by default; ``-v``/``-vv``; text or JSON lines (``--log-format``), redacted."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(getattr(args, "verbose", 0), 2)]
    logging.basicConfig(level=level)
    for handler in logging.getLogger().handlers:  # no token in any log line (config/redact.py)
        handler.setFormatter(formatter(getattr(args, "log_format", "text")))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args)
    try:
        return asyncio.run(_run(args))
    except Terminated:
        log.info("stopped (SIGTERM)")
        return 143
    except RepoExpertError as e:
        print(f"repo-expert: {redact(str(e))}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.Error) as e:  # the disk, a file: what no layer above could name
        log.debug("unexpected %s", type(e).__name__, exc_info=True)
        print(f"repo-expert: {redact(' '.join(str(e).split()))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("repo-expert: interrupted; the previous index is still in place", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
