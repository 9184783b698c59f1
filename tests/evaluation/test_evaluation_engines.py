"""The evaluation on DuckDB, PostgreSQL and MariaDB: SQLite databases copied into each engine,
queries transpiled from SQLite, timeouts enforced by the engine, and verdicts equal to SQLite's on
simple queries.

Every database is generated in ``tmp_path``. PostgreSQL and MariaDB each run on one throwaway server
for the session (``tests/pg_server.py``, ``tests/mariadb_server.py``); each test uses its own schema
or database prefix. Without the server binaries those tests skip, unless
``GUARDED_SQLITE_REQUIRE_POSTGRES=1`` or ``GUARDED_SQLITE_REQUIRE_MARIADB=1`` (CI), where that is a
failure. MariaDB's own copy and its differences from SQLite are in ``test_evaluation_mariadb.py``.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from guarded_sqlite._analysis.transpile import NotOneStatement, TranspileError, transpile
from guarded_sqlite.cli.commands import main
from guarded_sqlite.evaluation import EvalReport, InputError, evaluate, sweep
from guarded_sqlite.evaluation.copy import (
    choose_kind,
    copy_to_duckdb,
    copy_to_postgres,
    pg_schema_name,
    plan_sqlite,
)
from tests.pace import within

ENGINES = ["duckdb", "postgres", "mysql"]

# --------------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """``evaluate`` keyword arguments for one engine, isolated per test (own cache, own schemas)."""
    if request.param == "duckdb":
        pytest.importorskip("duckdb")
        return {"engine": "duckdb", "cache_dir": tmp_path / "duckdb-cache"}
    if request.param == "mysql":
        params = request.getfixturevalue("mariadb_params")
        return {
            "engine": "mysql",
            "mysql_url": f"mysql://{params['user']}@{params['host']}:{params['port']}",
            "mysql_db_prefix": f"t{uuid.uuid4().hex[:8]}_",
        }
    return {
        "engine": "postgres",
        "pg_dsn": request.getfixturevalue("pg_dsn"),
        "pg_schema_prefix": request.getfixturevalue("pg_schema_prefix"),
    }


def make_db(root: Path, db_id: str, script: str) -> Path:
    """``root/db_id/db_id.sqlite`` from an SQL script (the Spider/BIRD layout)."""
    path = root / db_id / f"{db_id}.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(script)
    con.commit()
    con.close()
    return path


SHOP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER);
INSERT INTO customers VALUES (0, 'name0'), (1, 'name1'), (2, 'name2'), (3, 'name3');
WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < 23)
INSERT INTO orders SELECT i, i / 6, 10 * (i % 6) FROM k;
CREATE TABLE pets (owner TEXT, kind TEXT);
INSERT INTO pets VALUES ('ann', 'cat'), ('ann', 'cat'), ('bob', 'dog');
CREATE TABLE t (v INTEGER);
INSERT INTO t VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (0);
CREATE TABLE Country (Code TEXT PRIMARY KEY, Name TEXT, Population INTEGER);
INSERT INTO Country VALUES ('FR', 'France', 68), ('DE', 'Germany', 84), ('IT', 'Italy', NULL);
"""

JOIN = "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id"
"""24 rows, 4 distinct: dup_ratio 0.83, so the probe flags it and P1 injects DISTINCT."""

SLOW = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500000000) SELECT count(*) FROM c"
"""Counts to 5e8: many seconds on every engine unless the engine stops it."""

