"""The aggregate fan-out rule (``guarded_sqlite.aggregates``, ``guarded_sqlite.fanout``)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import guarded_sqlite


def test_an_order_sensitive_aggregate_not_at_risk_does_not_confirm_a_fan_out() -> None:
    """The corrected query feeds a GROUP_CONCAT (or json_group_array) that is not at risk its rows in
    another order; that alone once confirmed the fan-out of SUM(r.x), whose values were all NULL."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(
        "CREATE TABLE root (id INTEGER PRIMARY KEY, g TEXT, x);"
        "CREATE TABLE kid1 (id INTEGER PRIMARY KEY, fk, g TEXT, x);"
        "INSERT INTO root VALUES (2, 'a', NULL), (3, 'a', NULL), (4, 'a', NULL);"
        "INSERT INTO kid1 VALUES (101, 2, 'a', 1), (102, 4, 'a', 2), (103, 3, 'b', 3);"
    )
    for item in ("GROUP_CONCAT(c1.g)", "json_group_array(c1.x)", "length(group_concat(c1.g)) || group_concat(c1.x)"):
        sql = f"SELECT {item}, SUM(r.x) FROM kid1 AS c1 JOIN root AS r ON c1.fk = r.id"
        for guard in ("patch", "text_to_sql"):
            cursor = guarded_sqlite.wrap(raw, guard=guard).execute(sql)
            assert cursor.fetchall() == raw.execute(sql).fetchall()
            assert (cursor.guard_report.trigger, cursor.guard_report.action) == (None, "none"), (guard, item)
    raw.close()


NULLABLE_KEY_SCHEMA = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
    "CREATE TABLE orders (id INTEGER UNIQUE, customer_id INTEGER, total DOUBLE PRECISION)",
    "CREATE TABLE visits (id INTEGER PRIMARY KEY, customer_id INTEGER)",
    "INSERT INTO customers VALUES (1, 'a')",
    "INSERT INTO orders VALUES (NULL, 1, 100), (NULL, 1, 50), (3, 1, 7)",
    "INSERT INTO visits VALUES (1, 1), (2, 1)",
]
NULLABLE_KEY_SQL = (
    "SELECT c.id, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN visits v ON v.customer_id = c.id GROUP BY c.id"
)


def check_nullable_key(raw: Any, dialect: str, row_id: str) -> None:
    """Two orders whose nullable UNIQUE id is NULL are two orders: numbered by that id they shared one
    number and text_to_sql served 107 (one of them dropped) instead of 157."""
    con = guarded_sqlite.wrap(raw, guard="text_to_sql", dialect=dialect)
    cursor = con.cursor() if dialect == "postgres" else con
    cursor.execute(NULLABLE_KEY_SQL)
    assert [tuple(row) for row in cursor.fetchall()] == [(1, 157.0)]
    assert cursor.guard_report.action == "aggregate_defanned"
    assert f'"o"."{row_id}"' in cursor.guard_report.final_sql


def test_duckdb_a_nullable_unique_key_does_not_number_rows() -> None:
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    for statement in NULLABLE_KEY_SCHEMA:
        raw.execute(statement)
    check_nullable_key(raw, "duckdb", "rowid")
    raw.close()


def test_postgres_a_nullable_unique_key_does_not_number_rows(pg_dsn: str) -> None:
    import uuid

    import psycopg

    schema = f"agg_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={schema}") as raw:
            for statement in NULLABLE_KEY_SCHEMA:
                raw.execute(statement)
            check_nullable_key(raw, "postgres", "ctid")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
