"""Shared fixtures: in-memory databases with a join that fans out."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator

import pytest

import guarded_sqlite

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


@pytest.fixture
def guarded() -> Iterator[guarded_sqlite.GuardedConnection]:
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    yield con
    con.close()


@pytest.fixture
def raw() -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(":memory:")
    fill_fanout(con)
    yield con
    con.close()


REQUIRE_POSTGRES = os.environ.get("GUARDED_SQLITE_REQUIRE_POSTGRES") == "1"


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A libpq DSN of one throwaway PostgreSQL server shared by the whole test session.

    Skips with the reason when psycopg or the server binaries are missing, unless
    GUARDED_SQLITE_REQUIRE_POSTGRES=1 (CI), where that is a failure.
    """
    from .pg_server import postgres_server, server_binaries

    missing = None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing = "psycopg is not installed"
    if missing is None and server_binaries() is None:
        missing = "PostgreSQL server binaries (pg_ctl, initdb) not found"
    if missing is not None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"{missing}, and GUARDED_SQLITE_REQUIRE_POSTGRES=1 requires PostgreSQL")
        pytest.skip(f"{missing}; set GUARDED_SQLITE_REQUIRE_POSTGRES=1 to make this a failure")
    with postgres_server() as dsn:
        yield dsn