# Index -> (gold, prediction); each pair exercises one outcome, on every engine alike.
CRAFTED: list[tuple[str, str]] = [
    # 0: a write: refused everywhere (read-only), and the data stays for the pairs after it
    ("SELECT count(*) FROM customers", "DELETE FROM customers"),
    # 1: exact match
    ("SELECT name FROM customers ORDER BY id", "SELECT name FROM customers"),
    # 2: fan-out: same set, 6x the rows; flagged, P1 fixes it
    ("SELECT name FROM customers", JOIN),
    # 3: the gold wants the duplicates: P1 breaks it
    (JOIN, JOIN),
    # 4: execution error
    ("SELECT name FROM customers", "SELECT nam FROM customers"),
    # 5: empty result
    ("SELECT name FROM customers", "SELECT name FROM customers WHERE id < 0"),
    # 6: the gold itself fails: excluded from N
    ("SELECT missing_column FROM customers", "SELECT name FROM customers"),
    # 7: mild duplicates (dup_ratio 0.33): an unflagged MBS case
    ("SELECT DISTINCT owner FROM pets", "SELECT owner FROM pets"),
    # 8: P2 removes a DISTINCT the gold does not have (11 rows, 10 distinct): a P2 fix
    ("SELECT v FROM t", "SELECT DISTINCT v FROM t"),
    # 9: SQLite's name rules: mixed case, back-quoted names, a double-quoted string
    ('SELECT Name FROM Country WHERE Code = "FR"', "SELECT `name` FROM `COUNTRY` WHERE code = 'FR'"),
    # 10: a truncated prediction: a syntax error on SQLite, a transpile error elsewhere
    ("SELECT count(*) FROM customers", "SELECT count(*) FROM customers WHERE id ="),
    # 11: NULLs sort first in SQLite; the transpiled ORDER BY keeps that on every engine
    (
        "SELECT Name FROM Country ORDER BY Population LIMIT 1",
        "SELECT name FROM country ORDER BY population ASC LIMIT 1",
    ),
    # 12: a truncated gold query: excluded everywhere, as a transpile failure off SQLite
    ("SELECT name FROM customers WHERE", "SELECT name FROM customers"),
]
TRANSPILE_FAILURE = 10


def write_inputs(
    folder: Path, pairs: Sequence[tuple[str, str]], db_ids: Sequence[str] = ("shop",)
) -> tuple[Path, Path]:
    gold = folder / "gold.sql"
    pred = folder / "pred.txt"
    gold.write_text("".join(f"{g}\t{db}\n" for db in db_ids for g, _ in pairs), encoding="utf-8")
    pred.write_text("".join(f"{p}\n" for _ in db_ids for _, p in pairs), encoding="utf-8")
    return gold, pred


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    root = tmp_path / "dbs"
    make_db(root, "shop", SHOP)
    return root


def verdicts(report: EvalReport) -> dict[int, tuple[Any, ...]]:
    return {
        r.index: (r.baseline_set, r.baseline_multiset, r.guarded_set, r.guarded_multiset, r.action)
        for r in report.pairs
    }


# --------------------------------------------------------------------------------------------------
# Transpiling


def test_transpile_applies_sqlite_name_rules_and_leaves_the_rest_to_sqlglot() -> None:
    names = ["Country", "Code", "Name"]
    for dialect in ENGINES:
        # MySQL quotes names with back quotes; the tests write them with double quotes.
        def run(sql: str, dialect: str = dialect) -> str:
            return transpile(sql, dialect, names).replace("`", '"')

        # Identifiers are case-insensitive in SQLite: all lower-cased and quoted.
        assert run("SELECT T1.Name FROM Country AS T1") == 'SELECT "t1"."name" FROM "country" AS "t1"'
        # A double-quoted name that is no column, table or alias is a string, as SQLite reads it ...
        assert run('SELECT Name FROM Country WHERE Code = "FR"').endswith("\"code\" = 'FR'")
        # ... but a double-quoted column, a back-quoted name and an alias stay identifiers.
        assert run('SELECT "Name" FROM Country') == 'SELECT "name" FROM "country"'
        assert run("SELECT `Nope` FROM Country") == 'SELECT "nope" FROM "country"'
        assert '"n" = 1' in run('SELECT count(*) AS n FROM Country GROUP BY Code HAVING "n" = 1')
        assert run('WITH c("k") AS (SELECT 1) SELECT "k", "v" FROM c') == (
            'WITH "c"("k") AS (SELECT 1) SELECT "k", \'v\' FROM "c"'
        )
        # Truncated SQL cannot be transpiled; two statements are an error of their own.
        with pytest.raises(TranspileError, match="cannot parse"):
            transpile("SELECT count(*) FROM Country WHERE Code =", dialect, names)
        with pytest.raises(NotOneStatement):
            transpile("SELECT 1; SELECT 2", dialect, names)
    # sqlglot's own dialect work stays: NULL ordering made explicit, LIMIT x, y, division by zero.
    assert transpile("SELECT Name FROM Country ORDER BY Name LIMIT 1, 2", "postgres", names) == (
        'SELECT "name" FROM "country" ORDER BY "name" NULLS FIRST LIMIT 2 OFFSET 1'
    )
    assert "NULLIF" in transpile("SELECT 1 / 0", "duckdb")


