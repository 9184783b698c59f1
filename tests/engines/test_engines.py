"""The guard on SQLite, DuckDB, PostgreSQL and MariaDB: the multiplicity cases (explosion, observe,
healthy, empty, errors, exemptions, P2, writes with RETURNING) on every engine (this is their only copy:
test_guard.py keeps what is specific to SQLite), then what is specific to each engine (transactions,
read-only re-execution, driver features).

PostgreSQL runs on one throwaway server per test session (``tests/pg_server.py``); each test gets its
own schema. Without the server binaries the PostgreSQL tests skip, unless
``GUARDED_SQLITE_REQUIRE_POSTGRES=1`` (CI), where that is a failure. MariaDB likewise
(``tests/mariadb_server.py``, one database per test, ``GUARDED_SQLITE_REQUIRE_MARIADB=1``); the tests
specific to it are in ``test_mariadb.py``.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import DupRatioSelector, GuardPolicy
from tests.helpers import (
    CANDIDATES,
    DISTINCT_NAMES,
    EMPTY,
    EXPLODING_SQL,
    FANOUT_SCHEMA,
    GOOD,
    WRITE,
    fill_fanout,
)
from tests.pace import within

ENGINES = ["sqlite", "duckdb", "postgres", "mysql"]

UNION_ALL_5 = " UNION ALL ".join(["SELECT name FROM customers"] * 5)

SLOW_SQL = {
    "sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
    "duckdb": "SELECT count(*) FROM range(10000000000)",
    "postgres": "SELECT pg_sleep(5)",
    "mysql": "SELECT SLEEP(5)",
}
INTERRUPTED = {
    "sqlite": "interrupted",
    "duckdb": "Interrupt",
    "postgres": "QueryCanceled",
    "mysql": "max_statement_time",
}


# --- PostgreSQL: one server per session, one schema per test --------------------------------------


class PgSchema:
    """A uniquely named schema on the session's server; connections opened here use it as search_path."""

    def __init__(self, dsn: str, name: str) -> None:
        self.dsn, self.name = dsn, name
        self._connections: list[Any] = []

    def connect(self, autocommit: bool = True) -> Any:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=autocommit, options=f"-c search_path={self.name}")
        self._connections.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._connections:
            conn.close()


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[PgSchema]:
    """A fresh schema for one test, dropped (with everything in it) afterwards."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
    schema = PgSchema(pg_dsn, name)
    try:
        yield schema
    finally:
        schema.close()
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {name} CASCADE")


# --- MariaDB: one server per session, one database per test --------------------------------------


class MariaDatabase:
    """A uniquely named database on the session's MariaDB server; connections opened here use it."""

    def __init__(self, params: dict[str, Any], name: str) -> None:
        self.params, self.name = params, name
        self._connections: list[Any] = []

    def connect(self, autocommit: bool = True, **kwargs: Any) -> Any:
        import pymysql

        conn = pymysql.connect(**self.params, database=self.name, autocommit=autocommit, **kwargs)
        self._connections.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._connections:
            if conn.open:
                conn.close()


@pytest.fixture
def maria_database(mariadb_params: dict[str, Any]) -> Iterator[MariaDatabase]:
    """A fresh database for one test, dropped (with everything in it) afterwards."""
    import pymysql

    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = pymysql.connect(**mariadb_params, autocommit=True)
    try:
        admin.cursor().execute(f"CREATE DATABASE {name}")
    finally:
        admin.close()
    database = MariaDatabase(mariadb_params, name)
    try:
        yield database
    finally:
        database.close()
        admin = pymysql.connect(**mariadb_params, autocommit=True)
        try:
            admin.cursor().execute(f"DROP DATABASE {name}")
        finally:
            admin.close()


# --- one adapter per engine -----------------------------------------------------------------------


class EngineDB:
    """A database on one engine with the fan-out schema, and uniform ways to use it.

    ``raw`` is the unguarded connection; ``guarded(guard)`` wraps that same connection (so both see the
    same data, uncommitted changes included); ``param`` is the engine's placeholder.
    """

    def __init__(self, name: str, raw: Any, param: str, pg: PgSchema | None = None) -> None:
        self.name, self.raw, self.param, self.pg = name, raw, param, pg
        self.maria: MariaDatabase | None = None
        self._con: Any = None

    @property
    def con(self) -> Any:
        """The connection guarded in patch mode."""
        if self._con is None:
            self._con = self.guarded("patch")
        return self._con

    def guarded(self, guard: Any = "patch") -> Any:
        return guarded_sqlite.wrap(self.raw, guard=guard, dialect=self.name)

    def cursor(self, con: Any) -> Any:
        """Something whose ``execute`` may raise and that keeps ``guard_report`` afterwards."""
        return con if self.name == "duckdb" else con.cursor()

    def fetch(self, con: Any, sql: str, params: Any = None, **rescue_inputs: Any) -> tuple[list[Any], Any]:
        """Execute on a guarded connection (or cursor) and fetch everything; (rows, guard_report)."""
        cur = self.run(con, sql, params, **rescue_inputs)
        return list(cur.fetchall()), cur.guard_report

    def run(self, con: Any, sql: str, params: Any = None, **rescue_inputs: Any) -> Any:
        """Execute on a guarded connection or cursor; returns the cursor (PyMySQL's connections have no
        ``execute`` and its cursors' ``execute`` returns a row count)."""
        if self.name == "mysql":
            cur = con if isinstance(con, guarded_sqlite.GuardedCursor) else con.cursor()
            cur.execute(sql, **rescue_inputs) if params is None else cur.execute(sql, params, **rescue_inputs)
            return cur
        return con.execute(sql, **rescue_inputs) if params is None else con.execute(sql, params, **rescue_inputs)

    def raw_rows(self, sql: str, params: Any = None) -> list[Any]:
        return list(self.raw_run(sql, params).fetchall())

    def raw_run(self, sql: str, params: Any = None) -> Any:
        """Execute on the unguarded connection; returns the driver's cursor (DuckDB: the connection)."""
        if self.name == "mysql":
            cur = self.raw.cursor()
            cur.execute(sql, params)
            return cur
        return self.raw.execute(sql) if params is None else self.raw.execute(sql, params)

    def raw_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if self.name == "mysql":
            self.raw.cursor().executemany(sql, rows)
        elif self.name == "postgres":
            with self.raw.cursor() as cur:
                cur.executemany(sql, rows)
        else:
            self.raw.executemany(sql, rows)
        self.commit()

    def commit(self) -> None:
        if self.name == "sqlite":
            self.raw.commit()

    def count(self, table: str) -> int:
        return int(self.raw_rows(f"SELECT count(*) FROM {table}")[0][0])


