"""``Connection.iterdump()`` without the guard: sqlite3's own dump, run on plain cursors.

sqlite3's ``iterdump`` is ``sqlite3.dump._iterdump(connection)`` (CPython 3.10 to 3.13; 3.13 adds the
keyword ``filter=``), called by the C method, and it takes its cursors from ``connection.cursor()``. On
a guarded connection those cursors are guarded, so under a preset that de-duplicates without asking
why (``"paper"``) the dump of a table with repeated rows lost rows, and a database restored from it
differed from the original. The dump reads the database; it is never the caller's query.

So the guarded connection's ``iterdump`` hands ``_iterdump`` the connection behind a small stand-in
whose ``cursor()`` is sqlite3's own (a plain ``sqlite3.Cursor`` with the connection's row factory, as
sqlite3's dump gets): nothing connection-wide is switched, so another thread's statements on the same
connection stay guarded while a dump is being read. ``backup()`` copies pages in C and runs no
statement through a cursor, so it needs nothing.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dump
from collections.abc import Callable, Generator
from typing import Any


def _find_iterdump() -> Callable[..., Generator[str, None, None]] | None:
    """sqlite3's dump generator, looked up when a dump starts (as the C method does)."""
    found: Callable[..., Generator[str, None, None]] | None = getattr(sqlite3.dump, "_iterdump", None)
    return found


class _PlainCursors:
    """The connection as sqlite3's dump uses it, with sqlite3's own unguarded ``cursor()``."""

    __slots__ = ("_connection",)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def cursor(self) -> sqlite3.Cursor:
        return sqlite3.Connection.cursor(self._connection)

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return self.cursor().execute(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def iterdump(
    connection: sqlite3.Connection, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Generator[str, None, None]:
    """``connection.iterdump(*args, **kwargs)`` as sqlite3 runs it, on plain cursors of ``connection``."""
    # sqlite3's own method first, for its argument and closed-connection errors, exactly as sqlite3
    # raises them at the call; the generator it returns has not run anything.
    own = sqlite3.Connection.iterdump(connection, *args, **kwargs)
    dump = _find_iterdump()
    if dump is None:  # not CPython 3.10-3.13's dump module: sqlite3's own dump, whatever it reads with
        return own
    own.close()
    return dump(_PlainCursors(connection), **kwargs)


__all__ = ["iterdump"]
