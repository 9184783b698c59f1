"""Property (hypothesis): an aggregate over a join hidden in a derived table (aliased or not), a CTE or a
view, filtered or not (on the rows' own columns, on an item's, or by a correlated ``EXISTS`` that names
the source's output qualified or not), is served either as the database returned it or as the truth
(each order's total once), never a third value, and is never called "not at risk" while the database's
answer is inflated. The same statement written as the join itself is the reference form.

The truth: the orders (with their customer) that have at least one item passing the item-level filter,
each summed once. Data: 1-3 customers over two names, 0-3 orders each, 0-3 items per order, a cap."""

from __future__ import annotations

import sqlite3
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import guarded_sqlite

_SCHEMA = (
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, tier INTEGER);"
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, cid INTEGER, total INTEGER, flag INTEGER);"
    "CREATE TABLE items (id INTEGER PRIMARY KEY, oid INTEGER, qty INTEGER);"
    "CREATE TABLE caps (id INTEGER PRIMARY KEY, cap INTEGER);"
)
_BODY = (
    "SELECT c.name AS name, c.tier AS tier, o.total AS t, o.flag AS flag, i.qty AS qty "
    "FROM customers c JOIN orders o ON o.cid = c.id JOIN items i ON i.oid = o.id"
)
_JOIN = "FROM customers c JOIN orders o ON o.cid = c.id JOIN items i ON i.oid = o.id"

# (over the join's aliases, over the source's outputs, the truth's condition on o and c, item-level)
_CONDITIONS = [
    ("o.total > 3", "t > 3", "o.total > 3", "1"),
    ("c.tier = 1", "tier = 1", "c.tier = 1", "1"),
    ("i.qty > 2", "qty > 2", "1", "i.qty > 2"),
    ("EXISTS (SELECT 1 FROM caps k WHERE k.cap < o.total)", "EXISTS (SELECT 1 FROM caps k WHERE k.cap < t)",
     "EXISTS (SELECT 1 FROM caps k WHERE k.cap < o.total)", "1"),
    ("EXISTS (SELECT 1 FROM caps k WHERE k.cap < o.total)", "EXISTS (SELECT 1 FROM caps k WHERE k.cap < d.t)",
     "EXISTS (SELECT 1 FROM caps k WHERE k.cap < o.total)", "1"),
]  # fmt: skip


@st.composite
def _data(draw: Any) -> str:
    rows = [f"INSERT INTO customers VALUES ({c}, 'c{c % 2}', {draw(st.integers(0, 2))})" for c in (1, 2, 3)]
    order = item = 0
    for customer in (1, 2, 3):
        for _ in range(draw(st.integers(0, 3))):
            order += 1
            total, flag = draw(st.integers(1, 9)), draw(st.integers(0, 1))
            rows.append(f"INSERT INTO orders VALUES ({order}, {customer}, {total}, {flag})")
            for _ in range(draw(st.integers(0, 3))):
                item += 1
                rows.append(f"INSERT INTO items VALUES ({item}, {order}, {draw(st.integers(1, 5))})")
    rows.append(f"INSERT INTO caps VALUES (1, {draw(st.integers(1, 6))})")
    return ";".join(rows)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=_data(),
    form=st.sampled_from(["join", "derived", "derived without alias", "cte", "view"]),
    condition=st.sampled_from([None, *_CONDITIONS]),
    grouped=st.booleans(),
)
def test_a_hidden_join_is_served_as_written_or_as_the_truth(
    data: str, form: str, condition: tuple[str, str, str, str] | None, grouped: bool
) -> None:
    on_join, on_outputs, on_orders, on_items = condition or ("1", "1", "1", "1")
    if form == "derived without alias":
        on_outputs = on_outputs.replace("d.t", "t")
    group = " GROUP BY name" if grouped else ""
    if form == "join":
        sql = f"SELECT {'c.name, ' if grouped else ''}SUM(o.total) {_JOIN} WHERE {on_join}"
        sql += " GROUP BY c.name" if grouped else ""
    else:
        source = {"derived": f"({_BODY}) d", "derived without alias": f"({_BODY})", "cte": "x d", "view": "v d"}
        sql = f"SELECT {'name, ' if grouped else ''}SUM(t) FROM {source[form]} WHERE {on_outputs}{group}"
        sql = f"WITH x AS ({_BODY}) {sql}" if form == "cte" else sql
    truth_sql = (
        f"SELECT {'c.name, ' if grouped else ''}SUM(o.total) FROM customers c JOIN orders o ON o.cid = c.id "
        f"WHERE EXISTS (SELECT 1 FROM items i WHERE i.oid = o.id AND {on_items}) AND {on_orders}"
        + (" GROUP BY c.name" if grouped else "")
    )
    raw = sqlite3.connect(":memory:")
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    for target in (raw, con):
        target.executescript(_SCHEMA + data + f";CREATE VIEW v AS {_BODY}")
    written = sorted(raw.execute(sql).fetchall(), key=repr)
    truth = sorted(raw.execute(truth_sql).fetchall(), key=repr)
    cur = con.execute(sql)
    served = sorted(cur.fetchall(), key=repr)
    report = cur.guard_report
    assert report is not None
    reasons = [d.reason for d in report.decisions if d.rule == "aggregate"]
    assert served in (written, truth), (sql, written, truth, served, reasons)
    if written != truth:
        assert not any(reason.startswith("not at risk") for reason in reasons), (sql, written, truth, reasons)
