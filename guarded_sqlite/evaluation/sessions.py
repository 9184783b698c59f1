"""Database sessions in a worker: one connection per database (or server), and timed execution on it.

Timeouts are enforced by the engine, never by abandoning a thread:

- SQLite and DuckDB: a ``guarded_sqlite._core.deadlines`` deadline calls the connection's ``interrupt()``
  from the shared watchdog thread once the timeout passes (``sqlite3_interrupt`` and DuckDB's
  ``interrupt`` are safe to call from another thread). The statement fails and is reported as
  ``"timeout"``. ``Deadline.cancel()`` is final, so an interrupt can only land while the query, or
  the guard's work for it, is still running. One that lands just after the statement finished
  cannot reach the next query: SQLite clears the flag when a statement starts with no other
  statement active, and DuckDB ignores an interrupt that arrives between statements.
- PostgreSQL: the session's ``statement_timeout``, which the server enforces on every statement.
- MySQL/MariaDB: the session's ``max_statement_time`` (MariaDB, every statement) or
  ``max_execution_time`` (MySQL, SELECT only), which the server enforces.
- ClickHouse (chDB): the session's ``max_execution_time``, which the server enforces.

The guard's own re-executions (a patch's re-run, rescue candidates) are bounded by the policy's
``rerun_timeout`` on every engine. On SQLite they run on the same connection, so the evaluation's
interrupt reaches them as well. On PostgreSQL the guard sets a local ``statement_timeout`` of its own
for them (MariaDB: ``SET STATEMENT max_statement_time``), and on DuckDB they run on a duplicate cursor,
which the connection's ``interrupt()`` does not reach: there ``rerun_timeout`` alone bounds them.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from .._api import wrap
from .._core.deadlines import interrupt_after
from .._guard.decide import forget_schema
from .._io.proxy import GuardedCursor
from ..errors import describe_error
from ..policy import GuardPolicy
from ..report import GuardReport
from .loaders import open_read_only
from .options import EngineSpec


class Run(NamedTuple):
    """One query's execution: its rows, or why there are none."""

    rows: list[Any] | None
    """The fetched rows; None when the query failed or timed out."""

    status: str
    """``"ok"``, ``"error"`` or ``"timeout"``."""

    error: str | None
    """``"ExceptionClass: message"`` on one line (``describe_error``), or the timeout's description."""

    seconds: float
    """Wall time of execute and fetch."""

    report: GuardReport | None
    """The guard's report, when the query ran on a guarded connection."""

    transpile_failed: bool = False
    """The query never ran: sqlglot could not transpile it for the engine."""


EMPTY_PREDICTION = Run(None, "error", "empty prediction", 0.0, None)
"""sqlite3 "runs" a blank statement and returns no rows, which would pass against an empty gold
result; no SQL is never a correct answer."""


