"""Repros c22 and c24 (``../shared/repros/correctness/``): where an inflated aggregate decides which rows
are served (HAVING, ORDER BY with LIMIT, an outer query reading a subquery or CTE), the default preset
flags the statement with its rows as written and ``"text_to_sql"`` serves the truth: never a third
answer, never silence.

The truth is computed independently: the same statement over ``orders`` filtered by a semi-join on
``items``, which counts each order once.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import guarded_sqlite

SCHEMA = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT REFERENCES customers(id), total REAL);
CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT REFERENCES orders(id), sku TEXT);
INSERT INTO customers VALUES (1, 'ana'), (2, 'bo'), (3, 'cy');
INSERT INTO orders VALUES {orders};
INSERT INTO items(order_id, sku) VALUES (1, 'a'), (1, 'b'), (1, 'c'), (2, 'x'), (3, 'p'), (3, 'q'), (4, 'r');
"""
# cy's two orders have equal totals in the first data set and differ in the second: which groups the
# corrected query serves, and whether they hold a repeated order, changes with it.
DATA = {
    "data 1": "(1, 1, 100), (2, 2, 150), (3, 3, 60), (4, 3, 60)",
    "data 2": "(1, 1, 100), (2, 2, 150), (3, 3, 60), (4, 3, 150)",
}
J = "FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id"
T = "FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.id IN (SELECT order_id FROM items)"
SHAPES = {
    "ranking by an alias": "SELECT c.name, SUM(o.total) AS spent {F} GROUP BY c.id ORDER BY spent DESC LIMIT 1",
    "ranking by the aggregate": "SELECT c.name {F} GROUP BY c.id ORDER BY SUM(o.total) DESC LIMIT 1",
    "ranking by position": "SELECT c.name, SUM(o.total) {F} GROUP BY c.id ORDER BY 2 DESC, c.id LIMIT 1",
    "HAVING": "SELECT c.name {F} GROUP BY c.id HAVING SUM(o.total) > 140 ORDER BY c.name",
    "HAVING by an alias": "SELECT c.name, SUM(o.total) AS s {F} GROUP BY c.id HAVING s > 140 ORDER BY c.name",
    "a derived table read by MAX": "SELECT MAX(s) FROM (SELECT c.id, SUM(o.total) AS s {F} GROUP BY c.id)",
    "a CTE filtered by AVG": (
        "WITH t AS (SELECT c.name, AVG(o.total) AS a {F} GROUP BY c.id) SELECT name FROM t WHERE a > 100 ORDER BY name"
    ),
    "an IN subquery": (
        "SELECT name FROM customers WHERE id IN (SELECT c.id {F} GROUP BY c.id HAVING SUM(o.total) >= 150) ORDER BY 1"
    ),
    "a scalar subquery": "SELECT (SELECT SUM(o.total) {F}) AS everything",
    "ordered by it, no LIMIT": "SELECT c.name {F} GROUP BY c.id ORDER BY SUM(o.total) DESC, c.id",
}


def database(data: str) -> sqlite3.Connection:
    raw = sqlite3.connect(":memory:")
    raw.executescript(SCHEMA.format(orders=DATA[data]))
    return raw


def guarded(raw: sqlite3.Connection, preset: str) -> Any:
    con = guarded_sqlite.connect(":memory:", guard=preset)  # type: ignore[arg-type]
    raw.backup(con)
    return con


@pytest.mark.parametrize("data", sorted(DATA))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_c24_an_inflated_aggregate_that_decides_the_rows_is_flagged_or_corrected(data: str, shape: str) -> None:
    """c24: under ``"patch"`` the statement's rows with a finding that says the inflation chose them;
    under ``"text_to_sql"`` the truth. Where the inflation changes nothing served, nothing is flagged."""
    raw = database(data)
    sql, truth_sql = SHAPES[shape].format(F=J), SHAPES[shape].format(F=T)
    written, truth = raw.execute(sql).fetchall(), raw.execute(truth_sql).fetchall()
    for preset in ("patch", "text_to_sql"):
        cur = guarded(raw, preset).execute(sql)
        served, report = cur.fetchall(), cur.guard_report
        if written == truth:
            assert served == written, preset
            continue
        assert report.trigger == "aggregate_fanout", (preset, report.decisions)
        if preset == "patch":
            assert served == written
            assert report.action == "none"
        else:
            assert served == truth, report.decisions
            assert report.action == "aggregate_defanned"


