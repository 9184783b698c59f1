"""An audit log of an agent tool's calls: one JSON line per call, for the operator who lets a model run SQL.

``guarded-sqlite mcp DB --audit-log PATH`` appends a line for every tool call: when it ended (UTC,
ISO 8601), which tool, the SQL with its literals replaced by ``?`` (``rewrite.normalise_literals``:
literals can be secrets the model read; on SQLite every double-quoted token too, since SQLite reads one
that names no column as a string; comments and names are kept), the outcome (``served``, ``refused``
with the refusal's kind, or ``failed``), how many rows were served or changed, and what the guard
found and did (its report's ``trigger`` and ``action``), plus the call's duration. So an operator can
see what the model ran and what the guard said, without the data.

Logging never costs more than the call: a statement is cut to ``MAX_LOGGED_SQL`` characters before it
is normalised (a cut inside a string literal hides the whole text rather than show part of it), and a
line is written once per call, unbuffered, so a write that fails (a full disk) fails in ``write`` and
leaves nothing behind for ``close``, which never raises. The MCP server writes a call's line before it
serves the call's answer, and by default refuses a call whose line cannot be written. ``audit_record``
is the pure part (what a line holds); ``AuditLog`` only appends lines to a file, under a lock, since
tool calls arrive on several threads.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

__all__ = ["MAX_LOGGED_SQL", "AuditLog", "AuditRecord", "audit_record", "logged_sql"]

MAX_LOGGED_SQL = 4000
"""Characters of a statement kept for the log, cut before normalising (longer ones end in a note)."""


@dataclass(frozen=True)
class AuditRecord:
    """One tool call, as one line of the audit log."""

    time: str
    """When the call ended, UTC, ISO 8601 with milliseconds."""

    tool: str
    """The tool called (``query`` or ``schema``)."""

    sql: str | None
    """The statement with literals replaced by ``?``, cut to ``MAX_LOGGED_SQL`` characters first; None
    for a tool that takes no SQL."""

    outcome: str
    """``"served"``, ``"refused"`` (the tool's refusal: see ``refusal``) or ``"failed"`` (a fault in the tool)."""

    refusal: str | None
    """The refusal's kind (``QueryRefused.kind``: ``write``, ``timeout``, ``too_large``, ...), else None."""

    rows: int | None
    """Rows served (None when nothing was served)."""

    rows_changed: int | None
    """Rows a write changed, when the database says (None otherwise)."""

    trigger: str | None
    """What the guard found (``GuardReport.trigger``), None when nothing or when it did not run."""

    action: str | None
    """What the guard did (``GuardReport.action``), None when it did not run."""

    seconds: float
    """How long the call took."""


def logged_sql(sql: str, dialect: str, limit: int = MAX_LOGGED_SQL) -> str:
    """``sql`` as the log keeps it: cut to ``limit`` characters, then literals replaced by ``?``.

    >>> logged_sql("SELECT * FROM users WHERE email = 'ana@example.com'", "sqlite")
    'SELECT * FROM users WHERE email = ?'
    >>> logged_sql('SELECT name FROM users WHERE email = "ana@example.com"', "sqlite")
    'SELECT name FROM users WHERE email = ?'
    >>> logged_sql("SELECT 1 + 22222", "sqlite", limit=12)
    'SELECT ? + ?… (16 characters, cut to 12)'
    >>> logged_sql("SELECT 'a secret that is long'", "sqlite", limit=15)  # cut inside a literal: all hidden
    '<SQL not shown: 15 characters>… (30 characters, cut to 15)'
    """
    quoted = dialect == "sqlite"  # SQLite's "x" is a string when no column is named x
    if len(sql) <= limit:
        return _without_literals(sql, dialect, quoted)
    return f"{_without_literals(sql[:limit], dialect, quoted)}… ({len(sql)} characters, cut to {limit})"


def _without_literals(sql: str, dialect: str, quoted: bool) -> str:
    """``normalise_literals``, and on MySQL/MariaDB also inside executable comments and optimizer hints
    (``/*!50000 ... 'x' */``), which the server reads as SQL though sqlglot keeps them as comments.

    >>> _without_literals("SELECT 1 /*!50000 INTO OUTFILE '/tmp/x' */", "mysql", False)
    'SELECT ? /*!50000 INTO OUTFILE ? */'

    A MySQL/MariaDB text that sqlglot and the server would read differently (``lexing``: a non-ASCII
    space after ``--``, a quoted user variable name) is not shown at all: sqlglot's reading of where its
    literals are is the one in question (repro a22's audit line kept a literal the server read).

    >>> _without_literals("SELECT 1 --\u00a0+ (SELECT 'ana@example.com')", "mysql", False)
    '<SQL not shown: 40 characters>'
    """
    from .._analysis.lexing import mysql_reading_problem
    from .._analysis.rewrite import normalise_literals

    if dialect == "mysql" and not _EXECUTABLE.search(sql) and mysql_reading_problem(sql) is not None:
        return f"<SQL not shown: {len(sql)} characters>"
    text = normalise_literals(sql, dialect, double_quoted=quoted)
    if dialect != "mysql" or "/*" not in text:
        return text
    return _EXECUTABLE.sub(lambda m: m.group(1) + normalise_literals(m.group(2), dialect) + "*/", text)


_EXECUTABLE = re.compile(r"(/\*\s*(?:[mM]?!\d*|\+))(.*?)\*/", re.DOTALL)
"""An executable comment or a hint: its opening (with MySQL's version number) and its text."""


def audit_record(
    tool: str,
    sql: str | None,
    dialect: str,
    *,
    ended: datetime,
    seconds: float,
    result: Any = None,
    refusal: str | None = None,
    failed: bool = False,
) -> AuditRecord:
    """The record of one call: ``result`` is the ``QueryResult`` served (for ``query``), ``refusal`` the
    kind of a ``QueryRefused``, ``failed`` a fault in the tool; a call with none of them was served
    without rows to count (``schema``)."""
    report = getattr(result, "report", None)
    rows = getattr(result, "rows", None)
    return AuditRecord(
        time=ended.astimezone(timezone.utc).isoformat(timespec="milliseconds"),
        tool=tool,
        sql=None if sql is None else logged_sql(sql, dialect) if isinstance(sql, str) else repr(type(sql)),
        outcome="failed" if failed else "refused" if refusal is not None else "served",
        refusal=refusal,
        rows=None if rows is None else len(rows),
        rows_changed=getattr(result, "rows_changed", None),
        trigger=getattr(report, "trigger", None),
        action=getattr(report, "action", None),
        seconds=round(seconds, 6),
    )


class AuditLog:
    """Appends ``AuditRecord``s to ``path`` as JSON lines, each written whole, unbuffered. The file is
    created if missing and never truncated. Raises ``OSError`` when it cannot be opened; ``write``
    raises ``OSError`` when its line could not be written (then none of it was, or a part that a reader
    sees as a line without its end); ``close`` never raises."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[bytes] = open(self.path, "ab", buffering=0)  # closed by close()
        self._lock = threading.Lock()

    def write(self, record: AuditRecord) -> None:
        line = (json.dumps(asdict(record), ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            written = 0
            while written < len(line):  # a raw write may take part of it
                count = self._file.write(line[written:])
                if not count:
                    raise OSError(f"the audit log {self.path} took no more bytes")
                written += count

    def now(self) -> datetime:
        """The current time, as records take it."""
        return datetime.now(timezone.utc)

    def close(self) -> None:
        """Close the file; a failure is logged, not raised (nothing is buffered, so nothing is lost)."""
        with self._lock:
            try:
                self._file.close()
            except OSError as failure:
                logging.getLogger(__name__).warning("could not close the audit log %s: %s", self.path, failure)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
