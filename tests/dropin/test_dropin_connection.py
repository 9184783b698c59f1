"""Drop-in parity, the connection: the execute/executemany/executescript shortcuts, isinstance checks,
the context manager, calling the connection, attributes, trace callbacks, ``cursor.connection`` and
``connect()``'s sqlite3 arguments.

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

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection, GuardedCursor
from tests.helpers import (
    HEALTHY_QUERIES,
    outcome,
    run,
)


def test_proxies_pass_isinstance_checks(guarded_items: GuardedConnection) -> None:
    """Code that type-checks for sqlite3 objects accepts the proxies."""
    assert isinstance(guarded_items, sqlite3.Connection)
    assert isinstance(guarded_items, GuardedConnection)
    cur = guarded_items.cursor()
    assert isinstance(cur, sqlite3.Cursor)
    assert isinstance(cur, GuardedCursor)
    assert isinstance(guarded_sqlite.unwrap(cur), sqlite3.Cursor)  # connect()'s cursors are sqlite3.Cursor objects


@pytest.mark.parametrize(("sql", "params"), HEALTHY_QUERIES)
def test_connection_execute_returns_guarded_cursor_with_sqlite3_rows(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, mode: str, sql: str, params: Any
) -> None:
    """``con.execute`` gives a guarded cursor that carries a report and serves sqlite3's rows."""
    cur = run(guarded_items, sql, params)
    assert isinstance(cur, GuardedCursor)
    report = cur.guard_report
    assert report is not None and report.sql == sql and report.mode == mode
    assert report.action == "none" and report.final_sql == sql
    assert cur.description == run(raw_items, sql, params).description
    assert cur.fetchall() == run(raw_items, sql, params).fetchall()


def test_cursor_execute_returns_the_cursor_itself(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection
) -> None:
    """``cur.execute(...)`` returns ``cur`` (chaining), and each ``con.execute`` makes a new cursor."""
    raw_cur, cur = raw_items.cursor(), guarded_items.cursor()
    assert raw_cur.execute("SELECT 1") is raw_cur
    assert cur.execute("SELECT 1") is cur
    assert guarded_items.execute("SELECT 1") is not guarded_items.execute("SELECT 1")