def test_c24_the_finding_says_which_clause_chose_the_rows() -> None:
    """c24: the finding and the feedback name the clause the inflated values chose the rows by."""
    cur = guarded(database("data 1"), "patch").execute(SHAPES["HAVING"].format(F=J))
    cur.fetchall()
    (finding,) = cur.guard_report.aggregates
    assert finding.chose == "HAVING"
    assert "by HAVING it chose other rows" in cur.guard_report.feedback()
    cur = guarded(database("data 1"), "patch").execute(SHAPES["a derived table read by MAX"].format(F=J))
    cur.fetchall()
    assert cur.guard_report.aggregates[0].chose == "an outer query"


def test_c24_no_flag_where_the_inflation_chooses_the_same_rows() -> None:
    """c24, no-op: a HAVING that the inflated and the true sums pass alike serves the same rows; the
    statement is not flagged although a group's order is counted three times."""
    raw = database("data 1")
    sql = f"SELECT c.name {J} GROUP BY c.id HAVING SUM(o.total) > 10 ORDER BY c.name"
    cur = guarded(raw, "text_to_sql").execute(sql)
    assert cur.fetchall() == raw.execute(sql).fetchall()
    assert cur.guard_report.trigger is None


def test_c24_a_correlated_subquery_is_left_as_written_and_says_why() -> None:
    """c24: a subquery reading the outer query's columns cannot be checked on its own: rows as
    written, and a decision saying so (not silence)."""
    raw = database("data 1")
    sql = (
        "SELECT x.name, (SELECT SUM(o.total) FROM orders o JOIN items i ON i.order_id = o.id "
        "WHERE o.customer_id = x.id) FROM customers x ORDER BY x.id"
    )
    cur = guarded(raw, "text_to_sql").execute(sql)
    assert cur.fetchall() == raw.execute(sql).fetchall()
    reasons = [d.reason for d in cur.guard_report.decisions if d.rule == "aggregate"]
    assert reasons and "outer query" in reasons[0]


@pytest.mark.parametrize("parameters", [(140, 1), {"least": 140, "n": 1}])
def test_c24_limit_and_having_parameters_are_bound_to_the_check_of_every_group(parameters: Any) -> None:
    """c24 (R5): ``HAVING ... > ? LIMIT ?``: the check of every group leaves out the parameters of the
    clauses it drops (positional) or binds them by name; the truth is served."""
    raw = database("data 1")
    named = isinstance(parameters, dict)
    tail = (
        "HAVING SUM(o.total) > :least ORDER BY c.name LIMIT :n"
        if named
        else ("HAVING SUM(o.total) > ? ORDER BY c.name LIMIT ?")
    )
    sql = f"SELECT c.name {J} GROUP BY c.id {tail}"
    truth = raw.execute(f"SELECT c.name {T} GROUP BY c.id {tail}", parameters).fetchall()
    cur = guarded(raw, "text_to_sql").execute(sql, parameters)
    assert cur.fetchall() == truth == [("bo",)]
    assert cur.guard_report.action == "aggregate_defanned"


def test_c24_paging_with_limit_parameters_is_checked() -> None:
    """R5: a paging query over groups with ``LIMIT ? OFFSET ?`` was not checked (its bounded check bound
    a parameter too many); it is now, as a whole check binding every parameter."""
    raw = database("data 2")
    sql = f"SELECT c.id, SUM(o.total) {J} GROUP BY c.id ORDER BY c.id LIMIT ? OFFSET ?"
    truth = raw.execute(f"SELECT c.id, SUM(o.total) {T} GROUP BY c.id ORDER BY c.id LIMIT ? OFFSET ?", (2, 0))
    cur = guarded(raw, "text_to_sql").execute(sql, (2, 0))
    assert cur.fetchall() == truth.fetchall() == [(1, 100.0), (2, 150.0)]
    assert cur.guard_report.action == "aggregate_defanned"


C22 = """
CREATE TABLE c(id INTEGER PRIMARY KEY, v INTEGER);
CREATE TABLE o(id INTEGER PRIMARY KEY, cid INTEGER);
INSERT INTO c VALUES (1, 5), (2, -5), (3, 4), (4, -2);
INSERT INTO o VALUES (1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2), (7, 3), (8, 4), (9, 4), (10, 4);
"""
C22_SQL = "SELECT c.id, SUM(c.v) AS s FROM c JOIN o ON o.cid = c.id GROUP BY c.id HAVING s > -10 ORDER BY c.id LIMIT 3"
C22_TRUTH = [(1, 5), (2, -5), (3, 4)]


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_c22_paging_bound_reads_an_aggregate_alias_in_having(engine: str) -> None:
    """c22: ``HAVING s > -10`` (s a SUM's alias) decides which groups a page holds: the check is not
    bounded to the groups the inflated filter let through, and the truth is served."""
    if engine == "sqlite":
        con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
        con.executescript(C22)
        cur = con.execute(C22_SQL)
    else:
        duckdb = pytest.importorskip("duckdb")
        raw = duckdb.connect()
        for statement in C22.strip().split(";"):
            if statement.strip():
                raw.execute(statement)
        cur = guarded_sqlite.wrap(raw, guard="text_to_sql").cursor()
        cur.execute(C22_SQL)
    assert [tuple(row) for row in cur.fetchall()] == C22_TRUTH
    assert cur.guard_report.action == "aggregate_defanned"


