"""Repros c01-c07, c11, c12 and c14 (``../shared/repros/correctness/``): the aggregate fan-out rule serves
a corrected value only when it is the written expression over each repeated table's rows once, and
otherwise leaves the rows as the database gave them, saying why.

Each test asserts what is served against an independent computation (a query that counts each row
once by other means) and what the report says, under ``"text_to_sql"`` (which serves corrections)
and, where the defect was a false flag, under the default ``"patch"``.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import guarded_sqlite


def sqlite_run(setup: str, sql: str, guard: str = "text_to_sql", factory: Any = None) -> tuple[list[Any], Any, Any]:
    """The guarded rows of ``sql`` on a fresh in-memory database, the report, and the cursor."""
    con = guarded_sqlite.connect(":memory:", guard=guard)  # type: ignore[arg-type]
    con.executescript(setup)
    if factory is not None:
        con.row_factory = factory
    cur = con.execute(sql)
    rows = cur.fetchall()
    return rows, cur.guard_report, cur


def plain(setup: str, sql: str) -> list[Any]:
    raw = sqlite3.connect(":memory:")
    raw.executescript(setup)
    try:
        return raw.execute(sql).fetchall()
    finally:
        raw.close()


# --- c01 ---------------------------------------------------------------------------------------------

C01 = """
CREATE TABLE departments(id INTEGER PRIMARY KEY, name TEXT, budget INTEGER);
CREATE TABLE employees(id INTEGER PRIMARY KEY, dept_id INTEGER, salary INTEGER);
CREATE TABLE assignments(id INTEGER PRIMARY KEY, emp_id INTEGER, project TEXT);
INSERT INTO departments VALUES (1,'A',100),(2,'B',900),(3,'C',500);
INSERT INTO employees VALUES (1,1,50),(2,1,60),(3,2,10),(4,3,30),(5,3,40);
INSERT INTO assignments(emp_id, project) VALUES (1,'x'),(1,'y'),(2,'x'),(3,'x'),(3,'y'),(3,'z'),(4,'x'),(5,'y'),(5,'z');
"""
C01_SQL = (
    "SELECT d.name, SUM(e.salary) AS budget FROM departments d JOIN employees e ON e.dept_id = d.id "
    "JOIN assignments a ON a.emp_id = e.id GROUP BY d.id ORDER BY budget DESC LIMIT 2"
)


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_c01_order_by_alias_is_the_select_item(dialect: str) -> None:
    """c01: ``ORDER BY budget`` sorts by the SUM aliased budget (every engine resolves a bare ORDER BY
    name to the output column first), not by departments.budget: the top two are A and C."""
    truth = [("A", 110), ("C", 70)]
    if dialect == "sqlite":
        rows, report, _ = sqlite_run(C01, C01_SQL)
    else:
        duckdb = pytest.importorskip("duckdb")
        raw = duckdb.connect()
        # DuckDB numbers no INTEGER PRIMARY KEY: the link table's ids stay NULL (it is not summed).
        for statement in C01.replace("id INTEGER PRIMARY KEY, emp_id", "id INTEGER, emp_id").split(";"):
            if statement.strip():
                raw.execute(statement)
        con = guarded_sqlite.wrap(raw, guard="text_to_sql")
        rows = con.execute(C01_SQL.replace("GROUP BY d.id", "GROUP BY d.id, d.name")).fetchall()
        report = con.guard_report
    assert rows == truth
    assert report.action == "aggregate_defanned"
    assert "ORDER BY budget DESC" in report.final_sql


# --- c02 ---------------------------------------------------------------------------------------------

C02 = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER);
CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INTEGER, product TEXT);
INSERT INTO customers VALUES (1,'ana'),(2,'ben'),(3,'cy');
INSERT INTO orders VALUES (1,1,100),(2,1,300),(3,2,50),(4,3,70);
INSERT INTO items(order_id, product) VALUES (1,'p'),(1,'q'),(2,'p'),(2,'q'),(3,'p'),(3,'q'),(4,'p'),(4,'q');
"""
C02_SQL = (
    "SELECT c.name, SUM(o.total) * 1.0 / COUNT(o.id) AS avg_order FROM customers c "
    "JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id GROUP BY c.id ORDER BY c.name"
)