class Session:
    """One connection in a worker: the raw connection, guarded views of it, and timed execution."""

    raw: Any

    def __init__(self) -> None:
        self._guarded: dict[GuardPolicy, Any] = {}
        # Policies that cannot be hashed, because their rescuer is a user's object that does not hash.
        self._unhashable: list[tuple[GuardPolicy, Any]] = []

    def enter(self, target: str | None, timeout: float | None) -> None:
        """Prepare the connection for a task's database (PostgreSQL switches schema and timeout)."""

    def guarded(self, policy: GuardPolicy) -> Any:
        """The raw connection wrapped with ``policy``, made once per policy."""
        try:
            con = self._guarded.get(policy)
        except TypeError:
            for known, con in self._unhashable:
                if known == policy:
                    return con
            con = wrap(self.raw, guard=policy)
            self._unhashable.append((policy, con))
            return con
        if con is None:
            con = self._guarded[policy] = wrap(self.raw, guard=policy)
        return con

    def run(self, con: Any, sql: str, timeout: float | None, rescue: dict[str, Any] | None = None) -> Run:
        """Execute and fetch ``sql`` on ``con`` (raw or guarded) within the timeout; ``rescue``: the
        ``candidates``/``question``/``hint`` keywords for a guarded ``execute``."""
        raise NotImplementedError

    def _interruptible(
        self, fetch: Callable[[], list[Any]], timeout: float | None
    ) -> tuple[list[Any] | None, str, str | None]:
        """``(rows, status, error)`` of ``fetch()``, interrupting the connection past ``timeout``."""
        if timeout is None:
            try:
                return fetch(), "ok", None
            except Exception as exc:  # any failure of predicted SQL scores 0; it must not stop the run
                return None, "error", describe_error(exc)
        deadline = interrupt_after(timeout, self.raw.interrupt)
        try:
            return fetch(), "ok", None
        except Exception as exc:
            deadline.cancel()
            if deadline.fired:
                return None, "timeout", f"interrupted at the {timeout:g} s timeout"
            return None, "error", describe_error(exc)
        finally:
            deadline.cancel()

    def _forget_catalogs(self) -> None:
        """The guarded views did not see the statement that moved the connection to another copy: their
        catalog snapshots name the previous database's tables, which would make every verdict on this
        one "unknown table"."""
        for con in (*self._guarded.values(), *(con for _, con in self._unhashable)):
            forget_schema(con._self_guard)

    def _run_on_server(
        self,
        con: Any,
        sql: str,
        rescue: dict[str, Any] | None,
        server_error: type[Exception],
        stopped: Callable[[Exception], str | None],
    ) -> Run:
        """Execute and fetch ``sql`` on a server's connection (raw or guarded), which enforces the time
        limit itself: ``stopped`` says why a ``server_error`` is that limit (None: another error)."""
        cursor = con.cursor()
        started = time.perf_counter()
        try:
            cursor.execute(sql, **(rescue or {}))
            if isinstance(cursor, GuardedCursor):
                cursor.guard_report  # noqa: B018  # built while the rows are buffered: its distinct count is exact
            rows: list[Any] | None = list(cursor.fetchall())
            status, error = "ok", None
        except server_error as exc:
            rows, why = None, stopped(exc)
            status, error = ("timeout", why) if why is not None else ("error", describe_error(exc))
        except Exception as exc:
            rows, status, error = None, "error", describe_error(exc)
        seconds = time.perf_counter() - started
        report = cursor.guard_report if isinstance(cursor, GuardedCursor) else None
        cursor.close()
        return Run(rows, status, error, seconds, report)

    def close(self) -> None:
        self.raw.close()


