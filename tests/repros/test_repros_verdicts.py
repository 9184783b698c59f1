"""Repros c08, c09, c10, c15 and c17 (``../shared/repros/correctness/``): provenance verdicts that must see
the keys a query establishes. Each test asserts the verdict and its evidence, on a real connection
(``cur.guard_report.provenance``) and through ``guarded_sqlite._analysis.provenance.analyse``, not only the rows
served: a rule that looks at the data could serve the same rows for another reason.

- c17: a LEFT JOIN's ON equality read backwards from a matched row of its right side.
- c10: a merged USING/NATURAL column of inner joins is read from every table holding it.
- c08, c15: ``ROW_NUMBER() OVER (PARTITION BY ...)`` and PostgreSQL's ``DISTINCT ON`` key a derived table.
- c09: a unique partial index is a key where the query's conditions on its table imply its predicate.
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
from guarded_sqlite._analysis.provenance import analyse
from guarded_sqlite._analysis.schema import SchemaFacts, TableFacts, read_sqlite_schema


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
    from guarded_sqlite._analysis.aggregates import plan_aggregates
    from guarded_sqlite._analysis.provenance import parse_statement

    raw = sqlite3.connect(":memory:")
    raw.executescript(C17 + "ALTER TABLE orders ADD COLUMN total INTEGER; CREATE TABLE visits (customer_id INTEGER);")
    facts = read_sqlite_schema(raw)

    def risks(sql: str) -> tuple[tuple[str, ...], ...]:
        tree = parse_statement(sql)
        assert not isinstance(tree, guarded_sqlite._analysis.provenance.Provenance)
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


# --- c09 ---------------------------------------------------------------------------------------------

C09 = """
CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, country TEXT);
CREATE TABLE profiles (id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users (id), bio TEXT, deleted_at TEXT);
CREATE UNIQUE INDEX profiles_live_user ON profiles (user_id) WHERE deleted_at IS NULL;
""" + "".join(
    f"INSERT INTO users VALUES ({i}, 'u{i}', '{('fr', 'de', 'il', 'us')[i % 4]}');"
    f"INSERT INTO profiles (user_id, bio, deleted_at) VALUES ({i}, 'old', '2024-01-01'), ({i}, 'current', NULL);"
    for i in range(1, 41)
)
C09_SQL = "SELECT u.country FROM users u JOIN profiles p ON p.user_id = u.id AND p.deleted_at IS NULL"


def test_c09_partial_unique_index_implied_by_the_query_is_a_key() -> None:
    """c09: ``p.deleted_at IS NULL`` in the join implies the index's ``WHERE deleted_at IS NULL``, so each
    user matches one live profile: ``value_repeats`` by the key p.user_id, 40 rows kept."""
    plain, rows, report = guarded(C09, C09_SQL)
    assert rows == plain and len(rows) == 40
    assert report.provenance == "value_repeats", report.provenance_evidence
    assert "p (profiles) is an N:1 lookup (p.user_id is a key)" in (report.provenance_evidence or "")
    raw = sqlite3.connect(":memory:")
    raw.executescript(C09)
    facts = read_sqlite_schema(raw)
    profiles = facts.table("profiles")
    assert profiles is not None and frozenset({"user_id"}) not in profiles.keys
    assert [(k.columns, k.predicate) for k in profiles.partial_keys] == [(frozenset({"user_id"}), "deleted_at IS NULL")]
    # The no-op: without the predicate, a user's deleted profiles match too.
    plain, rows, report = guarded(C09, C09_SQL.replace(" AND p.deleted_at IS NULL", ""))
    assert report.provenance == "amplified" and "p (profiles) fans out u (users)" in report.provenance_evidence


def test_c09_the_verdict_follows_the_partial_index_being_created_and_dropped() -> None:
    """The catalog view compares each table's ``sqlite_master`` rows and index list: a partial index
    created, re-created with another predicate or dropped after a verdict changes the next one."""
    con = guarded_sqlite.connect(":memory:")
    con.executescript(C09.replace("CREATE UNIQUE INDEX profiles_live_user", "CREATE INDEX profiles_plain"))

    def verdict() -> str | None:
        cur = con.execute(C09_SQL)
        cur.fetchall()
        return cur.guard_report.provenance

    assert verdict() == "amplified"
    con.execute("DROP INDEX profiles_plain")
    con.execute("DELETE FROM profiles WHERE deleted_at IS NOT NULL")
    con.execute("CREATE UNIQUE INDEX profiles_live_user ON profiles (user_id) WHERE deleted_at IS NULL")
    con.execute("INSERT INTO profiles (user_id, bio, deleted_at) SELECT id, 'old', '2024-01-01' FROM users")
    assert verdict() == "value_repeats"
    con.execute("DROP INDEX profiles_live_user")
    con.execute("CREATE UNIQUE INDEX profiles_live_user ON profiles (user_id) WHERE deleted_at > '2023'")
    assert verdict() == "amplified"
    con.execute("DROP INDEX profiles_live_user")
    con.execute("CREATE UNIQUE INDEX profiles_live_user ON profiles (user_id) WHERE deleted_at IS NULL")
    assert verdict() == "value_repeats"
    con.execute("DROP INDEX profiles_live_user")
    assert verdict() == "amplified"
    con.close()


PARTIAL_CONDITIONS = [
    "p.deleted_at IS NULL",
    "p.deleted_at IS NOT NULL",
    "p.deleted_at = 1",
    "p.kind = 'a'",
    "'a' = p.kind",
    "p.kind IN ('a')",
    "(p.deleted_at IS NULL OR p.kind = 'a')",
    "u.kind = 'a'",
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([None, 1]), st.sampled_from([None, "a", "b"])), max_size=10
    ),
    predicate=st.sampled_from(["deleted_at IS NULL", "kind = 'a'", "deleted_at IS NULL AND kind = 'a'"]),
    on=st.lists(st.sampled_from(PARTIAL_CONDITIONS), max_size=3),
    where=st.lists(st.sampled_from(PARTIAL_CONDITIONS), max_size=2),
    left=st.booleans(),
)
def test_property_partial_keys_hold_on_the_data(
    rows: list[tuple[int, int | None, str | None]], predicate: str, on: list[str], where: list[str], left: bool
) -> None:
    """Whenever a partial key makes the profiles a lookup of the users, each user row appears at most
    once, on data the unique partial index itself enforces (rows it refuses are left out)."""
    con = sqlite3.connect(":memory:")
    con.executescript(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, kind TEXT);"
        "INSERT INTO users VALUES (0, 'a'), (1, 'b'), (2, NULL), (3, 'a');"
        "CREATE TABLE profiles (id INTEGER PRIMARY KEY, user_id INTEGER, deleted_at INTEGER, kind TEXT);"
        f"CREATE UNIQUE INDEX live ON profiles (user_id) WHERE {predicate};"
    )
    con.executemany("INSERT OR IGNORE INTO profiles (user_id, deleted_at, kind) VALUES (?, ?, ?)", rows)
    join = "LEFT JOIN" if left else "JOIN"
    sql = f"SELECT u.id FROM users u {join} profiles p ON " + " AND ".join(["p.user_id = u.id", *on])
    if where:
        sql += " WHERE " + " AND ".join(where)
    verdict = analyse(sql, read_sqlite_schema(con), reference="leading")
    assert verdict.verdict != "unknown", verdict.evidence
    if not verdict.fanning_leading:
        per_user = Counter(r[0] for r in con.execute(sql))
        assert all(n == 1 for n in per_user.values()), (sql, predicate, verdict.evidence)
    con.close()


def test_postgres_partial_unique_index_is_a_partial_key(pg_dsn: str) -> None:
    """PostgreSQL: ``pg_index.indpred`` is read as a partial key (``pg_get_expr``'s text), and c09's query
    is ``value_repeats`` on a real server, also for a predicate on a text column, which PostgreSQL
    writes with a cast literal (``status = 'current'::text``). A varchar column comes back cast itself
    (``(code)::text = 'x'::text``), which only the same cast in the query matches: no key there."""
    psycopg = pytest.importorskip("psycopg")
    from guarded_sqlite._analysis.schema_servers import read_postgres_schema

    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        raw.execute("DROP SCHEMA IF EXISTS c09 CASCADE")
        raw.execute("CREATE SCHEMA c09")
        raw.execute("SET search_path TO c09")
        raw.execute("CREATE TABLE users (id int PRIMARY KEY, country text)")
        raw.execute(
            "CREATE TABLE profiles (id serial PRIMARY KEY, user_id int, status text, code varchar(8), deleted_at date)"
        )
        raw.execute("CREATE UNIQUE INDEX live ON profiles (user_id) WHERE deleted_at IS NULL")
        raw.execute("CREATE UNIQUE INDEX current ON profiles (user_id) WHERE status = 'current'")
        raw.execute("CREATE UNIQUE INDEX coded ON profiles (user_id) WHERE code = 'x'")
        raw.execute("INSERT INTO users SELECT g, (ARRAY['fr', 'de'])[g % 2 + 1] FROM generate_series(1, 20) g")
        raw.execute(
            "INSERT INTO profiles (user_id, status, deleted_at) SELECT g, 'old', date '2024-01-01' "
            "FROM generate_series(1, 20) g UNION ALL SELECT g, 'current', NULL FROM generate_series(1, 20) g"
        )
        profiles = read_postgres_schema(raw).table("profiles")
        assert profiles is not None
        assert {k.columns for k in profiles.partial_keys} == {frozenset({"user_id"})}
        assert len(profiles.partial_keys) == 3
        con = guarded_sqlite.wrap(raw)
        cur = con.cursor()
        for condition in ("p.deleted_at IS NULL", "p.status = 'current'"):
            cur.execute(C09_SQL.replace("p.deleted_at IS NULL", condition))
            assert len(cur.fetchall()) == 20
            assert cur.guard_report.provenance == "value_repeats", (condition, cur.guard_report.provenance_evidence)
        coded = analyse(C09_SQL.replace("p.deleted_at IS NULL", "p.code = 'x'"), read_postgres_schema(raw), "postgres")
        assert coded.verdict == "amplified", coded.evidence
        raw.execute("DROP SCHEMA c09 CASCADE")
