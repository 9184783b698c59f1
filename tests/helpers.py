"""Constants and plain helpers shared by several test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection

MODES = ("observe", "patch")
"""Modes that must give sqlite3's results on queries that are not flagged."""

NO_PARAMS: Any = object()
"""Sentinel: call execute() without a parameters argument."""

# --- the fan-out database: a join that repeats every customer once per order ------------------------

FANOUT_SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER);
"""


def fill_fanout(con: sqlite3.Connection, customers: int = 4, orders_per_customer: int = 6) -> None:
    """Customers with many orders each: joining them repeats every customer per order."""
    con.executescript(FANOUT_SCHEMA)
    con.executemany(
        "INSERT INTO customers VALUES (?, ?, ?)", [(i, f"name{i}", f"city{i % 2}") for i in range(customers)]
    )
    con.executemany(
        "INSERT INTO orders VALUES (?, ?, ?)",
        [(c * orders_per_customer + k, c, 10 * k) for c in range(customers) for k in range(orders_per_customer)],
    )
    con.commit()


EXPLODING_SQL = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
"""24 rows, 4 distinct (dup_ratio 5/6): flagged at the default tau_inject and patched by P1."""

# --- the items table: healthy data of every storage class ------------------------------------------

ITEMS_SCHEMA = """
CREATE TABLE items (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    qty INTEGER,
    price REAL,
    note TEXT,
    payload BLOB
);
"""
ITEM_COUNT = 30


def fill_items(con: sqlite3.Connection) -> None:
    """30 distinct rows with every storage class, some NULLs, nothing a probe would flag."""
    con.executescript(ITEMS_SCHEMA)
    con.executemany(
        "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)",
        [
            (i, f"name{i}", i % 7, i * 1.25, None if i % 3 else f"note {i}", bytes([i, i + 1]))
            for i in range(1, ITEM_COUNT + 1)
        ],
    )
    con.commit()


# Queries that are healthy (or empty) so patch mode must leave them exactly as sqlite3 returns them.
HEALTHY_QUERIES = [
    pytest.param("SELECT * FROM items ORDER BY id", NO_PARAMS, id="select-star"),
    pytest.param("SELECT id, name FROM items WHERE qty > ? ORDER BY name", (2,), id="qmark-params"),
    pytest.param("SELECT name, price FROM items WHERE id BETWEEN :lo AND :hi", {"lo": 3, "hi": 17}, id="named-params"),
    pytest.param("SELECT count(*), sum(qty), avg(price) FROM items", NO_PARAMS, id="aggregate"),
    pytest.param("SELECT id, note FROM items ORDER BY id DESC LIMIT 7", NO_PARAMS, id="limit"),
    pytest.param("SELECT id FROM items WHERE id < 0", NO_PARAMS, id="empty"),
    pytest.param("SELECT payload, id * 2 AS twice FROM items", (), id="blob-empty-tuple-params"),
]


def run(cursor: Any, sql: str, params: Any = NO_PARAMS) -> Any:
    return cursor.execute(sql) if params is NO_PARAMS else cursor.execute(sql, params)


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """What calling ``fn`` did: ("ok", value) or ("raised", exception class, message)."""
    try:
        return ("ok", fn())
    except Exception as error:
        return ("raised", type(error), str(error))


def guarded_connect(guard: Any = "observe", **kwargs: Any) -> GuardedConnection:
    """An in-memory guarded connection holding the items table."""
    con = guarded_sqlite.connect(":memory:", guard=guard, **kwargs)
    fill_items(con)
    return con


def dict_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    """A row_factory giving dicts keyed by column name."""
    return {column[0]: value for column, value in zip(cursor.description, row)}


def list_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> list[Any]:
    """A row_factory giving lists (unhashable rows)."""
    return list(row)


class CountingConnection(sqlite3.Connection):
    """A Connection subclass with its own helper method."""

    def count(self, table: str) -> int:
        return self.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[no-any-return]


# --- rescue candidates over the fan-out database (conftest.fill_fanout) ----------------------------

GOOD = "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders) ORDER BY name"
EMPTY = "SELECT name FROM customers WHERE id < 0"
BROKEN = "SELECT name FROM no_such_table"
WRITE = "DELETE FROM orders"
CANDIDATES = [EXPLODING_SQL, GOOD, EMPTY, BROKEN, WRITE]
DISTINCT_NAMES = [(f"name{i}",) for i in range(4)]