def _fill_fanout(db: EngineDB) -> None:
    if db.name == "sqlite":
        fill_fanout(db.raw)
        return
    for statement in FANOUT_SCHEMA.split(";"):
        if statement.strip():
            db.raw_run(statement)
    p = db.param
    db.raw_many(f"INSERT INTO customers VALUES ({p}, {p}, {p})", [(i, f"name{i}", f"city{i % 2}") for i in range(4)])
    db.raw_many(
        f"INSERT INTO orders VALUES ({p}, {p}, {p})", [(c * 6 + k, c, 10 * k) for c in range(4) for k in range(6)]
    )


def _make_db(name: str, request: pytest.FixtureRequest) -> Iterator[EngineDB]:
    if name == "sqlite":
        raw = sqlite3.connect(":memory:")
        db = EngineDB(name, raw, "?")
    elif name == "duckdb":
        duckdb = pytest.importorskip("duckdb")
        raw = duckdb.connect()
        db = EngineDB(name, raw, "?")
    elif name == "mysql":
        maria: MariaDatabase = request.getfixturevalue("maria_database")
        db = EngineDB(name, maria.connect(autocommit=True), "%s")
        db.maria = maria
    else:
        pg: PgSchema = request.getfixturevalue("pg_schema")
        db = EngineDB(name, pg.connect(autocommit=True), "%s", pg)
    _fill_fanout(db)
    try:
        yield db
    finally:
        db.raw.close()


@pytest.fixture(params=ENGINES)
def db(request: pytest.FixtureRequest) -> Iterator[EngineDB]:
    """The fan-out database on each engine in turn."""
    yield from _make_db(request.param, request)


@pytest.fixture
def pg_db(request: pytest.FixtureRequest) -> Iterator[EngineDB]:
    """The fan-out database on PostgreSQL (autocommit connection)."""
    yield from _make_db("postgres", request)


@pytest.fixture
def duck_db(request: pytest.FixtureRequest) -> Iterator[EngineDB]:
    """The fan-out database on DuckDB (in memory)."""
    yield from _make_db("duckdb", request)


def _exploding_with_parameter(db: EngineDB) -> str:
    return f"{EXPLODING_SQL} WHERE o.amount >= {db.param}"


# --- the multiplicity cases, on every engine (SQLite included) -------------------------------------


def test_explosion_is_flagged_and_patched_with_distinct(db: EngineDB) -> None:
    """A fanned-out join is flagged and P1-patched: the rows are the raw result's distinct rows, and the
    report names the trigger, the action, the rewritten SQL (placeholder kept) and the decision."""
    sql = _exploding_with_parameter(db)
    rows, report = db.fetch(db.con, sql, (0,))
    raw_rows = db.raw_rows(sql, (0,))
    assert len(raw_rows) == 24
    assert Counter(rows) == Counter(set(raw_rows))
    assert report.trigger == "cartesian_explosion" and report.flagged
    assert report.action == "distinct_injected" and report.patched
    if db.name == "mysql":  # PyMySQL binds on the client: the guard reads the statement the server received
        sql = sql.replace(f">= {db.param}", ">= 0")
    assert report.final_sql == sql.replace("SELECT", "SELECT DISTINCT", 1)
    assert report.final_sql.endswith(">= 0" if db.name == "mysql" else f">= {db.param}")
    assert (report.rows, report.unique_rows, report.final_rows) == (24, 4, 4)
    assert report.dup_ratio == pytest.approx(20 / 24)
    assert [(d.rule, d.applied) for d in report.decisions] == [("P1", True)]
    assert report.detect_us is not None and report.detect_us >= 0
    assert report.patch_ms is not None and report.patch_ms > 0


def _same_name_customers(db: EngineDB) -> None:
    """Two more customers named ``name0`` (ids 10 and 11), with three orders each."""
    p = db.param
    db.raw_many(f"INSERT INTO customers VALUES ({p}, {p}, {p})", [(10, "name0", "city0"), (11, "name0", "city1")])
    db.raw_many(f"INSERT INTO orders VALUES ({p}, {p}, {p})", [(100 + k, 10 + k % 2, k) for k in range(6)])


def test_join_copies_are_removed_and_equal_names_of_distinct_customers_kept(db: EngineDB) -> None:
    """issue 23: one row per customer, three customers named name0 included; text_to_sql merges them."""
    _same_name_customers(db)
    rows, report = db.fetch(db.con, EXPLODING_SQL)
    assert len(db.raw_rows(EXPLODING_SQL)) == 30
    assert Counter(rows) == Counter({("name0",): 3, ("name1",): 1, ("name2",): 1, ("name3",): 1})
    assert report.action == "join_copies_removed" and report.decisions[0].copies == 24
    assert "__gs_id0" in report.final_sql
    rows, report = db.fetch(db.guarded("text_to_sql"), EXPLODING_SQL)
    assert Counter(rows) == Counter({(f"name{i}",): 1 for i in range(4)}) and report.action == "distinct_injected"


def test_duckdb_python_functions_are_never_run_again_by_the_check(duck_db: EngineDB) -> None:
    """DuckDB lists a Python function like a built-in: the guarded connection remembers its name."""
    con = duck_db.guarded()
    calls: list[str] = []
    con.create_function("tag", lambda x: calls.append(x) or x, ["VARCHAR"], "VARCHAR", side_effects=True)
    rows, report = duck_db.fetch(con, EXPLODING_SQL.replace("c.name", "tag(c.name)"))
    assert len(rows) == 24 and report.action == "none" and "tag()" in report.decisions[0].reason
    assert len(calls) == 24


