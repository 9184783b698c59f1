"""Drop-in parity, user-defined callables: functions, aggregates, collations and window functions
registered on a guarded connection, errors raised inside them, and a SELECT whose user function
writes into the table it reads.

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
from guarded_sqlite import GuardedConnection, GuardPolicy
from tests.helpers import (
    outcome,
)


class Spread:
    """An aggregate: max - min."""

    def __init__(self) -> None:
        self.values: list[int] = []

    def step(self, value: int) -> None:
        self.values.append(value)

    def finalize(self) -> int:
        return max(self.values) - min(self.values)


class RunningSum:
    """A window function: sum over the frame."""

    def __init__(self) -> None:
        self.total = 0

    def step(self, value: int) -> None:
        self.total += value

    def inverse(self, value: int) -> None:
        self.total -= value

    def value(self) -> int:
        return self.total

    def finalize(self) -> int:
        return self.total


def register_user_functions(con: Any) -> None:
    con.create_function("double", 1, lambda x: None if x is None else x * 2, deterministic=True)
    con.create_function("shout", -1, lambda *args: "!".join(map(str, args)))
    con.create_aggregate("spread", 1, Spread)
    con.create_collation("reverse", lambda a, b: (a < b) - (a > b))
    if hasattr(con, "create_window_function"):
        con.create_window_function("running", 1, RunningSum)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, double(qty), shout(id, name, price) FROM items ORDER BY id",
        "SELECT qty, spread(id) FROM items GROUP BY qty ORDER BY qty",
        "SELECT name FROM items ORDER BY name COLLATE reverse",
        "SELECT id, running(id) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM items",
    ],
    ids=["scalar", "aggregate", "collation", "window"],
)
def test_user_functions(raw_items: sqlite3.Connection, guarded_items: GuardedConnection, sql: str) -> None:
    """create_function/create_aggregate/create_collation/create_window_function work through the proxy."""
    register_user_functions(raw_items)
    register_user_functions(guarded_items)
    if "OVER" in sql and not hasattr(sqlite3.Connection, "create_window_function"):
        pytest.skip("window functions need Python 3.11")
    cur = guarded_items.execute(sql)
    assert cur.fetchall() == raw_items.execute(sql).fetchall()
    assert cur.guard_report is not None and cur.guard_report.trigger is None


def test_user_function_error_matches_sqlite3(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """A user function that raises gives sqlite3's OperationalError, and the report records it."""
    for con in (raw_items, guarded_items):
        con.create_function("boom", 1, lambda x: 1 / 0)
    sql = "SELECT boom(id) FROM items"
    cur = guarded_items.cursor()
    expected = outcome(lambda: raw_items.cursor().execute(sql).fetchall())
    assert outcome(lambda: cur.execute(sql).fetchall()) == expected
    assert expected[0] == "raised"
    assert cur.guard_report is not None and cur.guard_report.trigger == "exec_error"
    assert cur.guard_report.error == f"{expected[1].__name__}: {expected[2]}"


def self_feeding(con: Any, limit: int) -> list[int]:
    """Table t plus f(x): each call inserts a new row into t (up to ``limit`` calls) and returns x."""
    calls = [0]
    con.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(3)])

    def feed(x: int) -> int:
        calls[0] += 1
        if calls[0] <= limit:
            con.execute("INSERT INTO t (x) VALUES (NULL)")
        return x

    con.create_function("feed", 1, feed)
    return calls


@pytest.mark.parametrize(
    "policy",
    [
        GuardPolicy(mode="patch", row_cap=5),
        GuardPolicy(mode="observe", row_cap=5),
        GuardPolicy(mode="patch", row_cap=1000),
        GuardPolicy(mode="observe", row_cap=1000),
    ],
    ids=["patch-cap5", "observe-cap5", "patch-cap1000", "observe-cap1000"],
)
@pytest.mark.parametrize("fetch", ["iterate", "fetchall"])
def test_select_whose_function_inserts_into_the_table_it_reads(policy: GuardPolicy, fetch: str) -> None:
    """The scan sees rows its own function inserted. With a small row_cap the guard must stop buffering
    and stream, terminate, and return what sqlite3 returns (a counter bounds both sides)."""
    limit = 50
    results = []
    for con in (sqlite3.connect(":memory:"), guarded_sqlite.connect(":memory:", guard=policy)):
        calls = self_feeding(con, limit)
        cur = con.execute("SELECT feed(x) FROM t")
        rows = list(cur) if fetch == "iterate" else cur.fetchall()
        results.append((rows, calls[0], con.execute("SELECT count(*) FROM t").fetchone()))
    assert results[1] == results[0]
    assert len(results[0][0]) == 3 + limit
