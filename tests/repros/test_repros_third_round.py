"""Repros c25-c39 (``../shared/repros/correctness/``, third round): statements with several SELECTs, shapes
that left with no decision, kept plans that outlived what their names resolve to, and dialect slips in
generated SQL. Each test names its repro; the truth is computed independently (the same statement with
``items`` replaced by a semi-join, which counts each order once).

What every test asserts is the serving rule: the statement's rows with a flag, or the truth; never a
third answer, never an inflated answer with no trigger.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

import guarded_sqlite

SHOP = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total INT);
CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku TEXT);
INSERT INTO customers VALUES (1, 'ana', 'north'), (2, 'bo', 'south'), (3, 'cy', 'north');
INSERT INTO orders VALUES (1, 1, 100), (2, 2, 150), (3, 3, 60), (4, 3, 70);
INSERT INTO items VALUES (1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c'), (4, 2, 'x'), (5, 3, 'p'), (6, 3, 'q'), (7, 4, 'r');
"""
# ana's one order 100 has three items, bo's 150 one, cy's 60 and 70 two and one.
J = "FROM customers c JOIN orders o ON o.customer_id = c.id JOIN items i ON i.order_id = o.id"
T = "FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.id IN (SELECT order_id FROM items)"


def shop(preset: str) -> tuple[sqlite3.Connection, Any]:
    """The raw shop and a guarded connection to a copy of it."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(SHOP)
    con = guarded_sqlite.connect(":memory:", guard=preset)  # type: ignore[call-overload]
    raw.backup(con)
    return raw, con


def served_or_flagged(raw: list[Any], truth: list[Any], cur: Any) -> list[Any]:
    """The rows ``cur`` served, asserted to be the truth or the statement's own rows with a flag."""
    served = [tuple(row) for row in cur.fetchall()]
    report = cur.guard_report
    assert served in (raw, truth), f"served {served}: neither the statement's {raw} nor the truth {truth}"
    if served == raw != truth:
        assert report.trigger == "aggregate_fanout" or report.aggregates, f"inflated {raw} served silently"
    return served


def test_c32_a_correction_over_the_current_time_is_never_kept() -> None:
    """c32: ``unixepoch()`` with no argument reads the clock: the corrected answer of one execution is not
    served again at the next, when the statement's own answer has moved with time."""
    raw, con = shop("text_to_sql")
    for db in (raw, con):
        db.execute("ALTER TABLE orders ADD COLUMN placed_at INT DEFAULT 0")
        db.execute("INSERT INTO orders VALUES (5, 2, 40, unixepoch() + 2)")
        db.executemany("INSERT INTO items(order_id, sku) VALUES (5, ?)", [("s",), ("t",)])
    where = "o.placed_at <= unixepoch() GROUP BY c.id ORDER BY c.id"
    sql, truth_sql = f"SELECT c.name, SUM(o.total) {J} WHERE {where}", f"SELECT c.name, SUM(o.total) {T} AND {where}"
    first = con.execute(sql)
    assert first.fetchall() == raw.execute(truth_sql).fetchall() == [("ana", 100), ("bo", 150), ("cy", 130)]
    time.sleep(2.5)
    later = con.execute(sql)
    assert later.fetchall() == raw.execute(truth_sql).fetchall() == [("ana", 100), ("bo", 190), ("cy", 130)]
    assert not any("reused" in decision.reason for decision in later.guard_report.decisions)


@pytest.mark.parametrize(
    "from_clause",
    [
        "FROM (SELECT id, name FROM customers) c, orders o, items i WHERE",
        "FROM (customers c), orders o, items i WHERE",
        "FROM customers c, orders o /* a, comment */, items i WHERE",
    ],
)
def test_c37_a_comma_join_after_a_parenthesis_is_screened_in(from_clause: str) -> None:
    """c37: the pre-screen sees a comma join whose first item is parenthesised, and an aggregate with a
    comment before its parenthesis; the statement is then analysed like its JOIN form."""
    raw, con = shop("text_to_sql")
    tail = "o.customer_id = c.id AND i.order_id = o.id GROUP BY c.id, c.name ORDER BY c.id"
    sql = f"SELECT c.name, SUM/**/(o.total) {from_clause} {tail}"
    truth = raw.execute(f"SELECT c.name, SUM(o.total) {T} GROUP BY c.id, c.name ORDER BY c.id").fetchall()
    cur = con.execute(sql)
    assert cur.fetchall() == truth == [("ana", 100), ("bo", 150), ("cy", 130)]
    assert cur.guard_report.trigger == "aggregate_fanout"


