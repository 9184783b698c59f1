"""Verdicts the default preset must not get wrong (issue 15): each repro in
../shared/repros/provenance/ about the analysis and its catalog reads, as a test. The schema-cache repros
(p01-p04, p20) are in tests/rules/test_schema_churn.py; the row paths (p08, p16, p18, p21) in
tests/repros/test_repros_rows.py; p09, p10, p14, p15 in tests/repros/test_repros_small.py.

Plain sqlite3 is the baseline: under the default preset the guarded rows must equal its rows wherever
the fresh verdict is not join amplification.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite._analysis.provenance import analyse
from guarded_sqlite._analysis.schema import SchemaFacts, read_sqlite_schema, sqlite_table_facts


def both(setup: str, sql: str, parameters: Any = (), guard: str = "patch") -> tuple[list[Any], list[Any], Any]:
    """The rows of ``sql`` on plain sqlite3 and on a guarded connection with the same data, and the report."""
    raw = sqlite3.connect(":memory:")
    raw.executescript(setup)
    con = guarded_sqlite.connect(":memory:", guard=guard)  # type: ignore[arg-type]
    con.executescript(setup)
    cur = con.execute(sql, parameters)
    return raw.execute(sql, parameters).fetchall(), cur.fetchall(), cur.guard_report


ORDERS_TEN = "".join(
    f"INSERT INTO orders (customer_id, created_at) VALUES ({1 + i % 2}, '2024-05-0{1 + i % 2} 1{i}:00');"
    for i in range(10)
)


def test_p05_tables_whose_names_differ_beyond_ascii_case_are_two_tables() -> None:
    """p05: SQLite folds ASCII letters only; "Ärzte" (keyed) and "ärzte" (keyless) must not share facts."""
    setup = """
        CREATE TABLE "ärzte" (id INTEGER, name TEXT);
        CREATE TABLE "Ärzte" (id INTEGER PRIMARY KEY, name TEXT);
        INSERT INTO "Ärzte" VALUES (1, 'Ana'), (2, 'Ben');
        CREATE TABLE visits (id INTEGER PRIMARY KEY, arzt_id INTEGER);
    """ + "".join(f"INSERT INTO visits (arzt_id) VALUES ({1 + i % 2});" for i in range(10))
    plain, rows, report = both(setup, 'SELECT a.name FROM visits v JOIN "Ärzte" a ON a.id = v.arzt_id')
    assert rows == plain and len(rows) == 10
    assert report.provenance == "value_repeats" and report.action == "none"


NULL_SKUS = (
    "CREATE TABLE items (sku TEXT PRIMARY KEY, title TEXT);"
    + "".join(f"INSERT INTO items VALUES ('sku{i}', 't{i}');" for i in range(19))
    + "INSERT INTO items VALUES (NULL, 'draft 1'), (NULL, 'draft 2');"
)


def test_p06_a_text_primary_key_may_hold_null_so_p2_keeps_the_distinct() -> None:
    """p06: the NULL sku rows make ``SELECT DISTINCT sku`` drop a row; P2 must not remove the DISTINCT."""
    plain, rows, report = both(NULL_SKUS, "SELECT DISTINCT sku FROM items")
    assert sorted(rows, key=repr) == sorted(plain, key=repr) and len(rows) == 20
    assert report.action == "none" and report.provenance != "identified"


def test_p06_null_primary_key_rows_are_not_collapsed_by_p1() -> None:
    """p06: five NULL skus repeat as value repeats of one table; P1 leaves them alone."""
    setup = NULL_SKUS + "INSERT INTO items VALUES (NULL, 'draft 3'), (NULL, 'draft 4'), (NULL, 'draft 5');"
    plain, rows, report = both(setup, "SELECT sku FROM items WHERE title LIKE 'draft%'")
    assert rows == plain and len(rows) == 5 and report.flagged and report.action == "none"


def test_p07_p2_does_not_rerun_a_distinct_the_keys_prove_a_no_op() -> None:
    """p07: ``SELECT DISTINCT t.id, t.name, audit(t.id) ...`` (the projection holds the key): the user
    function runs once per row, as with sqlite3, and nothing is re-executed: the default preset keeps
    every DISTINCT as written, without asking anything."""
    calls: list[int] = []
    con = guarded_sqlite.connect(":memory:")
    con.executescript("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT);")
    con.executemany("INSERT INTO t (name) VALUES (?)", [(f"n{i}",) for i in range(50)])
    con.create_function("audit", 1, lambda x: calls.append(x) or x)
    cur = con.execute('SELECT DISTINCT "t"."id", "t"."name", audit("t"."id") FROM "t" WHERE "t"."name" LIKE ?', ("n%",))
    assert len(cur.fetchall()) == 50 and len(calls) == 50
    report = cur.guard_report
    assert report.action == "none" and report.decisions == () and report.provenance is None


P11_SETUP = (
    """
    CREATE TABLE calendar (day TEXT PRIMARY KEY, weekday TEXT NOT NULL, is_holiday INTEGER);
    INSERT INTO calendar VALUES ('2024-05-01', 'Wed', 1), ('2024-05-02', 'Thu', 0);
    CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, code TEXT UNIQUE);
    INSERT INTO customers VALUES (1, 'Ana', 'A'), (2, 'Ben', 'B');
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, created_at TEXT, code TEXT);
    """
    + ORDERS_TEN
    + "UPDATE orders SET code = lower(CASE customer_id WHEN 1 THEN 'A' ELSE 'B' END);"
)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT d.weekday FROM orders o JOIN calendar d ON d.day = date(o.created_at)",
        "SELECT c.name FROM orders o JOIN customers c ON c.id IS o.customer_id",
        "SELECT c.name FROM orders o JOIN customers c ON c.code = upper(o.code)",
        "SELECT c.name FROM orders o, customers c WHERE c.id = o.customer_id + 0",
        "SELECT c.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id",  # the control
    ],
)
def test_p11_a_lookup_on_an_expression_of_known_columns_is_an_n_to_1_lookup(sql: str) -> None:
    """p11: a key matched to a deterministic expression of the other table's columns (or with IS) is
    an N:1 lookup: value repeats, left alone."""
    plain, rows, report = both(P11_SETUP, sql)
    assert rows == plain and len(rows) == 10
    assert report.provenance == "value_repeats" and report.action == "none", report.provenance_evidence


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT c.name FROM orders o JOIN customers c ON c.id = mystery(o.customer_id)", "mystery"),
        ("SELECT c.name FROM orders o JOIN customers c ON c.id = o.customer_id + random() * 0", "RANDOM"),
        ("SELECT c.name FROM orders o JOIN customers c ON c.code = o.code COLLATE NOCASE", "COLLATE"),
    ],
)
def test_p11_an_equality_the_analysis_does_not_model_is_unknown_not_a_fan_out(sql: str, why: str) -> None:
    """Fail closed: a user function, a non-deterministic one or a COLLATE may well determine the table,
    so the verdict is unknown and the default preset changes no row."""
    con = guarded_sqlite.connect(":memory:")
    con.executescript(P11_SETUP)
    con.create_function("mystery", 1, lambda x: x)
    raw = sqlite3.connect(":memory:")
    raw.executescript(P11_SETUP)
    raw.create_function("mystery", 1, lambda x: x)
    cur = con.execute(sql)
    assert cur.fetchall() == raw.execute(sql).fetchall()
    report = cur.guard_report
    assert report.provenance == "unknown" and report.action == "none"
    assert why.lower() in (report.provenance_evidence or "").lower(), report.provenance_evidence


def test_p11_the_keys_of_a_genuine_fan_out_still_decide() -> None:
    """The reverse direction of an expression lookup does fan out (customers repeat once per order), and
    the default preset still repairs it."""
    plain, rows, report = both(P11_SETUP, "SELECT c.name FROM customers c JOIN orders o ON o.customer_id + 0 = c.id")
    assert len(plain) == 10 and sorted(rows) == [("Ana",), ("Ben",)] and report.provenance == "amplified"


FTS_SETUP = (
    """
    CREATE TABLE docs (id INTEGER PRIMARY KEY, category TEXT, body TEXT);
    CREATE VIRTUAL TABLE docs_fts USING fts5(body, content='docs', content_rowid='id');
    """
    + "".join(
        f"INSERT INTO docs (category, body) VALUES ('{'news' if i % 5 else 'blog'}', 'sqlite tip {i}');"
        for i in range(10)
    )
    + "INSERT INTO docs_fts (docs_fts) VALUES ('rebuild');"
)


def test_p12_a_full_text_tables_rowid_is_a_key() -> None:
    """p12: ``docs JOIN docs_fts ON docs_fts.rowid = docs.id`` is a 1:1 lookup; the repeated categories
    are value repeats."""
    sql = "SELECT d.category FROM docs d JOIN docs_fts f ON f.rowid = d.id WHERE docs_fts MATCH ?"
    plain, rows, report = both(FTS_SETUP, sql, ("sqlite",))
    assert rows == plain and len(rows) == 10
    assert report.provenance == "value_repeats" and report.action == "none"


def test_p12_rtree_rowid_is_a_key_and_other_modules_keys_are_unknown() -> None:
    """R*Tree's rowid is unique; a module SQLite does not vouch for (here ``csv``, declared by the text
    the facts are read from) gets ``keys_unknown``, and a join through it is ``unknown``."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE boxes USING rtree(id, lo, hi)")
    boxes = read_sqlite_schema(con).table("boxes")
    assert boxes is not None and frozenset({"rowid"}) in boxes.identity_keys and not boxes.keys_unknown
    con.execute("CREATE TABLE ghost (a INTEGER)")
    ghost = sqlite_table_facts(con.cursor(), "main", "ghost", "table", "CREATE VIRTUAL TABLE ghost USING csv(a)")
    assert ghost.keys_unknown and not ghost.keys
    facts = SchemaFacts((boxes, ghost))
    assert analyse("SELECT g.a FROM boxes b JOIN ghost g ON g.a = b.id", facts).verdict == "unknown"
    plain = SchemaFacts((boxes, sqlite_table_facts(con.cursor(), "main", "ghost", "table", "CREATE TABLE ghost (a)")))
    assert analyse("SELECT g.a FROM boxes b JOIN ghost g ON g.a = b.id", plain).verdict == "amplified"


