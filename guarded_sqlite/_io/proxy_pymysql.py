"""``wrap()``'s cursors for PyMySQL (MySQL and MariaDB), shaped as PyMySQL's own. Parameters
(``%s``, ``%(name)s``) are bound as PyMySQL binds them, on the client (``mogrify``), before the guard
reads the statement: reports show the statement the server received, with its values. Further, ``execute`` and
``executemany`` return the number of rows (after a patch, the rows served), ``fetchall``/``fetchmany``
return what PyMySQL's cursor class returns (a tuple of tuples from ``Cursor``, a list of dicts from
``DictCursor``), ``fetchmany()`` without a size reads ``arraysize`` rows, cursors are context managers,
and unbuffered cursors (``SSCursor``, ``SSDictCursor``) stream their rows unprobed, as psycopg's
server-side cursors do. ``callproc`` and ``nextset`` pass through unprobed.
"""

from __future__ import annotations

import operator
from typing import Any

from .._guard.decide import settle, unprobed
from .client_bound import ClientBoundConnection, ClientBoundCursor
from .proxy import CursorProxy

_UNBUFFERED = "unbuffered cursor (SSCursor): rows stream from the server unbuffered and unprobed"
_PROCEDURE = "callproc(): a stored procedure's results are not probed"


class PyMySQLCursor(ClientBoundCursor):
    """A guarded PyMySQL cursor (``Cursor``, ``DictCursor`` and their subclasses)."""

    def callproc(self, procname: str, args: Any = ()) -> Any:
        raw = self.__wrapped__
        self._self_report = None
        self._self_rows = raw  # the procedure's result sets are read from the driver's cursor
        self._self_buffer = None
        guard = self._self_guard.in_scope()
        self._self_state = state = unprobed(guard.preset, f"CALL {procname}", _PROCEDURE)
        result = raw.callproc(procname, args)
        settle(guard, state, self)
        return result

    def nextset(self) -> bool | None:
        """The driver's next result set, served by the driver's cursor (never probed)."""
        raw = self.__wrapped__
        self._self_rows = raw
        self._self_buffer = None
        result: bool | None = raw.nextset()
        return result

    def scroll(self, value: int, mode: str = "relative") -> None:
        """PyMySQL's ``scroll`` over the rows served: a result served as the driver returned it is handed
        back to the driver's cursor at the position read so far; patched rows cannot be scrolled."""
        raw, state = self.__wrapped__, self._self_state
        if state is not None and state.action != "none":
            import pymysql

            raise pymysql.err.NotSupportedError("scroll() over rows the guard patched")
        position = self.rownumber
        self._self_rows = raw
        self._self_buffer = None
        if position is not None:
            raw.rownumber = position
        raw.scroll(value, mode)

    def fetchmany(self, size: Any = None) -> Any:
        raw = self.__wrapped__
        if self._self_rows is raw:
            return self.__wrapped__.fetchmany(size)
        # PyMySQL reads ``arraysize`` rows for a size of None or 0 (sqlite3: every row for 0).
        rows = super().fetchmany(size or raw.arraysize)
        return _as_driver(raw, rows, ())

    def fetchall(self) -> Any:
        raw = self.__wrapped__
        if self._self_rows is raw:
            return self.__wrapped__.fetchall()
        return _as_driver(raw, super().fetchall(), [])

    @property
    def rownumber(self) -> int | None:
        rows, state = self._self_rows, self._self_state
        if state is None or rows is self.__wrapped__ or state.final_rows is None:
            number: int | None = self.__wrapped__.rownumber
            return number
        remaining = len(rows) if type(rows) is list else operator.length_hint(rows)
        served: int = state.final_rows - remaining
        return served


def _as_driver(raw: Any, rows: list[Any], empty: Any) -> Any:
    """Rows in the container PyMySQL's cursor class gives: its buffered rows are a tuple (``Cursor``) or
    a list (``DictCursor``); ``empty`` when the statement returned no result set."""
    kept = getattr(raw, "_rows", None)
    if kept is None:
        return empty if not rows else rows
    return tuple(rows) if isinstance(kept, tuple) else rows


class PyMySQLStreamingCursor(PyMySQLCursor):
    """An unbuffered cursor (``SSCursor``): buffering would defeat the reason it exists, so statements
    pass through unprobed and the report says so."""

    def execute(self, query: str, args: Any = None, /, **kwargs: Any) -> int:  # type: ignore[override]
        raw = self.__wrapped__
        self._self_report = None
        self._self_rows = raw
        self._self_buffer = None
        guard = self._self_guard.in_scope()
        self._self_state = state = unprobed(guard.preset, query, _UNBUFFERED)
        result: int = raw.execute(query, args)
        settle(guard, state, self)
        return result


class PyMySQLConnectionProxy(ClientBoundConnection):
    """``wrap()``'s guarded PyMySQL connection: its cursors are this module's. Like PyMySQL's own it has
    no ``execute``; ``query()`` (PyMySQL's low-level call, which reads no rows through a cursor) passes
    through unguarded."""

    def _cursor_proxy(self, raw_cursor: Any) -> type[CursorProxy]:
        import pymysql.cursors

        return PyMySQLStreamingCursor if isinstance(raw_cursor, pymysql.cursors.SSCursor) else PyMySQLCursor
