"""What every engine shares: the ``Engine`` interface the guard calls, the ``GuardStatement`` it runs
for itself, the errors a re-execution raises, and the small helpers the drivers' engines use."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "NO_DEADLINE",
    "NO_PARAMETERS",
    "Engine",
    "GuardStatement",
    "RerunRefused",
    "WritableNotRestored",
    "execute_with",
    "fetch_described",
]

NO_PARAMETERS: Any = object()
"""Sentinel: the caller passed no parameters (sqlite3 treats that differently from ``()``)."""

_SCHEMA_SQL = (
    "SELECT table_name, column_name FROM information_schema.columns "
    "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
    "ORDER BY table_schema, table_name, ordinal_position"
)


class GuardStatement(NamedTuple):
    """One statement the guard runs for itself, read-only (``Engine.read_only_fetch``)."""

    sql: str
    parameters: Any
    """As the caller's ``execute`` took them (``NO_PARAMETERS``: none given)."""
    row_factory: Any
    """The row factory of the cursor it runs on (None: plain tuples)."""
    max_rows: int
    """The answer is None past this many rows."""
    time_limit: float | None
    """Seconds it may run before it is interrupted (None: no limit)."""
    description: list[Any] | None = None
    """When given, receives the cursor's description."""
    writes_possible: bool = True
    """False when proven unable to write (a single SELECT calling only the engine's built-in,
    deterministic functions): SQLite then leaves ``PRAGMA query_only`` as it is, so that no other
    writer on the connection (a blob handle, a second proxy) meets a read-only window."""


class RerunRefused(Exception):
    """The engine cannot re-execute right now without risk to the caller's transaction."""


class WritableNotRestored(Exception):
    """``PRAGMA query_only`` could not be switched back off after a guard statement (the caller's own
    progress handler or ``interrupt()`` kept aborting it); the connection must restore it before the
    caller's next statement."""


class Engine:
    """The driver-specific operations the guard needs. Subclasses override what differs.

    Engines are stateless: every method receives the driver's connection (``raw``) it works on.
    """

    name: str = ""
    dialect = "sqlite"
    status_results = False
    """True when the driver answers statements without rows with a status row set (DuckDB)."""

    def is_status_result(self, raw_cursor: Any, sql: str) -> bool:
        """Whether a result that has a description is really a status (no rows of its own)."""
        return False

    def read_only_fetch(self, raw: Any, statement: GuardStatement) -> list[Any] | None:
        """Rows of ``statement`` run read-only on ``raw``; None when there are more than its
        ``max_rows``. Raises the driver's error if the query fails or is interrupted, ``RerunRefused`` if
        it cannot run safely now, ``TransactionLost`` if the database rolled back the caller's open
        transaction while it ran."""
        raise NotImplementedError

    def may_collate_text(self, raw: Any) -> bool:
        """Whether a DISTINCT on this connection could compare text with a collation other than
        binary equality (then P1 cannot de-duplicate in Python)."""
        return True

    def row_factory(self, raw_cursor: Any) -> Any:
        """What the guard's statements take as ``GuardStatement.row_factory`` to give rows shaped as
        ``raw_cursor``'s (None: plain tuples)."""
        return getattr(raw_cursor, "row_factory", None)

    def plain_rows(self, raw_cursor: Any) -> tuple[Any, Callable[[list[tuple[Any, ...]]], list[Any]] | None]:
        """For a guard statement whose rows are served in place of ``raw_cursor``'s: the row factory
        that makes ``read_only_fetch`` return plain tuples, and what makes those tuples into the rows
        ``raw_cursor`` would give (its row factory over its own description; None: tuples as they are)."""
        return None, None

    functions_sql: str | None = None
    """A query listing the folded names of the application's functions (``user_functions``), or None."""

    schema_sql: str = _SCHEMA_SQL
    """A query giving (table, column) rows in order, for ``schema_summary``."""

    def user_functions(self, raw: Any) -> frozenset[str] | None:
        """Folded names of the functions the engine lists on this connection that are not its own
        built-ins (a re-execution would call them again), or None when that cannot be told: the rows of
        ``functions_sql`` where the engine has one."""
        if self.functions_sql is None:
            return frozenset()
        try:
            rows = self.read_only_fetch(raw, GuardStatement(self.functions_sql, NO_PARAMETERS, None, 100_000, 5.0))
        except Exception:  # the list cannot be read: every name may be the application's
            return None
        return None if rows is None else frozenset(str(row[0]) for row in rows)

    def name_context(self, raw: Any) -> Any:
        """What unqualified table names resolve against on this connection now (the current schema,
        database or search path), compared by the schema view before it reuses its catalog: a switch
        made without DDL words (``SET schema``, ``set_config('search_path', ...)``, PyMySQL's
        ``select_db()``) changes it (c33). None where the engine has no such setting or it cannot be read."""
        return None

    def schema_summary(self, raw: Any) -> str:
        """``table(col, col, ...)`` per table, one per line, for the rescue prompt."""
        rows = self.read_only_fetch(raw, GuardStatement(self.schema_sql, NO_PARAMETERS, None, 100_000, 5.0)) or []
        tables: dict[str, list[str]] = {}
        for row in rows:
            table, column = row[0], row[1]
            tables.setdefault(str(table), []).append(str(column))
        return "\n".join(f"{table}({', '.join(columns)})" for table, columns in tables.items())


def execute_with(cursor: Any, sql: str, parameters: Any) -> None:
    """``cursor.execute(sql)`` or ``cursor.execute(sql, parameters)``, as the caller gave them."""
    if parameters is NO_PARAMETERS:
        cursor.execute(sql)
    else:
        cursor.execute(sql, parameters)


NO_DEADLINE = contextlib.nullcontext()
"""The context a statement without a time limit runs in."""


def fetch_described(cursor: Any, count: int, description: list[Any] | None) -> list[Any]:
    """``cursor.fetchmany(count)``, passing the cursor's description to ``description`` when asked."""
    rows: list[Any] = cursor.fetchmany(count)
    if description is not None:
        description.append(cursor.description)
    return rows