def test_join_copies_of_a_keyless_table_use_the_engines_row_id(db: EngineDB) -> None:
    """A projected table without a key: SQLite's and DuckDB's rowid, PostgreSQL's tableoid and ctid;
    MariaDB has none a query can read, so the rows are left as they are, with the reason."""
    db.raw_run("CREATE TABLE people (name TEXT)")
    db.raw_run("CREATE TABLE visits (person TEXT, day INTEGER)")
    p = db.param
    db.raw_many(f"INSERT INTO people VALUES ({p})", [("ann",), ("ann",), ("bob",)])
    db.raw_many(f"INSERT INTO visits VALUES ({p}, {p})", [("ann", d) for d in range(3)] + [("bob", 1)])
    sql = "SELECT p.name FROM people p JOIN visits v ON v.person = p.name"
    assert len(db.raw_rows(sql)) == 7  # each ann row once per ann visit: 2 x 3 + 1
    rows, report = db.fetch(db.guarded(GuardPolicy(tau_inject=0.1)), sql)
    if db.name == "mysql":  # InnoDB's row id cannot be read: no identity, and the guard says so
        assert report.provenance == "unknown" and report.action == "none" and len(rows) == 7
        assert "no row identity for p (people)" in report.decisions[0].reason
        return
    assert report.provenance == "amplified" and report.action == "join_copies_removed", report.decisions
    assert Counter(rows) == Counter({("ann",): 2, ("bob",): 1})
    expected_identity = {"sqlite": '"p"."rowid"', "duckdb": '"p"."rowid"', "postgres": '"p"."tableoid", "p"."ctid"'}
    assert expected_identity[db.name].split(", ")[0] in report.final_sql


def test_observe_mode_reports_but_changes_nothing(db: EngineDB) -> None:
    """In observe mode the explosion is reported and the raw rows are served, with no rule considered."""
    rows, report = db.fetch(db.guarded("observe"), EXPLODING_SQL)
    assert Counter(rows) == Counter(db.raw_rows(EXPLODING_SQL))
    assert report.mode == "observe" and report.trigger == "cartesian_explosion"
    assert report.action == "none" and report.decisions == () and report.final_sql == EXPLODING_SQL


def test_healthy_query_is_untouched(db: EngineDB) -> None:
    """A duplicate-free result is served as the engine returns it; no rule is considered."""
    sql = "SELECT id, name FROM customers ORDER BY id"
    rows, report = db.fetch(db.con, sql)
    assert rows == db.raw_rows(sql)
    assert report.trigger is None and not report.flagged and report.action == "none"
    assert report.decisions == () and report.patch_ms is None and report.dup_ratio == 0.0


def test_empty_result_is_flagged_but_not_patched(db: EngineDB) -> None:
    """No rows: flagged empty_result, nothing patched."""
    rows, report = db.fetch(db.con, EMPTY)
    assert rows == []
    assert report.trigger == "empty_result" and report.action == "none"
    assert report.rows == 0 and report.dup_ratio is None and report.decisions == ()


@pytest.mark.parametrize("sql", ["SELECT * FROM missing", "SELEC 1"])
def test_execution_error_is_reraised_with_the_drivers_class_and_the_report_set(db: EngineDB, sql: str) -> None:
    """A failing statement raises the driver's own exception class with the driver's message, and the
    report says exec_error with that error."""
    with pytest.raises(Exception) as raw_error:
        db.raw_run(sql)
    cur = db.cursor(db.con)
    with pytest.raises(Exception) as guarded_error:
        cur.execute(sql)
    assert type(guarded_error.value) is type(raw_error.value)
    assert type(guarded_error.value).__module__.split(".")[0] in {"sqlite3", "_duckdb", "duckdb", "psycopg", "pymysql"}
    assert str(guarded_error.value) == str(raw_error.value)
    report = cur.guard_report
    assert report.trigger == "exec_error" and report.action == "none"
    assert report.error == f"{type(raw_error.value).__name__}: {' '.join(str(raw_error.value).split())}"


@pytest.mark.parametrize(
    "sql, reason, ordered",
    [
        (EXPLODING_SQL + " ORDER BY c.name LIMIT 20", "LIMIT", True),
        ("SELECT count(*) FROM orders GROUP BY id", "GROUP BY", False),
        (UNION_ALL_5, "UNION ALL", False),
    ],
    ids=["limit", "group-by", "union-all"],
)
def test_flagged_but_exempt_queries_keep_their_rows_and_say_why(
    db: EngineDB, sql: str, reason: str, ordered: bool
) -> None:
    """LIMIT, GROUP BY and UNION ALL results are flagged but P1 leaves them alone, with the reason."""
    rows, report = db.fetch(db.con, sql)
    raw_rows = db.raw_rows(sql)
    if ordered:
        assert rows == raw_rows
    else:
        assert Counter(rows) == Counter(raw_rows)
    assert report.trigger == "cartesian_explosion" and report.action == "none" and report.final_sql == sql
    (decision,) = report.decisions
    assert decision.rule == "P1" and not decision.applied and reason in decision.reason


def _people(db: EngineDB, names: list[str]) -> None:
    db.raw_run("CREATE TABLE people (name TEXT)")
    db.raw_many(f"INSERT INTO people VALUES ({db.param})", [(n,) for n in names])


def test_paper_p2_removes_a_distinct_that_hides_legitimate_duplicates(db: EngineDB) -> None:
    """11 rows with 10 distinct: DISTINCT hides a legitimate duplicate, and the paper's P2 removes it."""
    names = [f"person{i}" for i in range(10)] + ["person0"]
    _people(db, names)
    rows, report = db.fetch(db.guarded("paper"), "SELECT DISTINCT name FROM people")
    assert Counter(rows) == Counter((n,) for n in names)
    assert report.trigger is None and report.action == "distinct_removed"
    assert report.final_sql == "SELECT name FROM people" and (report.rows, report.final_rows) == (10, 11)
    assert [(d.rule, d.applied) for d in report.decisions] == [("P2", True)]


