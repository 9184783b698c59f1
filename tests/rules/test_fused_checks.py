"""Issue 44: the statement corrected and its SELECTs' checks of every group in one query on SQLite
(``guarded_sqlite._analysis.fusing``), split back into what the separate queries returned: the same
decisions, report and served rows as the queries run on their own, with one check statement where there
were two; and the shapes where fusion must not apply run the queries on their own, as before."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any
from unittest import mock

import pytest
import sqlglot

import guarded_sqlite
from guarded_sqlite import GuardPolicy
from guarded_sqlite._analysis import planning
from guarded_sqlite._analysis.schema import read_sqlite_schema

SCHEMA = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT REFERENCES customers(id), total REAL);
CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT REFERENCES orders(id), sku TEXT);
INSERT INTO customers VALUES (1, 'ana'), (2, 'bo'), (3, 'cy');
INSERT INTO orders VALUES (1, 1, 100), (2, 2, 150), (3, 3, 60), (4, 3, 150);
INSERT INTO items(order_id, sku) VALUES (1, 'a'), (1, 'b'), (1, 'c'), (2, 'x'), (3, 'p'), (3, 'q'), (4, 'r');
"""
J = "FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id"
DERIVED = f"SELECT MAX(s) FROM (SELECT c.name, SUM(o.total) AS s {J} GROUP BY c.id)"
FUSED = {
    "a derived table read by MAX": DERIVED,
    "a CTE filtered by AVG": (
        f"WITH t AS (SELECT c.name, AVG(o.total) AS a {J} GROUP BY c.id) SELECT name FROM t WHERE a > 100"
    ),
    "a scalar subquery": f"SELECT (SELECT SUM(o.total) {J}) AS everything",
    "two derived tables": (
        f"SELECT a.s - b.s FROM (SELECT SUM(o.total) AS s {J} WHERE c.id = 1) a, "
        f"(SELECT SUM(o.total) AS s {J} WHERE c.id = 3) b"
    ),
    "a UNION ALL of two grouped branches": (
        f"SELECT c.id, SUM(o.total) {J} WHERE c.id < 3 GROUP BY c.id UNION ALL "
        f"SELECT c.id, SUM(o.total) {J} WHERE c.id = 3 GROUP BY c.id"
    ),
    "joined back to a filter": (
        f"SELECT x.name FROM customers x JOIN (SELECT c.id, SUM(o.total) AS s {J} GROUP BY c.id) d ON d.id = x.id "
        "WHERE d.s > 200"
    ),
}
NOT_FUSED = {
    # The statement orders or pages its rows: inside the fused compound it would be a derived table,
    # whose order SQLite does not promise to keep.
    "ranked by the outer query": (
        f"SELECT name FROM (SELECT c.name, SUM(o.total) AS s {J} GROUP BY c.id) ORDER BY s DESC LIMIT 1"
    ),
    # The SELECT at risk has HAVING: its check of every group leaves it out, other rows than it serves.
    "a subquery with HAVING": f"SELECT COUNT(*) FROM (SELECT c.id {J} GROUP BY c.id HAVING SUM(o.total) > 200)",
    # The outer SELECT has its own aggregate at risk: its check is planned on the corrected statement.
    "an outer aggregate at risk too": (
        f"SELECT SUM(o.total) {J} JOIN (SELECT c2.id, SUM(o2.total) AS s FROM customers c2 JOIN orders o2 "
        "ON o2.customer_id = c2.id JOIN items i2 ON i2.order_id = o2.id GROUP BY c2.id) d ON d.id = c.id "
        "WHERE d.s > 200"
    ),
    # Its columns cannot be counted from its text.
    "SELECT *": f"SELECT * FROM (SELECT c.name, SUM(o.total) AS s {J} GROUP BY c.id)",
}


def database(schema: str = SCHEMA) -> sqlite3.Connection:
    raw = sqlite3.connect(":memory:")
    raw.executescript(schema)
    return raw


@contextmanager
def unfused() -> Iterator[None]:
    """Plans made meanwhile run the statement corrected and each check of every group on their own."""
    with mock.patch.object(planning, "fused_check", lambda *args: None):
        yield


def comparable(report: Any) -> Any:
    """The report without its timings."""
    return dataclasses.replace(report, detect_us=None, patch_ms=None)