AUTH_SETUP = """
    CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
    CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER);
    INSERT INTO customers VALUES (1, 'Ana'), (2, 'Ben');
""" + "".join(f"INSERT INTO orders (customer_id) VALUES ({1 + i % 2});" for i in range(10))


@pytest.mark.parametrize("answer", [sqlite3.SQLITE_DENY, sqlite3.SQLITE_IGNORE])
@pytest.mark.parametrize("guard", ["patch", "text_to_sql"])
def test_p13_a_catalog_the_callers_authorizer_denies_is_unknown(answer: int, guard: str) -> None:
    """p13: an authorizer that forbids PRAGMA also blocks the guard's catalog reads; that is "cannot
    tell", not "no keys": the amplification P1 would see is never established, no row changes."""
    sql = "SELECT c.name FROM customers c JOIN orders o ON c.id = o.customer_id"
    raw = sqlite3.connect(":memory:")
    raw.executescript(AUTH_SETUP)
    con = guarded_sqlite.connect(":memory:", guard=guard)  # type: ignore[arg-type]
    con.executescript(AUTH_SETUP)
    con.set_authorizer(lambda action, *a: answer if action == sqlite3.SQLITE_PRAGMA else sqlite3.SQLITE_OK)
    for query in (sql, "SELECT c.name FROM orders o JOIN customers c ON c.id = o.customer_id"):
        cur = con.execute(query)
        assert cur.fetchall() == raw.execute(query).fetchall()
        assert cur.guard_report.provenance == "unknown" and cur.guard_report.action == "none"
        assert "catalog unreadable" in (cur.guard_report.provenance_evidence or "")
    con.set_authorizer(None)  # readable again: the fan-out is established and repaired
    cur = con.execute(sql)
    assert len(cur.fetchall()) == 2 and cur.guard_report.provenance == "amplified"