class SQLiteSession(Session):
    """One read-only SQLite database."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.raw = open_read_only(path)

    def run(
        self,
        con: sqlite3.Connection,
        sql: str,
        timeout: float | None,
        rescue: dict[str, Any] | None = None,
    ) -> Run:
        if not sql.strip():
            return EMPTY_PREDICTION
        cursor = con.cursor()

        def fetch() -> list[Any]:
            cursor.execute(sql, **(rescue or {}))
            if isinstance(cursor, GuardedCursor):
                cursor.guard_report  # noqa: B018  # built while the rows are buffered: its distinct count is exact
            return cursor.fetchall()

        started = time.perf_counter()
        rows, status, error = self._interruptible(fetch, timeout)
        seconds = time.perf_counter() - started
        report = cursor.guard_report if isinstance(cursor, GuardedCursor) else None
        cursor.close()
        if self.raw.in_transaction:  # a predicted BEGIN must not leak into the next query
            self.raw.rollback()
        return Run(rows, status, error, seconds, report)


_MENTIONS_TRANSACTION = re.compile(r"\b(begin|transaction)\b", re.IGNORECASE)


class DuckDBSession(Session):
    """One DuckDB copy, opened read-only.

    The connection runs one thread: the pool's processes are the parallelism, and a single thread
    keeps DuckDB's row order deterministic.
    """

    def __init__(self, path: str) -> None:
        import duckdb

        super().__init__()
        self.raw = duckdb.connect(path, read_only=True, config={"threads": 1})

    def run(self, con: Any, sql: str, timeout: float | None, rescue: dict[str, Any] | None = None) -> Run:
        if not sql.strip():
            return EMPTY_PREDICTION
        raw = self.raw

        def fetch() -> list[Any]:
            con.execute(sql, **(rescue or {}))  # a guarded DuckDB connection is its own cursor, as DuckDB's is
            if con is not raw:
                con.guard_report  # noqa: B018  # built while the rows are buffered: its distinct count is exact
            rows: list[Any] = con.fetchall()
            return rows

        started = time.perf_counter()
        rows, status, error = self._interruptible(fetch, timeout)
        seconds = time.perf_counter() - started
        report = None if con is raw else con.guard_report
        if _MENTIONS_TRANSACTION.search(sql):
            from .._engines import DUCKDB

            if DUCKDB.in_explicit_transaction(raw):  # a predicted BEGIN must not leak
                raw.execute("ROLLBACK")
        return Run(rows, status, error, seconds, report)


class PostgresSession(Session):
    """One PostgreSQL connection per worker, moved between the copies' schemas.

    Autocommit, ``default_transaction_read_only = on`` and the evaluation's ``statement_timeout`` for
    the whole session: the server cancels any statement past it (the guard's re-runs set their own).
    """

    def __init__(self, dsn: str) -> None:
        import psycopg

        super().__init__()
        self.raw = psycopg.connect(dsn, autocommit=True)
        self.raw.execute("SET default_transaction_read_only = on")
        self._canceled = psycopg.errors.QueryCanceled
        self._schema: str | None = None
        self._timeout: Any = object()

    def enter(self, target: str | None, timeout: float | None) -> None:
        if timeout != self._timeout:
            value = "0" if timeout is None else f"{max(1, round(timeout * 1000))}ms"
            self.raw.execute("SELECT set_config('statement_timeout', %s, false)", (value,))
            self._timeout = timeout
        if target != self._schema:
            assert target is not None
            self.raw.execute("SELECT set_config('search_path', %s, false)", ('"' + target.replace('"', '""') + '"',))
            self._schema = target
            self._forget_catalogs()

    def run(self, con: Any, sql: str, timeout: float | None, rescue: dict[str, Any] | None = None) -> Run:
        if not sql.strip():
            return EMPTY_PREDICTION
        from psycopg.pq import TransactionStatus

        def stopped(exc: Exception) -> str | None:
            return f"canceled at the {timeout:g} s statement_timeout" if "statement timeout" in str(exc) else None

        run = self._run_on_server(con, sql, rescue, self._canceled, stopped)
        if self.raw.info.transaction_status != TransactionStatus.IDLE:  # a predicted BEGIN must not leak
            self.raw.rollback()
        return run


class MySQLSession(Session):
    """One MySQL/MariaDB connection per worker, moved between the copies' databases.

    Autocommit, ``SESSION TRANSACTION READ ONLY`` (the server refuses writes, error 1792) and the
    evaluation's time limit for the whole session (MariaDB's ``max_statement_time``; MySQL's
    ``max_execution_time``, SELECT only); multi-statements stay off, as PyMySQL's default. A recursive
    CTE may iterate as often as on SQLite, which sets no limit: MariaDB stops one silently after
    ``max_recursive_iterations`` (1,000 by default), returning fewer rows, and MySQL fails it after
    ``cte_max_recursion_depth``; the time limit stops a runaway one instead.
    """

    _TIMEOUT_ERRORS = (1969, 3024)
    """MariaDB's ``max_statement_time`` and MySQL's ``max_execution_time`` exceeded."""

    def __init__(self, url: str) -> None:
        from .._engines.mysql import is_mariadb
        from .copy_mysql import connect_mysql

        super().__init__()
        self.raw = connect_mysql(url)
        self._mariadb = is_mariadb(self.raw)
        recursion = "max_recursive_iterations" if self._mariadb else "cte_max_recursion_depth"
        with self.raw.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION READ ONLY")
            cursor.execute(f"SET SESSION {recursion} = 4294967295")
        self._database: str | None = None
        self._timeout: Any = object()

    def enter(self, target: str | None, timeout: float | None) -> None:
        if timeout != self._timeout:
            with self.raw.cursor() as cursor:
                if self._mariadb:
                    cursor.execute("SET SESSION max_statement_time = %s", (0 if timeout is None else timeout,))
                else:
                    milliseconds = 0 if timeout is None else max(1, round(timeout * 1000))
                    cursor.execute("SET SESSION max_execution_time = %s", (milliseconds,))
            self._timeout = timeout
        if target != self._database:
            assert target is not None
            self.raw.select_db(target)
            self._database = target
            self._forget_catalogs()

    def run(self, con: Any, sql: str, timeout: float | None, rescue: dict[str, Any] | None = None) -> Run:
        if not sql.strip():
            return EMPTY_PREDICTION
        import pymysql

        from .._engines.mysql import in_transaction

        def stopped(exc: Exception) -> str | None:
            if timeout is not None and exc.args and exc.args[0] in self._TIMEOUT_ERRORS:
                return f"stopped at the {timeout:g} s statement time limit"
            return None

        run = self._run_on_server(con, sql, rescue, pymysql.err.MySQLError, stopped)
        if in_transaction(self.raw) or _MENTIONS_TRANSACTION.search(sql):  # a predicted BEGIN must not leak
            self.raw.rollback()
        return run


class ClickHouseSession(Session):
    """The chDB folder of the copies (one per process: chDB serves one), moved between its databases.

    ``readonly = 2`` (no write, settings still settable, so the timeout can change), ``join_use_nulls =
    1`` (a LEFT JOIN's unmatched row holds NULL, as in SQLite, not the columns' defaults) and the
    evaluation's time limit as ``max_execution_time``, which the server enforces on every statement.
    """

    def __init__(self, cache_dir: str | None) -> None:
        from .copy_clickhouse import connect_clickhouse

        super().__init__()
        self.raw = connect_clickhouse(cache_dir)
        cursor = self.raw.cursor()
        cursor.execute("SET join_use_nulls = 1, readonly = 2")
        cursor.close()
        self._database: str | None = None
        self._timeout: Any = object()

    def enter(self, target: str | None, timeout: float | None) -> None:
        cursor = self.raw.cursor()
        try:
            if timeout != self._timeout:
                cursor.execute(f"SET max_execution_time = {0 if timeout is None else max(timeout, 0.001):.3f}")
                self._timeout = timeout
            if target != self._database:
                assert target is not None
                cursor.execute(f"USE `{target}`")
                self._database = target
                self._forget_catalogs()
        finally:
            cursor.close()

    def run(self, con: Any, sql: str, timeout: float | None, rescue: dict[str, Any] | None = None) -> Run:
        if not sql.strip():
            return EMPTY_PREDICTION

        def stopped(exc: Exception) -> str | None:
            if timeout is not None and "TIMEOUT_EXCEEDED" in str(exc):
                return f"stopped at the {timeout:g} s max_execution_time"
            return None

        return self._run_on_server(con, sql, rescue, RuntimeError, stopped)  # chDB's ChdbError is one


# One session per database (SQLite, DuckDB) or per server (PostgreSQL, MySQL) in this process. Worker
# processes keep theirs until they exit; an in-process run closes them when it ends.
_SESSIONS: dict[tuple[str, str], Session] = {}


def open_session(engine: EngineSpec, db_path: str, target: str | None, timeout: float | None) -> Session:
    """This process's session for a database (opened on first use), entered for ``target``/``timeout``.

    ``db_path``: the SQLite file; ``target``: the DuckDB copy's file, the PostgreSQL copy's schema or
    the MySQL copy's database.
    """
    name = engine.name
    if name == "sqlite":
        key = (name, db_path)
    elif name == "duckdb":
        key = (name, str(target))
    elif name == "mysql":
        key = (name, str(engine.mysql_url))
    elif name == "clickhouse":
        key = (name, str(engine.cache_dir))
    else:
        key = (name, str(engine.pg_dsn))
    session = _SESSIONS.get(key)
    if session is None:
        if name == "sqlite":
            session = SQLiteSession(db_path)
        elif name == "duckdb":
            session = DuckDBSession(str(target))
        elif name == "mysql":
            session = MySQLSession(str(engine.mysql_url))
        elif name == "clickhouse":
            session = ClickHouseSession(engine.cache_dir)
        else:
            session = PostgresSession(str(engine.pg_dsn))
        _SESSIONS[key] = session
    session.enter(target, timeout)
    return session


def close_sessions() -> None:
    """Close every database connection this process opened for evaluation."""
    while _SESSIONS:
        _, session = _SESSIONS.popitem()
        session.close()
