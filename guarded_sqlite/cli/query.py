"""``guarded-sqlite query DB SQL``: run one statement through the guard and show its rows and report.

The point is to let someone try the guard on their own database without writing Python: the rows the
guarded cursor serves, then what the guard did to them in one sentence (``--verbose`` adds
``cursor.guard_report``'s ``summary()``, rule decisions and duplicate-provenance evidence), as a plain
table, or rows and the whole report as one JSON object.

The database is opened read-only (``file:...?mode=ro``) and locked down as the agent tools' are
(``lockdown.lock_down_sqlite``: ``query_only``, and an authorizer denying ATTACH, VACUUM INTO, writes and
functions such as ``fts3_tokenizer``), so the command never changes it or creates a file; a write
statement fails with SQLite's "attempt to write a readonly database" or "not authorized" and is
reported like any other SQL error. Exit status: 0 on success; 1 when the statement fails (SQL errors,
wrong parameter count, writes), reported on one line of stderr; 2 for an unusable database path (missing, a directory,
unreadable, not a SQLite file) or bad options.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..agent.presenting import database_problem, format_table, json_safe, plain_account, report_dict
from ..policy import PRESETS
from ..report import GuardReport

DEFAULT_LIMIT = 50
"""Rows printed in the text table unless ``--limit`` says otherwise."""


def add_query_parser(commands: Any) -> None:
    """Add the ``query`` subcommand to the CLI's subparsers."""
    from .arguments import non_negative_int

    query = commands.add_parser(
        "query",
        help="run one SQL statement on a SQLite file through the guard; print the rows and the guard report",
        description="Open DB read-only through guarded_sqlite.connect, run SQL, print the rows the guarded "
        "cursor serves and its guard_report. Exit status: 0 on success, 1 when the statement fails (SQL "
        "errors, writes to the read-only database), 2 for an unusable DB path or bad options.",
    )
    query.add_argument("db", type=Path, metavar="DB", help="a SQLite database file (opened read-only)")
    query.add_argument("sql", metavar="SQL", help="one SQL statement")
    query.add_argument(
        "--guard",
        choices=PRESETS,
        default="patch",
        help="guard preset: patch (default: the rows are a person's to read), text_to_sql, paper, observe "
        "(probe only) or off",
    )
    query.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="VALUE",
        help="a value for the next positional '?' (repeatable, in order); bound as text, which SQLite "
        "converts where it is compared with a numeric column",
    )
    query.add_argument(
        "--limit",
        type=non_negative_int,
        default=None,
        metavar="N",
        help=f"print at most N rows (default: {DEFAULT_LIMIT} in the table, all with --json), then how many more",
    )
    query.add_argument("--json", action="store_true", help="print one JSON object: columns, rows, row_count, report")
    query.add_argument(
        "--verbose",
        action="store_true",
        help="after the one-sentence account, print the report's fields: summary, rule decisions with their "
        "thresholds and evidence, final SQL, note",
    )


def _report_lines(report: GuardReport, verbose: bool) -> list[str]:
    """What the guard did, in one sentence (``plain_account``) and, when it changed the rows, the SQL whose
    rows were served; ``verbose`` adds the report's fields: its summary, rule decisions and note."""
    lines = [plain_account(report)]
    if report.patched and not verbose:
        lines.append("The rows served are those of: " + report.final_sql.replace("\n", "\n  "))
    if not verbose:
        if report.flagged or report.decisions:
            lines.append("(--verbose shows the whole report: the rule that decided, its thresholds and evidence)")
        return lines
    lines.append(f"guard_report: {report.summary()}")
    if report.flagged or report.decisions:
        lines.append(f"  trigger     {report.trigger}")
        lines.append(f"  action      {report.action}")
        for decision in report.decisions:
            lines.append(f"  {decision.rule:<11} {'applied' if decision.applied else 'not applied'}: {decision.reason}")
        # The provenance verdict and its evidence are already in summary(); the decisions say what came of them.
        if report.patched:
            lines.append("  final_sql   " + report.final_sql.replace("\n", "\n              "))
    if report.note is not None:
        lines.append(f"  note        {report.note}")
    return lines


def run_query(args: argparse.Namespace, error: Callable[[str], None], out: Callable[[str], None] = print) -> int:
    """Carry out ``guarded-sqlite query`` for parsed ``args``; ``error`` prints a one-line error."""
    from .._analysis.schema import raw_sqlite
    from .._api import connect
    from ..agent.lockdown import lock_down_sqlite

    path: Path = args.db
    problem = database_problem(path)
    if problem is not None:
        error(problem)
        return 2
    # as_uri() percent-encodes '?', '#' and '%' in the path, so any file name survives the URI.
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        con = connect(uri, uri=True, guard=args.guard)
        # mode=ro covers the main database only: ATTACH and VACUUM INTO would still create files.
        lock_down_sqlite(raw_sqlite(con), allow_writes=False, value_bytes=None)
    except sqlite3.Error as failure:
        error(f"{path}: cannot be opened ({failure})")
        return 2
    limit = args.limit if args.limit is not None else (None if args.json else DEFAULT_LIMIT)
    try:
        cur = con.execute(args.sql, tuple(args.param))
        report = cur.guard_report
        assert report is not None  # set by every execute
        columns = [entry[0] for entry in cur.description] if cur.description is not None else None
        rows = cur.fetchall() if limit is None else cur.fetchmany(limit) if limit else []
        # Count the rest without keeping them: a flagged explosion can be large.
        more = sum(1 for _ in cur) if limit is not None else 0
    except sqlite3.Error as failure:
        message = " ".join(str(failure).split()) or type(failure).__name__
        if "readonly database" in message or "not authorized" in message:
            message += " (query opens the database read-only and never writes)"
        error(f"{type(failure).__name__}: {message}")
        return 1
    finally:
        con.close()
    total = len(rows) + more
    if args.json:
        document = {
            "columns": columns,
            "rows": json_safe(rows),
            "row_count": total,
            "report": report_dict(report),
        }
        out(json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False))
        return 0
    if columns is None:
        out("(the statement returns no rows)")
    else:
        out("\n".join(format_table(columns, rows)))
        plural = "row" if total == 1 else "rows"
        if more:
            out(f"({total} {plural}; {len(rows)} shown, {more} more: --limit N shows more)")
        else:
            out(f"({total} {plural})")
    out("")
    out("\n".join(_report_lines(report, args.verbose)))
    return 0
