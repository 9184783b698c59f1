"""SQLite (``sqlite3``): the guard's statements run on the caller's own connection under ``PRAGMA
query_only`` (and ``busy_timeout = 0``), so uncommitted changes are seen; both restored on every path;
``interrupt()`` from the watchdog thread (``_core.deadlines``) past the time limit."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import Any

from .._core.deadlines import defer_keyboard_interrupt, interrupt_after
from ..errors import TransactionLost, describe_error
from .base import NO_DEADLINE, Engine, GuardStatement, WritableNotRestored, execute_with, fetch_described

__all__ = ["SQLITE", "SQLiteEngine"]


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
                    with interrupt_after(time_limit, raw.interrupt) if time_limit is not None else NO_DEADLINE:
                        running[0] = True
                        try:
                            execute_with(cursor, sql, parameters)
                            rows = fetch_described(cursor, max_rows + 1, description)
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
        return frozenset(str(row[0]).lower() for row in rows if not row[1]) - _library_functions()

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


@functools.cache
def _library_functions() -> frozenset[str]:
    """The functions SQLite's own compiled-in extensions register on every connection without the
    built-in flag (FTS3/FTS5's ``match``, ``bm25``, ``snippet``; R-tree's ``rtreenode``): the library's,
    not the application's. A function the application registers through the guarded connection counts
    whatever its name (``ConnectionState.registered_functions``)."""
    probe = sqlite3.connect(":memory:")
    try:
        return frozenset(str(row[0]).lower() for row in probe.execute("PRAGMA function_list") if not row[1])
    except sqlite3.Error:
        return frozenset()
    finally:
        probe.close()


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


SQLITE = SQLiteEngine()
