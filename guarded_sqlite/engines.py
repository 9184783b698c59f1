"""What differs between database drivers: one small ``Engine`` per supported driver.

The probe and the rules are engine-independent; re-executing a patch or a candidate is not. Each
engine knows how to run one query *read-only* on the caller's connection without disturbing it, how
to stop it after a time limit, which sqlglot dialect its SQL is written in, and whether a result is a
real row set or a status (DuckDB answers ``CREATE`` and ``INSERT`` with a one-column status result).

- SQLite (``sqlite3``): ``PRAGMA query_only`` on the same connection, so uncommitted changes are seen;
  a progress handler interrupts past the time limit.
- PostgreSQL (psycopg 3): ``conn.transaction(force_rollback=True)`` — a savepoint inside an open
  transaction, ``BEGIN``/``ROLLBACK`` otherwise — with ``SET LOCAL transaction_read_only = on`` and a
  local ``statement_timeout``; the caller's transaction state is left exactly as it was. Refused when
  the caller's transaction has already failed (nothing can run in it) or a statement is in flight.
- DuckDB: no savepoints, and any error inside an explicit transaction aborts it, so re-execution runs
  only when no explicit transaction is open, on a duplicate cursor in ``BEGIN TRANSACTION READ ONLY``,
  with ``interrupt()`` past the time limit.

Drivers are imported only to recognise their connections, never by ``import guarded_sqlite``.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

NO_PARAMETERS: Any = object()
"""Sentinel: the caller passed no parameters (sqlite3 treats that differently from ``()``)."""

_SCHEMA_SQL = (
    "SELECT table_name, column_name FROM information_schema.columns "
    "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
    "ORDER BY table_schema, table_name, ordinal_position"
)


class RerunRefused(Exception):
    """The engine cannot re-execute right now without risk to the caller's transaction."""


class Engine:
    """The driver-specific operations the guard needs. Subclasses override what differs."""

    name = "dbapi"
    dialect = "sqlite"
    status_results = False
    """True when the driver answers statements without rows with a status row set (DuckDB)."""

    def is_status_result(self, raw_cursor: Any, sql: str) -> bool:
        """Whether a result that has a description is really a status (no rows of its own)."""
        return False

    def read_only_fetch(
        self, guard: Any, sql: str, parameters: Any, row_factory: Any, row_cap: int, time_limit: float | None
    ) -> list[Any] | None:
        """Rows of ``sql`` run read-only on the guarded connection; None past ``row_cap``.

        Raises the driver's error if the query fails or is interrupted, ``RerunRefused`` if it
        cannot run safely now.
        """
        raise NotImplementedError

    def schema_summary(self, guard: Any) -> str:
        """``table(col, col, ...)`` per table, one per line, for the rescue prompt."""
        rows = self.read_only_fetch(guard, _SCHEMA_SQL, NO_PARAMETERS, None, 100_000, 5.0) or []
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


class SQLiteEngine(Engine):
    name = "sqlite"
    dialect = "sqlite"

    def read_only_fetch(
        self, guard: Any, sql: str, parameters: Any, row_factory: Any, row_cap: int, time_limit: float | None
    ) -> list[Any] | None:
        # Same connection, so the caller's uncommitted changes are visible. Plain sqlite3.Cursors keep
        # a factory= subclass's cursor hooks out of the guard's own work.
        raw = guard.proxy.__wrapped__
        limit = _SQLiteTimeLimit(raw, time_limit, guard.progress_handler) if time_limit is not None else None
        pragma = sqlite3.Cursor(raw)
        pragma.row_factory = None
        was_query_only = pragma.execute("PRAGMA query_only").fetchone()[0]
        if not was_query_only:
            pragma.execute("PRAGMA query_only = ON")
        try:
            if limit is not None:
                limit.start()
            cursor = sqlite3.Cursor(raw)
            cursor.row_factory = row_factory
            execute_with(cursor, sql, parameters)
            rows = cursor.fetchmany(row_cap + 1)
            cursor.close()
        finally:
            if limit is not None:
                limit.stop()
            if not was_query_only:
                pragma.execute("PRAGMA query_only = OFF")
            pragma.close()
        return None if len(rows) > row_cap else rows

    def schema_summary(self, guard: Any) -> str:
        cursor = sqlite3.Cursor(guard.proxy.__wrapped__)
        cursor.row_factory = None
        tables = cursor.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        lines = []
        for (table,) in tables:
            columns = [row[1] for row in cursor.execute("SELECT * FROM pragma_table_info(?)", (table,)).fetchall()]
            lines.append(f"{table}({', '.join(columns)})")
        cursor.close()
        return "\n".join(lines)