def test_default_keeps_a_distinct_over_value_repeats(db: EngineDB) -> None:
    """The same DISTINCT under the default preset: kept as written, with nothing parsed or run (P2 is
    the paper preset's rule only)."""
    _people(db, [f"person{i}" for i in range(10)] + ["person0"])
    rows, report = db.fetch(db.con, "SELECT DISTINCT name FROM people")
    assert sorted(rows) == [(f"person{i}",) for i in range(10)]
    assert report.action == "none" and report.provenance is None and report.decisions == ()


def test_p2_keeps_the_distinct_when_removal_adds_too_many_duplicates(db: EngineDB) -> None:
    """12 rows with 10 distinct (dup_ratio 1/6 > tau_remove): the DISTINCT stays, with the reason."""
    _people(db, [f"person{i}" for i in range(10)] + ["person0", "person1"])
    rows, report = db.fetch(db.guarded("paper"), "SELECT DISTINCT name FROM people")
    assert sorted(rows) == [(f"person{i}",) for i in range(10)]
    assert report.action == "none"
    (decision,) = report.decisions
    assert decision.rule == "P2" and not decision.applied and "tau_remove" in decision.reason


def test_insert_returning_duplicate_rows_runs_once_and_is_never_rewritten(db: EngineDB) -> None:
    """INSERT ... RETURNING with 24 equal rows is flagged but never rewritten or executed twice."""
    db.raw_run("CREATE TABLE t (x INTEGER)")
    db.commit()
    sql = "INSERT INTO t SELECT 1 FROM orders RETURNING x"
    rows, report = db.fetch(db.con, sql)
    db.commit()
    assert rows == [(1,)] * 24
    assert report.trigger == "cartesian_explosion" and report.action == "none" and report.final_sql == sql
    (decision,) = report.decisions
    assert decision.rule == "P1" and not decision.applied and "not a SELECT" in decision.reason
    assert db.count("t") == 24


def test_rescue_picks_the_healthy_candidate(db: EngineDB) -> None:
    """DupRatioSelector replaces the flagged selection with the healthy candidate; failing, empty and
    write candidates are previewed with their outcome."""
    con = db.guarded(GuardPolicy(rescue=DupRatioSelector()))
    rows, report = db.fetch(con, EXPLODING_SQL, candidates=CANDIDATES, question="Which customers ordered?")
    assert rows == DISTINCT_NAMES
    assert report.trigger == "cartesian_explosion" and report.action == "candidate_selected"
    assert report.final_sql == GOOD
    rescue = report.rescue
    assert rescue.chosen_index == 1 and rescue.chosen_sql == GOOD and rescue.fallback_reason is None
    previews = rescue.candidates
    assert (previews[0].rows, previews[0].unique_rows) == (24, 4)
    assert (previews[1].rows, previews[1].unique_rows, previews[1].error) == (4, 4, None)
    assert previews[2].rows == 0
    assert previews[3].rows is None and previews[3].error
    assert previews[4].error == "not a read-only query: never executed"
    assert db.count("orders") == 24


def test_a_write_candidate_is_never_executed_even_when_chosen(db: EngineDB) -> None:
    """A rescuer choosing a DELETE candidate gets nothing: it never runs, and P1 repairs the selection."""
    con = db.guarded(GuardPolicy(rescue=lambda request: 0))
    rows, report = db.fetch(con, EXPLODING_SQL, candidates=[WRITE])
    assert sorted(rows) == DISTINCT_NAMES and report.action == "distinct_injected"
    rescue = report.rescue
    assert rescue.chosen_index is None and "not a read-only query" in rescue.fallback_reason
    assert rescue.candidates[0].error == "not a read-only query: never executed"
    assert db.count("orders") == 24


def test_a_slow_candidate_is_stopped_and_the_connection_stays_usable(db: EngineDB) -> None:
    """A never-ending candidate is stopped by rerun_timeout; the healthy one is chosen, and the
    connection still reads, patches and writes afterwards."""
    con = db.guarded(GuardPolicy(rescue=DupRatioSelector(), rerun_timeout=0.3))
    started = time.perf_counter()
    rows, report = db.fetch(con, EMPTY, candidates=[SLOW_SQL[db.name], GOOD])
    elapsed = time.perf_counter() - started
    assert within(elapsed, 0.3, 2.7), elapsed
    assert rows == DISTINCT_NAMES and report.action == "candidate_selected"
    slow = report.rescue.candidates[0]
    assert slow.rows is None and INTERRUPTED[db.name] in slow.error
    _, after = db.fetch(con, EXPLODING_SQL)
    assert after.action == "distinct_injected"
    db.run(con, "INSERT INTO customers VALUES (50, 'new', 'x')")
    db.commit()
    assert db.count("customers") == 5
    if db.name == "postgres":
        assert db.raw_rows("SHOW statement_timeout") == [("0",)]


@pytest.mark.parametrize("drain", ["iterate", "fetchmany", "fetchone"])
def test_reexecuting_a_drained_cursor_serves_the_new_rows(db: EngineDB, drain: str) -> None:
    """After a result was read to its end by iteration, fetchmany or fetchone, executing again on the same
    cursor (DuckDB: the connection) serves the new statement's rows, as the drivers do."""
    if db.name == "duckdb" and drain == "iterate":
        pytest.skip("a raw DuckDB connection is not iterable: nothing to compare with")
    cur = db.cursor(db.con)
    cur.execute("SELECT id FROM customers ORDER BY id")
    if drain == "iterate":
        assert list(cur) == [(i,) for i in range(4)]
    elif drain == "fetchmany":
        assert list(cur.fetchmany(100)) == [(i,) for i in range(4)]  # PyMySQL's Cursor gives tuples
    else:
        while cur.fetchone() is not None:
            pass
    cur.execute("SELECT name FROM customers ORDER BY id")
    assert list(cur.fetchall()) == DISTINCT_NAMES
    cur.execute("SELECT id FROM customers WHERE id = 2")
    assert cur.fetchone() == (2,)


