"""Repros c08, c09, c10, c15 and c17 (``../shared/repros/correctness/``): provenance verdicts that must see
the keys a query establishes. Each test asserts the verdict and its evidence, on a real connection
(``cur.guard_report.provenance``) and through ``guarded_sqlite.provenance.analyse``, not only the rows
served: a rule that looks at the data could serve the same rows for another reason.

- c17: a LEFT JOIN's ON equality read backwards from a matched row of its right side.
- c10: a merged USING/NATURAL column of inner joins is read from every table holding it.
- c08, c15: ``ROW_NUMBER() OVER (PARTITION BY ...)`` and PostgreSQL's ``DISTINCT ON`` key a derived table.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite.provenance import analyse
from guarded_sqlite.schema import SchemaFacts, TableFacts, read_sqlite_schema


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


# --- c10 ---------------------------------------------------------------------------------------------

C10 = (
    """
CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER);
CREATE TABLE notes (customer_id INTEGER PRIMARY KEY, body TEXT);
"""
    + "".join(
        f"INSERT INTO customers VALUES ({i}, 'c{i}'); INSERT INTO notes VALUES ({i}, 'n{i}');" for i in range(1, 11)
    )
    + "".join(
        f"INSERT INTO orders (customer_id, total) VALUES ({i}, {10 * j});"
        for i in range(1, 11)
        for j in range(3 if i <= 3 else 1)
    )
)


def test_c10_using_join_order_decides_nothing_under_text_to_sql() -> None:
    """c10: ``customers JOIN orders USING (customer_id)`` and ``orders JOIN customers USING (customer_id)``
    are one query; projecting the merged column reads both tables, so both spellings are judged and
    served alike (16 rows, value repeats of the orders' customer ids), NATURAL JOIN too."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(C10)
    facts = read_sqlite_schema(raw)
    pairs = [
        ("customers JOIN orders USING (customer_id)", "orders JOIN customers USING (customer_id)"),
        ("customers NATURAL JOIN orders", "orders NATURAL JOIN customers"),
    ]
    for a, b in pairs:
        outcomes = set()
        for from_ in (a, b):
            sql = f"SELECT customer_id FROM {from_}"
            verdict = analyse(sql, facts, reference="projected")
            assert sorted(verdict.projected) == ["customers", "orders"], (sql, verdict)
            assert verdict.verdict == "value_repeats", (sql, verdict.evidence)
            plain, rows, report = guarded(C10, sql, "text_to_sql")
            assert Counter(rows) == Counter(plain) and len(rows) == 16, sql
            outcomes.add((report.provenance, report.action))
        assert outcomes == {("value_repeats", "none")}


def test_c10_three_table_using_join_in_every_order() -> None:
    """c10 generalised: every order of ``customers``, ``orders`` and ``notes`` joined ``USING
    (customer_id)`` gets one verdict under the projected reference, for each projection."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(C10)
    facts = read_sqlite_schema(raw)
    for columns in ("customer_id", "customer_id, name", "customer_id, total", "body"):
        verdicts = set()
        for order in itertools.permutations(("customers", "orders", "notes")):
            sql = f"SELECT {columns} FROM {order[0]} " + " ".join(f"JOIN {t} USING (customer_id)" for t in order[1:])
            result = analyse(sql, facts, reference="projected")
            verdicts.add((result.verdict, frozenset(result.projected), frozenset(result.fanning_projected)))
        assert len(verdicts) == 1, (columns, verdicts)


def test_c10_left_join_using_keeps_the_merged_column_on_the_left() -> None:
    """c10's no-op: in SQLite a LEFT JOIN's merged column is its left side's (NULL-extended rows keep the
    left value), so only the left table is projected, and the verdict follows the written order."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(C10)
    facts = read_sqlite_schema(raw)
    forward = analyse(
        "SELECT customer_id FROM customers LEFT JOIN orders USING (customer_id)", facts, reference="projected"
    )
    assert forward.projected == ("customers",) and forward.verdict == "identified"
    assert forward.fanning == ("orders",), forward.evidence
    backward = analyse(
        "SELECT customer_id FROM orders LEFT JOIN customers USING (customer_id)", facts, reference="projected"
    )
    assert backward.projected == ("orders",) and backward.verdict == "value_repeats", backward.evidence


# --- c08, c15 ----------------------------------------------------------------------------------------

