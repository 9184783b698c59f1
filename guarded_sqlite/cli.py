"""The ``guarded-sqlite`` command line."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="guarded-sqlite", description="Runtime guardrail for machine-written SQL on SQLite.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="build a small shop database and show a join explosion caught and patched")
    demo.add_argument("--db", type=Path, help="where to create the demo database (default: a temporary file)")
    args = parser.parse_args(argv)

    if args.command == "demo":
        from .demo import run

        if args.db is not None:
            return run(args.db)
        with tempfile.TemporaryDirectory() as folder:
            return run(Path(folder) / "shop.db")
    parser.error(f"unknown command {args.command}")  # pragma: no cover
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
