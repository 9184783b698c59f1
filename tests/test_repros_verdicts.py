"""Repros c08, c09, c10, c15 and c17 (``../shared/repros/correctness/``): provenance verdicts that must see
the keys a query establishes. Each test asserts the verdict and its evidence, on a real connection
(``cur.guard_report.provenance``) and through ``guarded_sqlite.provenance.analyse``, not only the rows
served: a rule that looks at the data could serve the same rows for another reason.

- c17: a LEFT JOIN's ON equality read backwards from a matched row of its right side.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import guarded_sqlite
from guarded_sqlite.provenance import analyse
from guarded_sqlite.schema import read_sqlite_schema


def guarded(setup: str, sql: str, guard: str = "patch") -> tuple[list[Any], list[Any], Any]:
    """Plain sqlite3's rows of ``sql``, the guarded connection's rows, and its report."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(setup)
    con = guarded_sqlite.connect(":memory:", guard=guard)  # type: ignore[arg-type]
    con.executescript(setup)
    cur = con.execute(sql)
    rows = cur.fetchall()
    report = cur.guard_report
    plain = raw.execute(sql).fetchall()
    con.close()
    raw.close()
    return plain, rows, report


# --- c17 ---------------------------------------------------------------------------------------------

C17 = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers (id), status TEXT);
""" + "".join(
    f"INSERT INTO customers VALUES ({i}, 'c{i}'); INSERT INTO orders VALUES ({i}, {i}, '{('open', 'paid')[i % 2]}');"
    for i in range(1, 21)
)
C17_LEFT = "SELECT o.status FROM customers c LEFT JOIN orders o ON o.customer_id = c.id"
C17_INNER = "SELECT o.status FROM customers c JOIN orders o ON o.customer_id = c.id"


def test_c17_left_join_right_side_is_not_fanned_out_by_its_left() -> None:
    """c17: ``SELECT o.status FROM customers c LEFT JOIN orders o ON o.customer_id = c.id`` repeats statuses
    of distinct orders; a matched order fixes its customer (c.id is a key) as in the inner join, so both
    spellings are ``value_repeats`` under both presets and keep their 20 rows."""
    for guard in ("patch", "text_to_sql"):
        for sql in (C17_LEFT, C17_INNER):
            plain, rows, report = guarded(C17, sql, guard)
            assert rows == plain and len(rows) == 20, (guard, sql)
            assert report.provenance == "value_repeats", (guard, sql, report.provenance_evidence)
            assert "c (customers) is an N:1 lookup (c.id is a key)" in (report.provenance_evidence or "")
    raw = sqlite3.connect(":memory:")
    raw.executescript(C17)
    facts = read_sqlite_schema(raw)
    for reference in ("both", "projected"):
        verdict = analyse(C17_LEFT, facts, reference=reference)
        assert verdict.verdict == "value_repeats" and verdict.fanning_projected == (), verdict.evidence
    # The leading table is still fanned out (a customer's orders), which a DISTINCT may hide (P2).
    assert analyse(C17_LEFT, facts).fanning_leading == ("o (orders)",)
    assert analyse(f"SELECT DISTINCT {C17_LEFT[7:]}", facts).hides_amplification


def test_c17_left_join_right_side_fans_out_when_the_left_column_is_not_a_key() -> None:
    """c17's no-op: an order matched on a column that is not a key of the left side repeats once per left
    row that matches it; that stays amplified."""
    setup = C17 + "CREATE TABLE visits (customer_id INTEGER, day TEXT);"
    raw = sqlite3.connect(":memory:")
    raw.executescript(setup)
    verdict = analyse(
        "SELECT o.status FROM visits v LEFT JOIN orders o ON o.customer_id = v.customer_id", read_sqlite_schema(raw)
    )
    assert verdict.verdict == "amplified" and verdict.fanning_projected == ("v (visits)",), verdict.evidence


def test_c17_the_aggregate_planner_reads_the_left_join_backwards_too() -> None:
    """c17 in the aggregate planner (a subclass of the analysis, same closure): each order's total is
    summed once over ``customers LEFT JOIN orders`` (a matched order has one customer), so nothing is at
    risk; over a left side whose ON column is not a key, the orders repeat and the SUM is at risk."""
    from guarded_sqlite.aggregates import plan_aggregates
    from guarded_sqlite.provenance import parse_statement

    raw = sqlite3.connect(":memory:")
    raw.executescript(C17 + "ALTER TABLE orders ADD COLUMN total INTEGER; CREATE TABLE visits (customer_id INTEGER);")
    facts = read_sqlite_schema(raw)

    def risks(sql: str) -> tuple[tuple[str, ...], ...]:
        tree = parse_statement(sql)
        assert not isinstance(tree, guarded_sqlite.provenance.Provenance)
        return tuple(r.repeating for r in plan_aggregates(tree, facts, "sqlite").risks)

    assert (
        risks("SELECT c.name, SUM(o.total) FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.name")
        == ()
    )
    assert risks("SELECT SUM(o.total) FROM visits v LEFT JOIN orders o ON o.customer_id = v.customer_id") == (
        ("v (visits)",),
    )
