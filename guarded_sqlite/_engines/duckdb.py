"""DuckDB: no savepoints, and any error inside an explicit transaction aborts it, so the guard's
statements run only when no explicit transaction is open, on the caller's own connection (its TEMP
tables, ``search_path`` and schema are what the statement read: a duplicate cursor has none of them,
c36) in ``BEGIN TRANSACTION READ ONLY``, with ``interrupt()`` from the watchdog thread past the time
limit. duckdb is imported only when a statement needs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core.deadlines import interrupt_after
from .base import NO_DEADLINE, Engine, GuardStatement, RerunRefused, execute_with, fetch_described

__all__ = ["DUCKDB", "DuckDBEngine"]


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

    def name_context(self, raw: Any) -> Any:
        try:  # cannot fail inside a transaction, which a failure would abort: nothing here can
            return raw.execute("SELECT current_schema(), current_setting('search_path')").fetchall()
        except Exception:
            return None

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
        rows = self.on_read_only_session(
            raw, sql, parameters, time_limit, lambda cursor: fetch_described(cursor, max_rows + 1, description)
        )
        return None if len(rows) > max_rows else rows

    def on_read_only_session(
        self, raw: Any, sql: str, parameters: Any, time_limit: float | None, consume: Callable[[Any], Any]
    ) -> Any:
        """Run ``sql`` on the caller's connection ``raw`` in a read-only transaction and return
        ``consume(raw)``, which must take what it needs of the result before the transaction ends.

        The caller checks that no explicit transaction is open, and has fetched (and keeps the
        description of) its own result, which this replaces. A duplicate cursor would be a new
        connection without the caller's TEMP tables, ``search_path`` or ``SET schema``: the same names
        would read other tables there (c36)."""
        raw.execute("BEGIN TRANSACTION READ ONLY")
        try:
            with interrupt_after(time_limit, raw.interrupt) if time_limit is not None else NO_DEADLINE:
                execute_with(raw, sql, parameters)
                return consume(raw)
        finally:
            raw.execute("ROLLBACK")


DUCKDB = DuckDBEngine()