# --- PostgreSQL -------------------------------------------------------------------------------------


def test_pg_order_by_outside_the_select_list_is_left_alone(pg_db: EngineDB) -> None:
    """PostgreSQL rejects SELECT DISTINCT ... ORDER BY a non-selected column, so P1 leaves it, saying why."""
    sql = EXPLODING_SQL + " ORDER BY o.amount"
    rows, report = pg_db.fetch(pg_db.con, sql)
    assert Counter(rows) == Counter(pg_db.raw_rows(sql)) and len(rows) == 24
    assert report.trigger == "cartesian_explosion" and report.action == "none"
    (decision,) = report.decisions
    assert not decision.applied and "ORDER BY o.amount is not in the select list" in decision.reason


def test_pg_patch_sees_uncommitted_changes_and_leaves_the_transaction_as_it_was(pg_db: EngineDB) -> None:
    """Inside an open transaction the patch's rerun sees its uncommitted rows; afterwards the transaction
    is still open and writable, and transaction_read_only/statement_timeout are as before."""
    from psycopg.pq import TransactionStatus

    conn = pg_db.pg.connect(autocommit=False)
    con = guarded_sqlite.wrap(conn, dialect="postgres")
    con.execute("SET statement_timeout = '7s'")
    con.execute("INSERT INTO customers VALUES (99, 'late', 'x')")
    with con.cursor() as cur:
        cur.executemany("INSERT INTO orders VALUES (%s, 99, 1)", [(1000 + i,) for i in range(6)])
    assert conn.info.transaction_status == TransactionStatus.INTRANS
    assert pg_db.count("customers") == 4  # another session does not see them yet

    rows, report = pg_db.fetch(con, EXPLODING_SQL)
    assert report.action == "distinct_injected"
    assert sorted(rows) == sorted([*DISTINCT_NAMES, ("late",)])

    assert conn.info.transaction_status == TransactionStatus.INTRANS
    assert con.execute("SHOW transaction_read_only").fetchall() == [("off",)]
    assert con.execute("SHOW statement_timeout").fetchall() == [("7s",)]
    con.execute("INSERT INTO customers VALUES (100, 'later', 'y')")  # still writable
    conn.commit()
    assert pg_db.count("customers") == 6 and pg_db.count("orders") == 30


def test_pg_slow_candidate_inside_a_transaction_keeps_the_transaction(pg_db: EngineDB) -> None:
    """A candidate cancelled by its statement_timeout inside the caller's transaction only rolls back its
    savepoint: the transaction stays open, its changes kept, its statement_timeout unchanged."""
    from psycopg.pq import TransactionStatus

    conn = pg_db.pg.connect(autocommit=False)
    con = guarded_sqlite.wrap(conn, guard=GuardPolicy(rescue=DupRatioSelector(), rerun_timeout=0.3))
    con.execute("INSERT INTO customers VALUES (99, 'late', 'x')")
    rows, report = pg_db.fetch(con, EMPTY, candidates=[SLOW_SQL["postgres"], GOOD])
    assert rows == DISTINCT_NAMES and "QueryCanceled" in report.rescue.candidates[0].error
    assert conn.info.transaction_status == TransactionStatus.INTRANS
    assert con.execute("SHOW statement_timeout").fetchall() == [("0",)]
    assert con.execute("SELECT name FROM customers WHERE id = 99").fetchall() == [("late",)]
    conn.commit()
    assert pg_db.count("customers") == 5


def test_pg_rerun_inside_a_failed_transaction_is_refused_with_a_reason(pg_db: EngineDB) -> None:
    """In a failed transaction nothing can run. A flagged statement there can only be the failed
    statement itself, so the rerun in question is the rescue's: the statement's own error is raised as
    the driver's class, the re-executions are refused with the reason (never an internal error, never a
    guard exception), and after a rollback the connection patches again."""
    import psycopg
    from psycopg.pq import TransactionStatus

    conn = pg_db.pg.connect(autocommit=False)
    con = guarded_sqlite.wrap(conn, guard=GuardPolicy(rescue=DupRatioSelector()))
    with pytest.raises(psycopg.errors.UndefinedTable):
        con.execute("SELECT * FROM missing")
    assert conn.info.transaction_status == TransactionStatus.INERROR
    cur = con.cursor()
    with pytest.raises(psycopg.errors.InFailedSqlTransaction):
        cur.execute(EXPLODING_SQL, candidates=[GOOD])
    report = cur.guard_report
    assert report.trigger == "exec_error" and report.action == "none"
    assert conn.info.transaction_status == TransactionStatus.INERROR
    _assert_refused_cleanly(report, "transaction has failed")
    conn.rollback()
    _, after = pg_db.fetch(con, EXPLODING_SQL)
    assert after.action == "distinct_injected"


def _assert_refused_cleanly(report: Any, why: str) -> None:
    """The report gives ``why`` as a refusal (a decision or a candidate's error), not as an internal error."""
    reasons = [d.reason for d in report.decisions]
    if report.rescue is not None:
        assert report.rescue.chosen_index is None
        reasons += [c.error or "" for c in report.rescue.candidates]
    assert not any("internal error" in r for r in reasons), reasons
    assert any(why in r for r in reasons), reasons


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "in-transaction"])
def test_pg_writing_function_cannot_write_during_the_rerun(pg_db: EngineDB, autocommit: bool) -> None:
    """A plpgsql function that INSERTs, called by a flagged query: the join-copy check never re-runs a
    statement calling a function it does not know, so the function's table has one execution's rows,
    and a candidate calling it is refused by the read-only rerun."""
    from psycopg.pq import TransactionStatus

    pg_db.raw_run("CREATE TABLE audit (n INTEGER)")
    pg_db.raw_run(
        "CREATE FUNCTION audited(v TEXT) RETURNS TEXT LANGUAGE plpgsql VOLATILE AS "
        "$$ BEGIN INSERT INTO audit VALUES (1); RETURN v; END $$"
    )
    conn = pg_db.pg.connect(autocommit=autocommit)
    con = guarded_sqlite.wrap(conn, guard=GuardPolicy(rescue=DupRatioSelector()))
    sql = "SELECT audited(c.name) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
    rows, report = pg_db.fetch(con, sql)
    # Not run again: the rows stay as returned, and the function ran once per row.
    assert len(rows) == 24 and report.trigger == "cartesian_explosion" and report.action == "none"
    assert "audited()" in report.decisions[0].reason and report.provenance == "unknown"

    rows, report = pg_db.fetch(con, EMPTY, candidates=["SELECT audited(name) FROM customers"])
    assert rows == [] and report.rescue.chosen_index is None
    assert "read-only" in report.rescue.candidates[0].error

    if not autocommit:
        assert conn.info.transaction_status == TransactionStatus.INTRANS
        conn.commit()
    assert pg_db.count("audit") == 24


