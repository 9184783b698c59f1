"""MySQL and MariaDB (PyMySQL): the guard's statements run on a cursor of the caller's own connection,
so they see what the caller's statement saw, uncommitted changes included.

- Under autocommit, outside a transaction: in ``START TRANSACTION READ ONLY`` (the server refuses
  every write to a non-temporary table, error 1792), then ``ROLLBACK``; a statement proven unable to
  write (``GuardStatement.writes_possible``) runs alone, as every autocommit statement does.
- Inside the caller's transaction, and whenever autocommit is off (PyMySQL's default; a transaction
  a SELECT began cannot be told apart, and ``START TRANSACTION`` would commit it and release its
  locks), because the server cannot make a transaction read-only once it has begun: a
  statement proven unable to write runs as it is (a failing SELECT leaves a MySQL transaction intact);
  any other runs between ``SAVEPOINT`` and ``ROLLBACK TO SAVEPOINT``, which undoes what it wrote to
  transactional tables (a write to a MyISAM table by a stored function it calls is not undone: the
  guard's own checks never run statements calling the application's functions, but a rescue
  candidate might).
- Time limits: MariaDB's ``SET STATEMENT max_statement_time = s FOR ...`` (the session's setting is
  never touched); MySQL's session ``max_execution_time`` (milliseconds, SELECT only), set and restored.
- Refused for a statement with an executable comment (``/*! ... */``, ``/*M! ... */``), whose text
  the server runs as SQL that the guard's analysis never saw, and while an unbuffered (``SSCursor``)
  result is still being read: PyMySQL would silently read the rest of it to run anything else. A
  deadlock that rolled back the caller's transaction raises ``TransactionLost``.

pymysql is imported only when a statement runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..errors import TransactionLost, describe_error
from .base import NO_PARAMETERS, Engine, GuardStatement, RerunRefused, execute_with, fetch_described

__all__ = ["MYSQL", "MySQLEngine", "in_transaction", "is_mariadb"]

_IN_TRANS = 1
"""``SERVER_STATUS_IN_TRANS``: the server's status flag for an open transaction."""
_DEADLOCK = 1213
"""A deadlock rolls back the whole transaction (a lock wait timeout, by default, the statement only)."""
_NO_SAVEPOINT = 1305
_SAVEPOINT = "__guarded_sqlite"
_EXECUTABLE_COMMENT = re.compile(r"/\*[mM]?!")
"""``/*! ... */`` and MariaDB's ``/*M! ... */``: the server runs their text as SQL, which no parser
of the statement sees (they carried writes past keyword checks)."""

_FUNCTIONS_SQL = "SELECT DISTINCT LOWER(routine_name) FROM information_schema.routines WHERE routine_type = 'FUNCTION'"
_SCHEMA_SQL = (
    "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = DATABASE() "
    "ORDER BY table_name, ordinal_position"
)


def is_mariadb(raw: Any) -> bool:
    """Whether the server is MariaDB (PyMySQL reads the version the server greeted it with)."""
    return "mariadb" in str(getattr(raw, "server_version", "") or "").lower()


def in_transaction(raw: Any) -> bool:
    """Whether the status of the server's last OK reply says a transaction is open. PyMySQL keeps no
    status from a result set's end, so under ``autocommit = 0`` a transaction a SELECT began is not
    seen here: the engine then takes the caller's transaction as open whatever this says. Under
    autocommit only BEGIN/START TRANSACTION, answered with OK, begins one, and COMMIT/ROLLBACK ends it."""
    return bool(int(getattr(raw, "server_status", 0) or 0) & _IN_TRANS)


