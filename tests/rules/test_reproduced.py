"""``fanout._reproduced``: corrected values are served only from a check whose written values are the
statement's own (a check that read other data, or a statement the analysis read otherwise than the
database, must not replace its rows). Fixtures with their no-op cases, and the end-to-end case it caught:
an unqualified column of a subquery that SQLite resolved to a derived table's output."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite._analysis.plans import AggregatePlan, AggregateRisk
from guarded_sqlite._rules.fanout import _reproduced


def _plan(function: str = "SUM", column: int | None = 1) -> AggregatePlan:
    risk = AggregateRisk(function, "o.total", ("o (orders)",), ("i (items)",), column)
    return AggregatePlan(risks=(risk,), width=2, items=(1,), check_sql="check", corrected_sql="corrected")


def _check(name: str, corrected: Any, written: Any, count: int = 3, magnitude: float = 30.0) -> tuple[Any, ...]:
    """A check row: the corrected query's columns, then written, corrected, counted, distinct, magnitude."""
    return (name, corrected, written, corrected, count, 1, magnitude)


@pytest.mark.parametrize(
    ("plan", "rows", "checked", "reproduced"),
    [
        (_plan(), [("a", 30), ("b", 5)], [_check("b", 5, 5, 1, 5.0), _check("a", 10, 30)], True),
        (_plan(), [("a", 30)], [_check("a", 15, 35)], False),  # the check summed other rows
        (_plan(), [("a", 30), ("b", 5)], [_check("a", 10, 30), _check("b", 4, 4, 1, 4.0)], False),
        # floats summed in another order: equal within rounding
        (_plan(), [("a", 0.1 + 0.2 + 0.3)], [_check("a", 0.2, 0.3 + 0.2 + 0.1, 3, 0.6)], True),
        # no-op cases: nothing to compare
        (_plan(column=None), [("a", "big")], [_check("a", "small", 35)], True),  # CASE WHEN SUM(..) > 9 ..
        (_plan("GROUP_CONCAT"), [("a", "x,x")], [_check("a", "x", "x,x,x")], True),
        (_plan(), [("c", 30)], [_check("a", 10, 35)], True),  # a group the check does not hold
        (_plan(), [], [_check("a", 10, 35)], True),
    ],
)
def test_reproduced(plan: AggregatePlan, rows: list[Any], checked: list[Any], reproduced: bool) -> None:
    assert _reproduced(plan, rows, checked) is reproduced


_SHOP = (
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER);"
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER);"
    "CREATE TABLE limits (id INTEGER PRIMARY KEY, cap INTEGER);"
    "INSERT INTO orders VALUES (1, 10), (2, 5);"
    "INSERT INTO items VALUES (1, 1, 100), (2, 1, 100), (3, 1, 100), (4, 2, 100);"
    "INSERT INTO limits VALUES (1, 7);"
)
_DERIVED = "(SELECT o.total AS qty FROM orders o JOIN items i ON i.order_id = o.id) d"


@pytest.mark.parametrize(
    ("condition", "served"),
    [
        # SQLite resolves the subquery's unqualified qty to the derived table's (an order's total): read
        # through, it became items.qty (100 > 7 for every row) and 15 was served where 10 is right. Now
        # the derived table is not read through, and the statement's 30 is served as written.
        ("EXISTS (SELECT 1 FROM limits l WHERE l.cap < qty)", 30),
        # qualified, it is read through and corrected: order 1 once (order 2's 5 is under the cap)
        ("EXISTS (SELECT 1 FROM limits l WHERE l.cap < d.qty)", 10),
        ("qty > (SELECT cap FROM limits)", 10),
    ],
)
def test_a_subquerys_unqualified_column_of_a_derived_tables_name(condition: str, served: int) -> None:
    sql = f"SELECT SUM(d.qty) FROM {_DERIVED} WHERE {condition}"
    raw = sqlite3.connect(":memory:")
    raw.executescript(_SHOP)
    assert raw.execute(sql).fetchall() == [(30,)]
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(_SHOP)
    assert con.execute(sql).fetchall() == [(served,)]
