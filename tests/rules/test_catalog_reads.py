"""The SQLite catalog reads of a statement new to the connection (issue 44): tables the connection has
read are not read again, only looked up (``SqliteSchemaView._current``), and DDL by another connection
in between is still seen."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import guarded_sqlite

SCHEMA = (
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL);"
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
    "INSERT INTO customers VALUES (1, 'a'), (2, 'b');"
    "INSERT INTO orders VALUES (1, 1, 10), (2, 1, 5), (3, 2, 7);"
    "INSERT INTO items (order_id, qty) VALUES (1, 1), (2, 1), (3, 1);"
)
AT_RISK = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN items i ON i.order_id = o.id WHERE c.id > {} GROUP BY c.id"
)


def _traced(con: sqlite3.Connection, sql: str) -> list[str]:
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    try:
        con.execute(sql).fetchall()
    finally:
        con.set_trace_callback(None)
    return seen


def _declaration_reads(statements: list[str]) -> list[str]:
    return [s for s in statements if "table_xinfo" in s or "tbl_name = " in s]


def test_a_new_statement_over_tables_read_before_only_looks_them_up() -> None:
    con = guarded_sqlite.connect(":memory:")
    con.executescript(SCHEMA)
    first = _traced(con, AT_RISK.format(0))
    read = {s.split('"')[3] for s in _declaration_reads(first) if "table_xinfo" in s}
    assert read == {"customers", "orders", "items"}
    second = _traced(con, AT_RISK.format(-1).replace("c.name", "c.name AS who"))  # a new shape too
    assert _declaration_reads(second) == []
    assert len(second) < len(first) - 6


def test_ddl_by_another_connection_between_two_new_statements_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    setup = sqlite3.connect(path)
    setup.executescript(SCHEMA)
    setup.close()
    con = guarded_sqlite.connect(path)
    report = con.execute(AT_RISK.format(0)).guard_report
    assert report is not None and report.decisions[0].reason.startswith("checked")  # items may repeat orders
    other = sqlite3.connect(path)
    # items made one row per order, declared so: a join on it can no longer repeat an order's row.
    other.executescript(
        "DROP TABLE items; CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER UNIQUE, qty INTEGER);"
        "INSERT INTO items (order_id, qty) VALUES (1, 1), (2, 1), (3, 1);"
    )
    other.close()
    statement = AT_RISK.format(-5)
    after = con.execute(statement).guard_report
    fresh = guarded_sqlite.connect(path)
    expected = fresh.execute(statement).guard_report
    assert after is not None and expected is not None
    assert after.decisions == expected.decisions and after.aggregates == expected.aggregates
    assert after.decisions != report.decisions  # not at risk now: no check ran
    con.close()
    fresh.close()