def run(
    raw: sqlite3.Connection, sql: str, guard: Any, fused: bool, params: Any = None, **connect: Any
) -> tuple[list[Any], Any, list[str]]:
    """The rows served, the report and the guard's own generated queries (they name ``__gs_``) of one
    first execution of ``sql`` on a copy of ``raw``."""
    con = guarded_sqlite.connect(":memory:", guard=guard, **connect)
    raw.backup(con)
    traced: list[str] = []
    con.set_trace_callback(traced.append)
    try:
        with nullcontext() if fused else unfused():
            cur = con.execute(sql) if params is None else con.execute(sql, params)
            rows = cur.fetchall()
        return rows, cur.guard_report, [s for s in traced if "__gs_" in s]
    finally:
        con.close()


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize("shape", sorted(FUSED))
def test_one_check_statement_and_the_same_outcome(shape: str, preset: str) -> None:
    """The statement corrected and its SELECTs' checks of every group run as one query; rows served and
    report are those of the queries run on their own."""
    raw = database()
    sql = FUSED[shape]
    rows, report, checks = run(raw, sql, preset, fused=True)
    before_rows, before, before_checks = run(raw, sql, preset, fused=False)
    assert len(checks) == 1 and checks[0].startswith('WITH "__gs_f0"'), checks
    assert rows == before_rows
    assert comparable(report) == comparable(before)
    assert report.trigger == "aggregate_fanout", report.decisions  # the data inflates every shape
    assert len(before_checks) >= 2  # without fusion: the statement corrected, then each check


def test_the_benchmarks_derived_table_runs_one_check_at_its_first_execution() -> None:
    """bench_aggregates' derived table: its first execution (kept confirmations dropped) runs one check
    statement; the finding is the one the separate queries make."""
    con = guarded_sqlite.connect(":memory:")
    con.executescript(SCHEMA)
    con.execute(DERIVED).fetchall()
    con._self_guard.confirmations.clear()
    traced: list[str] = []
    con.set_trace_callback(traced.append)
    cur = con.execute(DERIVED)
    assert cur.fetchall() == [(300.0,)]
    checks = [s for s in traced if "__gs_" in s]
    assert len(checks) == 1, checks
    (finding,) = cur.guard_report.aggregates
    assert (finding.written, finding.corrected, finding.chose) == (300.0, 100.0, "an outer query")
    # Repeated on unchanged data: the kept confirmation, no check at all.
    traced.clear()
    again = con.execute(DERIVED)
    assert again.fetchall() == [(300.0,)]
    assert not [s for s in traced if "__gs_" in s]
    assert any("confirmation reused" in d.reason for d in again.guard_report.decisions)


def test_the_kept_confirmation_serves_the_corrected_part() -> None:
    """Under ``"text_to_sql"`` a repeated statement is served the corrected rows kept from the fused
    query's first part, as from the corrected query run on its own."""
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(SCHEMA)
    first = con.execute(DERIVED)
    assert first.fetchall() == [(210.0,)]
    again = con.execute(DERIVED)
    assert again.fetchall() == [(210.0,)]
    assert again.guard_report.action == "aggregate_defanned"
    assert any("confirmation reused" in d.reason for d in again.guard_report.decisions)


@pytest.mark.parametrize("shape", sorted(NOT_FUSED))
def test_shapes_not_fused_run_their_queries_on_their_own(shape: str) -> None:
    """No-op: where fusion would not be exact, the plan has no fused query and the guard runs what it ran
    before, with the same outcome."""
    raw = database()
    sql = NOT_FUSED[shape]
    rows, report, checks = run(raw, sql, "text_to_sql", fused=True)
    before_rows, before, before_checks = run(raw, sql, "text_to_sql", fused=False)
    assert not any(check.startswith('WITH "__gs_f') for check in checks)
    assert checks == before_checks
    assert rows == before_rows
    assert comparable(report) == comparable(before)


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb", "postgres"])
def test_the_plan_fuses_on_sqlite_only(dialect: str) -> None:
    """At the plan level: SQLite's plan has the fused query and its parts' widths (the statement's one
    column, the derived table's two and five counts); other engines keep the separate queries (whether
    a CTE is evaluated once is the engine's choice there)."""
    raw = database()
    found = planning.aggregate_plan(sqlglot.parse_one(DERIVED, read=dialect), read_sqlite_schema(raw), dialect)
    assert found.scopes and found.check_sql is not None
    if dialect == "sqlite":
        assert found.fused_sql is not None and found.fused_sql.startswith('WITH "__gs_f0"')
        assert found.fused_widths == (1, 7)
    else:
        assert found.fused_sql is None and found.fused_widths == ()


