"""``python -m core.cli``: the same command line as ``repo-expert``."""

import sys

from core.cli import main

sys.exit(main())
