"""``transparent.flattened``: derived tables, CTEs and views that only join and filter, read through into
the SELECT that reads them (issue 42, c35). Fixture pairs of input and expected SQL, no-op cases
included, and a check on SQLite that every rewrite returns the same rows."""

from __future__ import annotations

import sqlite3

import pytest
import sqlglot
from hypothesis import event, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from guarded_sqlite._analysis.transparent import flattened

VIEWS = {
    "order_lines": (
        "SELECT o.id AS order_id, o.customer_id, o.total, i.sku FROM orders o JOIN items i ON i.order_id = o.id"
    ),
    "big_orders": "SELECT id, customer_id, total FROM orders WHERE total > 90",
    "per_customer": "SELECT customer_id, SUM(total) AS s FROM orders GROUP BY customer_id",
}


def view_body(table: exp.Table) -> exp.Select | None:
    body = VIEWS.get(table.name.lower())
    return None if body is None else sqlglot.parse_one(body, read="sqlite")  # type: ignore[return-value]


REWRITTEN = [
    (
        "SELECT c.name, SUM(l.total) FROM customers c JOIN order_lines l ON l.customer_id = c.id GROUP BY c.id",
        "SELECT c.name, SUM(l__o.total) FROM customers AS c CROSS JOIN orders AS l__o JOIN items AS l__i "
        "ON l__i.order_id = l__o.id WHERE l__o.customer_id = c.id GROUP BY c.id",
    ),
    (
        "SELECT SUM(total) FROM order_lines",
        "SELECT SUM(order_lines__o.total) FROM orders AS order_lines__o JOIN items AS order_lines__i "
        "ON order_lines__i.order_id = order_lines__o.id",
    ),
    (
        "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN (SELECT order_id FROM items) i ON i.order_id = o.id GROUP BY c.id",
        "SELECT c.name, SUM(o.total) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
        "CROSS JOIN items AS i__items WHERE i__items.order_id = o.id GROUP BY c.id",
    ),
    (
        "WITH t AS (SELECT c.name, o.total FROM customers c JOIN orders o ON o.customer_id = c.id) "
        "SELECT name, SUM(total) AS s FROM t GROUP BY name",
        "WITH t AS (SELECT c.name, o.total FROM customers AS c JOIN orders AS o ON o.customer_id = c.id) "
        "SELECT t__c.name, SUM(t__o.total) AS s FROM customers AS t__c JOIN orders AS t__o "
        "ON t__o.customer_id = t__c.id GROUP BY t__c.name",
    ),
    (
        "SELECT b.total * 2 FROM big_orders b",
        "SELECT b__orders.total * 2 FROM orders AS b__orders WHERE b__orders.total > 90",
    ),
    (  # a derived table without an alias (SQLite takes one), its SELECT's only source
        "SELECT SUM(total) FROM (SELECT o.total FROM orders o JOIN items i ON i.order_id = o.id) WHERE total > 1",
        "SELECT SUM(subquery__o.total) FROM orders AS subquery__o JOIN items AS subquery__i "
        "ON subquery__i.order_id = subquery__o.id WHERE subquery__o.total > 1",
    ),
]

LEFT_ALONE = [
    # LEFT-joined: its NULL-extended rows would become a filter.
    "SELECT c.name, SUM(l.total) FROM customers c LEFT JOIN order_lines l ON l.customer_id = c.id GROUP BY c.id",
    # Grouped: not transparent.
    "SELECT c.name, p.s FROM customers c JOIN per_customer p ON p.customer_id = c.id",
    # A select-list alias that takes a name of the source's columns: ORDER BY total means the alias.
    "SELECT SUM(total) AS total FROM order_lines ORDER BY total",
    # An unqualified column beside another source: whose it is is not known here.
    "SELECT SUM(total) FROM order_lines JOIN customers c ON c.id = customer_id",
    # Correlated derived table: its body reads the outer query.
    "SELECT c.name, (SELECT SUM(x.v) FROM (SELECT t.v FROM t WHERE t.c = c.id) x) FROM customers c",
    # DISTINCT, LIMIT, *: not plain joins and filters.
    "SELECT SUM(d.total) FROM (SELECT DISTINCT customer_id, total FROM orders) d",
    "SELECT SUM(d.total) FROM (SELECT total FROM orders LIMIT 3) d",
    "SELECT SUM(d.total) FROM (SELECT * FROM orders) d",
    # A RIGHT JOIN after it: the source's condition in WHERE would drop the rows it NULL-extends.
    "SELECT c.name, l.total FROM order_lines l JOIN customers c ON c.id = l.customer_id "
    "RIGHT JOIN orders o ON o.id = 1",
    # A derived table without an alias beside another source: its columns' owner is not known here.
    "SELECT SUM(total) FROM (SELECT o.total FROM orders o JOIN items i ON i.order_id = o.id) JOIN customers c ON 1",
    # A subquery's unqualified column named like the source's output may be that output (SQLite looks
    # outward for a name its own tables lack): read through, it would be another table's column.
    "SELECT SUM(l.total) FROM order_lines l WHERE EXISTS (SELECT 1 FROM customers c WHERE c.id < total)",
    # A plain table and no source to read through.
    "SELECT SUM(o.total) FROM orders o JOIN customers c ON c.id = o.customer_id",
]


