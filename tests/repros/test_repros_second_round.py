"""Repros c19, c20, c21 and c23 (``../shared/repros/correctness/``, "Second round"): defects in round 4's
own mechanisms.

- c20: the pre-grouped check decides what the leaf may drop from the join's full column use.
- c21, c23: a kept confirmation is invalidated by every way data can change under the connection
  (incremental blob I/O, a dirty read of a shared cache), or not kept where that cannot be told.
- c19: an application function a generated column, view or trigger calls is one the check can call.
"""

from __future__ import annotations

import guarded_sqlite

# --- c20 ---------------------------------------------------------------------------------------------

C20 = """
CREATE TABLE o(id INTEGER PRIMARY KEY, cust INTEGER NOT NULL, total INTEGER NOT NULL);
CREATE TABLE i(line INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, sku INTEGER NOT NULL);
CREATE TABLE x(id INTEGER PRIMARY KEY, sku INTEGER NOT NULL);
INSERT INTO o VALUES (1, 1, 100), (2, 1, 10), (3, 2, 7), (4, 2, 1000);
INSERT INTO i(order_id, sku) VALUES (1, 5), (1, 5), (1, 6), (2, 5), (3, 5), (3, 5), (4, 6), (4, 6);
INSERT INTO x VALUES (1, 5), (2, 5), (3, 5), (4, 5);
"""
C20_SQL = (
    "SELECT o.cust, SUM(o.total) FROM o JOIN i ON i.order_id = o.id NATURAL JOIN x GROUP BY o.cust ORDER BY o.cust"
)


def test_c20_a_natural_join_reading_the_leaf_keeps_its_condition() -> None:
    """c20: ``NATURAL JOIN x`` compares x.sku with i.sku, a column of i no Column node names: i is not
    pre-grouped (its derived table would keep order_id only), so the corrected sum is each order once
    that the join keeps (customer 2: order 3, 7; not order 4's 1000), and the default's warning quotes
    the values the statement returned."""
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(C20)
    cur = con.execute(C20_SQL)
    assert cur.fetchall() == [(1, 110), (2, 7)]
    assert cur.guard_report.action == "aggregate_defanned"
    default = guarded_sqlite.connect(":memory:")
    default.executescript(C20)
    cur = default.execute(C20_SQL)
    assert cur.fetchall() == [(1, 210), (2, 14)]
    (reason,) = [decision.reason for decision in cur.guard_report.decisions]
    assert "210 -> 110" in reason, reason
    con.close()
    default.close()