def test_c37_the_screen_still_passes_over_statements_without_a_join() -> None:
    """No-op side of c37: commas of a select list, an IN list or a string after FROM are no join."""
    from guarded_sqlite._core.probe import mentions_value_aggregate_over_join as screen

    # Without a join the answer is the text's words (for the views that join), never True.
    assert screen("SELECT SUM(total), COUNT(*) FROM orders WHERE id IN (1, 2) AND sku <> 'a, b'") is not True
    assert screen("SELECT SUM(total) FROM orders UNION ALL SELECT a, b FROM t") is not True
    assert screen('SELECT SUM(total) FROM "order" -- , items') is not True
    assert screen("SELECT COUNT(*) FROM orders o, items i") is False
    assert screen('SELECT SUM(o.total) FROM "order" o, items i') is True
    assert screen("SELECT (SELECT SUM(v) FROM (SELECT 1 AS v) a, (SELECT 2 AS w) b)") is True


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
def test_c38_mariadb_paging_check_replaces_its_marker(mariadb_params: dict[str, object], preset: str) -> None:
    """c38: on MariaDB the paging check's marker is written with backticks and replaced by the served
    groups' keys: the check runs, and the inflated page is flagged or corrected."""
    import pymysql

    admin = pymysql.connect(**mariadb_params, autocommit=True)  # type: ignore[arg-type]
    name = f"c38_{preset}"
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
    admin.cursor().execute(f"CREATE DATABASE {name}")
    raw = pymysql.connect(**mariadb_params, database=name, autocommit=True)  # type: ignore[arg-type]
    try:
        cur = raw.cursor()
        for statement in SHOP.replace("INTEGER PRIMARY KEY", "INT PRIMARY KEY AUTO_INCREMENT").split(";"):
            if statement.strip():
                cur.execute(statement)
        sql = f"SELECT c.city, SUM(o.total) {J} GROUP BY c.city ORDER BY c.city LIMIT 1"
        cur.execute(sql)
        written = [tuple(row) for row in cur.fetchall()]
        cur.execute(f"SELECT c.city, SUM(o.total) {T} GROUP BY c.city ORDER BY c.city LIMIT 1")
        truth = [tuple(row) for row in cur.fetchall()]
        assert (written, truth) == ([("north", 490)], [("north", 230)])
        guarded = guarded_sqlite.wrap(raw, guard=preset).cursor()
        guarded.execute(sql)
        served = served_or_flagged(written, truth, guarded)
        assert served == (truth if preset == "text_to_sql" else written)
        assert not any("failed" in decision.reason for decision in guarded.guard_report.decisions)
    finally:
        raw.close()
        admin.cursor().execute(f"DROP DATABASE {name}")
        admin.close()


C29_CASES = [
    ("values", "SELECT c.name, SUM(o.total) {F} {W} o.total > ?1 GROUP BY c.id ORDER BY c.id", (0,)),
    ("ranking", "SELECT c.name {F} GROUP BY c.id ORDER BY SUM(o.total) DESC LIMIT ?1", (1,)),
    ("HAVING", "SELECT c.name {F} GROUP BY c.id HAVING SUM(o.total) > ?1 ORDER BY c.id", (140,)),
    ("repeated and out of order", "SELECT c.name {F} {W} o.total > ?2 GROUP BY c.id HAVING SUM(o.total) > ?1 "
     "AND SUM(o.total) > ?2 ORDER BY c.id", (140, 0)),
]  # fmt: skip


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize(("label", "template", "parameters"), C29_CASES, ids=[case[0] for case in C29_CASES])
def test_c29_numbered_parameters_are_analysed_and_bound_by_number(
    preset: str, label: str, template: str, parameters: tuple[Any, ...]
) -> None:
    """c29: ``?1`` statements are planned like ``?`` ones (read as names, written back as ``?N``), and each
    check binds the values up to the largest number it still holds."""
    raw, con = shop(preset)
    sql = template.format(F=J, W="WHERE")
    truth = raw.execute(template.format(F=T, W="AND"), parameters).fetchall()
    written = raw.execute(sql, parameters).fetchall()
    assert written != truth
    cur = con.execute(sql, parameters)
    served = served_or_flagged(written, truth, cur)
    assert served == (truth if preset == "text_to_sql" else written)
    assert cur.guard_report.trigger == "aggregate_fanout"


