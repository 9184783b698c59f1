"""P1 under the key-based presets acts only where the data shows join copies (issue 23, items 1-2):
"patch" removes exactly the copies, "text_to_sql" serves the distinct values once copies are shown,
and whatever cannot be established leaves the rows as SQLite returned them. Repros c16 and c18
(``../shared/repros/correctness/``) are the tests named after them."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite

SHOP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id));
INSERT INTO customers VALUES (1, 'Ana Lima', 'Lisbon'), (2, 'Ben', 'Lagos'), (3, 'Ana Lima', 'Porto');
"""
# Ana (1) has 5 orders, Ben 5, the second Ana Lima (3) 5: 15 rows, 2 distinct names, 3 customers.
ORDERS = [(customer,) for customer in (1, 2, 3) for _ in range(5)]
NAMES = "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id"

# Every test runs through connect() and through wrap() (tests/connect_or_wrap.py).
pytestmark = pytest.mark.usefixtures("connect_or_wrap")


def shop(connect: Any = None, **kwargs: Any) -> Any:
    """The shop database; guarded unless ``connect`` says otherwise (``guarded_sqlite.connect`` is looked
    up at call time, so the ``[wrap]`` runs of this module run these tests against ``wrap()``'s proxies too)."""
    con = (connect or guarded_sqlite.connect)(":memory:", **kwargs)
    con.executescript(SHOP)
    con.executemany("INSERT INTO orders(customer_id) VALUES (?)", ORDERS)
    return con


def first_rows_per_customer(sql: str) -> list[Any]:
    """sqlite3's rows of ``sql`` (which projects customers' columns), keeping the first row of each
    customer in sqlite3's order: an oracle built from the customers' rowids."""
    raw = shop(sqlite3.connect)
    check = sql.replace(" FROM", ", c.rowid FROM", 1)
    seen: set[int] = set()
    kept = []
    for *values, rowid in raw.execute(check):
        if rowid not in seen:
            seen.add(rowid)
            kept.append(tuple(values))
    return kept


def served(con: Any, sql: str, parameters: Any = ()) -> tuple[list[Any], Any]:
    cur = con.execute(sql, parameters)
    return cur.fetchall(), cur.guard_report


def test_patch_keeps_two_customers_of_the_same_name() -> None:
    """Two customers named alike stay two rows; only the rows their orders repeat are removed."""
    rows, report = served(shop(), NAMES)
    assert rows == first_rows_per_customer(NAMES)
    assert Counter(rows) == Counter({("Ana Lima",): 2, ("Ben",): 1})
    assert report.action == "join_copies_removed" and report.final_rows == 3
    p1 = report.decisions[0]
    assert p1.applied and p1.copies == 12
    # final_sql is the check that told the two customers apart: it runs, and holds their row identities
    assert '"c"."id" AS "__gs_id0"' in report.final_sql
    check = sqlite3.connect(":memory:")
    check.executescript(SHOP)
    check.executemany("INSERT INTO orders(customer_id) VALUES (?)", ORDERS)
    assert {row[1] for row in check.execute(report.final_sql)} == {1, 2, 3}


def test_text_to_sql_serves_the_distinct_values_once_copies_are_shown() -> None:
    rows, report = served(shop(guard="text_to_sql"), NAMES)
    assert rows == [("Ana Lima",), ("Ben",)]
    assert report.action == "distinct_injected" and report.final_sql.startswith("SELECT DISTINCT")
    assert report.decisions[0].copies == 12


def test_copies_that_are_all_the_duplicates_are_served_as_distinct() -> None:
    """Where every repeated row is a join copy, removing the copies is exactly SELECT DISTINCT."""
    rows, report = served(shop(), "SELECT c.city FROM customers c JOIN orders o ON o.customer_id = c.id")
    assert rows == [("Lisbon",), ("Lagos",), ("Porto",)]
    assert report.action == "distinct_injected" and report.final_sql.startswith("SELECT DISTINCT")


def test_c18_no_join_copies_on_the_data_leaves_the_rows() -> None:
    """c18: the keys allow a fan-out, the data has none (one order per customer)."""
    con = guarded_sqlite.connect(":memory:")
    con.executescript(SHOP)
    con.executemany("INSERT INTO customers VALUES (?, 'Ana Lima', 'Lisbon')", [(i,) for i in range(4, 40)])
    con.executemany("INSERT INTO orders(customer_id) VALUES (?)", [(i,) for i in range(1, 40)])
    rows, report = served(con, NAMES)
    assert len(rows) == 39 and report.trigger == "cartesian_explosion" and report.action == "none"
    assert report.provenance == "amplified"
    p1 = report.decisions[0]
    assert not p1.applied and p1.copies == 0 and "no join copies on the data" in p1.reason
    assert "no join repeats a row" in report.feedback()


