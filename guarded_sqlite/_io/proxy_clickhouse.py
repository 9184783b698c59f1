"""``wrap()``'s cursors for chDB's ``dbapi`` (ClickHouse in the process), shaped as chDB's own.

chDB binds parameters (``%s``, ``?``) on the client (``Cursor.mogrify``) and the server reads the bound
text, so the guard binds them the same way before it reads the statement: reports show what ran, with
its values. Further, as chDB's cursor: ``execute`` returns the number of rows (after a patch, the rows
served; -1 for none), ``fetchall``/``fetchmany`` return tuples of tuples, ``fetchmany()`` without a size
reads one row (chDB ignores ``arraysize``), and ``with conn as cur`` gives a (guarded) cursor and closes
the connection on leaving. ``executemany`` and the connection's own ``query()`` (chDB's formatted
output: CSV, Arrow, ...) pass through unprobed.
"""

from __future__ import annotations

from typing import Any

from .client_bound import ClientBoundConnection, ClientBoundCursor
from .proxy import CursorProxy


class ChDBCursor(ClientBoundCursor):
    """A guarded ``chdb.dbapi`` cursor."""

    # chDB binds what fits a candidate and leaves the rest, or raises IndexError where too few fit.
    CANDIDATE_ERRORS = (*ClientBoundCursor.CANDIDATE_ERRORS, IndexError)
    EMPTY_ROWCOUNT = -1  # chDB counts an empty result as -1

    def fetchmany(self, size: Any = 1) -> Any:
        return tuple(super().fetchmany(1 if size is None else size))

    def fetchall(self) -> Any:
        return tuple(super().fetchall())


class ChDBConnectionProxy(ClientBoundConnection):
    """``wrap()``'s guarded chDB connection. Like chDB's own it has no ``execute``; ``with conn as cur``
    gives a guarded cursor (chDB's gives a cursor, not the connection) and closes the connection after."""

    def _cursor_proxy(self, raw_cursor: Any) -> type[CursorProxy]:
        return ChDBCursor

    def __enter__(self) -> ChDBCursor:  # type: ignore[override]
        self.__wrapped__.__enter__().close()  # chDB's cursor for the block: ours replaces it
        cursor = self.cursor()
        assert isinstance(cursor, ChDBCursor)
        return cursor

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)