def test_c29_a_bare_parameter_mixed_with_numbered_ones_is_left_unparsed() -> None:
    """No-op side: ``?`` after ``?1`` takes the next number after the largest so far, which names would not
    say: the statement is not rewritten (and not served corrected)."""
    from guarded_sqlite._analysis.provenance import named_numbers

    mixed = "SELECT c.name FROM c WHERE a > ?1 AND b > ? AND s = '?2'"
    assert named_numbers(mixed) == mixed
    assert named_numbers("SELECT '?1' AS q, ?2 -- ?3") == "SELECT '?1' AS q, :__gs_p2 -- ?3"


C39_CASES = [
    ("HAVING", "SELECT c.name {f} GROUP BY c.id, c.name HAVING SUM(o.total) > {p} ORDER BY c.id", 140),
    ("derived table",
     "SELECT MAX(d.s) FROM (SELECT c.id, SUM(o.total) AS s {f} {w} o.total < {p} GROUP BY c.id) d", 1000),
    ("ranking LIMIT", "SELECT c.name {f} GROUP BY c.id, c.name ORDER BY SUM(o.total) DESC LIMIT {p}", 1),
]  # fmt: skip


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize(("label", "template", "value"), C39_CASES, ids=[case[0] for case in C39_CASES])
def test_c39_duckdb_numbered_parameters_bind_every_check(preset: str, label: str, template: str, value: int) -> None:
    """c39: DuckDB's ``$1`` bound from a list: the check of every group and a subquery's own check bind
    what they hold, so the inflated answer is flagged (``patch``) or corrected (``text_to_sql``)."""
    duckdb = pytest.importorskip("duckdb")
    db = duckdb.connect()
    for statement in SHOP.split(";"):
        if statement.strip():
            db.execute(statement)
    where = "WHERE" if "{w}" in template else ""
    sql = template.format(f=J, w=where, p="$1").replace("  ", " ")
    truth = db.execute(template.format(f=T, w="AND" if where else "", p="$1"), [value]).fetchall()
    written = db.execute(sql, [value]).fetchall()
    assert written != truth
    cur = guarded_sqlite.wrap(db.cursor(), guard=preset)
    cur.execute(sql, [value])
    served = served_or_flagged(written, truth, cur)
    assert served == (truth if preset == "text_to_sql" else written)
    assert not any("failed" in decision.reason for decision in cur.guard_report.decisions)


C30_SETUP = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total INT, tax INT);
CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku TEXT);
INSERT INTO customers VALUES (1, 'ana', 'north'), (2, 'bo', 'north'), (3, 'cy', 'south'), (4, 'di', 'south');
INSERT INTO orders VALUES (1, 1, 150, 0), (2, 2, 60, 0), (3, 3, 100, 40), (4, 4, 70, 80), (5, 4, 0, -20);
INSERT INTO items(order_id, sku) VALUES (1, 'a'), (2, 'b'), (2, 'c'), (2, 'd'),
  (3, 'e'), (3, 'f'), (3, 'g'), (4, 'h'), (5, 'i'), (5, 'j'), (5, 'k');
"""
C30_CASES = {
    "ranking, no key shown": "SELECT SUM(o.total) AS s {F} {W} c.city = 'north' GROUP BY c.id ORDER BY s DESC LIMIT 1",
    "ranking, city shown": "SELECT c.city, SUM(o.total) {F} {W} c.city = 'north' GROUP BY c.id ORDER BY 2 DESC LIMIT 1",
    "HAVING on another SUM": "SELECT SUM(o.total) {F} {W} c.city = 'south' GROUP BY c.id HAVING SUM(o.tax) > 45",
}


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize("label", sorted(C30_CASES))
def test_c30_chosen_groups_are_compared_with_their_values(preset: str, label: str) -> None:
    """c30: where the columns shown cannot tell the groups apart, another group chosen by the inflated
    value still differs in that value: the check of every group runs and the statement is flagged."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(C30_SETUP)
    con = guarded_sqlite.connect(":memory:", guard=preset)  # type: ignore[call-overload]
    raw.backup(con)
    template = C30_CASES[label]
    sql = template.format(F=J, W="WHERE")
    written, truth = raw.execute(sql).fetchall(), raw.execute(template.format(F=T, W="AND")).fetchall()
    assert written != truth
    served = served_or_flagged(written, truth, con.execute(sql))
    assert served == (truth if preset == "text_to_sql" else written)


