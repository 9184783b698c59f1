#!/usr/bin/env python
"""CPython's own sqlite3 test suite with ``sqlite3.connect`` swapped for ``guarded_sqlite.connect``.

    .venv/bin/python benchmarks/cpython_sqlite3_swapped.py [--guard observe|patch|off] [--wrap] [-v]

Every connection the suite opens through ``sqlite3.connect`` becomes a guarded one (``install()``;
``--wrap`` instead returns ``wrap()`` proxies over plain connections, to compare). The suite is the one
shipped with this Python (``test.test_sqlite3``; some distributions leave it out). Prints the ids of the
tests that fail or error, with the first line of each message, and exits 1 if any did.
"""

from __future__ import annotations

import argparse
import io
import sqlite3
import sys
import unittest
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--guard", default="observe", help="the guard preset (default observe)")
    parser.add_argument("--wrap", action="store_true", help="wrap() proxies instead of connect()'s connections")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)

    import guarded_sqlite

    real_connect = sqlite3.connect
    if args.wrap:

        def connect(*a: Any, **k: Any) -> Any:
            return guarded_sqlite.wrap(real_connect(*a, **k), guard=args.guard)

        sqlite3.connect = sqlite3.dbapi2.connect = connect  # type: ignore[assignment]
    else:
        guarded_sqlite.install(guard=args.guard)
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName("test.test_sqlite3")
    except ImportError as error:
        print(f"CPython's test.test_sqlite3 is not available here: {error}", file=sys.stderr)
        return 2
    stream = io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=2 if args.verbose else 1).run(suite)
    if args.verbose:
        print(stream.getvalue())
    sqlite3.connect = sqlite3.dbapi2.connect = real_connect  # type: ignore[assignment]
    problems = [("FAIL", t, m) for t, m in result.failures] + [("ERROR", t, m) for t, m in result.errors]
    problems += [("UNEXPECTED SUCCESS", t, "") for t in result.unexpectedSuccesses]
    kind = "wrap() proxies" if args.wrap else "connect()"
    print(
        f"test_sqlite3 with sqlite3.connect -> guarded_sqlite {kind} (guard={args.guard!r}), Python"
        f" {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}: ran {result.testsRun},"
        f" {len(problems)} failed or errored, {len(result.skipped)} skipped"
    )
    for label, test, message in sorted(problems, key=lambda p: p[1].id()):
        lines = [line for line in message.strip().splitlines() if line.strip()]
        print(f"- {label} {test.id()}: {lines[-1] if lines else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