def test_r01_a_user_function_in_the_statement_is_never_run_again(tmp_path: Path) -> None:
    """r01: the check would call the function once more per row; the statement is left alone instead."""
    calls: list[str] = []
    con = shop()
    con.create_function("tag", 1, lambda x: calls.append(x) or x)
    rows, report = served(con, NAMES.replace("c.name", "tag(c.name)"))
    assert len(rows) == 15 and len(calls) == 15
    assert report.action == "none" and report.provenance == "unknown"
    assert "tag()" in report.decisions[0].reason


def test_a_user_function_replacing_a_built_in_is_recognised() -> None:
    """``lower`` parses as a built-in; SQLite's function list says the application replaced it."""
    calls: list[str] = []
    con = shop()
    con.create_function("lower", 1, lambda x: calls.append(x) or x)
    rows, report = served(con, NAMES.replace("c.name", "lower(c.name)"))
    assert len(rows) == 15 and len(calls) == 15 and report.action == "none"
    assert "lower()" in report.decisions[0].reason


def test_a_function_registered_after_the_first_check_is_known() -> None:
    """SQLite's function list is read once per connection; later registrations through the guarded
    connection are remembered, so a statement calling one is not run again either."""
    con = shop()
    assert served(con, NAMES)[1].action == "join_copies_removed"  # the list is read here
    calls: list[str] = []
    con.create_function("later", 1, lambda x: calls.append(x) or x)
    rows, report = served(con, NAMES.replace("c.name", "later(c.name)"))
    assert len(rows) == 15 and len(calls) == 15 and report.action == "none"


def test_a_non_deterministic_statement_is_never_run_again() -> None:
    rows, report = served(shop(), NAMES + " WHERE random() IS NOT NULL")
    assert len(rows) == 15 and report.action == "none" and report.provenance == "unknown"


@pytest.mark.parametrize("factory", [sqlite3.Row, None])
def test_row_factories_get_their_own_rows_back(factory: Any) -> None:
    con = shop()
    con.row_factory = factory
    rows, report = served(con, NAMES)
    assert report.action == "join_copies_removed"
    assert [tuple(row) for row in rows] == first_rows_per_customer(NAMES)
    if factory is sqlite3.Row:
        assert all(type(row) is sqlite3.Row for row in rows) and rows[0]["name"] == "Ana Lima"


def test_a_left_join_keeps_the_rows_it_null_extends() -> None:
    """Rows whose projected table is NULL-extended carry no row identity: never taken for copies."""
    con = shop()
    con.executemany("INSERT INTO customers VALUES (?, 'Nobody', NULL)", [(i,) for i in range(10, 16)])
    sql = (
        "SELECT o.id IS NULL, c.name FROM customers c LEFT JOIN orders o ON o.customer_id = c.id "
        "LEFT JOIN orders o2 ON o2.customer_id = c.id"
    )
    raw = shop(sqlite3.connect)
    raw.executemany("INSERT INTO customers VALUES (?, 'Nobody', NULL)", [(i,) for i in range(10, 16)])
    rows, report = served(con, sql)
    expected = raw.execute(sql).fetchall()
    # the six customers without orders stay six rows; each orders row of a customer is repeated 5x by o2
    assert Counter(rows)[(1, "Nobody")] == 6
    assert report.action != "none" and len(rows) == 15 + 6 < len(expected)


def test_a_cte_column_list_renaming_by_position_never_merges_two_rows() -> None:
    """``t(k, id)`` makes ``t.id`` the body's ``f``: two rows of x sharing f = 7 are two rows of t, not
    copies (a fuzzer's find: the key found by name identified the wrong column and merged them). SQLite
    has no column list on a derived table; the analysis refuses one too (provenance fixtures)."""
    sql = "WITH t(k, id) AS (SELECT id, f FROM x) SELECT t.id FROM t JOIN b ON b.k = 1"
    con = guarded_sqlite.connect(":memory:")
    raw = sqlite3.connect(":memory:")
    for c in (con, raw):
        c.executescript(
            "CREATE TABLE x (id INTEGER PRIMARY KEY, f INT); INSERT INTO x VALUES (1, 7), (2, 7), (3, 8);"
            "CREATE TABLE b (id INTEGER PRIMARY KEY, k INT);"
            "INSERT INTO b (k) VALUES (1), (1), (1), (1), (1), (1), (1), (1), (1), (1);"
        )
    for preset in ("patch", "text_to_sql"):
        with con.guard_scope(guard=preset):
            rows, report = served(con, sql)
        assert rows == raw.execute(sql).fetchall() and report.action == "none", (preset, report)
        assert "renames its columns by position" in report.provenance_evidence