def test_c30_the_same_groups_with_corrected_values_are_not_said_to_be_chosen() -> None:
    """No-op side: where the served group is the same and only its (corrected) value differs, the finding
    does not say the aggregate chose the rows."""
    _, con = shop("patch")
    cur = con.execute(f"SELECT c.name, SUM(o.total) {J} WHERE c.id = 1 GROUP BY c.id HAVING SUM(o.total) > 50")
    assert cur.fetchall() == [("ana", 300)]
    (finding,) = cur.guard_report.aggregates
    assert (finding.written, finding.corrected) == (300, 100)
    assert not finding.chose


def test_c27_a_kept_safe_plan_is_not_reused_over_a_shadowing_temp_table_or_a_reattached_file(tmp_path: Any) -> None:
    """c27: "nothing at risk" was kept while main's schema version stood still; a TEMP table that shadows
    ``items`` (without its UNIQUE), or another file attached under the same name, now plans anew."""

    def make(name: str, unique: bool, items: str) -> str:
        path = str(tmp_path / name)
        db = sqlite3.connect(path)
        db.executescript(
            "CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);"
            "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total INT);"
            f"CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT {'UNIQUE' if unique else ''}, sku TEXT);"
            "INSERT INTO customers VALUES (1, 'ana'), (2, 'bo');"
            "INSERT INTO orders VALUES (1, 1, 100), (2, 2, 150);"
            f"INSERT INTO items(order_id, sku) VALUES {items};"
        )
        db.close()
        return path

    one_each = make("main.db", True, "(1, 'a'), (2, 'b')")
    fanned = make("fanned.db", False, "(1, 'a'), (1, 'b'), (1, 'c'), (2, 'd')")
    sql = (
        "SELECT c.name, SUM(o.total) FROM {s}customers c JOIN {s}orders o ON o.customer_id = c.id "
        "JOIN {s}items i ON i.order_id = o.id GROUP BY c.id ORDER BY c.id"
    )
    con = guarded_sqlite.connect(one_each, guard="text_to_sql")
    assert con.execute(sql.format(s="")).fetchall() == [("ana", 100), ("bo", 150)]
    con.execute("CREATE TEMP TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku TEXT)")
    con.execute("INSERT INTO temp.items(order_id, sku) VALUES (1, 'a'), (1, 'b'), (1, 'c'), (2, 'd')")
    cur = con.execute(sql.format(s=""))
    assert cur.fetchall() == [("ana", 100), ("bo", 150)]  # the truth; the statement now says ana 300
    assert cur.guard_report.trigger == "aggregate_fanout"
    con = guarded_sqlite.connect(str(tmp_path / "empty.db"), guard="text_to_sql")
    con.execute("ATTACH ? AS aux", (one_each,))
    assert con.execute(sql.format(s="aux.")).fetchall() == [("ana", 100), ("bo", 150)]
    con.execute("DETACH aux")
    con.execute("ATTACH ? AS aux", (fanned,))
    cur = con.execute(sql.format(s="aux."))
    assert cur.fetchall() == [("ana", 100), ("bo", 150)]
    assert cur.guard_report.trigger == "aggregate_fanout"


SESSION_SQL = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "JOIN {items} i ON i.order_id = o.id GROUP BY c.id, c.name ORDER BY c.id"
)
SESSION_TRUTH = (
    "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
    "WHERE o.id IN (SELECT order_id FROM {items}) GROUP BY c.id, c.name ORDER BY c.id"
)
C36_SESSIONS = {
    "TEMP table shadows items": [
        "CREATE TEMP TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku VARCHAR)",
        "INSERT INTO temp.items VALUES (1, 2, 'x'), (2, 2, 'y')",
    ],
    "SET search_path": [
        "CREATE SCHEMA s2",
        "CREATE TABLE s2.items(id INTEGER PRIMARY KEY, order_id INT, sku VARCHAR)",
        "INSERT INTO s2.items VALUES (1, 2, 'x'), (2, 2, 'y')",
        "SET search_path = 's2,main'",
    ],
}


