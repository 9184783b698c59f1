"""Drop-in parity, closed cursors and connections: fetching from a closed cursor, after the connection
was closed (here or through another handle), and any other use of closed objects raise as sqlite3 does.

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
from collections.abc import Callable
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection
from tests.helpers import (
    fill_items,
    outcome,
)

FETCHES: dict[str, Callable[[Any], Any]] = {
    "fetchone": lambda cur: cur.fetchone(),
    "fetchmany": lambda cur: cur.fetchmany(2),
    "fetchall": lambda cur: cur.fetchall(),
    "next": lambda cur: next(cur),
    "iterate": lambda cur: list(cur),
}


@pytest.mark.parametrize("fetch", FETCHES)
@pytest.mark.parametrize("partly_read", [False, True], ids=["unread", "partly-read"])
def test_fetch_from_closed_cursor_raises_like_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, fetch: str, partly_read: bool
) -> None:
    """Fetching from a closed cursor raises sqlite3's ProgrammingError, even with rows still buffered."""
    results = []
    for con in (raw_items, guarded_items):
        cur = con.execute("SELECT id FROM items ORDER BY id")
        if partly_read:
            cur.fetchone()
        cur.close()
        results.append(outcome(lambda: FETCHES[fetch](cur)))
    assert results[1] == results[0]
    assert results[0][:2] == ("raised", sqlite3.ProgrammingError)


@pytest.mark.parametrize("fetch", FETCHES)
@pytest.mark.parametrize("partly_read", [False, True], ids=["unread", "partly-read"])
def test_fetch_after_connection_closed_raises_like_sqlite3(fetch: str, partly_read: bool, mode: str) -> None:
    """Fetching after the connection was closed raises sqlite3's ProgrammingError."""
    results = []
    for con in (sqlite3.connect(":memory:"), guarded_sqlite.connect(":memory:", guard=mode)):
        fill_items(con)
        cur = con.execute("SELECT id FROM items ORDER BY id")
        if partly_read:
            cur.fetchone()
        con.close()
        results.append(outcome(lambda: FETCHES[fetch](cur)))
    assert results[1] == results[0]
    assert results[0][:2] == ("raised", sqlite3.ProgrammingError)


@pytest.mark.parametrize("closer", ["raw-connection", "other-proxy"])
def test_fetch_after_connection_closed_elsewhere_raises_like_sqlite3(closer: str) -> None:
    """The real connection may be closed by its owner (after ``wrap()``) or through another proxy
    (``wrap(con, guard=...)``); fetching afterwards must still raise as sqlite3 does."""
    raw = sqlite3.connect(":memory:")
    fill_items(raw)
    raw_cur = raw.execute("SELECT id FROM items")
    con = guarded_sqlite.wrap(raw, guard="patch")
    cur = guarded_sqlite.wrap(con, guard="observe").execute("SELECT id FROM items")
    if closer == "raw-connection":
        raw.close()
    else:
        con.close()
    expected = outcome(raw_cur.fetchall)
    assert expected[:2] == ("raised", sqlite3.ProgrammingError)
    assert outcome(cur.fetchall) == expected


def test_use_of_closed_cursor_and_connection_raises_like_sqlite3(mode: str) -> None:
    """execute on a closed cursor or connection, and cursor() on a closed connection, raise the same."""
    results = []
    for con in (sqlite3.connect(":memory:"), guarded_sqlite.connect(":memory:", guard=mode)):
        fill_items(con)
        cur = con.cursor()
        cur.close()
        seen = [outcome(lambda: cur.execute("SELECT 1")), outcome(lambda: cur.executemany("SELECT 1", []))]
        other = con.cursor()
        con.close()
        seen += [
            outcome(lambda: other.execute("SELECT 1")),
            outcome(lambda: con.execute("SELECT 1")),
            outcome(lambda: con.cursor()),
            outcome(con.commit),
            outcome(con.close),  # closing twice is fine
        ]
        results.append(seen)
    assert results[1] == results[0]