def test_c02_an_expression_mixing_a_count_is_refused_whole() -> None:
    """c02: SUM/COUNT over the same fan-out is right as written; correcting the SUM alone halved it.
    The statement is refused, its rows served as sqlite3's, and the decision says why."""
    for guard in ("patch", "text_to_sql"):
        rows, report, _ = sqlite_run(C02, C02_SQL, guard)
        assert rows == plain(C02, C02_SQL) == [("ana", 200.0), ("ben", 50.0), ("cy", 70.0)]
        assert (report.trigger, report.action) == (None, "none")
        (decision,) = report.decisions
        assert decision.rule == "aggregate" and not decision.applied
        assert "mixes SUM(o.total), at risk, with COUNT(o.id)" in decision.reason


# --- c03 ---------------------------------------------------------------------------------------------

C03 = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT, points INTEGER);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, year INTEGER, total INTEGER);
INSERT INTO customers VALUES (1,'ana','Haifa',10),(2,'ben','Haifa',20),(3,'cy','Lyon',30),(4,'dan','Lyon',5);
INSERT INTO orders(customer_id, year, total) VALUES
  (1,2024,100),(1,2024,300),(1,2023,40),(3,2024,70),(3,2024,10),(4,2023,9);
"""
C03_SQL = (
    "SELECT c.city, o.year, SUM(c.points) FROM customers c "
    "LEFT JOIN orders o ON o.customer_id = c.id AND o.year = 2024 GROUP BY c.city ORDER BY c.city"
)


def test_c03_a_left_join_pin_does_not_split_groups() -> None:
    """c03: ``o.year = 2024`` in a LEFT JOIN's ON holds on matched rows only: o.year is not fixed by the
    groups. One row per city, each customer's points once (o.year stays a bare column, as written)."""
    rows, report, _ = sqlite_run(C03, C03_SQL)
    assert [(city, points) for city, _, points in rows] == [("Haifa", 30), ("Lyon", 35)]
    assert report.action == "aggregate_defanned"
    assert '"__gs_t"."__gs1"' not in report.final_sql.split("GROUP BY")[-1]  # o.year is not grouped


def test_c03_where_the_engine_groups_every_column_the_pin_is_refused() -> None:
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    for statement in C03.replace("id INTEGER PRIMARY KEY, customer_id", "id INTEGER, customer_id").split(";"):
        if statement.strip():
            raw.execute(statement)
    sql = C03_SQL.replace("GROUP BY c.city", "GROUP BY c.city, o.year").replace("ORDER BY c.city", "ORDER BY 1, 2")
    written = raw.execute(sql).fetchall()
    con = guarded_sqlite.wrap(raw, guard="text_to_sql")
    rows = con.execute(sql).fetchall()
    # Grouped by o.year, as written: each customer once per (city, year) group.
    assert rows == [("Haifa", 2024, 10), ("Haifa", None, 20), ("Lyon", 2024, 30), ("Lyon", None, 5)] != written
    assert con.guard_report.action == "aggregate_defanned"


# --- c04 ---------------------------------------------------------------------------------------------

C04 = [
    "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT)",
    "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER)",
    "INSERT INTO customers VALUES (1,'ana','Haifa'),(2,'ben','Haifa'),(3,'cy','Lyon')",
    "INSERT INTO orders VALUES (1,1,100),(2,1,300),(3,2,50),(4,3,70)",
]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT c.city, SUM(l.s) FROM customers c, "
        "(SELECT SUM(o.total) AS s FROM orders o WHERE o.customer_id = c.id) l GROUP BY c.city ORDER BY c.city",
        "SELECT c.city, SUM(l.total) FROM customers c, (SELECT o.total FROM orders o WHERE o.customer_id = c.id "
        "ORDER BY o.id DESC LIMIT 1) l GROUP BY c.city ORDER BY c.city",
        "SELECT c.city, SUM(l.s) FROM customers c, (SELECT SUM(total) AS s FROM orders "
        "WHERE customer_id = length(name) - 2) l GROUP BY c.city ORDER BY c.city",
    ],
    ids=["aggregate", "limit-1", "unqualified"],
)
def test_c04_duckdb_lateral_subquery_is_not_one_row(sql: str) -> None:
    """c04: DuckDB binds a correlated subquery in FROM laterally: one row per customer, not one row. Its
    keys are unknown: nothing is flagged under either preset, rows as DuckDB gives them."""
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    for statement in C04:
        raw.execute(statement)
    written = raw.execute(sql).fetchall()
    for guard in ("patch", "text_to_sql"):
        con = guarded_sqlite.wrap(raw, guard=guard)
        assert con.execute(sql).fetchall() == written
        report = con.guard_report
        assert (report.trigger, report.action, report.aggregates) == (None, "none", ())


