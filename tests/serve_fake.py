"""``repo-expert serve …`` on the fake embedder, for tests that need the server in a process of
its own (the MCP SDK's stdio client starts one; MCP over HTTP runs under uvicorn; the bots and
their health servers receive SIGTERM). The command line is the real one (``core.cli.parser``),
and so are the logging, the dispatch and the SIGTERM handling (``run_command``); only the
embedder is the tests' fake, so the real model never loads."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent.parent), str(Path(__file__).parent)]

from helpers import FakeApp  # noqa: E402

from core.cli import Terminated, parser, run_command, setup_logging  # noqa: E402
from core.errors import RepoExpertError  # noqa: E402


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    # As the real entry point does (stderr; stdout is the MCP stdio transport's), at least -v.
    args.verbose = max(getattr(args, "verbose", 0), 1)
    setup_logging(args)

    async def run() -> int:
        return await run_command(FakeApp(Path(args.instances), Path(args.data)), args)

    try:
        return asyncio.run(run())
    except RepoExpertError as e:
        print(f"repo-expert: {e}", file=sys.stderr)
        return 2
    except Terminated:
        return 143
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
