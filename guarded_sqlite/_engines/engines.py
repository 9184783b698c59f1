"""What differs between database drivers: one small ``Engine`` per supported driver.

The probe and the rules are engine-independent; re-executing a patch or a candidate is not. Each
engine knows how to run one query *read-only* on the caller's connection without disturbing it, how
to stop it after a time limit, which sqlglot dialect its SQL is written in, and whether a result is a
real row set or a status (DuckDB answers ``CREATE`` and ``INSERT`` with a one-column status result).

- SQLite (``sqlite3``): ``PRAGMA query_only`` (and ``busy_timeout = 0``) on the same connection, so
  uncommitted changes are seen; both restored on every path; ``interrupt()`` from the watchdog thread
  (``deadlines``) past the time limit.
- PostgreSQL (psycopg 3): ``conn.transaction(force_rollback=True)`` — a savepoint inside an open
  transaction, ``BEGIN``/``ROLLBACK`` otherwise — with ``SET LOCAL transaction_read_only = on`` and a
  local ``statement_timeout``; the caller's transaction state is left exactly as it was. Refused when
  the caller's transaction has already failed (nothing can run in it) or a statement is in flight.
- DuckDB: no savepoints, and any error inside an explicit transaction aborts it, so re-execution runs
  only when no explicit transaction is open, on a duplicate cursor in ``BEGIN TRANSACTION READ ONLY``,
  with ``interrupt()`` from the watchdog thread past the time limit.

Drivers are imported only to recognise their connections, never by ``import guarded_sqlite``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from .._core.deadlines import defer_keyboard_interrupt, interrupt_after
from ..errors import TransactionLost, describe_error

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

    def plain_rows(self, raw_cursor: Any) -> tuple[Any, Callable[[list[tuple[Any, ...]]], list[Any]] | None]:
        """For a guard statement whose rows are served in place of ``raw_cursor``'s: the row factory
        that makes ``read_only_fetch`` return plain tuples, and what makes those tuples into the rows
        ``raw_cursor`` would give (its row factory over its own description; None: tuples as they are)."""
        return None, None

    def user_functions(self, raw: Any) -> frozenset[str] | None:
        """Folded names of the functions the engine lists on this connection that are not its own
        built-ins (a re-execution would call them again), or None when that cannot be told."""
        return frozenset()

    def schema_summary(self, raw: Any) -> str:
        """``table(col, col, ...)`` per table, one per line, for the rescue prompt."""
        rows = self.read_only_fetch(raw, GuardStatement(_SCHEMA_SQL, NO_PARAMETERS, None, 100_000, 5.0)) or []
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
    """Re-executes on the caller's own connection (so its uncommitted changes are seen) under
    ``PRAGMA query_only``, with a C-level ``interrupt()`` deadline.

    Every state change is undone on every path, KeyboardInterrupt included: SIGINT is deferred (and
    turned into an ``interrupt()`` of the statement) while query_only is on, then re-raised. A failed
    statement that made SQLite roll back the caller's transaction (SQLITE_FULL, SQLITE_NOMEM, ...)
    raises ``TransactionLost`` instead of passing as an ordinary failed re-execution.
    """

    name = "sqlite"
    dialect = "sqlite"

    def plain_rows(self, raw_cursor: Any) -> tuple[Any, Callable[[list[tuple[Any, ...]]], list[Any]] | None]:
        # Any factory but sqlite3.Row is applied when rows are served (guarded_sqlite._io.factories):
        # the cursor's factory is None here. A Row is made over the caller's cursor, whose
        # description is the written statement's.
        if getattr(raw_cursor, "row_factory", None) is sqlite3.Row:
            return None, lambda rows: [sqlite3.Row(raw_cursor, row) for row in rows]
        return None, None

    def read_only_fetch(self, raw: Any, statement: GuardStatement) -> list[Any] | None:
        sql, parameters, row_factory, max_rows, time_limit, description, writes_possible = statement
        was_in_transaction = raw.in_transaction
        failure: BaseException | None = None
        rows: list[Any] = []
        running = [False]

        def stop_running() -> None:
            # A Ctrl-C stops the guard's statement; outside it there is nothing to stop, and an
            # interrupt() while another statement of the connection is still active (a cursor the
            # caller left mid-result) stays pending and fails the caller's next statements. A
            # statement proven unable to write (the join-copy check) is left to finish under its
            # time limit instead: the Ctrl-C reaches the caller right after it.
            if running[0] and writes_possible:
                raw.interrupt()

        with defer_keyboard_interrupt(stop_running):
            # Plain sqlite3.Cursors keep a factory= subclass's cursor hooks out of the guard's own work.
            pragma = sqlite3.Cursor(raw)
            pragma.row_factory = None
            was_query_only: int | None = None
            busy_timeout: int | None = None
            try:
                # A statement proven unable to write runs as if query_only were on already: nothing
                # to switch on, nothing to restore.
                was_query_only = pragma.execute("PRAGMA query_only").fetchone()[0] if writes_possible else 1
                if not was_query_only:
                    pragma.execute("PRAGMA query_only = ON")
                # A locked database fails the guard's statement at once instead of waiting out the
                # caller's busy timeout; the caller's own statements keep theirs.
                busy_timeout = pragma.execute("PRAGMA busy_timeout").fetchone()[0]
                if busy_timeout:
                    pragma.execute("PRAGMA busy_timeout = 0")
                cursor = sqlite3.Cursor(raw)
                cursor.row_factory = row_factory
                try:
                    with interrupt_after(time_limit, raw.interrupt) if time_limit is not None else _NO_DEADLINE:
                        running[0] = True
                        try:
                            execute_with(cursor, sql, parameters)
                            rows = _fetch_described(cursor, max_rows + 1, description)
                        finally:
                            running[0] = False
                finally:
                    cursor.close()
            except Exception as error:
                failure = error
            finally:
                restored = _restore(pragma, "busy_timeout", busy_timeout) if busy_timeout else True
                restored = (was_query_only != 0 or _restore(pragma, "query_only", 0)) and restored
                pragma.close()
        if was_in_transaction and not raw.in_transaction:
            raise TransactionLost(
                "the database rolled back the open transaction while the guard re-executed a query "
                f"({describe_error(failure) if failure is not None else 'no error reported'}); "
                "uncommitted changes are lost"
            ) from failure
        if not restored:
            raise WritableNotRestored("PRAGMA query_only could not be switched off yet") from failure
        if failure is not None:
            raise failure
        return None if len(rows) > max_rows else rows

    def restore_writable(self, raw: Any) -> bool:
        """Switch ``PRAGMA query_only`` off after a ``WritableNotRestored``; True once done."""
        pragma = sqlite3.Cursor(raw)
        try:
            return _restore(pragma, "query_only", 0)
        finally:
            pragma.close()

    def switch_query_only_on(self, raw: Any) -> bool:
        """Switch ``PRAGMA query_only`` on; True if it was off (the caller switches it back). Raises
        ``sqlite3.Error`` when it cannot be read or set: nothing may then run as if it were on."""
        pragma = sqlite3.Cursor(raw)
        pragma.row_factory = None
        try:
            if pragma.execute("PRAGMA query_only").fetchone()[0]:
                return False
            pragma.execute("PRAGMA query_only = ON")
            return True
        finally:
            pragma.close()

    def may_collate_text(self, raw: Any) -> bool:
        # Only declared collations (NOCASE, RTRIM or the caller's own) make DISTINCT merge text that
        # Python keeps apart; a COLLATE written in the query itself is refused before this is asked.
        cursor = sqlite3.Cursor(raw)
        cursor.row_factory = None
        try:
            schemas = [row[1] for row in cursor.execute("PRAGMA database_list").fetchall()]
            for schema in schemas:
                quoted = '"' + schema.replace('"', '""') + '"'
                found = cursor.execute(
                    f"SELECT 1 FROM {quoted}.sqlite_master WHERE sql LIKE '%collate%' LIMIT 1"
                ).fetchone()
                if found:
                    return True
            return False
        except sqlite3.Error:
            return True
        finally:
            cursor.close()

    def user_functions(self, raw: Any) -> frozenset[str] | None:
        # SQLite lists every function with a flag that is off for the application's own (an application
        # that replaces a built-in, say lower(), replaces its entry too) and for extensions' functions.
        cursor = sqlite3.Cursor(raw)
        cursor.row_factory = None
        try:
            rows = cursor.execute("PRAGMA function_list").fetchall()
        except sqlite3.Error:
            return None
        finally:
            cursor.close()
        if not rows:  # an authorizer that ignores PRAGMA, or a build without the list: cannot tell
            return None
        return frozenset(str(row[0]).lower() for row in rows if not row[1])

    def schema_summary(self, raw: Any) -> str:
        cursor = sqlite3.Cursor(raw)
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


def _restore(pragma: sqlite3.Cursor, name: str, value: int, attempts: int = 3) -> bool:
    """``PRAGMA name = value``, retried: a pending ``interrupt()`` or the caller's progress handler may
    abort one attempt. False when every attempt failed."""
    for _ in range(attempts):
        try:
            pragma.execute(f"PRAGMA {name} = {int(value)}")
            return True
        except sqlite3.Error:
            continue
    return False


_NO_DEADLINE = contextlib.nullcontext()


class PostgresEngine(Engine):
    name = "postgres"
    dialect = "postgres"

    def plain_rows(self, raw_cursor: Any) -> tuple[Any, Callable[[list[tuple[Any, ...]]], list[Any]] | None]:
        from psycopg.rows import tuple_row

        factory = getattr(raw_cursor, "row_factory", None)
        if factory is None or factory is tuple_row:
            return tuple_row, None
        make = factory(raw_cursor)  # psycopg's row factory reads the cursor's (the written statement's) description
        return tuple_row, lambda rows: [make(row) for row in rows]

    def read_only_fetch(self, raw: Any, statement: GuardStatement) -> list[Any] | None:
        sql, parameters, row_factory, max_rows, time_limit, description = statement[:6]
        import psycopg
        from psycopg.pq import TransactionStatus

        conn = raw
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
                timeout = pg_statement_timeout(time_limit)
                if timeout is not None:
                    cursor.execute("SELECT set_config('statement_timeout', %s, true)", (timeout,))
                execute_with(cursor, sql, parameters)
                rows = _fetch_described(cursor, max_rows + 1, description)
        finally:
            cursor.close()
        return None if len(rows) > max_rows else rows


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
        settings = dict(
            raw.execute(
                "SELECT name, lower(CAST(value AS VARCHAR)) FROM duckdb_settings() "
                "WHERE name IN ('python_scan_all_frames', 'lock_configuration')"
            ).fetchall()
        )
        # A locked configuration (the agent tools' lockdown) refuses every SET.
        if "python_scan_all_frames" in settings and settings.get("lock_configuration") != "true":
            raw.execute("SET python_scan_all_frames = true")

    def in_explicit_transaction(self, raw: Any) -> bool:
        """Autocommit gives every statement a new transaction id; inside BEGIN they repeat."""
        try:
            first = raw.execute("SELECT current_transaction_id()").fetchone()[0]
            return bool(raw.execute("SELECT current_transaction_id()").fetchone()[0] == first)
        except Exception:  # an aborted transaction refuses even this: treat it as open
            return True

    def read_only_fetch(self, raw: Any, statement: GuardStatement) -> list[Any] | None:
        sql, parameters, _, max_rows, time_limit, description = statement[:6]  # DuckDB has no row factories
        if self.in_explicit_transaction(raw):
            raise RerunRefused(
                "an explicit transaction is open and DuckDB has no savepoints: a failing re-execution would abort it"
            )
        rows = self.on_read_only_duplicate(
            raw, sql, parameters, time_limit, lambda cursor: _fetch_described(cursor, max_rows + 1, description)
        )
        return None if len(rows) > max_rows else rows

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
        try:
            cursor.execute("BEGIN TRANSACTION READ ONLY")
            with interrupt_after(time_limit, cursor.interrupt) if time_limit is not None else _NO_DEADLINE:
                execute_with(cursor, sql, parameters)
                return consume(cursor)
        finally:
            try:
                cursor.execute("ROLLBACK")
            finally:
                cursor.close()


_PG_LONGEST_TIMEOUT_MS = 2**31 - 1
"""PostgreSQL's largest ``statement_timeout`` (an int of milliseconds, about 24.8 days)."""


def pg_statement_timeout(time_limit: float | None) -> str | None:
    """The local ``statement_timeout`` setting for a time limit in seconds, or None to set none: no
    limit (None or ``float("inf")``), or one longer than PostgreSQL accepts, which is no limit in
    practice and would otherwise fail the statement with an out-of-range error."""
    if time_limit is None or time_limit * 1000 >= _PG_LONGEST_TIMEOUT_MS:
        return None
    return f"{max(1, int(time_limit * 1000))}ms"


def _fetch_described(cursor: Any, count: int, description: list[Any] | None) -> list[Any]:
    """``cursor.fetchmany(count)``, passing the cursor's description to ``description`` when asked."""
    rows: list[Any] = cursor.fetchmany(count)
    if description is not None:
        description.append(cursor.description)
    return rows


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