# --------------------------------------------------------------------------------------------------
# Copying


TYPES = """
CREATE TABLE Mixed (
    ID INTEGER PRIMARY KEY, Price DECIMAL(19,4), Amount NUMERIC, Label TEXT, Data BLOB,
    Anything, Flag BOOL, Born DATE, Score REAL
);
INSERT INTO Mixed VALUES (1, 1, 10, 'a', x'00ff', 'text', NULL, NULL, 0.5);
INSERT INTO Mixed VALUES (2, 2.5, 20, 'b''c', NULL, 3, NULL, NULL, -1.25);
INSERT INTO Mixed VALUES (3, NULL, NULL, NULL, x'01', 4.5, NULL, NULL, NULL);
CREATE TABLE "Odd Name" ("Weird Col" INTEGER, "select" TEXT);
INSERT INTO "Odd Name" VALUES (1, 'x');
CREATE TABLE Empty (a INT, b FLOAT, c VARCHAR(10), d DATETIME, e);
CREATE VIEW Labels AS SELECT Label FROM Mixed WHERE Label <> "b'c";
"""

EXPECTED_KINDS = {
    "ID": "integer",
    "Price": "real",
    "Amount": "integer",
    "Label": "text",
    "Data": "blob",
    "Anything": "text",
    "Flag": "integer",
    "Born": "text",
    "Score": "real",
}


def test_plan_chooses_column_types_from_the_stored_values() -> None:
    assert choose_kind("NUMERIC", "DECIMAL(19,4)", (4, 11, 0, 0))[0] == "real"
    assert choose_kind("INTEGER", "INTEGER", (3, 0, 1, 0))[0] == "text"
    assert choose_kind("NUMERIC", "DATETIME", (0, 0, 0, 0)) == ("text", None)
    assert choose_kind("NUMERIC", "DECIMAL", (0, 0, 0, 0)) == ("real", None)
    assert choose_kind("BLOB", "", (0, 0, 0, 0)) == ("text", None)


def test_plan_of_a_database(tmp_path: Path) -> None:
    path = make_db(tmp_path, "types", TYPES)
    plan = plan_sqlite(path)
    tables = {t.name: t for t in plan.tables}
    mixed = tables["Mixed"]
    assert {c.name: c.kind for c in mixed.columns} == EXPECTED_KINDS
    notes = {c.name: c.note for c in mixed.columns if c.note}
    assert set(notes) == {"Price", "Anything"}
    assert "1 integer value(s) widened to floating point" in notes["Price"]
    assert "mixed storage classes (1 integer, 1 real, 1 text)" in notes["Anything"]
    assert (mixed.rows, mixed.primary_key) == (3, ("ID",))
    assert [c.kind for c in tables["Empty"].columns] == ["integer", "real", "text", "text", "text"]
    assert [name for name, _ in plan.views] == ["Labels"]


def _read(con: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in con.execute(sql).fetchall()]


MIXED_ROWS = [
    (1, 1.0, 10, "a", b"\x00\xff", "text", 0.5),
    (2, 2.5, 20, "b'c", None, "3", -1.25),
    (3, None, None, None, b"\x01", "4.5", None),
]