def test_c04_the_lateral_derived_table_is_opaque_to_the_provenance_analysis() -> None:
    from guarded_sqlite._analysis.provenance import analyse
    from guarded_sqlite._analysis.schema import SchemaFacts, TableFacts

    facts = SchemaFacts(
        (
            TableFacts("customers", columns=("id", "name", "city"), keys=(frozenset({"id"}),)),
            TableFacts("orders", columns=("id", "customer_id", "total"), keys=(frozenset({"id"}),)),
        )
    )
    sql = "SELECT c.name FROM customers c, (SELECT SUM(o.total) AS s FROM orders o WHERE o.customer_id = c.id) l"
    assert analyse(sql, facts, "duckdb").verdict == "unknown"
    assert "lateral subquery" in analyse(sql, facts, "duckdb").evidence
    plain_derived = sql.replace("WHERE o.customer_id = c.id", "")
    assert analyse(plain_derived, facts, "duckdb").verdict == "value_repeats"  # one row: no-op fixture


# --- c05 ---------------------------------------------------------------------------------------------

C05 = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER);
CREATE TABLE tags(id INTEGER PRIMARY KEY, customer_id INTEGER, tag TEXT);
INSERT INTO customers VALUES (1,'ana'),(2,'ben'),(3,'cy');
INSERT INTO orders VALUES (1,1,100),(2,1,300),(3,2,50),(4,3,70),(5,3,30);
INSERT INTO tags(customer_id, tag) VALUES (1,'vip'),(1,'new'),(2,'vip'),(3,'vip'),(3,'old');
"""
C05_SQL = """SELECT c2.name, SUM(d.total) FROM
  (SELECT o.id AS order_id, c.id AS customer_id, o.total AS total
     FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY o.id) d
  JOIN customers c2 ON c2.id = d.customer_id
  JOIN tags t ON t.customer_id = c2.id