def test_pg_cursor_context_manager_yields_a_guarded_cursor(pg_db: EngineDB) -> None:
    """``with con.cursor() as cur`` yields the guarded cursor (with guard_report) and closes it."""
    with pg_db.con.cursor() as cur:
        assert isinstance(cur, guarded_sqlite.GuardedCursor)
        cur.execute(EXPLODING_SQL)
        rows = cur.fetchall()
        assert cur.guard_report.action == "distinct_injected"
    assert sorted(rows) == DISTINCT_NAMES
    assert cur.closed


def test_pg_server_side_cursor_streams_every_row_unprobed(pg_db: EngineDB) -> None:
    """A named (server-side) cursor streams all rows, unbuffered and unpatched, and says it was not probed."""
    conn = pg_db.pg.connect(autocommit=False)
    con = guarded_sqlite.wrap(conn, dialect="postgres")
    sql = _exploding_with_parameter(pg_db)
    rows: list[Any] = []
    with con.cursor(name="x") as cur:
        cur.execute(sql, (0,))
        while batch := cur.fetchmany(5):
            rows.extend(batch)
        report = cur.guard_report
    conn.commit()
    assert Counter(rows) == Counter(pg_db.raw_rows(sql, (0,))) and len(rows) == 24
    assert not report.probed and report.trigger is None and report.action == "none"
    assert "server-side" in report.note and report.final_sql == sql


def test_pg_named_parameters_survive_a_patch(pg_db: EngineDB) -> None:
    """``%(name)s`` parameters are kept byte for byte in the patched SQL and bound on the rerun."""
    sql = EXPLODING_SQL + " WHERE o.amount >= %(low)s AND c.id <> %(skip)s"
    rows, report = pg_db.fetch(pg_db.con, sql, {"low": 0, "skip": 3})
    assert sorted(rows) == DISTINCT_NAMES[:3]
    assert report.action == "distinct_injected"
    assert report.final_sql == sql.replace("SELECT", "SELECT DISTINCT", 1)


@pytest.mark.parametrize("keyword", [{"prepare": False}, {"binary": True}], ids=["prepare", "binary"])
def test_pg_execute_accepts_psycopgs_own_keywords(pg_db: EngineDB, keyword: dict[str, Any]) -> None:
    """psycopg's ``execute(query, params, *, prepare=..., binary=...)`` keywords work on the guarded cursor
    and connection as on psycopg's, and the statement is still guarded."""
    sql = _exploding_with_parameter(pg_db)
    cur = pg_db.con.cursor()
    cur.execute(sql, (0,), **keyword)
    assert sorted(cur.fetchall()) == DISTINCT_NAMES and cur.guard_report.action == "distinct_injected"
    assert pg_db.con.execute("SELECT 1", None, **keyword).fetchall() == [(1,)]


def test_pg_composed_and_bytes_queries_are_guarded(pg_db: EngineDB) -> None:
    """psycopg takes a query as ``psycopg.sql.Composable`` or ``bytes`` too: they run as on psycopg, and
    the guard reads (and patches) the text psycopg sends."""
    from psycopg import sql as pgsql

    composed = pgsql.SQL("SELECT {} FROM customers AS c JOIN orders AS o ON {} = c.id").format(
        pgsql.Identifier("c", "name"), pgsql.Identifier("o", "customer_id")
    )
    with_parameter = pgsql.SQL(_exploding_with_parameter(pg_db))
    for query, params in [(composed, None), (with_parameter, (0,)), (EXPLODING_SQL.encode(), None)]:
        raw_rows = pg_db.raw.execute(query, params).fetchall()
        cur = pg_db.con.cursor()
        cur.execute(query, params)
        rows = cur.fetchall()
        report = cur.guard_report
        assert sorted(rows) == sorted(set(raw_rows)) == DISTINCT_NAMES and len(raw_rows) > len(rows)
        assert report.action == "distinct_injected" and report.sql.startswith("SELECT")
        observed = pg_db.guarded("observe").execute(query, params)
        assert observed.fetchall() == raw_rows and observed.guard_report.sql == report.sql
    count = pgsql.SQL("SELECT count(*) FROM {}").format(pgsql.Identifier("orders"))
    assert pg_db.con.execute(count).fetchall() == pg_db.raw.execute(count).fetchall()


def test_pg_rowcount_counts_the_rows_served(pg_db: EngineDB) -> None:
    """psycopg's ``rowcount`` of a SELECT is its number of rows; after a patch the cursor serves the
    patched rows, so ``rowcount`` must count those (unpatched: as raw psycopg)."""
    rows, _ = pg_db.fetch(pg_db.con, GOOD)
    assert pg_db.con.execute(GOOD).rowcount == pg_db.raw.execute(GOOD).rowcount == len(rows) == 4
    cur = pg_db.con.execute(EXPLODING_SQL)
    assert cur.guard_report.action == "distinct_injected"
    assert cur.rowcount == len(cur.fetchall()) == 4


