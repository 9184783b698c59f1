"""Drop-in parity, subclasses: ``factory=`` a Connection subclass (its own methods, its own default
cursor class) and ``cursor(factory=...)`` a Cursor subclass (its own methods, fetching through
``self``) keep working on guarded connections.

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
from typing import Any

import guarded_sqlite
from guarded_sqlite import GuardedConnection, GuardedCursor
from tests.helpers import (
    ITEM_COUNT,
    CountingConnection,
    fill_items,
)


class TaggedCursor(sqlite3.Cursor):
    """A Cursor subclass with its own methods."""

    def tag(self) -> str:
        return f"tagged:{self.arraysize}"

    def first_row(self) -> Any:
        return self.fetchone()


class CursorFactoryConnection(sqlite3.Connection):
    def cursor(self, factory: Any = TaggedCursor) -> Any:  # type: ignore[override]
        return super().cursor(factory)


def test_connection_factory_subclass(raw_items: sqlite3.Connection, mode: str) -> None:
    """``factory=`` a Connection subclass: isinstance holds, its methods work, queries are still guarded."""
    con = guarded_sqlite.connect(":memory:", factory=CountingConnection, guard=mode)
    fill_items(con)
    assert isinstance(con, CountingConnection) and isinstance(con, GuardedConnection)
    assert isinstance(guarded_sqlite.unwrap(con), CountingConnection)  # a subclass of it, not a proxy
    assert con.count("items") == ITEM_COUNT
    cur = con.execute("SELECT * FROM items ORDER BY id")
    assert isinstance(cur, GuardedCursor) and cur.guard_report is not None
    assert cur.fetchall() == raw_items.execute("SELECT * FROM items ORDER BY id").fetchall()


def test_connection_subclass_default_cursor_class(raw_items: sqlite3.Connection, mode: str) -> None:
    """A Connection subclass whose ``cursor()`` picks its own Cursor class still yields guarded cursors of it."""
    con = guarded_sqlite.connect(":memory:", factory=CursorFactoryConnection, guard=mode)
    fill_items(con)
    for cur in (con.cursor(), con.execute("SELECT 1")):
        assert isinstance(cur, TaggedCursor) and isinstance(cur, GuardedCursor)
        assert cur.connection is con
    assert (
        con.cursor().execute("SELECT id FROM items").fetchall() == raw_items.execute("SELECT id FROM items").fetchall()
    )


def test_cursor_factory_subclass(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """``cursor(factory=Sub)``: isinstance holds, the subclass's own methods work, rows match sqlite3."""
    cur = guarded_items.cursor(factory=TaggedCursor)
    assert isinstance(cur, TaggedCursor) and isinstance(guarded_sqlite.unwrap(cur), TaggedCursor)
    cur.arraysize = 4
    assert cur.tag() == "tagged:4"
    sql = "SELECT id, name FROM items ORDER BY id"
    assert cur.execute(sql).fetchall() == raw_items.cursor(TaggedCursor).execute(sql).fetchall()
    assert cur.guard_report is not None and cur.guard_report.sql == sql


def test_cursor_subclass_method_that_fetches_matches_sqlite3(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection
) -> None:
    """A Cursor subclass's own method that fetches through ``self`` sees the rows, as with sqlite3."""
    sql = "SELECT id FROM items ORDER BY id"
    raw_cur = raw_items.cursor(TaggedCursor).execute(sql)
    cur = observe_items.cursor(TaggedCursor).execute(sql)
    raw_first = raw_cur.first_row()
    assert raw_first == (1,)
    assert cur.first_row() == raw_first
    assert cur.fetchall() == raw_cur.fetchall()