@pytest.mark.parametrize(("sql", "expected"), REWRITTEN)
def test_a_transparent_source_is_read_through(sql: str, expected: str) -> None:
    result = flattened(sqlglot.parse_one(sql, read="sqlite"), view_body)
    assert result is not None and result.sql("sqlite") == expected


@pytest.mark.parametrize("sql", LEFT_ALONE)
def test_other_sources_are_left_as_written(sql: str) -> None:
    assert flattened(sqlglot.parse_one(sql, read="sqlite"), view_body) is None


@pytest.mark.parametrize(("sql", "expected"), REWRITTEN)
def test_every_rewrite_returns_the_same_rows(sql: str, expected: str) -> None:
    """On a shop where orders repeat per item: the rewritten query is the same query, not an approximation."""
    db = sqlite3.connect(":memory:")
    db.executescript(
        "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total INT);"
        "CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku TEXT);"
        "CREATE TABLE t(c INT, v INT);"
        "INSERT INTO customers VALUES (1, 'ana'), (2, 'bo'), (3, 'cy');"
        "INSERT INTO orders VALUES (1, 1, 100), (2, 2, 150), (3, 3, 60), (4, 3, 70), (5, NULL, 95);"
        "INSERT INTO items(order_id, sku) VALUES (1, 'a'), (1, 'b'), (2, 'x'), (3, 'p'), (5, 'q');"
    )
    for name, body in VIEWS.items():
        db.execute(f"CREATE VIEW {name} AS {body}")
    assert sorted(db.execute(expected).fetchall()) == sorted(db.execute(sql).fetchall())


# --------------------------------------------------------------------------------------------------
# Property: a rewrite never changes a query's rows
# --------------------------------------------------------------------------------------------------


_BODIES = [
    "SELECT o.id AS oid, o.customer_id AS cid, o.total AS v FROM orders o",
    "SELECT o.id AS oid, o.customer_id AS cid, o.total AS v FROM orders o WHERE o.total > 60",
    "SELECT o.id AS oid, o.customer_id AS cid, o.total AS v FROM orders o JOIN items i ON i.order_id = o.id",
    "SELECT o.id AS oid, o.customer_id AS cid, i.id AS v FROM orders o JOIN items i ON i.order_id = o.id "
    "WHERE i.sku <> 'b'",
    "SELECT o.id AS oid, c.id AS cid, o.total + c.id AS v FROM customers c, orders o WHERE o.customer_id = c.id",
]
_FORMS = ["derived", "view", "cte"]


@st.composite
def _queries(draw: st.DrawFn) -> tuple[str, str]:
    body = draw(st.sampled_from(_BODIES))
    form = draw(st.sampled_from(_FORMS))
    source = {"derived": f"({body})", "view": "lines", "cte": "t"}[form]
    join = draw(st.sampled_from(["FROM", "JOIN", "COMMA"]))
    pick = draw(st.sampled_from(["s.v", "SUM(s.v)", "COUNT(*)", "s.oid, s.v", "c.name, SUM(s.v)", "MAX(s.cid)"]))
    where = draw(st.sampled_from(["", "s.v > 10", "c.id = 1", "s.oid IN (1, 2)"]))
    if join == "FROM":
        from_clause = f"FROM {source} s JOIN customers c ON c.id = s.cid"
    elif join == "JOIN":
        from_clause = f"FROM customers c JOIN {source} s ON s.cid = c.id"
    else:
        from_clause = f"FROM customers c, {source} s"
        where = " AND ".join(part for part in ("s.cid = c.id", where) if part)
    grouped = "GROUP BY c.id" if any(f in pick for f in ("SUM", "COUNT", "MAX")) else ""
    if "c.name" in pick:
        grouped = "GROUP BY c.id, c.name"
    sql = f"SELECT {pick} {from_clause}" + (f" WHERE {where}" if where else "") + (f" {grouped}" if grouped else "")
    if form == "cte":
        sql = f"WITH t AS ({body}) {sql}"
    return sql, body


@settings(max_examples=150, deadline=None)
@given(_queries(), st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["a", "b", "c"])), max_size=8))
def test_property_a_rewrite_returns_the_same_rows(query: tuple[str, str], items: list[tuple[int, str]]) -> None:
    """Whatever the source's form (derived table, view, CTE), its body, its join and the outer query's
    shape: the rewritten query has the same rows as a multiset (checked on SQLite), or is not rewritten."""
    sql, body = query
    db = sqlite3.connect(":memory:")
    db.executescript(
        "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total INT);"
        "CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku TEXT);"
        "INSERT INTO customers VALUES (1, 'ana'), (2, 'bo'), (3, 'cy');"
        "INSERT INTO orders VALUES (1, 1, 100), (2, 2, 50), (3, 3, 70), (4, 3, 10), (5, NULL, 95);"
    )
    db.executemany("INSERT INTO items(order_id, sku) VALUES (?, ?)", items)
    db.execute(f"CREATE VIEW lines AS {body}")
    views = {"lines": sqlglot.parse_one(body, read="sqlite")}

    def lines(table: exp.Table) -> exp.Select | None:
        found = views.get(table.name.lower())
        return None if found is None else found.copy()  # type: ignore[return-value]

    result = flattened(sqlglot.parse_one(sql, read="sqlite"), lines)
    event("rewritten" if result is not None else "left as written")
    if result is None:
        return
    rewritten = result.sql("sqlite")
    assert sorted(db.execute(rewritten).fetchall(), key=repr) == sorted(db.execute(sql).fetchall(), key=repr), rewritten