C08 = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers (id), created TEXT);
""" + "".join(
    f"INSERT INTO customers VALUES ({i}, 'c{i}', '{('Haifa', 'Lyon')[i % 2]}');"
    + "".join(f"INSERT INTO orders (customer_id, created) VALUES ({i}, '2024-0{k}-01');" for k in (1, 2, 3))
    for i in range(1, 41)
)
C08_SQL = """SELECT c.city FROM customers c
JOIN (SELECT *, ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY created DESC) AS rn FROM orders) o
  ON o.customer_id = c.id AND o.rn = 1"""


def test_c08_latest_row_per_group_by_row_number_is_a_lookup() -> None:
    """c08: (customer_id, rn) is a key of the numbered derived table, so ``o.customer_id = c.id AND o.rn
    = 1`` picks one order per customer: ``value_repeats``, 40 rows kept, under both presets."""
    for guard in ("patch", "text_to_sql"):
        plain, rows, report = guarded(C08, C08_SQL, guard)
        assert rows == plain and len(rows) == 40
        assert report.provenance == "value_repeats", report.provenance_evidence
        assert "o is an N:1 lookup (o.customer_id, o.rn is a key)" in (report.provenance_evidence or "")


def test_c08_rank_and_an_unpinned_number_are_no_key() -> None:
    """c08's no-ops: RANK() numbers ties alike, and without ``rn = 1`` each customer's orders all match."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(C08)
    facts = read_sqlite_schema(raw)
    for sql in (C08_SQL.replace("ROW_NUMBER()", "RANK()"), C08_SQL.replace(" AND o.rn = 1", "")):
        verdict = analyse(sql, facts)
        assert verdict.verdict == "amplified" and verdict.fanning == ("o",), (sql, verdict.evidence)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(st.sampled_from([None, 0, 1, 2]), st.sampled_from([None, 0, 1]), st.integers(0, 2)), max_size=8
    ),
    function=st.sampled_from(["ROW_NUMBER", "ROW_NUMBER", "RANK", "DENSE_RANK"]),
    partition=st.sampled_from(["", "PARTITION BY a", "PARTITION BY t.a", "PARTITION BY a, b", "PARTITION BY b"]),
    on=st.sampled_from(["d.a = x.a", "d.a = x.a AND d.b = x.b", "d.b = x.id", "d.rn = x.id", ""]),
    pin=st.sampled_from([" AND d.rn = 1", " AND d.rn = 2", ""]),
)
def test_property_numbered_derived_table_keys_hold_on_the_data(
    rows: list[tuple[int | None, int | None, int]], function: str, partition: str, on: str, pin: str
) -> None:
    """Whenever a numbered derived table is taken as determined by the leading table, each leading row
    appears at most once in the join, whatever the data (NULL partitions and ties included)."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, c INTEGER)")
    con.executemany("INSERT INTO t (a, b, c) VALUES (?, ?, ?)", rows)
    condition = f"{on}{pin}".removeprefix(" AND ") or "1 = 1"
    sql = (
        f"SELECT x.c FROM t x JOIN (SELECT t.*, {function}() OVER ({partition} ORDER BY c) AS rn FROM t) d "
        f"ON {condition}"
    )
    verdict = analyse(sql, read_sqlite_schema(con), reference="leading")
    assert verdict.verdict != "unknown", verdict.evidence
    if not verdict.fanning_leading:
        per_row = Counter(r[0] for r in con.execute(sql.replace("SELECT x.c", "SELECT x.id", 1)))
        assert all(n == 1 for n in per_row.values()), (sql, verdict.evidence)
    con.close()


ORDERS_FACTS = SchemaFacts(
    (
        TableFacts("customers", "public", ("id", "city"), (frozenset({"id"}),), frozenset({"id"})),
        TableFacts("orders", "public", ("id", "customer_id", "created"), (frozenset({"id"}),), frozenset({"id"})),
    ),
    ("public",),
)
C15_SQL = (
    "SELECT c.city FROM customers c JOIN (SELECT DISTINCT ON (customer_id) * FROM orders "
    "ORDER BY customer_id, created DESC) o ON o.customer_id = c.id"
)


def test_c15_distinct_on_keys_the_derived_table() -> None:
    """c15: ``DISTINCT ON (customer_id)`` keeps one order per customer_id, a key of the derived table:
    ``value_repeats``. DISTINCT ON more columns than the join matches is no lookup (no-op)."""
    verdict = analyse(C15_SQL, ORDERS_FACTS, dialect="postgres")
    assert verdict.verdict == "value_repeats", verdict.evidence
    assert "o is an N:1 lookup (o.customer_id is a key)" in verdict.evidence
    wider = analyse(C15_SQL.replace("(customer_id)", "(customer_id, created)"), ORDERS_FACTS, dialect="postgres")
    assert wider.verdict == "amplified" and wider.fanning == ("o",), wider.evidence
    qualified = C15_SQL.replace("ON (customer_id) * FROM orders", "ON (x.customer_id) * FROM orders x")
    assert analyse(qualified, ORDERS_FACTS, dialect="postgres").verdict == "value_repeats"


def test_c15_distinct_on_on_a_real_postgres(pg_dsn: str) -> None:
    """c15 on PostgreSQL through ``wrap``: the guard's own verdict is ``value_repeats`` and 30 rows stay."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        raw.execute("DROP SCHEMA IF EXISTS c15 CASCADE")
        raw.execute("CREATE SCHEMA c15")
        raw.execute("SET search_path TO c15")
        raw.execute("CREATE TABLE customers (id int PRIMARY KEY, city text)")
        raw.execute("CREATE TABLE orders (id int PRIMARY KEY, customer_id int REFERENCES customers (id), created date)")
        raw.execute(
            "INSERT INTO customers SELECT g, CASE WHEN g % 2 = 0 THEN 'Haifa' ELSE 'Lyon' END "
            "FROM generate_series(1, 30) g"
        )
        raw.execute("INSERT INTO orders SELECT g, (g % 30) + 1, date '2024-01-01' + g FROM generate_series(1, 90) g")
        plain = raw.execute(C15_SQL).fetchall()
        con = guarded_sqlite.wrap(raw)
        cur = con.cursor()
        cur.execute(C15_SQL)
        rows = cur.fetchall()
        assert Counter(rows) == Counter(plain) and len(rows) == 30
        assert cur.guard_report.provenance == "value_repeats", cur.guard_report.provenance_evidence
        raw.execute("DROP SCHEMA c15 CASCADE")