def test_c24_a_subquerys_confirmation_is_kept_while_the_data_is_unchanged() -> None:
    """A statement whose subquery was corrected is decided again from its kept rows while nothing it
    read changed, and checked anew after a write."""
    raw = database("data 2")
    con = guarded(raw, "text_to_sql")
    sql, truth_sql = (SHAPES["a derived table read by MAX"].format(F=f) for f in (J, T))
    first = con.execute(sql)
    assert first.fetchall() == raw.execute(truth_sql).fetchall() == [(210.0,)]
    again = con.execute(sql)
    assert again.fetchall() == [(210.0,)]
    assert any("confirmation reused" in d.reason for d in again.guard_report.decisions)
    con.execute("UPDATE orders SET total = 500 WHERE id = 2")
    raw.execute("UPDATE orders SET total = 500 WHERE id = 2")
    after = con.execute(sql)
    assert after.fetchall() == raw.execute(truth_sql).fetchall() == [(500.0,)]
    assert not any("confirmation reused" in d.reason for d in after.guard_report.decisions)


def test_c24_an_inflated_having_that_filters_out_every_group_is_checked() -> None:
    """D3 (found by the deciding oracle): ``HAVING SUM(o.total) > 0`` where the inflated sum is negative
    serves no rows at all; the empty result is checked too: flagged under ``"patch"`` (the trigger
    says the aggregate, not just "empty"), the truth's one group under ``"text_to_sql"``."""
    setup = (
        "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total REAL);"
        "CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku TEXT);"
        "INSERT INTO customers VALUES (1, 'ana'); INSERT INTO orders VALUES (1, 1, 10), (2, 1, -5);"
        "INSERT INTO items(order_id) VALUES (1), (2), (2), (2);"
    )
    sql = f"SELECT c.id {J} GROUP BY c.id HAVING SUM(o.total) > 0"
    for preset, served in (("patch", []), ("text_to_sql", [(1,)])):
        con = guarded_sqlite.connect(":memory:", guard=preset)  # type: ignore[call-overload]
        con.executescript(setup)
        cur = con.execute(sql)
        assert cur.fetchall() == served
        assert cur.guard_report.trigger == "aggregate_fanout"
    # No-op: an empty result of an aggregate that only shows values stays an empty result, unchecked.
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(setup)
    cur = con.execute(f"SELECT c.id, SUM(o.total) {J} WHERE c.id = 2 GROUP BY c.id")
    assert cur.fetchall() == []
    assert cur.guard_report.trigger == "empty_result"
    (decision,) = cur.guard_report.decisions  # routine: said, not run (issue 42 item 2)
    assert decision.reason == "not at risk: no rows, and the aggregate only shows values"


def test_c24_a_correlated_subquery_that_filters_out_every_row_says_why() -> None:
    """Found by the deciding oracle: a correlated ``EXISTS (... HAVING SUM(o.total) > 10)`` whose inflated
    sum filters out every customer served no rows with only ``empty_result``; the subquery cannot be
    checked on its own, and the decision says so, as for a result with rows."""
    setup = (
        "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total REAL);"
        "CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku TEXT);"
        "INSERT INTO customers VALUES (1, 'ana'), (2, 'bo'); INSERT INTO orders VALUES (1, 2, -5), (2, 2, 25);"
        "INSERT INTO items(order_id) VALUES (1), (1), (1), (2);"
    )
    sql = (
        "SELECT x.id FROM customers x WHERE EXISTS (SELECT 1 FROM orders o JOIN items i ON i.order_id = o.id "
        "WHERE o.customer_id = x.id GROUP BY o.customer_id HAVING SUM(o.total) > 10) ORDER BY x.id"
    )
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(setup)
    cur = con.execute(sql)
    assert cur.fetchall() == []
    reasons = [d.reason for d in cur.guard_report.decisions if d.rule == "aggregate"]
    assert reasons and "outer query" in reasons[0], cur.guard_report.decisions