class MySQLEngine(Engine):
    name = "mysql"
    dialect = "mysql"
    functions_sql = _FUNCTIONS_SQL
    schema_sql = _SCHEMA_SQL

    def row_factory(self, raw_cursor: Any) -> Any:
        """The cursor class the guard's statements use to give rows shaped as ``raw_cursor``'s
        (``DictCursor``: dicts); None for plain tuples."""
        import pymysql.cursors

        kind = type(raw_cursor)
        if not issubclass(kind, pymysql.cursors.DictCursorMixin):
            return None
        # The guard's own statements are always read whole: never unbuffered (SSDictCursor).
        return pymysql.cursors.DictCursor if issubclass(kind, pymysql.cursors.SSCursor) else kind

    def plain_rows(self, raw_cursor: Any) -> tuple[Any, Callable[[list[tuple[Any, ...]]], list[Any]] | None]:
        if self.row_factory(raw_cursor) is None:
            return None, None
        # The cursor's own conversion, over its field names: the written statement's description.
        convert = raw_cursor._conv_row
        return None, lambda rows: [convert(row) for row in rows]

    def name_context(self, raw: Any) -> Any:
        try:
            return self.read_only_fetch(raw, GuardStatement("SELECT DATABASE()", NO_PARAMETERS, None, 1, 5.0))
        except Exception:
            return None

    def read_only_fetch(self, raw: Any, statement: GuardStatement) -> list[Any] | None:
        sql, parameters, row_factory, max_rows, time_limit, description, writes_possible = statement
        import pymysql

        if _EXECUTABLE_COMMENT.search(sql):
            raise RerunRefused("an executable comment (/*! ... */) runs SQL no parser sees: not run again")
        pending = getattr(raw, "_result", None)
        if pending is not None and getattr(pending, "unbuffered_active", False):
            raise RerunRefused("an unbuffered (SSCursor) result is still being read on the connection")
        mariadb = is_mariadb(raw)
        limited = sql
        if time_limit is not None and mariadb:
            limited = f"SET STATEMENT max_statement_time = {max(time_limit, 0.001):.3f} FOR {sql}"
        cursor = raw.cursor(row_factory) if row_factory is not None else raw.cursor(pymysql.cursors.Cursor)
        try:
            if not raw.get_autocommit() or in_transaction(raw):
                return self._in_callers_transaction(cursor, statement, limited, mariadb)
            if not writes_possible:
                with _SessionTimeLimit(cursor, time_limit, mariadb):
                    execute_with(cursor, limited, parameters)
                    rows = fetch_described(cursor, max_rows + 1, description)
                return None if len(rows) > max_rows else list(rows)
            cursor.execute("START TRANSACTION READ ONLY")
            try:
                with _SessionTimeLimit(cursor, time_limit, mariadb):
                    execute_with(cursor, limited, parameters)
                    rows = fetch_described(cursor, max_rows + 1, description)
            finally:
                cursor.execute("ROLLBACK")
            return None if len(rows) > max_rows else list(rows)
        finally:
            cursor.close()

    def _in_callers_transaction(
        self, cursor: Any, statement: GuardStatement, sql: str, mariadb: bool
    ) -> list[Any] | None:
        import pymysql

        parameters, max_rows, time_limit, description = statement[1], statement[3], statement[4], statement[5]
        fenced = statement.writes_possible
        if fenced:
            cursor.execute(f"SAVEPOINT {_SAVEPOINT}")
        try:
            with _SessionTimeLimit(cursor, time_limit, mariadb):
                execute_with(cursor, sql, parameters)
                rows = fetch_described(cursor, max_rows + 1, description)
        except pymysql.err.MySQLError as error:
            if error.args and error.args[0] == _DEADLOCK:
                raise TransactionLost(f"the server rolled back the transaction: {describe_error(error)}") from error
            raise
        finally:
            if fenced:
                try:
                    cursor.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
                    cursor.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
                except pymysql.err.MySQLError as error:
                    if error.args and error.args[0] == _NO_SAVEPOINT:
                        raise TransactionLost(
                            f"the server rolled back the transaction: {describe_error(error)}"
                        ) from error
                    raise
        return None if len(rows) > max_rows else list(rows)


class _SessionTimeLimit:
    """MySQL's server (not MariaDB's, which limits the statement itself): the session's
    ``max_execution_time`` for the duration, restored after."""

    def __init__(self, cursor: Any, time_limit: float | None, mariadb: bool) -> None:
        self.cursor = cursor
        self.limit = None if mariadb or time_limit is None else max(1, int(time_limit * 1000))
        self.previous: Any = None

    def __enter__(self) -> None:
        if self.limit is None:
            return
        self.cursor.execute("SELECT @@SESSION.max_execution_time")
        self.previous = int(self.cursor.fetchone()[0])
        self.cursor.execute(f"SET SESSION max_execution_time = {self.limit}")

    def __exit__(self, *exc_info: Any) -> None:
        if self.limit is not None and self.previous is not None:
            self.cursor.execute(f"SET SESSION max_execution_time = {self.previous}")


MYSQL = MySQLEngine()
