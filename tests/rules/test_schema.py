"""Schema facts from the SQLite, DuckDB and PostgreSQL catalogs, and the per-connection cache."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

import guarded_sqlite
from guarded_sqlite._analysis.provenance import analyse
from guarded_sqlite._analysis.schema import (
    CatalogUnreadable,
    ForeignKey,
    SchemaFacts,
    TableFacts,
    lookup_statement,
    plain_cursor,
    read_lookup,
    read_sqlite_schema,
    sqlite_declarations,
    sqlite_has_table,
    sqlite_index_list,
    sqlite_schemas,
    sqlite_temp_names,
)
from guarded_sqlite._analysis.schema_servers import read_duckdb_schema, read_postgres_schema

DDL = """
CREATE TABLE plain (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE composite (a INTEGER, b TEXT, v TEXT, PRIMARY KEY (a, b));
CREATE TABLE uniques (id INTEGER PRIMARY KEY, code TEXT NOT NULL UNIQUE, email TEXT UNIQUE, x INT, y INT,
                      UNIQUE (x, y));
CREATE UNIQUE INDEX uniques_name ON uniques (x);
CREATE UNIQUE INDEX uniques_partial ON uniques (y) WHERE y > 0;
CREATE UNIQUE INDEX uniques_expression ON uniques (lower(email));
CREATE TABLE textkey (code TEXT PRIMARY KEY, n INTEGER);
CREATE TABLE norowid (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;
CREATE TABLE keyless (a INTEGER, b INTEGER);
CREATE TABLE child (id INTEGER PRIMARY KEY, plain_id INTEGER REFERENCES plain (id), a INT, b TEXT,
                    FOREIGN KEY (a, b) REFERENCES composite (a, b));
CREATE VIEW named AS SELECT id, name FROM plain;
CREATE TABLE [Odd "Name"] ("Key Col" INTEGER PRIMARY KEY, "Val" TEXT);
"""


@pytest.fixture
def con() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:")
    connection.executescript(DDL)
    yield connection
    connection.close()


def keys(facts: TableFacts | None) -> set[frozenset[str]]:
    assert facts is not None
    return {k for k in facts.keys if not k & {"rowid", "oid", "_rowid_"}}


def test_sqlite_keys(con: sqlite3.Connection) -> None:
    facts = read_sqlite_schema(con)
    assert keys(facts.table("plain")) == {frozenset({"id"})}
    assert keys(facts.table("composite")) == {frozenset({"a", "b"})}
    uniques = facts.table("uniques")
    assert keys(uniques) == {
        frozenset({"id"}),
        frozenset({"code"}),
        frozenset({"email"}),
        frozenset({"x", "y"}),
        frozenset({"x"}),  # a unique index; the partial and the expression index are not keys
    }
    assert keys(facts.table("norowid")) == {frozenset({"k"})}
    assert facts.table("norowid") is not None and frozenset({"rowid"}) not in facts.table("norowid").keys  # type: ignore[union-attr]
    assert keys(facts.table("keyless")) == set()
    assert frozenset({"rowid"}) in facts.table("keyless").keys  # type: ignore[union-attr]


def test_sqlite_null_rule(con: sqlite3.Connection) -> None:
    facts = read_sqlite_schema(con)
    uniques = facts.table("uniques")
    assert uniques is not None
    assert "code" in uniques.not_null and "email" not in uniques.not_null
    identity = set(uniques.identity_keys)
    assert frozenset({"code"}) in identity and frozenset({"id"}) in identity
    assert frozenset({"email"}) not in identity and frozenset({"x"}) not in identity
    textkey = facts.table("textkey")
    # SQLite lets a PRIMARY KEY column of a rowid table hold NULL (unless declared NOT NULL or the
    # rowid itself): the key matches with =, but does not identify rows.
    assert textkey is not None and frozenset({"code"}) in textkey.keys
    assert frozenset({"code"}) not in textkey.identity_keys and "code" not in textkey.not_null
    norowid = facts.table("norowid")  # WITHOUT ROWID enforces NOT NULL on its key
    assert norowid is not None and frozenset({"k"}) in norowid.identity_keys and not norowid.rowid
    assert not any(k & {"rowid", "oid", "_rowid_"} for k in norowid.keys)
    plain = facts.table("plain")  # INTEGER PRIMARY KEY is the rowid: never NULL
    assert plain is not None and frozenset({"id"}) in plain.identity_keys


def test_sqlite_columns_foreign_keys_views_and_quoting(con: sqlite3.Connection) -> None:
    facts = read_sqlite_schema(con)
    child = facts.table("CHILD")
    assert child is not None and child.columns == ("id", "plain_id", "a", "b")
    assert set(child.foreign_keys) == {
        ForeignKey(("plain_id",), "plain", ("id",)),
        ForeignKey(("a", "b"), "composite", ("a", "b")),
    }
    view = facts.table("named")
    assert view is not None and view.is_view and view.keys == () and view.columns == ("id", "name")
    odd = facts.table('odd "name"')
    assert odd is not None and keys(odd) == {frozenset({"key col"})} and odd.columns == ("Key Col", "Val")
    assert facts.table("missing") is None


def test_sqlite_temp_and_attached_resolution(con: sqlite3.Connection) -> None:
    con.executescript(
        """
        ATTACH DATABASE ':memory:' AS aux;
        CREATE TABLE aux.plain (other INTEGER UNIQUE);
        CREATE TABLE aux.only_aux (z INTEGER PRIMARY KEY);
        CREATE TEMP TABLE keyless (t INTEGER PRIMARY KEY);
        """
    )
    facts = read_sqlite_schema(con)
    assert facts.search_order == ("temp", "main", "aux")
    assert facts.table("plain") is not None and facts.table("plain").schema == "main"  # type: ignore[union-attr]
    assert facts.table("plain", "aux").columns == ("other",)  # type: ignore[union-attr]
    assert facts.table("keyless").schema == "temp"  # type: ignore[union-attr]  # temp shadows main
    assert facts.table("keyless", "main").columns == ("a", "b")  # type: ignore[union-attr]
    assert facts.table("only_aux").schema == "aux"  # type: ignore[union-attr]
    assert facts.table("PLAIN", "AUX") is not None


def test_sqlite_reader_ignores_row_factory_text_factory_and_proxies(con: sqlite3.Connection) -> None:
    expected = read_sqlite_schema(con)
    con.row_factory = lambda cursor, row: {"row": row}
    con.text_factory = bytes
    assert read_sqlite_schema(con) == expected
    con.row_factory = sqlite3.Row
    assert read_sqlite_schema(con) == expected
    guarded = guarded_sqlite.wrap(con)
    assert read_sqlite_schema(guarded) == expected


def test_sqlite_reader_never_raises() -> None:
    assert read_sqlite_schema(object()) == SchemaFacts()
    closed = sqlite3.connect(":memory:")
    closed.close()
    assert read_sqlite_schema(closed) == SchemaFacts()


def test_sqlite_lookups_the_schema_view_uses(con: sqlite3.Connection) -> None:
    """The catalog reads behind ``guarded_sqlite._analysis.catalog``: schemas in resolution order, a table's
    declarations (its own row and its indexes'), the same rows by rowid, index lists, TEMP names."""
    con.execute("ATTACH DATABASE ':memory:' AS aux2")
    con.execute("CREATE TEMP TABLE scratch (x)")
    cur = plain_cursor(con)
    assert sqlite_schemas(cur) == ("temp", "main", "aux2")
    rows = sqlite_declarations(cur, "main", "UNIQUES")  # names match as SQLite's: ASCII case folded
    assert rows[0][1:4] == ("table", "uniques", "uniques") and {r[1] for r in rows[1:]} == {"index"}
    lookup, parameters = lookup_statement(("temp", "main"), {1: [r[0] for r in rows]}, ["scratch", "uniques"])
    temp, found = read_lookup(cur.execute(lookup, parameters).fetchall())
    assert temp == {"scratch"} and tuple(found[1][r[0]] for r in rows) == rows
    assert {i[0] for i in sqlite_index_list(cur, "main", "uniques")} == {r[2] for r in rows[1:]}
    assert sqlite_temp_names(cur) == {"scratch"}
    assert sqlite_has_table(cur, "main", "plain") and not sqlite_has_table(cur, "aux2", "plain")
    con.execute("DROP INDEX uniques_name")  # its row is gone: a lookup by rowid tells
    assert len(read_lookup(cur.execute(lookup, parameters).fetchall())[1][1]) == len(rows) - 1


def test_sqlite_lookups_raise_rather_than_answer_nothing() -> None:
    """A read that fails, or a PRAGMA an authorizer silenced, is ``CatalogUnreadable``, never "no rows"."""
    con = sqlite3.connect(":memory:")
    con.executescript(DDL)
    cur = plain_cursor(con)
    con.set_authorizer(lambda action, *a: sqlite3.SQLITE_IGNORE if action == sqlite3.SQLITE_PRAGMA else 0)
    with pytest.raises(CatalogUnreadable):
        sqlite_schemas(cur)
    con.set_authorizer(lambda action, *a: sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_PRAGMA else 0)
    with pytest.raises(CatalogUnreadable):
        sqlite_index_list(cur, "main", "plain")
    con.set_authorizer(None)
    con.close()
    with pytest.raises(CatalogUnreadable):
        sqlite_declarations(cur, "main", "plain")


def test_sqlite_facts_drive_the_analysis(con: sqlite3.Connection) -> None:
    facts = read_sqlite_schema(con)
    sql = "SELECT p.name FROM plain p JOIN child c ON c.plain_id = p.id"
    assert analyse(sql, facts).verdict == "amplified"
    assert analyse("SELECT c.a FROM child c JOIN plain p ON c.plain_id = p.id", facts).verdict == "value_repeats"


# -------------------------------------------------------------------------------------------- DuckDB


def test_duckdb_schema() -> None:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, email VARCHAR UNIQUE, name VARCHAR NOT NULL)")
    con.execute("CREATE TABLE orders (id INTEGER, customer_id INTEGER REFERENCES customers (id), PRIMARY KEY (id))")
    con.execute("CREATE TABLE pairs (a INTEGER, b INTEGER, c INTEGER, UNIQUE (a, b))")
    con.execute("CREATE UNIQUE INDEX pairs_c ON pairs (c)")
    con.execute("CREATE VIEW names AS SELECT name FROM customers")
    con.execute("CREATE TEMP TABLE scratch (k INTEGER PRIMARY KEY)")
    con.execute("CREATE SCHEMA other")
    con.execute("CREATE TABLE other.thing (t INTEGER PRIMARY KEY)")
    facts = read_duckdb_schema(con)
    customers = facts.table("CUSTOMERS")
    assert customers is not None and customers.columns == ("id", "email", "name")
    assert set(customers.keys) == {frozenset({"id"}), frozenset({"email"})}
    assert customers.not_null >= {"id", "name"} and "email" not in customers.not_null
    orders = facts.table("orders")
    assert orders is not None and orders.foreign_keys == (ForeignKey(("customer_id",), "customers", ("id",)),)
    assert set(facts.table("pairs").keys) == {frozenset({"a", "b"}), frozenset({"c"})}  # type: ignore[union-attr]
    assert facts.table("names").is_view  # type: ignore[union-attr]
    assert facts.table("scratch").schema == "temp"  # type: ignore[union-attr]
    assert facts.table("thing", "other") is not None and facts.table("thing") is None
    verdict = analyse("SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id", facts, "duckdb")
    assert verdict.verdict == "amplified"
    assert read_duckdb_schema(object()) == SchemaFacts(search_order=("temp", "main"))
    con.close()


# ---------------------------------------------------------------------------------------- PostgreSQL


def test_postgres_schema(pg_dsn: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_dsn) as con:
        con.execute("DROP SCHEMA IF EXISTS prov_test CASCADE")
        con.execute("CREATE SCHEMA prov_test")
        con.execute("SET search_path TO prov_test, public")
        con.execute("CREATE TABLE customers (id integer PRIMARY KEY, email text UNIQUE, name text NOT NULL)")
        con.execute("CREATE TABLE orders (id integer PRIMARY KEY, customer_id integer REFERENCES customers (id))")
        con.execute("CREATE TABLE pairs (a integer, b integer, c integer, UNIQUE (a, b))")
        con.execute("CREATE UNIQUE INDEX pairs_c ON pairs (c) WHERE c > 0")
        con.execute("CREATE UNIQUE INDEX pairs_expr ON pairs ((a + b))")
        con.execute("CREATE VIEW names AS SELECT name FROM customers")
        con.execute("CREATE TEMP TABLE customers (k integer PRIMARY KEY)")
        con.commit()
        facts = read_postgres_schema(con)
        assert con.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert facts.search_order[0].startswith("pg_temp")
        temp = facts.table("customers")
        assert temp is not None and temp.columns == ("k",)  # the temporary table shadows prov_test.customers
        customers = facts.table("customers", "prov_test")
        assert customers is not None and set(customers.keys) == {frozenset({"id"}), frozenset({"email"})}
        assert customers.not_null >= {"id", "name"}
        assert facts.table("customers", "pg_temp") is temp
        orders = facts.table("orders")
        assert orders is not None and orders.foreign_keys == (ForeignKey(("customer_id",), "customers", ("id",)),)
        assert set(facts.table("pairs").keys) == {frozenset({"a", "b"})}  # type: ignore[union-attr]
        assert facts.table("names").is_view  # type: ignore[union-attr]
        sql = "SELECT c.name FROM prov_test.customers c JOIN orders o ON o.customer_id = c.id"
        assert analyse(sql, facts, "postgres").verdict == "amplified"
        con.execute("DROP SCHEMA prov_test CASCADE")
        con.commit()
    assert read_postgres_schema(object()) == SchemaFacts()


def test_postgres_schema_read_leaves_the_callers_transaction_as_it_was(pg_dsn: str) -> None:
    """The catalog is read in a savepoint: inside an open transaction its uncommitted writes survive and
    the transaction stays open; a failed transaction is not touched (no keys, still failed)."""
    psycopg = pytest.importorskip("psycopg")
    status = psycopg.pq.TransactionStatus
    with psycopg.connect(pg_dsn) as con:
        con.execute("CREATE TEMP TABLE kept (id INTEGER PRIMARY KEY)")
        con.execute("INSERT INTO kept VALUES (1)")
        assert con.info.transaction_status == status.INTRANS
        facts = read_postgres_schema(con)
        assert facts.table("kept") is not None and frozenset({"id"}) in facts.table("kept").keys
        assert con.info.transaction_status == status.INTRANS
        assert con.execute("SELECT count(*) FROM kept").fetchone() == (1,)
        with pytest.raises(psycopg.errors.DivisionByZero):
            con.execute("SELECT 1 / 0")
        assert con.info.transaction_status == status.INERROR
        assert read_postgres_schema(con) == SchemaFacts()
        assert con.info.transaction_status == status.INERROR
        con.rollback()


def test_duckdb_schema_read_inside_an_explicit_transaction_keeps_it_open() -> None:
    """Inside BEGIN the catalog is read on a duplicate cursor: the caller's transaction and its
    uncommitted rows are untouched, and committed tables' keys are still found."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR)")
    con.execute("BEGIN TRANSACTION")
    con.execute("INSERT INTO customers VALUES (1, 'a')")
    facts = read_duckdb_schema(con)
    assert set(facts.table("customers").keys) == {frozenset({"id"})}  # type: ignore[union-attr]
    assert con.execute("SELECT count(*) FROM customers").fetchall() == [(1,)]
    con.execute("COMMIT")
    assert con.execute("SELECT count(*) FROM customers").fetchall() == [(1,)]