def duckdb_shop(items_per_order: str = "(1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c'), (4, 2, 'd')") -> Any:
    duckdb = pytest.importorskip("duckdb")
    db = duckdb.connect()
    db.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name VARCHAR)")
    db.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total INT)")
    db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku VARCHAR)")
    db.execute("INSERT INTO customers VALUES (1, 'ana'), (2, 'bo')")
    db.execute("INSERT INTO orders VALUES (1, 1, 100), (2, 2, 150)")
    db.execute(f"INSERT INTO items VALUES {items_per_order}")
    return db


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize("session", sorted(C36_SESSIONS))
def test_c36_duckdb_checks_run_in_the_callers_session(preset: str, session: str) -> None:
    """c36: the check runs on the caller's DuckDB connection, with its TEMP tables and search path: the
    corrected answer is the one of the table the statement read, not main's."""
    db = duckdb_shop()
    guarded = guarded_sqlite.wrap(db, guard=preset)
    for statement in C36_SESSIONS[session]:
        guarded.execute(statement)
    written = db.execute(SESSION_SQL.format(items="items")).fetchall()
    truth = db.execute(SESSION_TRUTH.format(items="items")).fetchall()
    assert (written, truth) == ([("bo", 300)], [("bo", 150)])
    cur = guarded.execute(SESSION_SQL.format(items="items"))
    served = served_or_flagged(written, truth, cur)
    assert served == (truth if preset == "text_to_sql" else written)
    if preset == "patch":
        (finding,) = cur.guard_report.aggregates
        assert (finding.written, finding.corrected) == (300, 150)  # bo's, in the table the statement read


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
def test_c33_duckdb_set_schema_replans(preset: str) -> None:
    """c33 (DuckDB): ``SET schema = 's2'`` has none of the DDL words; the catalog is read again because the
    current schema changed, and the fan-out in s2 (no UNIQUE on items.order_id) is seen."""
    db = duckdb_shop("(1, 1, 'a'), (2, 2, 'b')")
    db.execute("CREATE UNIQUE INDEX one_item ON items(order_id)")
    db.execute("CREATE SCHEMA s2")
    for table in ("customers", "orders", "items"):
        db.execute(f"CREATE TABLE s2.{table} AS SELECT * FROM main.{table}")
    db.execute("INSERT INTO s2.items VALUES (3, 1, 'c'), (4, 1, 'd')")
    guarded = guarded_sqlite.wrap(db, guard=preset)
    assert guarded.execute(SESSION_SQL.format(items="items")).fetchall() == [("ana", 100), ("bo", 150)]
    guarded.execute("SET schema = 's2'")
    written = db.execute(SESSION_SQL.format(items="items")).fetchall()
    truth = db.execute(SESSION_TRUTH.format(items="items")).fetchall()
    assert (written, truth) == ([("ana", 300), ("bo", 150)], [("ana", 100), ("bo", 150)])
    served = served_or_flagged(written, truth, guarded.execute(SESSION_SQL.format(items="items")))
    assert served == (truth if preset == "text_to_sql" else written)


@pytest.mark.parametrize("switch", ["SET SCHEMA 's2'", "SELECT set_config('search_path', 's2', false)"])
def test_c33_postgres_schema_switch_without_ddl_words_replans(pg_dsn: str, switch: str) -> None:
    """c33 (PostgreSQL): ``SET SCHEMA`` and ``set_config('search_path', ...)`` move the search path, which
    the schema view compares before it reuses its catalog."""
    import uuid

    import psycopg

    s1, s2 = (f"c33_{uuid.uuid4().hex[:8]}_{n}" for n in (1, 2))
    admin = psycopg.connect(pg_dsn, autocommit=True)
    try:
        for schema, unique, items in ((s1, "UNIQUE", "(1, 1), (2, 2)"), (s2, "", "(1, 1), (2, 1), (3, 1), (4, 2)")):
            admin.execute(f"CREATE SCHEMA {schema}")
            admin.execute(f"CREATE TABLE {schema}.customers(id INT PRIMARY KEY, name TEXT)")
            admin.execute(f"CREATE TABLE {schema}.orders(id INT PRIMARY KEY, customer_id INT, total INT)")
            admin.execute(f"CREATE TABLE {schema}.items(id INT PRIMARY KEY, order_id INT {unique})")
            admin.execute(f"INSERT INTO {schema}.customers VALUES (1, 'ana'), (2, 'bo')")
            admin.execute(f"INSERT INTO {schema}.orders VALUES (1, 1, 100), (2, 2, 150)")
            admin.execute(f"INSERT INTO {schema}.items VALUES {items}")
        raw = psycopg.connect(pg_dsn, autocommit=True)
        raw.execute(f"SET search_path TO {s1}")
        guarded = guarded_sqlite.wrap(raw, guard="text_to_sql")
        sql = SESSION_SQL.format(items="items")
        assert [tuple(r) for r in guarded.execute(sql).fetchall()] == [("ana", 100), ("bo", 150)]
        guarded.execute(switch.replace("s2", s2))
        cur = guarded.execute(sql)
        assert [tuple(r) for r in cur.fetchall()] == [("ana", 100), ("bo", 150)]  # the statement says ana 300
        assert cur.guard_report.trigger == "aggregate_fanout"
        raw.close()
    finally:
        for schema in (s1, s2):
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()


