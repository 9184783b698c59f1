"""PostgreSQL (psycopg 3): the guard's statements run in ``conn.transaction(force_rollback=True)`` (a
savepoint inside an open transaction, ``BEGIN``/``ROLLBACK`` otherwise) with ``SET LOCAL
transaction_read_only = on`` and a local ``statement_timeout``; the caller's transaction state is left
exactly as it was. Refused when the caller's transaction has already failed or a statement is in
flight. psycopg is imported only when a statement runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import NO_PARAMETERS, Engine, GuardStatement, RerunRefused, execute_with, fetch_described

__all__ = ["POSTGRES", "PostgresEngine", "pg_statement_timeout"]


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

    def name_context(self, raw: Any) -> Any:
        try:
            return self.read_only_fetch(raw, GuardStatement(_CONTEXT_SQL, NO_PARAMETERS, None, 1, 5.0))
        except Exception:
            return None

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
                rows = fetch_described(cursor, max_rows + 1, description)
        finally:
            cursor.close()
        return None if len(rows) > max_rows else rows


_PG_LONGEST_TIMEOUT_MS = 2**31 - 1
"""PostgreSQL's largest ``statement_timeout`` (an int of milliseconds, about 24.8 days)."""


def pg_statement_timeout(time_limit: float | None) -> str | None:
    """The local ``statement_timeout`` setting for a time limit in seconds, or None to set none: no
    limit (None or ``float("inf")``), or one longer than PostgreSQL accepts, which is no limit in
    practice and would otherwise fail the statement with an out-of-range error."""
    if time_limit is None or time_limit * 1000 >= _PG_LONGEST_TIMEOUT_MS:
        return None
    return f"{max(1, int(time_limit * 1000))}ms"


POSTGRES = PostgresEngine()


_CONTEXT_SQL = "SELECT current_schemas(true)::text, pg_my_temp_schema()::text"