GROUP BY c2.id ORDER BY c2.name"""


def test_c05_derived_table_key_by_its_qualified_source() -> None:
    """c05: GROUP BY o.id keys the derived table by order_id (o.id's output), not by customer_id (c.id,
    which a bare-name match took): every order counted once per customer."""
    rows, report, _ = sqlite_run(C05, C05_SQL)
    assert rows == [("ana", 400), ("ben", 50), ("cy", 100)]
    assert report.action == "aggregate_defanned"
    assert '"d"."order_id"' in report.final_sql


def test_c05_a_group_key_the_body_does_not_output_by_its_source_is_no_key() -> None:
    import sqlglot

    from guarded_sqlite._analysis.schema import SchemaFacts
    from guarded_sqlite._analysis.sqltree import derived_keys

    body = sqlglot.parse_one(
        "SELECT o.id AS order_id, c.id AS customer_id FROM orders o JOIN customers c ON c.id = o.customer_id "
        "GROUP BY {}".format("id"),
        read="sqlite",
    )
    assert derived_keys(body, SchemaFacts(), {})[1] == ()  # a bare ``id``: o's or c's, it cannot tell
    keyed = sqlglot.parse_one(str(body.sql()).replace("GROUP BY id", "GROUP BY o.id"), read="sqlite")
    assert derived_keys(keyed, SchemaFacts(), {})[1] == (frozenset({"order_id"}),)


# --- c06 ---------------------------------------------------------------------------------------------

C06 = """
CREATE TABLE users(id int PRIMARY KEY, country text);
CREATE TABLE user_tags(id int PRIMARY KEY, user_id int, tag text);
CREATE TABLE events(user_id int, day date, amount int) PARTITION BY RANGE (day);
CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE payments(id int PRIMARY KEY, user_id int, amount int);
CREATE TABLE payments_archive() INHERITS (payments);
INSERT INTO users VALUES (1,'fr'),(2,'de');
INSERT INTO user_tags VALUES (1,1,'a'),(2,1,'b'),(3,2,'a');
INSERT INTO events VALUES (1,'2024-03-01',10),(1,'2025-03-01',20),(2,'2024-05-01',5),(2,'2025-05-01',7);
INSERT INTO payments VALUES (1,1,10),(2,2,5);
INSERT INTO payments_archive VALUES (1,1,20),(2,2,7);
"""


@pytest.fixture
def c06_schema(pg_dsn: str) -> Iterator[str]:
    import psycopg

    schema = f"c06_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.parametrize("table", ["events", "payments"], ids=["partitions", "inheritance"])
def test_c06_postgres_rows_told_apart_by_tableoid_and_ctid(pg_dsn: str, c06_schema: str, table: str) -> None:
    """c06: ctid repeats across partitions, a parent's PRIMARY KEY across inheritance children; with
    tableoid every event and payment counts once: fr 30, de 12."""
    import psycopg
    from psycopg.rows import dict_row, namedtuple_row

    alias = table[0]
    sql = (
        f"SELECT u.country, SUM({alias}.amount) FROM users u JOIN {table} {alias} ON {alias}.user_id = u.id "
        "JOIN user_tags t ON t.user_id = u.id GROUP BY u.country ORDER BY u.country"
    )
    with psycopg.connect(pg_dsn, autocommit=True, options=f"-c search_path={c06_schema}") as raw:
        raw.execute(C06)
        assert raw.execute(sql).fetchall() == [("de", 12), ("fr", 60)]
        con = guarded_sqlite.wrap(raw, guard="text_to_sql")
        cur = con.cursor()
        cur.execute(sql)
        assert cur.fetchall() == [("de", 12), ("fr", 30)]
        assert cur.guard_report.action == "aggregate_defanned"
        assert f'"{alias}"."tableoid", "{alias}"."ctid"' in cur.guard_report.final_sql
        # c14 on PostgreSQL: psycopg's row factories over the written statement's description.
        for factory, expected in ((dict_row, {"country": "de", "sum": 12}), (namedtuple_row, ("de", 12))):
            cur = con.cursor(row_factory=factory)
            cur.execute(sql)
            first = cur.fetchall()[0]
            assert first == expected
            if factory is namedtuple_row:
                assert (first.country, first.sum) == ("de", 12)
            assert [d.name for d in cur.description] == ["country", "sum"]


# --- c07 ---------------------------------------------------------------------------------------------


def test_c07_duckdb_user_column_rowid_is_no_row_id() -> None:
    """c07: a user column named rowid shadows DuckDB's row id: the table has none, the correction is
    refused and says why, rows as DuckDB gives them. Without that column, the row id is used."""
    duckdb = pytest.importorskip("duckdb")
    sql = (
        "SELECT u.country, SUM(p.amount) FROM users u JOIN payments p ON p.user_id = u.id "
        "JOIN tags t ON t.user_id = u.id GROUP BY u.country ORDER BY u.country"
    )
    for column, served in (("rowid", [("de", 12), ("fr", 60)]), ("batch", [("de", 12), ("fr", 30)])):
        raw = duckdb.connect()
        for statement in [
            "CREATE TABLE users(id INTEGER PRIMARY KEY, country TEXT)",
            "CREATE TABLE tags(id INTEGER PRIMARY KEY, user_id INTEGER, tag TEXT)",
            f"CREATE TABLE payments({column} INTEGER, user_id INTEGER, amount INTEGER)",
            "INSERT INTO users VALUES (1,'fr'),(2,'de')",
            "INSERT INTO tags VALUES (1,1,'a'),(2,1,'b'),(3,2,'a')",
            "INSERT INTO payments VALUES (1,1,10),(1,1,20),(7,2,5),(7,2,7)",
        ]:
            raw.execute(statement)
        con = guarded_sqlite.wrap(raw, guard="text_to_sql")
        assert con.execute(sql).fetchall() == served
        report = con.guard_report
        if column == "rowid":
            assert (report.trigger, report.action) == (None, "none")
            (decision,) = report.decisions
            assert not decision.applied
            assert "no row identity for p (payments)" in decision.reason
        else:
            assert report.action == "aggregate_defanned" and '"p"."rowid"' in report.final_sql
        raw.close()


# --- c11 ---------------------------------------------------------------------------------------------

C11 = """
CREATE TABLE accounts(id INTEGER PRIMARY KEY, branch TEXT, balance REAL);
CREATE TABLE owners(id INTEGER PRIMARY KEY, account_id INTEGER, name TEXT);
INSERT INTO accounts VALUES (1,'north',0.1),(2,'north',0.2),(3,'north',-0.3),(4,'south',5.0),(5,'south',2.5);
INSERT INTO owners VALUES (1,3,'x'),(2,2,'y'),(3,1,'z'),(4,4,'p'),(5,5,'q');
"""
C11_SQL = "SELECT a.branch, SUM(a.balance) FROM owners o JOIN accounts a ON a.id = o.account_id GROUP BY a.branch"


def test_c11_float_rounding_is_no_fan_out() -> None:
    """c11: every account has one owner, so no row repeats: whatever the summation order makes of
    0.1 + 0.2 - 0.3, nothing is flagged and the rows are sqlite3's (and DuckDB's)."""
    for guard in ("patch", "text_to_sql"):
        rows, report, _ = sqlite_run(C11, C11_SQL, guard)
        assert rows == plain(C11, C11_SQL)
        assert (report.trigger, report.action, report.aggregates) == (None, "none", ())
    duckdb = pytest.importorskip("duckdb")
    raw = duckdb.connect()
    for statement in C11.replace("REAL", "DOUBLE").split(";"):
        if statement.strip():
            raw.execute(statement)
    written = raw.execute(C11_SQL).fetchall()
    for guard in ("patch", "text_to_sql"):
        con = guarded_sqlite.wrap(raw, guard=guard)
        assert con.execute(C11_SQL).fetchall() == written
        assert con.guard_report.trigger is None


def test_c11_repetition_that_changes_nothing_is_not_flagged() -> None:
    """An AVG over a uniform repetition, and repeated rows whose argument is NULL or zero, are right as
    written: the rows repeat (the counts say so) but no value changes."""
    setup = """
    CREATE TABLE c (id INTEGER PRIMARY KEY, g TEXT, x REAL, y INTEGER);
    CREATE TABLE k (id INTEGER PRIMARY KEY, c_id INTEGER);
    INSERT INTO c VALUES (1, 'a', 0.1, NULL), (2, 'a', 0.7, 0), (3, 'b', -0.3, NULL);
    INSERT INTO k (c_id) VALUES (1), (1), (2), (2), (3), (3), (3);
    """
    for item in ("AVG(c.x)", "SUM(c.y)", "TOTAL(c.y)"):
        sql = f"SELECT c.g, {item} FROM c JOIN k ON k.c_id = c.id GROUP BY c.g ORDER BY c.g"
        for guard in ("patch", "text_to_sql"):
            rows, report, _ = sqlite_run(setup, sql, guard)
            assert rows == plain(setup, sql), item
            assert (report.trigger, report.action) == (None, "none"), item
    sql = "SELECT c.g, SUM(c.x) FROM c JOIN k ON k.c_id = c.id GROUP BY c.g ORDER BY c.g"
    rows, report, _ = sqlite_run(setup, sql)
    assert report.action == "aggregate_defanned"
    assert rows[0][0] == "a" and abs(rows[0][1] - 0.8) < 1e-12 and abs(rows[1][1] + 0.3) < 1e-12


def test_c11_differs_tolerates_rounding_of_the_magnitudes_summed() -> None:
    from guarded_sqlite._rules.fanout import differs

    assert not differs("SUM", 2.7755575615628914e-17, 5.551115123125783e-17, 3, 0.6)
    assert differs("SUM", 0.6, 0.3, 3, 0.6)
    assert differs("SUM", 3, 2, 3, 3.0)  # integers compare exactly
    assert not differs("AVG", 0.30000000000000004, 0.3, 6, 1.8)
    assert differs("AVG", 0.35, 0.3, 6, 1.8)
    assert not differs("SUM", None, None, 0, None)
    assert differs("GROUP_CONCAT", "a,a", "a", 2, None)


# --- c12 ---------------------------------------------------------------------------------------------

C12 = """
CREATE TABLE products(name TEXT COLLATE NOCASE NOT NULL, price INTEGER);
CREATE UNIQUE INDEX products_name ON products(name COLLATE BINARY);
CREATE TABLE sales(id INTEGER PRIMARY KEY, product TEXT, region TEXT);
INSERT INTO products VALUES ('widget', 5), ('WIDGET', 7), ('gadget', 3);
INSERT INTO sales(product, region) VALUES ('widget','n'), ('gadget','n'), ('gadget','n');
"""
C12_SQL = "SELECT s.region, SUM(p.price) FROM sales s JOIN products p ON p.name = s.product GROUP BY s.region"


def test_c12_rows_numbered_by_rowid_not_by_a_key_under_another_collation() -> None:
    """c12: 'widget' and 'WIDGET' are two products (BINARY unique index on a NOCASE column): the rowid
    tells them apart, 5 + 7 + 3 = 15 for region n."""
    rows, report, _ = sqlite_run(C12, C12_SQL)
    assert rows == [("n", 15)]
    assert '"p"."rowid"' in report.final_sql


def test_c12_without_rowid_the_key_is_compared_under_binary() -> None:
    setup = C12.replace("price INTEGER);", "price INTEGER, PRIMARY KEY (name COLLATE BINARY)) WITHOUT ROWID;")
    setup = setup.replace("CREATE UNIQUE INDEX products_name ON products(name COLLATE BINARY);", "")
    rows, report, _ = sqlite_run(setup, C12_SQL)
    assert rows == [("n", 15)]
    assert '"p"."name" COLLATE BINARY' in report.final_sql


# --- c14 ---------------------------------------------------------------------------------------------

C14 = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT, points INTEGER);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, total INTEGER);
INSERT INTO customers VALUES (1,'ana','x',10),(2,'ben','x',20),(3,'cy','y',30);
INSERT INTO orders VALUES (1,1,100),(2,1,300),(3,2,50),(4,3,70);
"""
C14_SQL = (
    "SELECT c.city, SUM(c.points) AS pts, SUM(c.points) * 2 FROM customers c JOIN orders o ON o.customer_id = c.id "
    "GROUP BY c.city ORDER BY c.city"
)


