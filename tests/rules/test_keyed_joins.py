"""Statements whose joins cannot repeat what they sum, recognised from their words (issue 44 item 3,
``guarded_sqlite._analysis.keyed_joins``): fixtures of what is read and what is not, that such a
statement is not parsed, and a hypothesis property that every statement so recognised is one the full
analysis finds nothing at risk in (the reading may miss, never invent, a safe statement)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite._analysis import plan_cache
from guarded_sqlite._analysis.catalog import AGGREGATES, Analyser, schema_view
from guarded_sqlite._analysis.keyed_joins import cannot_fan_out, read_joins
from guarded_sqlite._analysis.planning import aggregate_plan
from guarded_sqlite._analysis.trees import Collecting

SCHEMA = (
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, region_id INTEGER, code TEXT UNIQUE NOT NULL);"
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, total REAL, ref INT UNIQUE, "
    "seq INTEGER NOT NULL UNIQUE, note TEXT);"
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER, qty INTEGER, sku TEXT);"
    "CREATE TABLE regions (rid INTEGER NOT NULL, label TEXT COLLATE NOCASE UNIQUE, size INTEGER);"
    "CREATE TABLE skus (sku TEXT PRIMARY KEY, price REAL);"
    "CREATE TABLE tags (code INTEGER COLLATE NOCASE PRIMARY KEY NOT NULL, weight INTEGER) WITHOUT ROWID;"
    "CREATE VIEW big_orders AS SELECT * FROM orders WHERE total > 10;"
)


def _connect() -> Any:
    con = guarded_sqlite.connect(":memory:")
    con.executescript(SCHEMA)
    con.execute("INSERT INTO customers VALUES (1, 'a', 1, 'x'), (2, 'b', 1, 'y')")
    con.execute("INSERT INTO orders VALUES (1, 1, 5.0, 1, 1, 'n'), (2, 1, 7.0, 2, 2, 'm'), (3, 2, 1.0, NULL, 3, 'n')")
    con.execute("INSERT INTO items VALUES (1, 1, 2, 's'), (2, 1, 3, 's'), (3, 2, 1, 't')")
    con.commit()
    return con


def _keyed(con: Any, sql: str) -> bool:
    reading = read_joins(sql)
    if reading is None:
        return False
    view = schema_view(con._self_guard)
    facts = view.facts_of(tuple(sorted({(None, t) for _, t in reading.tables}, key=lambda n: n[1])))
    return facts is not None and cannot_fan_out(reading, facts)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id",
        "SELECT SUM(o.total) FROM orders o LEFT JOIN customers c ON c.id = o.customer_id WHERE c.name = 'a'",
        "SELECT c.name, SUM(i.qty) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
        "JOIN items AS i ON i.order_id = o.id AND i.qty > 0 GROUP BY c.name ORDER BY 2 DESC LIMIT 3",
        "SELECT SUM(orders.total) FROM customers JOIN orders ON orders.customer_id = customers.id",
        "SELECT AVG(CASE WHEN i.sku = 's' THEN i.qty ELSE 0 END) FROM orders o JOIN items i ON o.id = i.order_id "
        "WHERE o.total > ? GROUP BY o.id",
        # an inner join's condition filters the whole row: c is matched on its key to o, o to i
        "SELECT SUM(i.qty) FROM items i JOIN customers c ON c.id > 0 "
        "JOIN orders o ON o.id = i.order_id AND c.id = o.id",
        "SELECT SUM(i.qty) FROM items i JOIN orders o ON o.seq = i.order_id",  # a NOT NULL UNIQUE integer
    ],
)
def test_recognised(sql: str) -> None:
    assert _keyed(_connect(), sql)


@pytest.mark.parametrize(
    "sql",
    [
        # the join repeats what is summed
        "SELECT SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id",
        "SELECT SUM(c.region_id) FROM customers c JOIN orders o ON o.customer_id = c.id",
        # keys that may not hold for the comparison: nullable, text, collation, no key, a view
        "SELECT SUM(i.qty) FROM items i JOIN orders o ON o.ref = i.order_id",
        "SELECT SUM(i.qty) FROM items i JOIN skus s ON s.sku = i.sku",
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON c.code = o.note",
        "SELECT SUM(c.region_id) FROM customers c JOIN regions r ON r.rid = c.region_id",
        "SELECT SUM(o.total) FROM orders o JOIN tags t ON t.code = o.customer_id",
        "SELECT SUM(i.qty) FROM items i JOIN big_orders b ON b.id = i.order_id",
        # forms not read: comma, USING, NATURAL, OR, parentheses, subqueries, bare columns, windows
        "SELECT SUM(o.total) FROM customers c, orders o WHERE o.customer_id = c.id",
        "SELECT SUM(o.total) FROM orders o JOIN customers c USING (id)",
        "SELECT SUM(o.total) FROM orders o NATURAL JOIN customers c",
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON c.id = o.customer_id OR c.id = 1",
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON (c.id = o.customer_id)",
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.id IN (SELECT 1)",
        "SELECT SUM(total) FROM orders o JOIN customers c ON c.id = o.customer_id",
        "SELECT SUM(o.total) OVER () FROM orders o JOIN customers c ON c.id = o.customer_id",
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON c.id = o.customer_id -- comment",
        # a comment's words are not SQL: an equality in one matches nothing (the join is ON 1 to SQLite)
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON 1 -- AND c.id = o.customer_id\n",
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON 1 /* AND c.id = o.customer_id AND */",
        # a space SQLite reads as part of a name, and a digit it does not read as one
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON c.id\u00a0= o.customer_id",
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON c.id = o.customer_id AND o.id > \u0663",
        'SELECT SUM(o.total) FROM orders o JOIN "customers" c ON c.id = o.customer_id',
        "SELECT SUM(o.total) FROM orders o JOIN main.customers c ON c.id = o.customer_id",
        "SELECT SUM(o.total), SUM(c.id) FROM orders o JOIN customers c ON c.id = o.customer_id",
        "SELECT SUM(1) FROM orders o JOIN customers c ON c.id = o.customer_id",
        "SELECT AVG(o.total) FROM orders o JOIN items i ON o.id = i.order_id",
        # a LEFT JOIN's condition does not filter the rows before it: c is not matched on its key
        "SELECT SUM(i.qty) FROM items i JOIN customers c ON c.id > 0 LEFT JOIN orders o ON o.id = i.order_id "
        "AND c.id = o.id",
        "SELECT SUM(o.total) FROM customers c LEFT JOIN orders o ON o.customer_id = c.id",
        # BETWEEN's AND is no conjunction: the ON condition is (o.total BETWEEN 0 AND c.id) = o.customer_id
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON o.total BETWEEN 0 AND c.id = o.customer_id",
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON o.total NOT BETWEEN 9 AND c.id = o.customer_id",
        # an AND inside CASE: the condition holds for every customer but the order's own
        "SELECT SUM(o.total) FROM orders o JOIN customers c ON CASE WHEN 1 AND c.id = o.customer_id AND 1 "
        "THEN 0 ELSE 1 END",
    ],
)
def test_not_recognised(sql: str) -> None:
    assert not _keyed(_connect(), sql)


def test_between_in_an_on_condition_is_checked_not_taken_for_a_conjunction() -> None:
    # Each order meets every customer whose id is at least its total: SUM(o.total) is inflated, and a
    # reading that split the condition at BETWEEN's AND saw c.id = o.customer_id and said "not at risk".
    con = _connect()
    con.execute("INSERT INTO orders VALUES (4, 1, 0.5, NULL, 4, 'z')")  # 0.5 BETWEEN 0 AND c.id: every c
    sql = "SELECT SUM(o.total) FROM orders o JOIN customers c ON o.total BETWEEN 0 AND c.id = o.customer_id"
    cur = con.execute(sql)
    assert cur.fetchall() == [(1.0,)]  # order 4 once per customer, served as sqlite3 returns it
    report = cur.guard_report
    assert report is not None
    assert not any(d.reason.startswith("not at risk") for d in report.decisions), report.decisions


@pytest.mark.parametrize("comment", ["-- AND c.id = o.customer_id\n", "/* AND c.id = o.customer_id AND */"])
def test_an_equality_in_a_comment_matches_nothing(comment: str) -> None:
    # ON 1: every order meets both customers, its total summed twice. A reading that took the comment's
    # words for SQL saw c matched on its key and served the doubled sums as "not at risk".
    con = _connect()
    sql = f"SELECT o.id, SUM(o.total) FROM orders o JOIN customers c ON 1 {comment} GROUP BY o.id ORDER BY o.id"
    assert not _keyed(con, sql)
    with con.guard_scope("text_to_sql"):
        cur = con.execute(sql)
        rows = cur.fetchall()
    assert rows == [(1, 5.0), (2, 7.0), (3, 1.0)], rows  # each order's total once
    assert cur.guard_report is not None and cur.guard_report.trigger == "aggregate_fanout"


def test_a_recognised_statement_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    con = _connect()
    con.execute("SELECT SUM(i.qty) FROM items i JOIN orders o ON o.id = i.order_id").fetchall()  # rule loaded
    parsed: list[str] = []
    monkeypatch.setattr(plan_cache, "aggregate_plan", lambda *args, **kwargs: parsed.append("planned"))
    sql = "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id"
    report = con.execute(sql).guard_report
    assert report is not None and report.trigger is None
    assert [d.reason for d in report.decisions] == [f"not at risk: {plan_cache._KEYED.note}"]
    assert parsed == []


_COLUMNS = {
    "customers": ("id", "name", "region_id", "code"),
    "orders": ("id", "customer_id", "total", "ref", "seq", "note"),
    "items": ("id", "order_id", "qty", "sku"),
    "regions": ("rid", "label", "size"),
    "skus": ("sku", "price"),
    "tags": ("code", "weight"),
    "big_orders": ("id", "customer_id", "total", "ref", "seq", "note"),
}


# Column pairs that join one table to another's key, or look as if they did (drawn half the time).
_PAIRS = [
    ("orders", "customer_id", "customers", "id"),
    ("items", "order_id", "orders", "id"),
    ("items", "order_id", "orders", "seq"),
    ("items", "order_id", "orders", "ref"),
    ("customers", "region_id", "regions", "rid"),
    ("items", "sku", "skus", "sku"),
    ("orders", "customer_id", "tags", "code"),
    ("orders", "note", "customers", "code"),
    ("items", "order_id", "big_orders", "id"),
    ("orders", "id", "items", "id"),
]


@st.composite
def _statements(draw: Any) -> str:
    count = draw(st.integers(2, 3))
    chain = draw(st.booleans())
    core = ["customers", "orders", "items"]
    tables = [draw(st.sampled_from(core if chain else sorted(_COLUMNS))) for _ in range(count)]
    aliases = [f"t{i}" for i in range(count)]
    parts = [f"{tables[0]} {aliases[0]}"]
    for i in range(1, count):
        conjuncts = []
        for _ in range(draw(st.integers(1, 2))):
            other = draw(st.integers(0, i))
            if other == i:  # a filter on the joined table
                conjuncts.append(f"{aliases[i]}.{draw(st.sampled_from(_COLUMNS[tables[i]]))} > 0")
            else:
                left = f"{aliases[i]}.{draw(st.sampled_from(_COLUMNS[tables[i]]))}"
                right = f"{aliases[other]}.{draw(st.sampled_from(_COLUMNS[tables[other]]))}"
                pairs = [
                    (f"{aliases[a]}.{x}", f"{aliases[b]}.{y}")
                    for t1, x, t2, y in _PAIRS
                    for a, b in ((i, other), (other, i))
                    if (tables[a], tables[b]) == (t1, t2)
                ]
                if pairs and draw(st.booleans()):
                    left, right = draw(st.sampled_from(pairs))
                conjuncts.append(f"{left} = {right}" if draw(st.booleans()) else f"{right} = {left}")
        kind = draw(st.sampled_from(["JOIN", "LEFT JOIN", "INNER JOIN", "LEFT OUTER JOIN"]))
        glue = draw(st.sampled_from([" AND ", " AND ", " OR ", " BETWEEN 0 AND "]))
        condition = glue.join(conjuncts)
        hidden = draw(st.sampled_from(["", "", "--", "/*"]))  # the condition in a comment: ON 1 to SQLite
        if hidden == "--":
            condition = f"1 -- AND {condition}\n"
        elif hidden == "/*":
            condition = f"1 /* AND {condition} AND */"
        parts.append(f"{kind} {tables[i]} {aliases[i]} ON {condition}")
    at = draw(st.integers(0, count - 1))
    argument = f"{aliases[at]}.{draw(st.sampled_from(_COLUMNS[tables[at]]))}"
    function = draw(st.sampled_from(["SUM", "AVG", "TOTAL", "GROUP_CONCAT"]))
    group = draw(
        st.sampled_from(["", f" GROUP BY {aliases[0]}.rowid", f" GROUP BY {aliases[-1]}.{_COLUMNS[tables[-1]][0]}"])
    )
    return f"SELECT {function}({argument}) FROM {' '.join(parts)}{group}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sql=_statements())
def test_recognised_only_where_the_analysis_finds_nothing_at_risk(sql: str) -> None:
    con = _connect()
    try:
        con.execute(sql).fetchall()
    except sqlite3.Error:
        return  # a draw SQLite refuses (a column a view lacks)
    if not _keyed(con, sql):
        event("not recognised")
        return
    event("recognised")
    view = schema_view(con._self_guard)
    with Collecting("sqlite"):
        full = view.explain(sql, Analyser("full analysis", aggregate_plan, AGGREGATES.unknown))
    assert not full.risks and not full.unanalysed, (sql, full.note)
