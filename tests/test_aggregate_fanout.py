"""The aggregate fan-out rule (``guarded_sqlite.aggregates``, ``guarded_sqlite.fanout``)."""

from __future__ import annotations

import sqlite3

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