class _SQLiteTimeLimit:
    """Interrupt statements on ``raw`` after ``seconds``, still honouring the caller's own handler."""

    def __init__(self, raw: sqlite3.Connection, seconds: float, previous: tuple[Any, int]) -> None:
        self._raw, self._seconds, self._previous = raw, seconds, previous

    def start(self) -> None:
        deadline = time.monotonic() + self._seconds
        user_handler = self._previous[0]

        def handler() -> int:
            if time.monotonic() > deadline:
                return 1
            return user_handler() if user_handler is not None else 0

        self._raw.set_progress_handler(handler, 1000)

    def stop(self) -> None:
        self._raw.set_progress_handler(*self._previous)


class PostgresEngine(Engine):
    name = "postgres"
    dialect = "postgres"

    def read_only_fetch(
        self, guard: Any, sql: str, parameters: Any, row_factory: Any, row_cap: int, time_limit: float | None
    ) -> list[Any] | None:
        import psycopg
        from psycopg.pq import TransactionStatus

        conn = guard.proxy.__wrapped__
        status = conn.info.transaction_status
        if status == TransactionStatus.INERROR:
            raise RerunRefused("the caller's transaction has failed; nothing can run in it until it is rolled back")
        if status == TransactionStatus.ACTIVE:
            raise RerunRefused("a statement is still in progress on the connection")
        cursor = psycopg.Cursor(conn, row_factory=row_factory) if row_factory is not None else psycopg.Cursor(conn)
        try:
            # A savepoint inside the caller's transaction, BEGIN/ROLLBACK outside one: either way the
            # settings below and anything the query did are rolled back, and the state is as before.
            with conn.transaction(force_rollback=True):
                cursor.execute("SET LOCAL transaction_read_only = on")
                if time_limit is not None:
                    cursor.execute(
                        "SELECT set_config('statement_timeout', %s, true)", (f"{max(1, int(time_limit * 1000))}ms",)
                    )
                execute_with(cursor, sql, parameters)
                rows = cursor.fetchmany(row_cap + 1)
        finally:
            cursor.close()
        return None if len(rows) > row_cap else rows