def test_duckdb_copy_is_faithful_and_idempotent(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    path = make_db(tmp_path, "types", TYPES)
    cache = tmp_path / "cache"
    first = copy_to_duckdb(path, "types", cache)
    assert (first.action, first.tables, first.rows) == ("copied", 3, 4)
    assert any("widened" in note for note in first.notes) and any("mixed storage" in note for note in first.notes)
    con = duckdb.connect(first.target, read_only=True)
    try:
        # Names keep their case in DuckDB, which resolves them case-insensitively even when quoted.
        rows = _read(con, 'SELECT "id", price, amount, label, data, anything, score FROM "MIXED" ORDER BY id')
        assert rows == MIXED_ROWS
        types = dict(
            _read(con, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'Mixed'")
        )
        assert types["Price"] == "DOUBLE" and types["Anything"] == "VARCHAR" and types["Data"] == "BLOB"
        assert _read(con, 'SELECT "weird col", "select" FROM "odd name"') == [(1, "x")]
        assert _read(con, "SELECT * FROM labels") == [("a",)]  # the view, with SQLite's "b'c" string
    finally:
        con.close()

    again = copy_to_duckdb(path, "types", cache)
    assert (again.action, again.target, again.notes) == ("reused", first.target, first.notes)

    with sqlite3.connect(path) as source:
        source.execute("INSERT INTO Mixed (ID, Label) VALUES (4, 'new')")
    source.close()
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a changed file, whatever the clock
    third = copy_to_duckdb(path, "types", cache)
    assert (third.action, third.rows) == ("copied", 5)
    assert sorted(p.name for p in cache.iterdir()) == [Path(first.target).name, Path(first.target).name + ".json"]


def test_postgres_copy_is_faithful_and_idempotent(tmp_path: Path, pg_dsn: str, pg_schema_prefix: str) -> None:
    import psycopg

    path = make_db(tmp_path, "types", TYPES)
    prefix = pg_schema_prefix
    schema = pg_schema_name("types", prefix)
    first = copy_to_postgres(path, "types", pg_dsn, prefix)
    assert (first.action, first.target, first.tables, first.rows) == ("copied", schema, 3, 4)
    with psycopg.connect(pg_dsn, options=f"-c search_path={schema}") as con:
        # Lower-cased names; the transpiled queries quote them in lower case.
        assert _read(con, "SELECT id, price, amount, label, data, anything, score FROM mixed ORDER BY id") == MIXED_ROWS
        types = dict(
            _read(
                con,
                f"SELECT column_name, data_type FROM information_schema.columns "
                f"WHERE table_schema = '{schema}' AND table_name = 'mixed'",
            )
        )
        assert (types["price"], types["anything"], types["data"], types["amount"]) == (
            "double precision",
            "text",
            "bytea",
            "bigint",
        )
        assert _read(con, 'SELECT "weird col", "select" FROM "odd name"') == [(1, "x")]
        assert _read(con, "SELECT * FROM labels") == [("a",)]
        # The primary key exists (PostgreSQL then accepts other columns of the table under GROUP BY id).
        assert _read(con, "SELECT label, count(*) FROM mixed GROUP BY id ORDER BY id")[0] == ("a", 1)
        # Text is ordered by code point, like SQLite's BINARY collation, not by the server's locale.
        assert _read(
            con,
            "SELECT collation_name FROM information_schema.columns "
            f"WHERE table_schema = '{schema}' AND table_name = 'mixed' AND column_name = 'label'",
        ) == [("C",)]
        recorded = con.execute(
            "SELECT db_id, rows, notes FROM guarded_sqlite.copies WHERE schema_name = %s", (schema,)
        ).fetchall()
        assert recorded == [("types", 4, list(first.notes))]

    again = copy_to_postgres(path, "types", pg_dsn, prefix)
    assert (again.action, again.rows, again.notes) == ("reused", 4, first.notes)

    with sqlite3.connect(path) as source:
        source.execute("INSERT INTO Mixed (ID, Label) VALUES (4, 'new')")
    source.close()
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    third = copy_to_postgres(path, "types", pg_dsn, prefix)
    assert (third.action, third.rows) == ("copied", 5)


def test_schema_names_are_safe() -> None:
    assert pg_schema_name("concert_singer") == "spider_concert_singer"
    odd = pg_schema_name("Weird-DB name")
    assert odd.startswith("spider_weird_db_name_") and odd != pg_schema_name("weird_db_name")
    assert len(pg_schema_name("x" * 200)) <= 63
    assert not pg_schema_name("pg_thing", prefix="").startswith("pg_")


# --------------------------------------------------------------------------------------------------
# Evaluating


def test_engine_verdicts_equal_sqlite_on_simple_queries(tmp_path: Path, shop: Path, engine: dict[str, Any]) -> None:
    gold, pred = write_inputs(tmp_path, CRAFTED)
    on_sqlite = evaluate(shop, gold, pred, workers=1, guard="paper")
    report = evaluate(shop, gold, pred, workers=1, guard="paper", **engine)

    assert report.engine == engine["engine"] and on_sqlite.engine == "sqlite"
    assert report.n == on_sqlite.n == len(CRAFTED) - 2
    assert [f.index for f in report.gold_failures] == [f.index for f in on_sqlite.gold_failures] == [6, 12]
    assert [f.transpile_failed for f in report.gold_failures] == [False, True]
    assert [f.transpile_failed for f in on_sqlite.gold_failures] == [False, False]
    assert verdicts(report) == verdicts(on_sqlite)
    # Every gold query that runs answers as on SQLite (NULLs first under ORDER BY included).
    assert report.gold_differences == on_sqlite.gold_differences == ()
    by_index = {r.index: r for r in report.pairs}
    # The fan-out fix and the break, and P2's fix (the paper preset: the default keeps that DISTINCT), as on SQLite.
    assert report.rules == on_sqlite.rules
    assert (report.rules["P1"].fired, report.rules["P1"].fix, report.rules["P1"].break_) == (2, 1, 1)
    assert (report.rules["P2"].fired, report.rules["P2"].fix) == (1, 1)
    assert by_index[2].action == "distinct_injected" and "DISTINCT" in by_index[2].final_sql
    assert (by_index[2].rows, by_index[2].unique_rows) == (24, 4)
    # The truncated prediction is an error on both, a transpile error only off SQLite (where the
    # guard never sees it, so it is not flagged there).
    assert on_sqlite.baseline.transpile_errors == 0 and report.baseline.transpile_errors == 1
    assert report.baseline.errors == on_sqlite.baseline.errors == 3
    failed = by_index[TRANSPILE_FAILURE]
    assert (failed.status, failed.transpile_failed, failed.engine_sql, failed.trigger) == ("error", True, None, None)
    assert (failed.error or "").startswith("TranspileError: sqlglot cannot parse it as SQLite")
    triggers = {r.index: r.trigger for r in on_sqlite.pairs if r.index != TRANSPILE_FAILURE}
    assert triggers == {r.index: r.trigger for r in report.pairs if r.index != TRANSPILE_FAILURE}
    assert (by_index[9].engine_sql or "").replace("`", '"') == 'SELECT "name" FROM "country" WHERE "code" = \'FR\''
    assert by_index[0].status == "error"  # read-only everywhere
    assert on_sqlite.pairs[0].engine_sql is None

    # Copies are reported, and a second run reuses them.
    assert [(c.db_id, c.action) for c in report.copies] == [("shop", "copied")]
    assert report.timings.copy_s > 0 and report.timings.transpile_s > 0
    again = evaluate(shop, gold, pred, workers=1, guard="paper", **engine)
    assert [(c.db_id, c.action) for c in again.copies] == [("shop", "reused")]
    assert verdicts(again) == verdicts(report)


def test_engine_timeouts_are_enforced_by_the_engine(tmp_path: Path, shop: Path, engine: dict[str, Any]) -> None:
    count = "SELECT count(*) FROM customers"
    # Pairs 0 and 2 share their gold, so they run back to back on the same connection.
    gold, pred = write_inputs(tmp_path, [(count, SLOW), (SLOW, "SELECT 1"), (count, count)])
    started = time.perf_counter()
    report = evaluate(shop, gold, pred, timeout=0.3, workers=1, **engine)
    elapsed = time.perf_counter() - started
    assert within(elapsed, 2 * 0.3, 7.4), elapsed  # two 0.3 s timeouts and a copy, not two counts to 5e8
    slow, after = report.pairs
    assert (slow.index, slow.status, slow.trigger) == (0, "timeout", "exec_error")
    assert within(slow.exec_ms / 1000, 0.3, 2.7), slow.exec_ms
    assert (after.index, after.status, after.baseline_multiset) == (2, "ok", True)  # the connection still works
    assert (report.baseline.timeouts, report.baseline.errors) == (1, 0)
    assert [(f.index, f.status) for f in report.gold_failures] == [(1, "timeout")]


def test_engine_worker_processes_open_their_own_connections(tmp_path: Path, shop: Path, engine: dict[str, Any]) -> None:
    make_db(shop, "second", SHOP)
    gold, pred = write_inputs(tmp_path, CRAFTED[:4], db_ids=("shop", "second"))
    inline = evaluate(shop, gold, pred, workers=1, **engine)
    pooled = evaluate(shop, gold, pred, workers=2, **engine)
    assert pooled.timings.workers == 2
    assert verdicts(pooled) == verdicts(inline) and pooled.rules == inline.rules
    assert {c.action for c in pooled.copies} == {"reused"}


def test_engine_sweep_matches_sqlite(tmp_path: Path, shop: Path, engine: dict[str, Any]) -> None:
    gold, pred = write_inputs(tmp_path, CRAFTED)
    options: dict[str, Any] = {"workers": 1, "p1_taus": [0.5, 0.8, 0.9], "p2_taus": [0.05, 0.1]}
    on_sqlite = sweep(shop, gold, pred, **options)
    report = sweep(shop, gold, pred, **options, **engine)
    assert report.evaluation.engine == engine["engine"]
    assert report.p1 == on_sqlite.p1 and report.p2 == on_sqlite.p2
    assert [(o.rule, o.tau, o.index) for o in report.outcomes] == [(o.rule, o.tau, o.index) for o in on_sqlite.outcomes]


def test_engine_options_are_checked(tmp_path: Path, shop: Path) -> None:
    gold, pred = write_inputs(tmp_path, CRAFTED[:1])
    with pytest.raises(InputError, match="needs a PostgreSQL connection string"):
        evaluate(shop, gold, pred, engine="postgres")
    with pytest.raises(InputError, match="only used with engine 'postgres'"):
        evaluate(shop, gold, pred, pg_dsn="host=127.0.0.1")
    with pytest.raises(InputError, match="engine must be one of"):
        evaluate(shop, gold, pred, engine="oracle")
    with pytest.raises(InputError, match="cannot connect to PostgreSQL"):
        evaluate(shop, gold, pred, engine="postgres", pg_dsn="host=127.0.0.1 port=1 connect_timeout=2")


def test_cli_eval_on_an_engine(
    tmp_path: Path, shop: Path, engine: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    gold, pred = write_inputs(tmp_path, CRAFTED)
    args = [
        "eval",
        "--db-root",
        str(shop),
        "--gold",
        str(gold),
        "--pred",
        str(pred),
        "--workers",
        "1",
        "--engine",
        engine["engine"],
    ]
    if engine["engine"] == "duckdb":
        args += ["--cache-dir", str(engine["cache_dir"])]
    elif engine["engine"] == "mysql":
        args += ["--mysql-url", engine["mysql_url"], "--mysql-db-prefix", engine["mysql_db_prefix"]]
    else:
        args += ["--pg-dsn", engine["pg_dsn"], "--pg-schema-prefix", engine["pg_schema_prefix"]]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"engine={engine['engine']}" in out
    assert "1 copied" in out and "of errors: transpile" in out
    assert "#6 shop [error]" in out  # the failing gold, listed


def test_cli_engine_errors_exit_2(tmp_path: Path, shop: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gold, pred = write_inputs(tmp_path, CRAFTED[:1])
    base = ["eval", "--db-root", str(shop), "--gold", str(gold), "--pred", str(pred), "--workers", "1"]
    assert main([*base, "--engine", "postgres"]) == 2
    assert "needs a PostgreSQL connection string" in capsys.readouterr().err
    assert main([*base, "--pg-dsn", "host=127.0.0.1"]) == 2
    assert "only used with engine 'postgres'" in capsys.readouterr().err
    assert main([*base, "--engine", "mariadb"]) == 2
    assert "engine 'mysql' needs the server's address" in capsys.readouterr().err
    assert main([*base, "--engine", "mysql", "--mysql-url", "mysql://127.0.0.1/shop"]) == 2
    assert "leave the database name out" in capsys.readouterr().err
    assert main([*base, "--mysql-url", "mysql://127.0.0.1"]) == 2
    assert "only used with engine 'mysql'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--engine", "oracle"])