def test_p17_checking_a_cached_verdict_costs_the_same_whatever_the_schema_size() -> None:
    """p17: after DDL (a TEMP table per request), a flagged statement on a schema of many tables runs
    the same catalog statements as on a schema of two, and reads no table's facts again."""

    def catalog_statements(tables: int) -> list[str]:
        con = guarded_sqlite.connect(":memory:", isolation_level=None)
        con.execute("BEGIN")
        for i in range(tables):
            con.execute(f"CREATE TABLE tenant_{i} (id INTEGER PRIMARY KEY, name TEXT UNIQUE, ref INTEGER)")
        con.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, name TEXT)")
        con.execute("CREATE TABLE o (id INTEGER PRIMARY KEY, cid INTEGER)")
        con.execute("INSERT INTO c VALUES (1, 'Ana'), (2, 'Ben')")
        con.executemany("INSERT INTO o (cid) VALUES (?)", [(1 + i % 2,) for i in range(10)])
        con.execute("COMMIT")
        query = "SELECT c.name FROM c JOIN o ON o.cid = c.id"
        assert con.execute(query).guard_report.action == "distinct_injected"
        con.execute("CREATE TEMP TABLE scratch (x)")
        seen: list[str] = []
        con.set_trace_callback(seen.append)
        assert con.execute(query).guard_report.action == "distinct_injected"
        con.set_trace_callback(None)
        # The catalog's statements only (rowids differ with the schema's size), not the join-copy check's.
        check = ("__gs_id", "function_list", "busy_timeout")
        return [re.sub(r"\d+", "N", s) for s in seen if s != query and not any(c in s for c in check)]

    small, large = catalog_statements(0), catalog_statements(300)
    assert small == large and len(small) <= 6, small
    assert not any("table_xinfo" in s or "tbl_name = " in s for s in large), large  # lookups, no scan or facts read