class DuckDBEngine(Engine):
    name = "duckdb"
    dialect = "duckdb"
    status_results = True

    def is_status_result(self, raw_cursor: Any, sql: str) -> bool:
        description = raw_cursor.description
        if description is None:
            return True
        if len(description) != 1 or description[0][0] not in ("Count", "Success"):
            return False
        # A query may name its only column "Count"; DuckDB's own parser settles it (rarely reached).
        import duckdb

        try:
            statements = raw_cursor.extract_statements(sql)
        except duckdb.Error:
            return False
        return bool(statements) and statements[-1].type != duckdb.StatementType.SELECT

    def scan_callers_frames(self, raw: Any) -> None:
        """Let DuckDB find DataFrames named in a query in the caller's frame, past the guard's frames.

        DuckDB resolves ``SELECT * FROM df`` by looking at the Python frame that called ``execute``:
        through the proxy, that is the guard's. ``python_scan_all_frames`` (DuckDB's former default)
        makes it look further out, where the caller's variables are. Checked through
        ``duckdb_settings()`` first, because a failing ``SET`` would abort a transaction the caller has
        open.
        """
        available = raw.execute(
            "SELECT count(*) FROM duckdb_settings() WHERE name = 'python_scan_all_frames'"
        ).fetchone()
        if available and available[0]:
            raw.execute("SET python_scan_all_frames = true")

    def in_explicit_transaction(self, raw: Any) -> bool:
        """Autocommit gives every statement a new transaction id; inside BEGIN they repeat."""
        try:
            first = raw.execute("SELECT current_transaction_id()").fetchone()[0]
            return bool(raw.execute("SELECT current_transaction_id()").fetchone()[0] == first)
        except Exception:  # an aborted transaction refuses even this: treat it as open
            return True

    def read_only_fetch(
        self, guard: Any, sql: str, parameters: Any, row_factory: Any, row_cap: int, time_limit: float | None
    ) -> list[Any] | None:
        raw = guard.proxy.__wrapped__
        if self.in_explicit_transaction(raw):
            raise RerunRefused(
                "an explicit transaction is open and DuckDB has no savepoints: a failing re-execution would abort it"
            )
        rows = self.on_read_only_duplicate(
            raw, sql, parameters, time_limit, lambda cursor: cursor.fetchmany(row_cap + 1)
        )
        return None if len(rows) > row_cap else rows

    def on_read_only_duplicate(
        self, raw: Any, sql: str, parameters: Any, time_limit: float | None, consume: Callable[[Any], Any]
    ) -> Any:
        """Run ``sql`` on a duplicate cursor in a read-only transaction and return ``consume(cursor)``.

        Outside an explicit transaction every change is committed, so the duplicate sees the same data,
        and the caller's own result and description stay untouched. The caller checks that no explicit
        transaction is open.
        """
        cursor = raw.cursor()
        self.scan_callers_frames(cursor)  # a duplicate connection does not inherit the setting
        timer = threading.Timer(time_limit, cursor.interrupt) if time_limit is not None else None
        try:
            cursor.execute("BEGIN TRANSACTION READ ONLY")
            if timer is not None:
                timer.start()
            execute_with(cursor, sql, parameters)
            return consume(cursor)
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()
            try:
                cursor.execute("ROLLBACK")
            finally:
                cursor.close()


SQLITE = SQLiteEngine()
POSTGRES = PostgresEngine()
DUCKDB = DuckDBEngine()
ENGINE_NAMES: tuple[str, ...] = ("sqlite", "duckdb", "postgres")
"""The supported engines, by the names ``dialect=``, ``--engine`` and reports use."""
_BY_DIALECT = {"sqlite": SQLITE, "postgres": POSTGRES, "postgresql": POSTGRES, "duckdb": DUCKDB}


def engine_for(connection: Any, dialect: str | None = None) -> Engine:
    """The engine for an open connection; ``dialect``, when given, must agree with the driver."""
    detected = _detect(connection)
    if detected is None:
        supported = "sqlite3.Connection, duckdb.DuckDBPyConnection, psycopg.Connection"
        raise TypeError(
            f"cannot guard a {type(connection).__module__}.{type(connection).__name__}; supported: {supported}"
        )
    if dialect is not None:
        wanted = _BY_DIALECT.get(dialect.lower())
        if wanted is None:
            raise ValueError(f"unknown dialect {dialect!r}; use one of 'sqlite', 'duckdb', 'postgres'")
        if wanted is not detected:
            raise ValueError(f"dialect {dialect!r} does not match a {detected.name} connection")
    return detected


def _detect(connection: Any) -> Engine | None:
    if isinstance(connection, sqlite3.Connection):
        return SQLITE
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None and isinstance(connection, duckdb.DuckDBPyConnection):
        return DUCKDB
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(connection, psycopg.Connection):
        return POSTGRES
    return None