@pytest.mark.parametrize("groups", [5, 7])
def test_a_part_over_row_cap_says_what_its_query_would_have_said(groups: int) -> None:
    """``row_cap`` holds for each part as for each query: a check of every group with more rows says so
    (5 groups: the fused rows, 6, fit in two parts of 3 and are split); where the fused rows are more than
    the parts may hold together (7 groups: 8 rows), the queries run on their own and say it themselves."""
    schema = "\n".join(
        [
            "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);",
            "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total REAL);",
            "CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT);",
            *(f"INSERT INTO customers VALUES ({c}, 'c{c}');" for c in range(1, groups + 1)),
            *(f"INSERT INTO orders VALUES ({c}, {c}, {10 * c});" for c in range(1, groups + 1)),
            *(f"INSERT INTO items(order_id) VALUES ({c}), ({c});" for c in range(1, groups + 1)),
        ]
    )
    raw = database(schema)
    policy = GuardPolicy(row_cap=3, provenance="text_to_sql")
    rows, report, checks = run(raw, DERIVED, policy, fused=True)
    before_rows, before, _ = run(raw, DERIVED, policy, fused=False)
    assert rows == before_rows == [(10.0 * groups * 2,)]
    assert comparable(report) == comparable(before)
    assert any("returned more than row_cap=3 rows" in d.reason for d in report.decisions), report.decisions
    assert checks[0].startswith('WITH "__gs_f0"')
    assert len(checks) == (1 if groups == 5 else 3)


def test_declared_types_convert_the_same_columns() -> None:
    """``detect_types``: each part has columns of its own, so a converter of the statement's column never
    reads a check's counts, and the columns served convert as the corrected query's do."""
    sqlite3.register_converter("GSFUSE", lambda value: "<" + value.decode() + ">")
    schema = SCHEMA.replace("name TEXT", "name GSFUSE")
    raw = database(schema)
    sql = f"SELECT name, s FROM (SELECT c.name, SUM(o.total) AS s {J} GROUP BY c.id) WHERE s > 0"
    for preset in ("patch", "text_to_sql"):
        rows, report, checks = run(raw, sql, preset, fused=True, detect_types=sqlite3.PARSE_DECLTYPES)
        before_rows, before, _ = run(raw, sql, preset, fused=False, detect_types=sqlite3.PARSE_DECLTYPES)
        assert checks[0].startswith('WITH "__gs_f0"')
        assert rows == before_rows
        assert comparable(report) == comparable(before)
    assert sorted(rows) == [("<ana>", 100.0), ("<bo>", 150.0), ("<cy>", 210.0)]


INNER = f"SELECT c.id, SUM(o.total) AS s {J} WHERE c.id >= {{a}} GROUP BY c.id"
BOUND = {
    "positional, inside": (f"SELECT MAX(s) FROM ({INNER.format(a='?')})", (1,)),
    "positional, outside": (f"SELECT MAX(s) FROM ({INNER.format(a='1')}) WHERE id <= ?", (3,)),
    "named, both sides": (f"SELECT MAX(s) FROM ({INNER.format(a=':a')}) WHERE id <= :b", {"a": 1, "b": 3}),
    "numbered, both sides": (f"SELECT MAX(s) FROM ({INNER.format(a='?2')}) WHERE id <= ?1", (3, 1)),
}


@pytest.mark.parametrize("bound", sorted(BOUND))
def test_parameters_inside_and_outside_the_subquery_bind_alike(bound: str) -> None:
    """The fused query holds every parameter the statement holds, and binds them as the statement does."""
    raw = database()
    sql, params = BOUND[bound]
    rows, report, checks = run(raw, sql, "text_to_sql", fused=True, params=params)
    before_rows, before, _ = run(raw, sql, "text_to_sql", fused=False, params=params)
    assert len(checks) == 1 and checks[0].startswith('WITH "__gs_f0"'), checks
    assert rows == before_rows == [(210.0,)]
    assert comparable(report) == comparable(before)