C34_SETUP = """
CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INT, total INT);
CREATE TABLE items(id INTEGER PRIMARY KEY, order_id INT, sku TEXT);
INSERT INTO customers VALUES (1, 'ana'), (2, 'bo'), (3, 'cy'), (4, 'di'), (5, 'ed');
INSERT INTO orders VALUES (1, 1, 60), (2, 2, 60), (3, 3, 60), (4, 4, 60), (5, 5, 150);
INSERT INTO items(order_id, sku) VALUES (1, 'a'), (1, 'b'), (2, 'c'), (2, 'd'), (3, 'e'), (3, 'f'),
  (4, 'g'), (4, 'h'), (5, 'i');
"""
C34_CASES = {
    "equal totals": "SELECT SUM(o.total) AS spent {F} GROUP BY c.id, c.name ORDER BY c.id",
    "label per group": "SELECT CASE WHEN SUM(o.total) > 100 THEN 'big' ELSE 'small' END AS size {F} "
    "GROUP BY c.id, c.name ORDER BY c.id",
}


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize("label", sorted(C34_CASES))
def test_c34_repeated_rows_of_an_inflated_aggregate_go_to_the_aggregate_rule(preset: str, label: str) -> None:
    """c34: a grouped result whose rows repeat (equal inflated totals, a label per group) is checked by the
    aggregate rule before the row repair takes it: flagged, or corrected under ``text_to_sql``."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(C34_SETUP)
    con = guarded_sqlite.connect(":memory:", guard=preset)  # type: ignore[call-overload]
    raw.backup(con)
    sql, truth_sql = (C34_CASES[label].format(F=f) for f in (J, T))
    written, truth = raw.execute(sql).fetchall(), raw.execute(truth_sql).fetchall()
    assert written != truth
    cur = con.execute(sql)
    served = served_or_flagged(written, truth, cur)
    assert served == (truth if preset == "text_to_sql" else written)
    assert cur.guard_report.trigger == "aggregate_fanout"


def test_c34_repeated_rows_without_an_inflated_aggregate_still_go_to_the_row_repair() -> None:
    """No-op side: equal totals that no join inflates are left to the probe as before (no aggregate finding)."""
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(C34_SETUP)
    cur = con.execute("SELECT SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id")
    assert cur.fetchall() == [(60,), (60,), (60,), (60,), (150,)]
    assert not cur.guard_report.aggregates
    assert cur.guard_report.action == "none"


def s_for(f: str, who: str, alias: str = "") -> str:
    return f"SELECT SUM(o.total){alias} {f} c.name = '{who}'"


def g_for(f: str, who: str) -> str:
    return f"SELECT c.name, SUM(o.total) {f} c.name = '{who}' GROUP BY c.id"


JW, TW = f"{J} WHERE", f"{T} AND"
C25_CASES = {
    "two derived tables": lambda f: (
        f"SELECT a.s - b.s FROM ({s_for(f, 'ana', ' AS s')}) a, ({s_for(f, 'cy', ' AS s')}) b"
    ),
    "two scalar subqueries": lambda f: f"SELECT ({s_for(f, 'ana')}) AS ana, ({s_for(f, 'cy')}) AS cy",
    "UNION ALL": lambda f: f"{g_for(f, 'ana')} UNION ALL {g_for(f, 'cy')}",
    "first not realised": lambda f: f"SELECT ({s_for(f, 'bo')}) AS bo, ({s_for(f, 'ana')}) AS ana",
}


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize("label", sorted(C25_CASES))
def test_c25_every_select_at_risk_is_corrected_or_none_is(preset: str, label: str) -> None:
    """c25: two SELECTs at risk in one statement are both planned: the truth (both corrected), or the
    statement's rows flagged; never the first corrected and the second inflated (-90 for 110 / -30)."""
    raw, con = shop(preset)
    make = C25_CASES[label]
    sql = make(JW)
    written, truth = raw.execute(sql).fetchall(), raw.execute(make(TW)).fetchall()
    assert written != truth
    cur = con.execute(sql)
    served = served_or_flagged(written, truth, cur)
    assert served == (truth if preset == "text_to_sql" else written)
    if label != "first not realised":  # both realised: a finding per SELECT
        assert len(cur.guard_report.aggregates) == 2


