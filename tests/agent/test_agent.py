"""``guarded_sqlite.agent``: the core every agent tool (MCP, LangChain, LlamaIndex) shares.

What a model receives must be what the guard served, with its feedback; what it may not do (write, pull
an oversized result, run forever) is refused with a message it can act on, and the database is never
changed while writes are off, even by a statement the text check misreads (``PRAGMA query_only``)."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

import guarded_sqlite
from guarded_sqlite.agent import GuardedDatabase, QueryRefused
from tests.agent_cases import AGGREGATE as AGGREGATE_FAN_OUT
from tests.agent_cases import FAN_OUT


def plain_rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_rows_are_what_the_guard_serves_and_the_feedback_is_the_reports(shop: Path) -> None:
    with GuardedDatabase.open(shop, guard="observe") as db:
        result = db.query(FAN_OUT)
    assert list(result.rows) == plain_rows(shop, FAN_OUT)
    assert result.columns == ("name",)
    assert result.report.trigger == "cartesian_explosion"
    assert result.feedback == result.report.feedback() != ""
    text = result.observation()
    assert text.endswith("Guard feedback:\n" + result.feedback)
    assert f"({len(result.rows)} rows)" in text
    document = result.as_dict()
    assert json.loads(json.dumps(document)) == document
    assert document["row_count"] == len(result.rows)
    assert document["report"]["trigger"] == "cartesian_explosion"


def test_a_healthy_query_has_no_feedback_block(shop: Path) -> None:
    with GuardedDatabase.open(shop) as db:
        result = db.query("WITH paris AS (SELECT name FROM customers) SELECT count(*) FROM paris")
    assert result.rows == ((6,),)
    assert result.feedback == ""
    assert "Guard feedback" not in result.observation()


def test_text_to_sql_serves_corrected_aggregates_and_says_so(shop: Path) -> None:
    with GuardedDatabase.open(shop, guard="text_to_sql") as db:
        result = db.query(AGGREGATE_FAN_OUT)
    right = dict(plain_rows(shop, "SELECT name, points FROM customers WHERE id IN (SELECT customer_id FROM orders)"))
    assert dict(result.rows) == right
    assert "The guard served the corrected values" in result.feedback


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM orders",
        "INSERT INTO customers (name, city, points) VALUES ('x', 'y', 1)",
        "CREATE TABLE t (x)",
        "DROP TABLE orders",
        "ATTACH DATABASE ':memory:' AS other",
        "PRAGMA query_only = OFF",
    ],
)
def test_writes_are_refused_and_the_file_is_unchanged(shop: Path, sql: str) -> None:
    before = shop.read_bytes()
    with GuardedDatabase.open(shop) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query(sql)
        assert refused.value.kind == "write"
        assert "only queries" in str(refused.value)
        assert db.query("SELECT count(*) FROM orders").rows == ((30,),)
    assert shop.read_bytes() == before


def test_the_engine_refuses_a_write_the_text_check_lets_through(shop: Path) -> None:
    # A connection used around the tool (or a statement the classifier misreads) still cannot write:
    # the authorizer denies write actions and PRAGMA query_only is on for the whole connection.
    with GuardedDatabase.open(shop, isolated=False) as db:
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            db.connection.execute("DELETE FROM orders")
    assert plain_rows(shop, "SELECT count(*) FROM orders") == [(30,)]


def test_allow_writes_lets_a_write_through(shop: Path) -> None:
    with GuardedDatabase.open(shop, allow_writes=True, isolated=False) as db:
        result = db.query("DELETE FROM orders WHERE id = 1")
        assert result.columns == ()
        assert result.observation() == "The statement ran and changed 1 row."
        assert result.rows_changed == 1 and result.as_dict()["rows_changed"] == 1
        db.connection.commit()
    assert plain_rows(shop, "SELECT count(*) FROM orders") == [(29,)]


def test_read_only_opens_the_file_read_only(shop: Path) -> None:
    with GuardedDatabase.open(shop, read_only=True, isolated=False) as db:
        with pytest.raises(sqlite3.DatabaseError, match=r"readonly|not authorized"):
            db.connection.execute("PRAGMA query_only = OFF").fetchall()
            db.connection.execute("DELETE FROM orders")
    with pytest.raises(ValueError, match="exclude"):
        GuardedDatabase.open(shop, read_only=True, allow_writes=True)


def test_bad_paths_are_value_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        GuardedDatabase.open(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()  # never created
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all, just text")
    with pytest.raises(ValueError, match="not a SQLite database"):
        GuardedDatabase.open(junk)
    with pytest.raises(ValueError, match="no such file"):
        GuardedDatabase.open(tmp_path / "missing.duckdb")


def test_an_unguarded_connection_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="guarded connection"):
        GuardedDatabase(sqlite3.connect(":memory:"))
    with pytest.raises(ValueError, match="timeout"):
        GuardedDatabase(guarded_sqlite.connect(":memory:"), timeout=0)


def test_oversized_results_are_refused_with_the_feedback(shop: Path) -> None:
    with GuardedDatabase.open(shop, guard="observe", max_rows=10) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query(FAN_OUT)  # 30 rows
        assert refused.value.kind == "too_large"
        assert "more than this tool's limit of 10 rows" in str(refused.value)
        # The repeats are why the result is big: the model is told so in the same answer.
        assert refused.value.feedback.startswith("The query returned 30 rows but only 6 distinct ones")
        assert refused.value.feedback in str(refused.value)
        assert len(db.query("SELECT DISTINCT c.name FROM customers c").rows) == 6
    with GuardedDatabase.open(shop, max_chars=100) as db:
        with pytest.raises(QueryRefused, match="characters as JSON") as refused:
            db.query("SELECT * FROM customers")
        assert refused.value.kind == "too_large"


def test_sql_errors_name_the_error_once(shop: Path) -> None:
    with GuardedDatabase.open(shop) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query("SELECT nope FROM customers")
        assert refused.value.kind == "sql_error"
        message = str(refused.value)
        assert message.count("no such column: nope") == 1
        assert "Next step: fix the SQL" in message
        with pytest.raises(QueryRefused, match="one statement at a time") as refused:
            db.query("SELECT 1; SELECT 2")
        assert ".." not in str(refused.value)
        for empty in ("", "   \n"):
            with pytest.raises(QueryRefused) as refused:
                db.query(empty)
            assert refused.value.kind == "empty"


def test_a_long_statement_is_stopped(shop: Path) -> None:
    endless = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"
    with GuardedDatabase.open(shop, timeout=0.3) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query(endless)
        assert refused.value.kind == "timeout"
        assert "longer than 0.3 seconds" in str(refused.value)
        assert db.query("SELECT 1").rows == ((1,),)  # the connection is usable afterwards


def test_parameters_are_bound(shop: Path) -> None:
    with GuardedDatabase.open(shop) as db:
        rows = db.query("SELECT name FROM customers WHERE id = ?", [2]).rows
    assert list(rows) == plain_rows(shop, "SELECT name FROM customers WHERE id = 2") != []


def test_threads_share_one_database(shop: Path) -> None:
    answers: list[tuple[tuple[object, ...], ...]] = []
    failures: list[BaseException] = []
    with GuardedDatabase.open(shop, guard="observe") as db:

        def ask() -> None:
            try:
                for _ in range(20):
                    answers.append(db.query(FAN_OUT).rows)
            except BaseException as failure:  # reported below, not lost in the thread
                failures.append(failure)

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not failures
    assert len(answers) == 80
    assert all(list(rows) == plain_rows(shop, FAN_OUT) for rows in answers)


def test_schema_lists_keys_foreign_keys_and_counts(shop: Path) -> None:
    with GuardedDatabase.open(shop) as db:
        info = db.schema()
    tables = {table.name: table for table in info.tables}
    assert set(tables) == {"customers", "orders", "order_items", "products"}
    assert tables["customers"].keys == (("id",),)
    assert tables["order_items"].keys == ()
    assert tables["orders"].row_count == 30
    assert ("ordered_on", "TEXT") in tables["orders"].columns
    (fk,) = tables["orders"].foreign_keys
    assert (fk.columns, fk.table, fk.ref_columns) == (("customer_id",), "customers", ("id",))
    assert fk.cardinality == "many-to-one"
    text = info.text()
    assert "Table order_items, 150 rows" in text
    assert "keys: none declared (rows may repeat)" in text
    assert "joining orders repeats each customers row once per matching orders row" in text
    assert json.loads(json.dumps(info.as_dict())) == info.as_dict()


def test_schema_cardinality_one_to_one_and_unknown(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE person (id INTEGER PRIMARY KEY, email TEXT UNIQUE);
        CREATE TABLE passport (person_id INTEGER PRIMARY KEY REFERENCES person(id), number TEXT);
        CREATE TABLE note (person_email TEXT REFERENCES person(email), body TEXT);
        CREATE TABLE loose (tag TEXT REFERENCES person(body));
        CREATE VIEW people AS SELECT id FROM person;
        """
    )
    con.close()
    with GuardedDatabase.open(path) as db:
        tables = {table.name: table for table in db.schema().tables}
    assert tables["passport"].foreign_keys[0].cardinality == "one-to-one"
    assert tables["note"].foreign_keys[0].cardinality == "many-to-one"
    assert tables["loose"].foreign_keys[0].cardinality == "unknown"
    assert tables["person"].keys == (("id",), ("email",))
    assert (tables["people"].kind, tables["people"].row_count) == ("view", None)


