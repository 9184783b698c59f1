"""``python -m guarded_sqlite``: the same as the ``guarded-sqlite`` command."""

import sys

from .cli.commands import main

sys.exit(main())
