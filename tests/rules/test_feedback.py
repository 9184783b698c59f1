"""``GuardReport.feedback()``: the text an agent's next prompt gets, in stable wording (these tests pin it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import guarded_sqlite
from guarded_sqlite.cli.demo import build_shop
from tests.helpers import EXPLODING_SQL, fill_fanout


@pytest.fixture
def shop() -> sqlite3.Connection:
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    return con


def test_healthy_statements_give_no_feedback(shop: sqlite3.Connection) -> None:
    assert shop.execute("SELECT name FROM customers").guard_report.feedback() == ""
    assert shop.execute("INSERT INTO customers (name) VALUES ('x')").guard_report.feedback() == ""


def test_a_patched_explosion_says_what_why_what_was_done_and_what_next(shop: sqlite3.Connection) -> None:
    assert shop.execute(EXPLODING_SQL).guard_report.feedback() == (
        "The query returned 24 rows but only 4 distinct ones (83% are repeats).\n"
        "Why (amplified): o (orders) fans out c (customers) (o.customer_id is not a key); projection has no key "
        "of c (customers).\n"
        "The guard served the 4 distinct rows (as SELECT DISTINCT).\n"
        "Next step: add DISTINCT to the outer SELECT, or test the joined table with EXISTS / IN (SELECT ...) "
        "instead of joining it, so that its rows do not repeat the answer."
    )


def test_removed_join_copies_say_how_many_and_what_next(shop: sqlite3.Connection) -> None:
    """Two more customers named name0, with orders: the copies go, the three name0 customers stay."""
    shop.executemany("INSERT INTO customers VALUES (?, 'name0', 'x')", [(10,), (11,)])
    shop.executemany("INSERT INTO orders VALUES (?, ?, 1)", [(100 + k, 10 + k % 2) for k in range(6)])
    assert shop.execute(EXPLODING_SQL).guard_report.feedback() == (
        "The query returned 30 rows but only 4 distinct ones (87% are repeats).\n"
        "Why (amplified): o (orders) fans out c (customers) (o.customer_id is not a key); projection has no key "
        "of c (customers).\n"
        "The guard removed 24 join copies and served 6 rows: one per combination of the joined tables' rows "
        "(equal rows of different table rows kept).\n"
        "Next step: add DISTINCT to the outer SELECT if equal answers of different rows should appear once, or "
        "test the joined table with EXISTS / IN (SELECT ...) instead of joining it."
    )


def test_an_explosion_without_join_copies_on_the_data_says_so() -> None:
    """One order per customer: the keys allow a fan-out, the data has none (c18's shape)."""
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con, customers=20, orders_per_customer=1)
    con.execute("UPDATE customers SET name = 'same'")
    lines = con.execute(EXPLODING_SQL).guard_report.feedback().splitlines()
    assert lines[2:] == [
        "The guard served all 20 rows as returned.",
        "On this data no join repeats a row: each repeated row comes from a different table row.",
        "Next step: if each answer should appear once, add DISTINCT; the repeats may be meant.",
    ]


def test_an_explosion_left_alone_says_the_rows_were_served_as_returned() -> None:
    con = guarded_sqlite.connect(":memory:", guard="observe")
    fill_fanout(con)
    lines = con.execute(EXPLODING_SQL).guard_report.feedback().splitlines()
    assert lines[0] == "The query returned 24 rows but only 4 distinct ones (83% are repeats)."
    assert lines[1] == "The guard served all 24 rows as returned."
    assert lines[2].startswith("Next step: add DISTINCT")


def test_value_repeats_say_the_repeats_may_be_meant(shop: sqlite3.Connection) -> None:
    feedback = shop.execute("SELECT customer_id FROM orders").guard_report.feedback()
    assert "Why (value_repeats): one table (orders): duplicates repeat its values." in feedback
    assert feedback.endswith("Next step: if each answer should appear once, add DISTINCT; the repeats may be meant.")


def test_empty_results_and_errors(shop: sqlite3.Connection) -> None:
    assert shop.execute("SELECT name FROM customers WHERE name = 'nobody'").guard_report.feedback() == (
        "The query returned no rows.\n"
        "Next step: check the WHERE conditions and literal values (spelling, case, date formats) against the data; "
        "an empty answer may also be right."
    )
    with pytest.raises(sqlite3.OperationalError):
        shop.execute("SELECT nme FROM customers")
    assert shop.guard_report.feedback() == (
        "The query failed: OperationalError: no such column: nme.\n"
        "Next step: fix the SQL; check table and column names against the schema."
    )


@pytest.mark.parametrize("guard", ["patch", "text_to_sql"])
def test_an_aggregate_fan_out_names_the_aggregate_and_the_fix(guard: str) -> None:
    con = guarded_sqlite.connect(":memory:", guard=guard)
    fill_fanout(con)
    con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, customer_id INTEGER)")
    con.executemany("INSERT INTO notes (customer_id) VALUES (?)", [(c,) for c in range(4) for _ in range(3)])
    sql = (
        "SELECT c.id, SUM(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN notes n ON n.customer_id = c.id GROUP BY c.id"
    )
    report = con.execute(sql).guard_report
    assert report.trigger == "aggregate_fanout"
    lines = report.feedback().splitlines()
    assert lines[0] == (
        "An aggregate counts rows several times: SUM(o.amount) counts o (orders) once per row of n (notes): "
        "450 -> 150 (factor 3)."
    )
    assert lines[1] == (
        "The guard served the corrected values (each row counted once per group)."
        if guard == "text_to_sql"
        else "The guard served the values as computed."
    )
    assert lines[2] == (
        "Next step: aggregate before joining n (notes) (a subquery grouped by the join key), or test n (notes) "
        "with EXISTS / IN (SELECT ...) instead of joining it."
    )


def test_an_aggregate_repeated_by_two_tables_names_both(tmp_path: Path) -> None:
    build_shop(tmp_path / "shop.db")
    con = guarded_sqlite.connect(tmp_path / "shop.db")
    sql = (
        "SELECT c.name, SUM(c.points) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN order_items i ON i.order_id = o.id GROUP BY c.name"
    )
    last = con.execute(sql).guard_report.feedback().splitlines()[-1]
    con.close()
    assert last == (
        "Next step: aggregate before joining o (orders), i (order_items) (a subquery grouped by the join key), "
        "or test o (orders), i (order_items) with EXISTS / IN (SELECT ...) instead of joining them."
    )