_SHOP = (
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER);"
    "CREATE TABLE items (id INTEGER PRIMARY KEY, order_id INTEGER);"
    "INSERT INTO orders VALUES (1, 10), (2, 5);"
    "INSERT INTO items VALUES (1, 1), (2, 1), (3, 1), (4, 2);"
    "CREATE VIEW lines AS SELECT o.id, o.total FROM orders o JOIN items i ON i.order_id = o.id;"
    "CREATE VIEW lines_over AS SELECT * FROM lines WHERE total > 0;"
    "CREATE VIEW lines_star AS SELECT * FROM orders o JOIN items i ON i.order_id = o.id;"
    "CREATE VIEW distinct_lines AS SELECT DISTINCT o.id, o.total FROM orders o JOIN items i ON i.order_id = o.id;"
    "CREATE VIEW all_orders AS SELECT * FROM orders;"
)
_JOIN = "orders o JOIN items i ON i.order_id = o.id"


@pytest.mark.parametrize(
    ("sql", "rows", "decision"),
    [
        # hiding a join and not read through: said, and served as written (each order once per item: 35)
        (f"SELECT SUM(total) FROM (SELECT * FROM {_JOIN})", 35, "aggregate not analysed: "),
        (f"WITH x AS (SELECT o.* FROM {_JOIN}) SELECT SUM(total) FROM x", 35, "aggregate not analysed: "),
        ("SELECT SUM(total) FROM lines_star", 35, "aggregate not analysed: "),
        ("SELECT SUM(total) FROM lines_over", 35, "aggregate not analysed: "),  # a view over a joining view
        (f"SELECT SUM(total) FROM (SELECT total FROM orders UNION ALL SELECT o.total FROM {_JOIN})", 50,
         "aggregate not analysed: "),
        # read through and corrected: a derived table without an alias
        (f"SELECT SUM(total) FROM (SELECT o.total FROM {_JOIN})", 15, "corrected values served: "),
        # no-op cases: rows that cannot repeat what they join
        ("SELECT SUM(total) FROM distinct_lines", 15, "not at risk: one table"),
        (f"SELECT SUM(total) FROM (SELECT total FROM orders UNION SELECT o.total FROM {_JOIN})", 15,
         "not at risk: one table"),
        ("SELECT SUM(total) FROM all_orders", 15, None),  # no join anywhere: not even looked at
    ],
)  # fmt: skip
def test_an_aggregate_over_one_source_that_hides_a_join(sql: str, rows: int, decision: str | None) -> None:
    """An aggregate over a single view, CTE or derived table was "not at risk: one table" even where that
    source joins and repeats the rows it sums; it is said to be not analysed there (or read through)."""
    import guarded_sqlite

    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(_SHOP)
    cur = con.execute(sql)
    assert cur.fetchall() == [(rows,)]
    report = cur.guard_report
    assert report is not None
    reasons = [d.reason for d in report.decisions if d.rule == "aggregate"]
    if decision is None:
        assert reasons == []
    else:
        assert len(reasons) == 1 and reasons[0].startswith(decision), reasons


def test_a_duckdb_view_of_three_joined_tables_is_said_to_be_not_analysed() -> None:
    """DuckDB (and PostgreSQL) write a view's joins as nested parenthesised groups, ``FROM ((customers AS
    c INNER JOIN orders AS o ON ...) INNER JOIN items AS i ON ...)``, which are not read through: an
    aggregate over such a view was "not at risk: one table" while the view repeats each order per item."""
    duckdb = pytest.importorskip("duckdb")
    import guarded_sqlite

    raw = duckdb.connect()
    for statement in (
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cid INTEGER, total INTEGER)",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, oid INTEGER)",
        "INSERT INTO customers VALUES (1, 'a')",
        "INSERT INTO orders VALUES (1, 1, 10), (2, 1, 5)",
        "INSERT INTO items VALUES (1, 1), (2, 1), (3, 2)",
        "CREATE VIEW v AS SELECT c.name, o.total AS t FROM customers c JOIN orders o ON o.cid = c.id "
        "JOIN items i ON i.oid = o.id",
    ):
        raw.execute(statement)
    con = guarded_sqlite.wrap(raw, guard="text_to_sql")
    cur = con.execute("SELECT SUM(t) FROM v")
    assert cur.fetchall() == [(25,)]  # as the database returned it
    report = cur.guard_report
    assert report is not None
    reasons = [d.reason for d in report.decisions if d.rule == "aggregate"]
    assert len(reasons) == 1 and reasons[0].startswith("aggregate not analysed: "), reasons