def test_pg_row_factories_shape_rows_as_psycopg_does(pg_db: EngineDB) -> None:
    """psycopg's own ``row_factory`` (``dict_row``, ``class_row``; on the connection or the cursor) is
    left to psycopg: healthy rows come back as raw psycopg makes them, a fan-out of dicts is flagged and
    P1 serves the distinct dicts; a connection-level factory reaches the guarded cursors (see README)."""
    from dataclasses import dataclass

    from psycopg.rows import class_row, dict_row, tuple_row

    @dataclass(frozen=True)
    class Customer:
        name: str
        city: str

    con = pg_db.guarded("paper")
    healthy = "SELECT name, city FROM customers ORDER BY id"
    for factory in (dict_row, class_row(Customer)):
        cur = con.cursor(row_factory=factory)
        assert cur.execute(healthy).fetchall() == pg_db.raw.cursor(row_factory=factory).execute(healthy).fetchall()
        assert cur.guard_report.trigger is None
    cur = con.cursor(row_factory=dict_row)
    rows = cur.execute(EXPLODING_SQL).fetchall()
    assert sorted(rows, key=lambda r: r["name"]) == [{"name": name} for (name,) in DISTINCT_NAMES]
    assert (cur.guard_report.trigger, cur.guard_report.action) == ("cartesian_explosion", "distinct_injected")
    pg_db.raw.row_factory = dict_row
    try:
        assert pg_db.con.execute(healthy).fetchall() == pg_db.raw.execute(healthy).fetchall()
    finally:
        pg_db.raw.row_factory = tuple_row


def test_pg_dialect_must_match_the_driver(pg_db: EngineDB) -> None:
    """Wrapping a psycopg connection as DuckDB is refused."""
    with pytest.raises(ValueError, match="does not match"):
        guarded_sqlite.wrap(pg_db.raw, dialect="duckdb")


# --- DuckDB -----------------------------------------------------------------------------------------


def test_duckdb_execute_returns_the_connection_and_keeps_the_callers_description(duck_db: EngineDB) -> None:
    """``con.execute`` returns the guarded connection, and ``description`` is the caller's statement's even
    after the guard re-ran things on the connection. (The paper preset: its projection repeats values
    of orders, which the default preset leaves alone.)"""
    con = duck_db.guarded("paper")
    sql = "SELECT c.name, o.amount * 0 AS zero FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
    expected = duck_db.raw.cursor().execute(sql).description
    result = con.execute(sql)
    assert result is con
    assert con.guard_report.action == "distinct_injected"
    assert con.description == expected
    assert sorted(con.fetchall()) == [(f"name{i}", 0) for i in range(4)]
    assert con.description == expected


def test_duckdb_description_after_a_failed_execute_is_raw_duckdbs(duck_db: EngineDB) -> None:
    """After a failed execute, ``description`` is what raw DuckDB gives (None), not the previous statement's."""
    import duckdb

    con = duck_db.con
    con.execute("SELECT 1 AS a").fetchall()
    with pytest.raises(duckdb.CatalogException):
        con.execute("SELECT * FROM missing")
    assert con.guard_report.trigger == "exec_error"
    assert con.description is None


def test_duckdb_status_results_are_not_probed_and_fetch_as_raw(duck_db: EngineDB) -> None:
    """CREATE/INSERT/UPDATE/DELETE answer with DuckDB's status result, exactly as raw DuckDB does, unprobed;
    a real query whose only column is named "Count" is still probed."""
    import duckdb

    other = duckdb.connect()
    try:
        con = duck_db.con
        for sql in [
            "CREATE TABLE t (x INTEGER)",
            "INSERT INTO t VALUES (1), (2), (3)",
            "UPDATE t SET x = x + 1 WHERE x > 1",
            "DELETE FROM t WHERE x = 1",
        ]:
            raw_result = other.execute(sql)
            expected = (raw_result.description, raw_result.fetchall())
            con.execute(sql)
            assert (con.description, con.fetchall()) == expected, sql
            assert not con.guard_report.probed and con.guard_report.note == "statement returns no rows"
        rows, report = duck_db.fetch(con, 'SELECT count(*) AS "Count" FROM t')
        assert rows == [(2,)] and report.probed and report.rows == 1
    finally:
        other.close()


def test_duckdb_patch_inside_an_explicit_transaction_is_served_and_the_transaction_intact(duck_db: EngineDB) -> None:
    """Inside BEGIN, DuckDB has no savepoint for the join-copy check, so the default leaves the rows (and
    says why); the paper's P1 needs no re-execution and applies to the uncommitted rows too; the
    transaction commits and persists."""
    con = duck_db.con
    con.execute("BEGIN TRANSACTION")
    con.execute("INSERT INTO customers VALUES (99, 'late', 'x')")
    con.execute("INSERT INTO orders SELECT 1000 + range, 99, 1 FROM range(6)")
    rows, report = duck_db.fetch(con, EXPLODING_SQL)
    assert len(rows) == 30 and report.trigger == "cartesian_explosion" and report.action == "none"
    assert "explicit transaction is open" in report.decisions[0].reason
    rows, report = duck_db.fetch(duck_db.guarded("paper"), EXPLODING_SQL)
    assert sorted(rows) == sorted({*rows}) and ("late",) in rows and len(rows) == 5
    assert report.trigger == "cartesian_explosion" and report.action == "distinct_injected"
    (decision,) = report.decisions
    assert decision.applied and "nothing re-executed" in decision.reason
    assert duck_db.raw.cursor().execute("SELECT count(*) FROM customers").fetchall() == [(4,)]  # not committed yet
    con.execute("COMMIT")
    assert duck_db.raw.cursor().execute("SELECT count(*) FROM customers").fetchall() == [(5,)]
    _, after = duck_db.fetch(con, EXPLODING_SQL)
    assert after.action == "distinct_injected"  # outside the transaction the check runs


def test_duckdb_rescue_inside_an_explicit_transaction_is_refused_with_a_reason(duck_db: EngineDB) -> None:
    """Inside BEGIN, a flagged statement with candidates: the candidates are refused with the reason (not
    as an internal error), the paper's P1 still applies from the fetched rows, and the transaction
    still commits."""
    con = duck_db.guarded(GuardPolicy.paper(rescue=DupRatioSelector()))
    con.execute("BEGIN TRANSACTION")
    con.execute("INSERT INTO customers VALUES (99, 'late', 'x')")
    rows, report = duck_db.fetch(con, EXPLODING_SQL, candidates=[GOOD])
    assert len(rows) == 4 and report.trigger == "cartesian_explosion" and report.action == "distinct_injected"
    refusals = [d for d in report.decisions if d.rule == "rescue"]
    assert refusals and not refusals[0].applied and "explicit transaction is open" in refusals[0].reason
    con.execute("COMMIT")
    assert duck_db.raw.cursor().execute("SELECT count(*) FROM customers").fetchall() == [(5,)]


