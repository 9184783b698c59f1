"""ClickHouse through chDB (``chdb.dbapi``, ClickHouse embedded in the process): the guard's statements
run on a new cursor of the caller's own connection (its ClickHouse session: the same current
database, session settings and temporary tables), one statement at a time, each under query-level
``SETTINGS readonly = 1`` and ``max_execution_time``.

- One statement, as ClickHouse itself reads it: ``SELECT a; INSERT ...`` runs *both* statements
  through chDB, and a ``SETTINGS`` clause appended to it would bind only the last. So the text first
  goes through the server's own parser (``formatQuerySingleLine``, which reads a string literal and runs
  nothing): more than one statement is refused, and the server's single-line rendering of the one
  statement (comments and a trailing ``;`` gone) is what runs, with the settings appended.
- ``readonly = 1`` on the query refuses every write, the table functions that reach files or the
  network (``file()``, ``url()``, ``s3()`` ...) and any setting the query's own text would change; the
  caller's session keeps its own ``readonly`` (a session-level ``SET readonly = 1`` could never be
  undone). A statement that carries its own ``SETTINGS`` or ``FORMAT`` clause is not run again: its
  settings could not be combined with these, and chDB's cursor reads one output format only; nor is
  one with ``INTO OUTFILE``, which chDB writes even under ``readonly``. In a session that is read-only
  already (the agent tools' lockdown), which refuses every setting, the statement runs as rendered,
  under the session's own ``readonly`` and ``max_execution_time``.
- ClickHouse has no transactions: nothing of the caller's is at risk, and there is no snapshot either.
  Two statements may see different data if another writer inserts in between (what the key proofs of
  ``_analysis.schema_clickhouse`` rest on is read right after the caller's statement, not with it).

chdb is imported only when a statement runs. A ClickHouse server reached through a PEP 249 driver
(clickhouse-connect, clickhouse-driver) needs nothing more than this SQL, but only chDB is recognised
by ``wrap()``: it is the one that could be tested here.
"""

from __future__ import annotations

import re
from typing import Any

from .base import NO_PARAMETERS, Engine, GuardStatement, RerunRefused, execute_with, fetch_described

__all__ = ["CLICKHOUSE", "ClickHouseEngine", "string_literal"]

_OWN_CLAUSES = re.compile(r"\b(SETTINGS|FORMAT)\b(?!\s*\()|\bINTO\s+OUTFILE\b")
"""A ``SETTINGS`` or ``FORMAT`` clause in the server's rendering (keywords upper-cased; ``format(...)``
the function excluded), or ``INTO OUTFILE``, which chDB writes to a file even under ``readonly = 1``.
A string literal or identifier spelled so is refused too: that errs on the side of not running a
statement again."""

_FUNCTIONS_SQL = "SELECT DISTINCT lower(name) FROM system.functions WHERE origin != 'System'"
_SCHEMA_SQL = "SELECT table, name FROM system.columns WHERE database = currentDatabase() ORDER BY table, position"


def string_literal(text: str) -> str:
    """``text`` as a ClickHouse string literal (backslash escapes, as the server reads them)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class ClickHouseEngine(Engine):
    name = "clickhouse"
    dialect = "clickhouse"
    functions_sql = _FUNCTIONS_SQL
    schema_sql = _SCHEMA_SQL

    def may_collate_text(self, raw: Any) -> bool:
        # Strings compare as bytes, but chDB hands some values back as text (arrays, tuples) and every
        # NaN as a new float, which Python's equality does not merge where DISTINCT does: the engine decides.
        return True

    def row_factory(self, raw_cursor: Any) -> Any:
        return None  # chDB's cursors have no row factories: rows are tuples

    def single_statement(self, cursor: Any, sql: str) -> tuple[str, int]:
        """The server's one-line rendering of ``sql`` and the session's ``readonly``; ``RerunRefused``
        when it is not one statement or carries its own ``SETTINGS``, ``FORMAT`` or ``INTO OUTFILE``.
        Raises the driver's error for text that does not parse."""
        try:
            cursor.execute(f"SELECT formatQuerySingleLine({string_literal(sql)}), getSetting('readonly')")
        except Exception as error:
            if "Multi-statements are not allowed" in str(error):
                raise RerunRefused("the text holds more than one statement: not run again") from error
            raise
        rendered, readonly = cursor.fetchall()[0]
        rendered = str(rendered)
        if _OWN_CLAUSES.search(rendered):
            raise RerunRefused("the statement carries its own SETTINGS, FORMAT or INTO OUTFILE clause: not run again")
        return rendered, int(readonly)

    def read_only_fetch(self, raw: Any, statement: GuardStatement) -> list[Any] | None:
        sql, parameters, _, max_rows, time_limit, description = statement[:6]
        cursor = raw.cursor()
        try:
            if parameters is not NO_PARAMETERS:
                sql = cursor.mogrify(sql, parameters)  # chDB binds on the client: the text the server reads
            sql, readonly = self.single_statement(cursor, sql)
            if not readonly:
                settings = "readonly = 1"
                if time_limit is not None:
                    settings += f", max_execution_time = {max(time_limit, 0.001):.3f}"
                sql = f"{sql} SETTINGS {settings}"
            # else: a read-only session (the agent tools' lockdown) refuses every setting, ours too; its own
            # readonly and max_execution_time hold for every statement it runs.
            execute_with(cursor, sql, NO_PARAMETERS)
            rows = list(fetch_described(cursor, max_rows + 1, description))
        finally:
            cursor.close()
        return None if len(rows) > max_rows else rows


CLICKHOUSE = ClickHouseEngine()
