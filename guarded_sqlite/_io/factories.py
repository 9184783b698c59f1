"""Row factories applied when rows are served: the probe and the patch rules see the database's rows.

A ``row_factory``'s objects need not compare as the rows they were made from: ORM-style entities equal
by primary key make a duplicate-free result look like an explosion (and P1 would drop real rows), and
a scalar factory (``lambda cursor, row: row[0]``) throws away the columns that tell rows apart. So the
guard judges and de-duplicates the values sqlite3 returned *before* any row factory:

- ``None`` and ``sqlite3.Row`` stay on sqlite3's C fetch. A ``Row`` compares and hashes as its values
  within one result (equality checks the description first, which all rows of one result share), so
  the probe and P1 treat it exactly as the tuple (``tests/repros/test_repros_rows.py`` checks this).
- Any other factory: the I/O layer sets the cursor's ``row_factory`` to None around sqlite3's execute and
  fetch (restored on every path), so the guard's own re-executions, which read the cursor's factory,
  return plain tuples too. The rows served go through ``Shaped``, which calls the factory with the
  caller's cursor as sqlite3's fetch does: lazily, exactly once per row handed out, after the report
  state and description are in place (a factory reading ``cursor.description`` sees the served rows').
  Rows past ``row_cap`` stream from sqlite3 itself, which applies the restored factory.

``Shaped`` is the head of a ``decide.Streaming`` (without a tail for a buffered result), so the serving
machinery (fetch methods, ``iter(cur)`` handed out, re-executing inside a loop) works on it unchanged.
DuckDB has no row factory; psycopg's ``row_factory`` is left to psycopg (see docs/guide/engines.md).
"""

from __future__ import annotations

import operator
import sqlite3
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .._guard.decide import LIST_ITERATOR, Streaming

_Row = sqlite3.Row
_T = TypeVar("_T")


def native(factory: Any) -> bool:
    """Whether sqlite3's C fetch may apply ``factory`` itself: rows it makes compare as their values."""
    return factory is None or factory is _Row


class Shaped:
    """Applies a row factory to plain rows as they are served, with the caller's cursor.

    ``rows`` yields tuples (or ``sqlite3.Row`` objects buffered before the factory changed, turned back
    into tuples first). The cursor is held weakly, so a cursor that buffers rows can be freed as soon as
    it is unreferenced (no reference cycle through its own buffer); ``hold()`` makes the reference strong
    while the iterator is in the caller's hands (``iter(cur)``), as sqlite3's iterator is the cursor.
    """

    __slots__ = ("factory", "held", "owner", "rows")

    def __init__(self, rows: Iterator[Any], owner: Any, factory: Any) -> None:
        self.rows = rows
        self.owner = weakref.ref(owner)
        self.factory = factory
        self.held: Any = None

    def __iter__(self) -> Shaped:
        return self

    def __next__(self) -> Any:
        row = next(self.rows)
        if type(row) is not tuple:
            row = tuple(row)
        factory = self.factory
        if factory is None:
            return row
        cursor = self.held
        if cursor is None:
            cursor = self.owner()
            if cursor is None:  # the cursor is gone: nothing can fetch from it any more
                raise StopIteration
        if factory is _Row and not issubclass(type(cursor), sqlite3.Cursor):
            cursor = cursor.__wrapped__  # sqlite3.Row type-checks its cursor in C: the proxy's raw cursor
        return factory(cursor, row)

    def __length_hint__(self) -> int:
        return operator.length_hint(self.rows)

    def hold(self) -> None:
        """Keep the cursor alive: this iterator was handed to the caller."""
        self.held = self.owner()


def with_plain_rows(set_factory: Callable[[Any], None], factory: Any, run: Callable[[], _T]) -> _T:
    """``run()`` with the cursor's row factory set to None (``set_factory``), ``factory`` again after it
    on every path. Restored twice: a KeyboardInterrupt landing on the first restore still gets the second."""
    try:
        try:
            set_factory(None)
            return run()
        finally:
            set_factory(factory)
    finally:
        set_factory(factory)


def shaped(rows: Any, cursor: Any, raw: Any, factory: Any) -> Any:
    """What ``cursor`` serves for ``rows`` (as ``decide.after_fetch`` returned them: plain tuples) when its
    row factory is ``factory``: buffered rows through ``Shaped``; a cursor serving rows itself is
    returned as it is (sqlite3 applies the factory). ``raw``: the sqlite3 cursor ``Streaming`` runs
    sqlite3's checks on (a weak proxy when it is ``cursor`` itself, which holds what it serves)."""
    kind = type(rows)
    if kind is list:
        return Streaming(Shaped(iter(rows), cursor, factory), raw, None)
    if kind is Streaming and rows.head is not None:
        rows.head = Shaped(rows.head, cursor, factory)
    return rows


def reshape(cursor: Any, raw: Any, old: Any, new: Any) -> None:
    """``cursor.row_factory`` changed from ``old`` to ``new`` (its setter calls this): the rows not
    served yet get ``new``, as sqlite3 applies the factory in force at each fetch.

    Buffered rows in sqlite3's shape (``old`` is None or ``sqlite3.Row``: the factory they were fetched
    with, since any change since would have come through here) are put behind a ``Shaped``; a
    ``Shaped`` already there just takes the new factory. Rows still in sqlite3 (past ``row_cap``, or a
    statement without a buffer) need nothing: sqlite3 reads the factory itself. An iterator the caller
    took with ``iter(cur)`` over rows in sqlite3's shape keeps serving them as they are (it is a plain
    list iterator); one over a ``Shaped`` sees the change. ``raw``: as for ``shaped``.
    """
    rows = cursor._self_rows
    kind = type(rows)
    if kind is Streaming:
        head = rows.head
        if type(head) is Shaped:
            head.factory = new
        elif head is not None and new is not old:
            rows.head = Shaped(head, cursor, new)
    elif (kind is list or kind is LIST_ITERATOR) and new is not old:
        # Shares the list iterator's position with an iterator handed out earlier, so re-executing
        # inside that loop still finds where it stands (Streaming's length hint is the head's).
        cursor._self_rows = Streaming(Shaped(iter(rows), cursor, new), raw, None)


__all__ = ["Shaped", "native", "reshape", "shaped", "with_plain_rows"]