DF_SQL = (
    "SELECT c.name, c.city FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
    " WHERE o.amount >= ? ORDER BY c.name"
)


@pytest.mark.parametrize("method", ["df", "fetchdf"])
def test_duckdb_dataframes_equal_raw_duckdbs_of_the_served_sql(duck_db: EngineDB, method: str) -> None:
    """``df()``/``fetchdf()`` after execute equal raw DuckDB's DataFrame of the served (patched) SQL, and
    after a partial fetchone they hold the rest of the rows; a healthy query's equals raw DuckDB's."""
    assert_frame_equal = pytest.importorskip("pandas.testing", reason="pandas is not installed").assert_frame_equal

    # A fresh proxy for each part, so that this checks the native fetches alone (re-executing a drained
    # connection is covered by test_reexecuting_a_drained_cursor_serves_the_new_rows).
    con = duck_db.guarded()
    con.execute(DF_SQL, (0,))
    report = con.guard_report
    assert report.action == "distinct_injected"
    expected = duck_db.raw.cursor().execute(report.final_sql, (0,)).df()
    assert len(expected) == 4
    assert_frame_equal(getattr(con, method)(), expected)

    con = duck_db.guarded()
    con.execute(DF_SQL, (0,))
    assert con.fetchone() == ("name0", "city0")
    assert_frame_equal(getattr(con, method)(), expected.iloc[1:].reset_index(drop=True))

    healthy = "SELECT id, name FROM customers ORDER BY id"
    con = duck_db.guarded()
    con.execute(healthy)
    assert con.guard_report.action == "none"
    assert_frame_equal(getattr(con, method)(), duck_db.raw.cursor().execute(healthy).df())


def test_duckdb_fetchnumpy_equals_raw_duckdbs_of_the_served_sql(duck_db: EngineDB) -> None:
    """``fetchnumpy()`` after execute equals raw DuckDB's arrays of the served SQL, also after a fetchone."""
    numpy_testing = pytest.importorskip("numpy.testing", reason="numpy is not installed")

    con = duck_db.guarded()
    con.execute(DF_SQL, (0,))
    expected = duck_db.raw.cursor().execute(con.guard_report.final_sql, (0,)).fetchnumpy()
    got = con.fetchnumpy()
    assert list(got) == list(expected) == ["name", "city"]
    for column in expected:
        numpy_testing.assert_array_equal(got[column], expected[column])

    con = duck_db.guarded()
    con.execute(DF_SQL, (0,))
    assert con.fetchone() == ("name0", "city0")
    got = con.fetchnumpy()
    for column in expected:
        numpy_testing.assert_array_equal(got[column], expected[column][1:])


def test_duckdb_cursor_is_a_guarded_duplicate_connection(duck_db: EngineDB) -> None:
    """``con.cursor()`` is another guarded connection to the same database with the same policy."""
    from guarded_sqlite._io.proxy_duckdb import GuardedDuckDBConnection

    policy = GuardPolicy(tau_inject=0.7)
    con = duck_db.guarded(policy)
    cur = con.cursor()
    try:
        assert isinstance(cur, GuardedDuckDBConnection) and cur is not con
        assert cur.guard_policy == policy
        rows, report = duck_db.fetch(cur, EXPLODING_SQL)
        assert sorted(rows) == DISTINCT_NAMES and report.action == "distinct_injected"
        assert cur.execute("SELECT 1").fetchall() == [(1,)]
    finally:
        cur.close()
    assert con.execute("SELECT count(*) FROM orders").fetchall() == [(24,)]


# --- wrap() and imports -----------------------------------------------------------------------------


def test_wrap_refuses_a_mismatched_dialect_and_unknown_drivers() -> None:
    """A DuckDB connection cannot be wrapped as PostgreSQL, and an unknown object is a TypeError."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    try:
        with pytest.raises(ValueError, match="does not match"):
            guarded_sqlite.wrap(con, dialect="postgres")
    finally:
        con.close()
    with pytest.raises(TypeError, match="cannot guard"):
        guarded_sqlite.wrap(object())


def test_importing_guarded_sqlite_imports_no_other_driver() -> None:
    """``import guarded_sqlite`` (and guarding, patching a SQLite connection) loads no other driver."""
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
import guarded_sqlite
from tests.helpers import fill_fanout, EXPLODING_SQL
assert not {{"duckdb", "psycopg", "pymysql"}} & set(sys.modules), "driver imported by import guarded_sqlite"
con = guarded_sqlite.connect(":memory:")
fill_fanout(con)
assert con.execute(EXPLODING_SQL).guard_report.action == "distinct_injected"
import sqlite3
guarded_sqlite.wrap(sqlite3.connect(":memory:")).close()
assert not {{"duckdb", "psycopg", "pymysql"}} & set(sys.modules), "driver imported by guarding SQLite"
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_duckdb_queries_can_name_the_callers_dataframes() -> None:
    """DuckDB's replacement scans find a pandas DataFrame named in the query in the caller's frame,
    through the proxy, as they do on a raw connection."""
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed")
    pd = pytest.importorskip("pandas", reason="pandas is not installed")

    con = guarded_sqlite.wrap(duckdb.connect(), guard="paper")  # one column of one table: paper patches it
    local_frame = pd.DataFrame({"a": [1] * 9 + [2]})
    rows = con.execute("SELECT a FROM local_frame").fetchall()
    assert local_frame.shape == (10, 1)
    report = con.guard_report
    assert report.trigger == "cartesian_explosion" and report.dup_ratio == 0.8
    assert sorted(rows) == [(1,), (2,)] and report.action == "distinct_injected"