C26_CASES = {
    "IN with HAVING": (
        "SELECT c.name, SUM(o.total) {F} {W} c.id IN (SELECT c2.id {F2} GROUP BY c2.id "
        "HAVING SUM(o2.total) > 140) GROUP BY c.id ORDER BY c.id"
    ),
    "derived table filtered": (
        "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id {I} "
        "JOIN (SELECT c2.id, SUM(o2.total) AS s {F2} GROUP BY c2.id) d ON d.id = c.id "
        "WHERE {S} d.s > 140 GROUP BY c.id ORDER BY c.id"
    ),
}
J2 = "FROM customers c2 JOIN orders o2 ON o2.customer_id = c2.id JOIN items i2 ON i2.order_id = o2.id"
T2 = "FROM customers c2 JOIN orders o2 ON o2.customer_id = c2.id WHERE o2.id IN (SELECT order_id FROM items)"


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize("label", sorted(C26_CASES))
def test_c26_the_outer_select_is_corrected_over_its_corrected_subquery(preset: str, label: str) -> None:
    """c26: an outer SUM at risk and an inflated subquery that chooses the customers: the outer query's
    correction reads the subquery corrected, so the truth is bo 150 alone (not the corrected totals of
    the customers the inflated filter chose)."""
    raw, con = shop(preset)
    template = C26_CASES[label]
    items, semi = "JOIN items i ON i.order_id = o.id", "o.id IN (SELECT order_id FROM items) AND"
    sql = template.format(F=J, W="WHERE", F2=J2, I=items, S="")
    truth_sql = template.format(F=T, W="AND", F2=T2, I="", S=semi)
    written, truth = raw.execute(sql).fetchall(), raw.execute(truth_sql).fetchall()
    assert (written, truth) == ([("ana", 300), ("bo", 150), ("cy", 190)], [("bo", 150)])
    cur = con.execute(sql)
    served = served_or_flagged(written, truth, cur)
    assert served == (truth if preset == "text_to_sql" else written)


def test_c26_a_subquery_that_cannot_be_checked_leaves_the_whole_statement_as_written() -> None:
    """All or nothing: the outer SUM could be corrected, but a correlated subquery at risk cannot be
    checked alone, so nothing is corrected and the decision names the subquery."""
    raw, con = shop("text_to_sql")
    sql = (
        f"SELECT c.name, SUM(o.total) {J} WHERE EXISTS (SELECT 1 {J2} WHERE c2.id = c.id GROUP BY c2.id "
        "HAVING SUM(o2.total) > 140) GROUP BY c.id ORDER BY c.id"
    )
    cur = con.execute(sql)
    assert cur.fetchall() == raw.execute(sql).fetchall()
    (decision,) = cur.guard_report.decisions
    assert not decision.applied
    assert "subquery" in decision.reason and "outer query" in decision.reason


C28_CASES = {
    "RIGHT JOIN": "SELECT c.name, SUM(o.total) FROM items i RIGHT JOIN orders o ON i.order_id = o.id "
    "JOIN customers c ON c.id = o.customer_id GROUP BY c.id, c.name ORDER BY c.id",
    "FULL JOIN": "SELECT o.customer_id, SUM(o.total) FROM orders o FULL JOIN items i ON i.order_id = o.id "
    "GROUP BY o.customer_id ORDER BY o.customer_id",
    "ROLLUP": "SELECT c.city, SUM(o.total) {J} GROUP BY ROLLUP (c.city) ORDER BY c.city NULLS LAST",
    "CUBE": "SELECT c.city, SUM(o.total) {J} GROUP BY CUBE (c.city) ORDER BY c.city NULLS LAST",
}