def test_p17_a_new_connection_reads_only_the_tables_the_statement_names(tmp_path: Any) -> None:
    """p17 (connection per request): the first flagged statement reads the facts of its two tables, not
    of the 300 others."""
    path = tmp_path / "app.db"
    setup = sqlite3.connect(path)
    setup.executescript(
        "".join(f"CREATE TABLE tenant_{i} (id INTEGER PRIMARY KEY, name TEXT UNIQUE);" for i in range(300))
        + "CREATE TABLE c (id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE o (id INTEGER PRIMARY KEY, cid INTEGER);"
        + "INSERT INTO c VALUES (1, 'Ana'), (2, 'Ben');"
        + "".join(f"INSERT INTO o (cid) VALUES ({1 + i % 2});" for i in range(10))
    )
    setup.close()
    con = guarded_sqlite.connect(path)
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    assert con.execute("SELECT c.name FROM c JOIN o ON o.cid = c.id").guard_report.action == "distinct_injected"
    facts_reads = [s for s in seen if "table_xinfo" in s]
    assert all('"c"' in s or '"o"' in s for s in facts_reads) and facts_reads, seen


def test_a_schema_detached_after_a_verdict_makes_it_read_again_not_unknown(tmp_path: Any) -> None:
    """A cached verdict whose check statements name a schema detached since is worked out again (the
    check statement fails: that is a changed answer, not an unreadable catalog). Here x resolves in the
    second attached schema, so the check asks the first whether it has come to shadow it."""
    for name, ddl in (("a", "CREATE TABLE other (v);"), ("b", "CREATE TABLE x (id INTEGER, name TEXT);")):
        setup = sqlite3.connect(tmp_path / f"{name}.db")
        setup.executescript(ddl + ("INSERT INTO x VALUES (1, 'a'), (2, 'b');" if name == "b" else ""))
        setup.close()
    con = guarded_sqlite.connect(":memory:", isolation_level=None)
    con.execute("CREATE TABLE o (id INTEGER PRIMARY KEY, xid INTEGER)")
    con.executemany("INSERT INTO o (xid) VALUES (?)", [(1 + i % 2,) for i in range(10)])
    con.execute("ATTACH ? AS a", (str(tmp_path / "a.db"),))
    con.execute("ATTACH ? AS b", (str(tmp_path / "b.db"),))
    sql = "SELECT x.name FROM o JOIN x ON x.id = o.xid"  # b.x is keyless: amplified
    assert con.execute(sql).guard_report.provenance == "amplified"
    con.execute("DETACH a")
    report = con.execute(sql).guard_report
    assert report.provenance == "amplified", report.provenance_evidence