def test_duckdb_files(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "shop.duckdb"
    raw = duckdb.connect(str(path))
    raw.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    raw.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id))")
    raw.execute("INSERT INTO customers VALUES (1, 'a'), (2, 'b')")
    raw.execute("INSERT INTO orders SELECT i, 1 + i % 2 FROM range(1, 21) t(i)")
    raw.close()
    with GuardedDatabase.open(path, guard="observe") as db:
        assert db.dialect == "duckdb"
        result = db.query("SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id")
        assert sorted(result.rows) == sorted([("a",)] * 10 + [("b",)] * 10)
        assert "add DISTINCT" in result.feedback
        with pytest.raises(QueryRefused) as refused:
            db.query("DELETE FROM orders")
        assert refused.value.kind == "write"
        with pytest.raises(QueryRefused) as refused:
            db.query("SELECT nope FROM customers")
        assert refused.value.kind == "sql_error"
        tables = {table.name: table for table in db.schema().tables}
    assert tables["orders"].foreign_keys[0].cardinality == "many-to-one"
    assert tables["orders"].row_count == 20
    assert ("name", "VARCHAR") in tables["customers"].columns
    with GuardedDatabase.open(path, read_only=True) as db:
        assert db.query("SELECT count(*) FROM orders").rows == ((20,),)


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("SELEC name FROM customers", "not_a_query"),
        ("-- a comment\nSLECT 1", "not_a_query"),
        ("/* first */ UPDATE customers SET points = 0", "write"),
        ("WITH gone AS (DELETE FROM orders RETURNING id) SELECT * FROM gone", "write"),
        ("EXPLAIN QUERY PLAN SELECT 1", "write"),
    ],
)
def test_a_typo_is_not_called_a_write(shop: Path, sql: str, kind: str) -> None:
    with GuardedDatabase.open(shop) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query(sql)
    assert refused.value.kind == kind
    if kind == "not_a_query":
        assert "check its first word" in str(refused.value)
        assert ("'SELEC'" if "SELEC" in sql else "'SLECT'") in str(refused.value)


