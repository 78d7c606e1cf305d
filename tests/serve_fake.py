"""``repo-expert serve …`` on the fake embedder, for tests that need the server in a process of
its own (the MCP SDK's stdio client starts one; MCP over HTTP runs under uvicorn). The command
line is the real one (``core.cli.parser``) and so is the dispatch (``cmd_serve``); only the
embedder is the tests' fake, so the real model never loads."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent.parent), str(Path(__file__).parent)]

from helpers import FakeApp  # noqa: E402

from core.cli import cmd_serve, parser  # noqa: E402
from core.errors import RepoExpertError  # noqa: E402


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    # stdout is the MCP stdio transport's: every log line goes to stderr.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")  # fmt: skip

    async def run() -> int:
        app = FakeApp(Path(args.instances), Path(args.data))
        try:
            return await cmd_serve(app, args)
        finally:
            await app.close()

    try:
        return asyncio.run(run())
    except RepoExpertError as e:
        print(f"repo-expert: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