def test_executemany_shortcut(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """``con.executemany`` inserts like sqlite3, returns a guarded cursor, and reports it unprobed."""
    rows = [(100 + i, f"extra{i}") for i in range(5)]
    sql = "INSERT INTO items (id, name) VALUES (?, ?)"
    raw_cur = raw_items.executemany(sql, rows)
    cur = guarded_items.executemany(sql, iter(rows))  # any iterable works, as in sqlite3
    assert isinstance(cur, GuardedCursor)
    assert cur.rowcount == raw_cur.rowcount == 5
    assert cur.lastrowid == raw_cur.lastrowid
    assert cur.guard_report is not None
    assert cur.guard_report.probed is False and "executemany" in (cur.guard_report.note or "")
    check = "SELECT * FROM items ORDER BY id"
    assert guarded_items.execute(check).fetchall() == raw_items.execute(check).fetchall()


def test_executescript_shortcut(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """``con.executescript`` runs every statement like sqlite3 and returns a guarded cursor."""
    script = """
        CREATE TABLE extra (k TEXT PRIMARY KEY, v INTEGER);
        INSERT INTO extra VALUES ('a', 1), ('b', 2);
        UPDATE items SET qty = qty + 100 WHERE id <= 3;
    """
    raw_cur = raw_items.executescript(script)
    cur = guarded_items.executescript(script)
    assert isinstance(cur, GuardedCursor)
    assert cur.guard_report is not None and cur.guard_report.probed is False
    assert cur.description == raw_cur.description
    assert cur.fetchall() == raw_cur.fetchall()
    for check in ("SELECT * FROM extra ORDER BY k", "SELECT id, qty FROM items ORDER BY id"):
        assert guarded_items.execute(check).fetchall() == raw_items.execute(check).fetchall()


def test_cursor_connection_is_the_guarded_connection(guarded_items: GuardedConnection) -> None:
    """Every way of getting a cursor gives one whose ``.connection`` is the guarded connection."""

    class SubCursor(sqlite3.Cursor):
        pass

    cursors = [
        guarded_items.cursor(),
        guarded_items.cursor(SubCursor),
        guarded_items.cursor(factory=SubCursor),
        guarded_items.execute("SELECT 1"),
        guarded_items.executemany("INSERT INTO items (name) VALUES (?)", [("x",)]),
        guarded_items.executescript("SELECT 1;"),
    ]
    for cur in cursors:
        assert cur.connection is guarded_items


def test_with_connection_yields_it_and_commits(tmp_path: Any, mode: str) -> None:
    """``with con as c``: ``c is con``; a clean exit commits, visible to another connection."""
    outcomes = {}
    for side, opener in {"raw": sqlite3.connect, "guarded": lambda p: guarded_sqlite.connect(p, guard=mode)}.items():
        path = tmp_path / f"{side}.db"
        con = opener(str(path))
        con.execute("CREATE TABLE t (x INTEGER)")
        con.commit()
        with con as entered:
            assert entered is con
            entered.execute("INSERT INTO t VALUES (1)")
            assert con.in_transaction
        assert not con.in_transaction
        other = sqlite3.connect(str(path))
        outcomes[side] = other.execute("SELECT x FROM t").fetchall()
        other.close()
        con.close()
    assert outcomes["guarded"] == outcomes["raw"] == [(1,)]


def test_with_connection_rolls_back_on_error(tmp_path: Any, mode: str) -> None:
    """An exception inside ``with con`` rolls back and propagates, exactly as with sqlite3."""
    outcomes = {}
    for side, opener in {"raw": sqlite3.connect, "guarded": lambda p: guarded_sqlite.connect(p, guard=mode)}.items():
        con = opener(str(tmp_path / f"{side}.db"))
        con.execute("CREATE TABLE t (x INTEGER UNIQUE)")
        con.execute("INSERT INTO t VALUES (1)")
        con.commit()
        with pytest.raises(sqlite3.IntegrityError) as info:
            with con:
                con.execute("INSERT INTO t VALUES (2)")
                con.execute("INSERT INTO t VALUES (1)")  # violates UNIQUE
        outcomes[side] = (str(info.value), con.in_transaction, con.execute("SELECT x FROM t ORDER BY x").fetchall())
        con.close()
    assert outcomes["guarded"] == outcomes["raw"]
    assert outcomes["raw"][2] == [(1,)]


def test_exit_returns_what_sqlite3_returns(raw_items: sqlite3.Connection, observe_items: GuardedConnection) -> None:
    """``__exit__`` does not swallow exceptions: it returns sqlite3's (falsy) value."""
    error = ValueError("x")
    raw_items.__enter__()
    observe_items.__enter__()
    assert observe_items.__exit__(ValueError, error, None) == raw_items.__exit__(ValueError, error, None)
    assert not observe_items.__exit__(None, None, None)


@pytest.mark.parametrize(
    "sql",
    ["SELECT * FROM items", "SELEC 1", "SELECT * FROM nope", "SELECT 1; SELECT 2", 42],
    ids=["ok", "syntax", "no-table", "two-statements", "not-str"],
)
def test_calling_the_connection_behaves_like_sqlite3(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection, sql: Any
) -> None:
    """sqlite3 connections are callable (they compile a statement); the proxy forwards that call."""
    raw_out = outcome(lambda: type(raw_items(sql)))
    guarded_out = outcome(lambda: type(observe_items(sql)))
    assert guarded_out == raw_out


def test_connection_attributes_pass_through(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """Reading and setting connection attributes reaches the real connection."""
    for con in (raw_items, guarded_items):
        con.execute("UPDATE items SET qty = 0 WHERE id = 1")
    assert guarded_items.in_transaction is raw_items.in_transaction is True
    assert guarded_items.total_changes == raw_items.total_changes
    assert guarded_items.isolation_level == raw_items.isolation_level == ""
    guarded_items.rollback()
    guarded_items.isolation_level = None
    assert guarded_sqlite.unwrap(guarded_items).isolation_level is None
    guarded_items.execute("UPDATE items SET qty = 0 WHERE id = 1")
    assert not guarded_items.in_transaction  # autocommit now, like sqlite3 with isolation_level=None
    raw_items.commit()
    assert list(guarded_items.iterdump()) == list(raw_items.iterdump())


def test_trace_callback_sees_the_same_statements(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection
) -> None:
    """On healthy queries the guard runs nothing extra: a trace callback sees what sqlite3 runs."""
    traces: dict[str, list[str]] = {"raw": [], "guarded": []}
    raw_items.set_trace_callback(traces["raw"].append)
    guarded_items.set_trace_callback(traces["guarded"].append)
    for con in (raw_items, guarded_items):
        con.execute("SELECT name FROM items WHERE id = ?", (3,)).fetchall()
        con.execute("UPDATE items SET qty = ? WHERE id = ?", (9, 3))
        con.executemany("INSERT INTO items (name) VALUES (?)", [("p",), ("q",)])
        con.commit()
        cur = con.cursor()
        cur.execute("SELECT count(*) FROM items")
        cur.fetchone()
    assert traces["guarded"] == traces["raw"]
    assert len(traces["raw"]) >= 6


def test_connect_accepts_sqlite3_positional_and_keyword_arguments(tmp_path: Any) -> None:
    """``connect(database, timeout, detect_types, isolation_level, ...)`` and ``uri=True`` work."""
    path = tmp_path / "args.db"
    con = guarded_sqlite.connect(str(path), 2.5, sqlite3.PARSE_DECLTYPES, None, guard="observe")
    assert con.isolation_level is None
    con.execute("CREATE TABLE t (x)")
    assert not con.in_transaction
    con.close()
    ro = guarded_sqlite.connect(f"file:{path}?mode=ro", uri=True, cached_statements=10)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro.execute("INSERT INTO t VALUES (1)")
    ro.close()