def test_a_check_that_returns_other_rows_leaves_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's projected rows must be the statement's own, else unknown: here the data changes
    between the statement and its check (simulated by a check that sees one order more)."""
    from guarded_sqlite._engines import GuardStatement
    from guarded_sqlite._engines.sqlite import SQLiteEngine

    con = shop()
    original = SQLiteEngine.read_only_fetch

    def changed_data(self: Any, raw: Any, statement: GuardStatement) -> Any:
        if "__gs_id0" in statement.sql:
            raw.execute("INSERT INTO orders(customer_id) SELECT 2 WHERE 0")  # keeps query_only honest
            rows = original(self, raw, statement)
            return None if rows is None else [*rows[:-1], ("Ben", 2)]
        return original(self, raw, statement)

    monkeypatch.setattr(SQLiteEngine, "read_only_fetch", changed_data)
    rows, report = served(con, NAMES)
    assert len(rows) == 15 and report.action == "none" and report.provenance == "unknown"
    assert "other rows" in report.decisions[0].reason


def test_paper_preset_stays_literal() -> None:
    rows, report = served(shop(guard="paper"), NAMES)
    assert rows == [("Ana Lima",), ("Ben",)] and report.action == "distinct_injected"
    assert report.decisions[0].copies is None and report.provenance is None


def test_c16_p2_never_removes_a_distinct_under_the_key_presets() -> None:
    """c16: a DISTINCT over a view join is unknown to the analysis, and stays as written."""
    sql = "SELECT DISTINCT c.name FROM customers c JOIN paid o ON o.customer_id = c.id"
    for guard in ("patch", "text_to_sql"):
        con = shop(guard=guard)
        con.execute("CREATE VIEW paid AS SELECT * FROM orders")
        rows, report = served(con, sql)
        assert sorted(rows) == [("Ana Lima",), ("Ben",)] and report.action == "none"
    # The paper's P2 still runs under its own preset: 31 customers with one order each, two named alike.
    con = guarded_sqlite.connect(":memory:", guard="paper")
    con.executescript(SHOP.split("INSERT")[0] + "CREATE VIEW paid AS SELECT * FROM orders;")
    con.executemany("INSERT INTO customers VALUES (?, ?, NULL)", [(i, f"n{i % 30}") for i in range(31)])
    con.executemany("INSERT INTO orders(customer_id) VALUES (?)", [(i,) for i in range(31)])
    rows, report = served(con, sql)
    assert report.action == "distinct_removed" and len(rows) == 31


def test_logging_says_warning_only_for_copies_served_unchanged(caplog: pytest.LogCaptureFixture) -> None:
    """No copies on the data (c18's shape): routine, DEBUG only. Copies removed: INFO."""
    import logging

    con = guarded_sqlite.connect(":memory:")
    con.executescript(SHOP)
    con.executemany("INSERT INTO orders(customer_id) VALUES (?)", [(1,), (2,), (3,)])
    con.executemany("INSERT INTO customers VALUES (?, 'Ana Lima', 'Lisbon')", [(i,) for i in range(4, 40)])
    con.executemany("INSERT INTO orders(customer_id) VALUES (?)", [(i,) for i in range(4, 40)])
    with caplog.at_level(logging.DEBUG, logger="guarded_sqlite"):
        assert con.execute(NAMES).guard_report.decisions[0].copies == 0
    assert [r.levelno for r in caplog.records if r.name == "guarded_sqlite"] and max(
        r.levelno for r in caplog.records if r.name == "guarded_sqlite"
    ) == logging.DEBUG
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="guarded_sqlite"):
        assert served(shop(), NAMES)[1].action == "join_copies_removed"
    assert max(r.levelno for r in caplog.records if r.name == "guarded_sqlite") == logging.INFO