@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize("label", sorted(C28_CASES))
def test_c28_c31_a_shape_the_analysis_cannot_read_leaves_with_a_decision(preset: str, label: str) -> None:
    """c28 (RIGHT/FULL JOIN), c31 (ROLLUP/CUBE), on DuckDB: the statement's rows stand, and the report
    carries an aggregate decision saying the analysis did not read it, never nothing."""
    db = duckdb_shop()
    db.execute("ALTER TABLE customers ADD COLUMN city VARCHAR DEFAULT 'north'")
    sql = C28_CASES[label].format(J=J)
    written = db.execute(sql).fetchall()
    cur = guarded_sqlite.wrap(db.cursor(), guard=preset)
    cur.execute(sql)
    assert cur.fetchall() == written
    (decision,) = [d for d in cur.guard_report.decisions if d.rule == "aggregate"]
    assert not decision.applied
    assert decision.reason.startswith("aggregate not analysed: ")


ORDER_LINES = (
    "CREATE VIEW order_lines AS SELECT o.id AS order_id, o.customer_id, o.total, i.sku "
    "FROM orders o JOIN items i ON i.order_id = o.id"
)
C35_CASES = {
    "per customer": (
        "SELECT c.name, SUM(l.total) FROM customers c JOIN order_lines l ON l.customer_id = c.id "
        "GROUP BY c.id, c.name ORDER BY c.id",
        f"SELECT c.name, SUM(o.total) {T} GROUP BY c.id, c.name ORDER BY c.id",
    ),
    "grand total": (
        "SELECT SUM(total) FROM order_lines",
        "SELECT SUM(total) FROM orders WHERE id IN (SELECT order_id FROM items)",
    ),
    "keyless derived table": (
        "SELECT c.name, SUM(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN (SELECT order_id FROM items) i ON i.order_id = o.id GROUP BY c.id, c.name ORDER BY c.id",
        f"SELECT c.name, SUM(o.total) {T} GROUP BY c.id, c.name ORDER BY c.id",
    ),
    "a CTE that holds the join": (
        "WITH l AS (SELECT o.customer_id, o.total FROM orders o JOIN items i ON i.order_id = o.id) "
        "SELECT c.name, SUM(l.total) FROM customers c JOIN l ON l.customer_id = c.id GROUP BY c.id, c.name "
        "ORDER BY c.id",
        f"SELECT c.name, SUM(o.total) {T} GROUP BY c.id, c.name ORDER BY c.id",
    ),
}


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
@pytest.mark.parametrize("preset", ["patch", "text_to_sql"])
@pytest.mark.parametrize("label", sorted(C35_CASES))
def test_c35_a_view_cte_or_derived_table_hiding_a_join_is_read_through(engine: str, preset: str, label: str) -> None:
    """c35: a view (SQLite's and DuckDB's catalogs give its body), a CTE or a keyless derived table that
    joins orders to their items is read through: the inflated SUM over it is flagged, or corrected."""
    sql, truth_sql = C35_CASES[label]
    if engine == "sqlite":
        raw, con = shop(preset)
        raw.execute(ORDER_LINES)
        con.execute(ORDER_LINES)
        run: Any = con.execute
    else:
        raw = duckdb_shop("(1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c'), (4, 2, 'x'), (5, 3, 'p'), (6, 3, 'q'), (7, 4, 'r')")
        raw.execute("INSERT INTO customers VALUES (3, 'cy')")
        raw.execute("INSERT INTO orders VALUES (3, 3, 60), (4, 3, 70)")
        raw.execute(ORDER_LINES)
        cursor = guarded_sqlite.wrap(raw.cursor(), guard=preset)
        run = cursor.execute
    written, truth = raw.execute(sql).fetchall(), raw.execute(truth_sql).fetchall()
    assert written != truth
    cur = run(sql)
    served = served_or_flagged(written, truth, cur)
    assert served == (truth if preset == "text_to_sql" else written)


def test_c35_a_view_that_does_not_join_costs_no_check() -> None:
    """No-op side: a SUM over a view of one table is screened out like a SUM over the table."""
    _, con = shop("text_to_sql")
    con.execute("CREATE VIEW big AS SELECT * FROM orders WHERE total > 90")
    cur = con.execute("SELECT SUM(total) FROM big")
    assert cur.fetchall() == [(250,)]
    assert cur.guard_report.decisions == () and cur.guard_report.final_sql == "SELECT SUM(total) FROM big"