def test_c14_sqlite_rows_carry_the_written_names() -> None:
    """c14: corrected rows read by name as the written statement's would: sqlite3.Row keys, any other
    row factory (which sees the cursor's description), and the description itself."""
    rows, report, cur = sqlite_run(C14, C14_SQL, factory=sqlite3.Row)
    assert report.action == "aggregate_defanned"
    assert rows[0].keys() == ["city", "pts", "SUM(c.points) * 2"]
    assert [(r["city"], r["pts"]) for r in rows] == [("x", 30), ("y", 30)]
    assert [d[0] for d in cur.description] == ["city", "pts", "SUM(c.points) * 2"]

    def as_dict(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
        return {d[0]: value for d, value in zip(cursor.description, row)}

    rows, _, _ = sqlite_run(C14, C14_SQL, factory=as_dict)
    assert rows[0] == {"city": "x", "pts": 30, "SUM(c.points) * 2": 60}


def test_c14_duckdb_frames_carry_the_written_names() -> None:
    duckdb = pytest.importorskip("duckdb")
    pytest.importorskip("pandas")
    raw = duckdb.connect()
    for statement in C14.split(";"):
        if statement.strip():
            raw.execute(statement)
    columns = list(raw.execute(C14_SQL).df().columns)
    con = guarded_sqlite.wrap(raw, guard="text_to_sql")
    frame = con.execute(C14_SQL).df()
    assert con.guard_report.action == "aggregate_defanned"
    assert list(frame.columns) == columns == ["city", "pts", "(sum(c.points) * 2)"]
    assert frame["pts"].tolist() == [30, 30]
    assert [d[0] for d in con.execute(C14_SQL).description] == columns


def test_c14_served_sql_keeps_a_placeholder_where_the_name_is_a_callers_alias() -> None:
    from guarded_sqlite._analysis.aggregates import AggregatePlan, served_sql

    plan = AggregatePlan(
        corrected_sql='SELECT x AS "__gs_c0", y AS "city" FROM t ORDER BY city',
        width=2,
        unnamed=((0, "city"),),
        aliases=("city",),
    )
    assert served_sql(plan, ["city", "city"]) == plan.corrected_sql
    plan = AggregatePlan(corrected_sql='SELECT x AS "__gs_c0" FROM t', width=1, unnamed=((0, "x"),))
    assert served_sql(plan, ['a "b"']) == 'SELECT x AS "a ""b""" FROM t'
    assert served_sql(plan, None) == 'SELECT x AS "x" FROM t'