def test_a_duckdb_path_that_is_not_duckdb_is_a_value_error(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    path = tmp_path / "broken.duckdb"
    path.write_bytes(b"definitely not a duckdb file" * 100)
    with pytest.raises(ValueError, match="cannot be opened"):
        GuardedDatabase.open(path)


def test_a_postgres_connection_is_served(pg_dsn: str) -> None:
    """Formerly a TypeError; tests/agent/test_agent_postgres.py holds the PostgreSQL tool to the rest."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_dsn) as raw:
        db = GuardedDatabase(guarded_sqlite.wrap(raw))
        assert db.dialect == "postgres"
        assert db.query("SELECT 1 AS one").rows == ((1,),)


def test_a_long_select_with_writes_off_is_refused_as_too_long_not_as_a_write(tmp_path: Path) -> None:
    from guarded_sqlite._analysis.rewrite import MAX_PARSED_CHARS

    path = tmp_path / "t.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE t(x)")
    raw.commit()
    raw.close()
    long_select = "SELECT x FROM t WHERE x IN (" + ", ".join(["1"] * (MAX_PARSED_CHARS // 3)) + ")"
    assert len(long_select) > MAX_PARSED_CHARS
    with GuardedDatabase.open(path, isolated=False) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query(long_select)
        assert refused.value.kind == "too_large"
        assert f"{len(long_select):,} characters" in str(refused.value) and "not a query" not in str(refused.value)
    with GuardedDatabase.open(path, isolated=False, allow_writes=True) as db:
        assert db.query(long_select).rows == ()  # with writes on nothing needs the write check


@pytest.mark.parametrize("isolated", [False, True])
def test_a_lone_surrogate_in_the_sql_is_refused_not_raised(shop: Path, isolated: bool) -> None:
    """A tool call's JSON may carry ``"\\ud800"``: the driver cannot encode it, and the UnicodeEncodeError
    (a WorkerError from the worker) ended LangChain's and LlamaIndex's agent runs (a fuzzer's find)."""
    sql = json.loads("\"SELECT '\\ud800' AS x\"")
    with GuardedDatabase.open(shop, isolated=isolated) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query(sql)
        assert refused.value.kind == "sql_error" and "lone surrogate" in str(refused.value)
        assert db.query("SELECT 1").rows == ((1,),)


def test_an_error_quoting_the_models_value_is_clipped(shop: Path) -> None:
    """SQLite quotes a bad JSON path whole: the refusal was 999,133 characters (5x ``max_chars``), and on
    PostgreSQL the DECLARE pattern's time grew with the square of it (a fuzzer's find)."""
    from guarded_sqlite.agent._database import ERROR_CHARS

    with GuardedDatabase.open(shop, isolated=False) as db:
        with pytest.raises(QueryRefused) as refused:
            db.query("SELECT json_extract('{}', printf('%.*c', 999000, 'x'))")
    text = str(refused.value)
    assert refused.value.kind == "sql_error" and "more characters not shown" in text
    assert len(text) < 2 * ERROR_CHARS + 500, len(text)
