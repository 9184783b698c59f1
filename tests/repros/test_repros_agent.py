"""Repros a01-a07, a09-a11, a14, a15 (``../shared/repros/agent/``): the agent tools' lockdown and limits,
plus a hostile-input corpus (hand-written and generated) through ``GuardedDatabase`` on SQLite and DuckDB:
every call answered with a result or ``QueryRefused``, the database's bytes unchanged, no file created
outside the database's folder, and the tool still answering afterwards.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guarded_sqlite.agent import GuardedDatabase, QueryRefused
from guarded_sqlite.agent._refusals import first_word as _first_word
from guarded_sqlite.agent.lockdown import sqlite_decision, value_length_limit


def sql_string(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


@pytest.fixture
def lite(tmp_path: Path) -> Path:
    path = tmp_path / "db" / "shop.db"
    path.parent.mkdir(exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE customers(id INTEGER PRIMARY KEY, email TEXT);"
        "CREATE VIRTUAL TABLE docs USING fts4(body);"
        "INSERT INTO docs(body) VALUES ('hello world');"
    )
    con.executemany("INSERT INTO customers(email) VALUES (?)", [(f"u{i}@example.com",) for i in range(50)])
    con.commit()
    con.close()
    return path


@pytest.fixture
def duck(tmp_path: Path) -> Path:
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "db" / "shop.duckdb"
    path.parent.mkdir(exist_ok=True)
    con = duckdb.connect(str(path))
    con.execute("CREATE SEQUENCE ids START 1000")
    con.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, email TEXT)")
    con.execute("INSERT INTO customers SELECT i, 'u' || i || '@example.com' FROM range(50) t(i)")
    con.close()
    return path


def refused_kind(db: GuardedDatabase, sql: str) -> str | None:
    try:
        db.query(sql)
    except QueryRefused as refused:
        return refused.kind
    return None


def test_a01_a02_duckdb_second_statements_and_copy_are_refused(duck: Path, tmp_path: Path) -> None:
    """a01, a02: a second statement after ';' (COMMENT, COPY, SET, EXPORT) is refused by DuckDB's own parser."""
    before = duck.read_bytes()
    with GuardedDatabase.open(duck) as db:
        for sql in (
            "SELECT 1; COMMENT ON TABLE customers IS 'x'",
            f"SELECT 1; COPY customers TO {sql_string(tmp_path / 'out.csv')}",
            "SELECT 1; SET memory_limit='1MB'",
            f"SELECT 1; EXPORT DATABASE {sql_string(tmp_path / 'export')}",
        ):
            assert refused_kind(db, sql) == "multiple_statements", sql
        assert refused_kind(db, f"COPY customers TO {sql_string(tmp_path / 'one.csv')}") == "write"
        assert db.query("SELECT count(*) FROM customers").rows == ((50,),)
    assert duck.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]


def test_a03_duckdb_file_readers_are_denied(duck: Path, tmp_path: Path) -> None:
    """a03: read_text, read_csv, glob fail: external access is off and locked."""
    secret = tmp_path / "credentials"
    secret.write_text("KEY=EXAMPLEKEY\n")
    with GuardedDatabase.open(duck, read_only=True) as db:
        for sql in (f"SELECT * FROM read_text({sql_string(secret)})", f"SELECT * FROM glob({sql_string(tmp_path)})"):
            assert refused_kind(db, sql) == "sql_error", sql


def test_a04_duckdb_nextval_cannot_advance_a_sequence(duck: Path) -> None:
    """a04: with writes off the DuckDB file is opened read-only, so nextval() fails."""
    before = duck.read_bytes()
    with GuardedDatabase.open(duck) as db:
        assert refused_kind(db, "SELECT nextval('ids')") == "sql_error"
    assert duck.read_bytes() == before


def test_a05_duckdb_install_and_autoload_are_refused(duck: Path) -> None:
    """a05: INSTALL is not a query; a second statement is refused; autoinstall is off and locked."""
    with GuardedDatabase.open(duck, read_only=True, isolated=False) as db:
        assert refused_kind(db, "SELECT 1; INSTALL x FROM 'http://127.0.0.1:9/leak'") == "multiple_statements"
        assert refused_kind(db, "INSTALL x FROM 'http://127.0.0.1:9/leak'") == "write"
        settings = dict(
            db._raw.execute(
                "SELECT name, value FROM duckdb_settings() WHERE name LIKE 'auto%known_extensions'"
            ).fetchall()
        )
        assert set(settings.values()) == {"false"}


def test_a06_rows_are_counted_while_fetching(lite: Path) -> None:
    """a06: a 3M-row result is refused after max_rows + 1 rows, not after fetchall(): the call's peak of
    Python memory stays within the guard's byte cap (fetching every row first held about 260 MB, and
    was refused as too large all the same)."""
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 3000000) SELECT i FROM n"
    with GuardedDatabase.open(lite, max_rows=200, isolated=False) as db:
        db.query("SELECT 1")  # imports and caches: not the call's memory
        policy = db.connection.guard_policy
        assert policy.byte_cap is not None and policy.byte_cap <= 16 * 200_000 + 64 * 201 + 1024
        tracemalloc.start()
        try:
            kind = refused_kind(db, sql)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak <= policy.byte_cap, (peak, policy.byte_cap)
    assert kind == "too_large"


def test_a07_a_value_longer_than_the_cap_is_never_built(lite: Path) -> None:
    """a07: SQLITE_LIMIT_LENGTH (Python 3.11+) refuses a 150 MB blob inside SQLite."""
    if not hasattr(sqlite3.Connection, "setlimit"):
        pytest.skip("Python 3.10's sqlite3 has no setlimit: values keep SQLite's default cap")
    with GuardedDatabase.open(lite, max_chars=200_000, isolated=False) as db:
        with pytest.raises(QueryRefused, match="value in the result is longer") as refused:
            db.query("SELECT zeroblob(150000000)")
        assert refused.value.kind == "too_large"
        assert db._raw.getlimit(sqlite3.SQLITE_LIMIT_LENGTH) == value_length_limit(200_000)  # type: ignore[union-attr,attr-defined]


def _seconds(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _skip_comment_lines(sql: str) -> int:
    """A linear skip of leading ``--`` lines by index: a09's reference time."""
    position = 0
    while sql.startswith("--", position):
        position = sql.find("\n", position) + 1
    return position


def test_a09_first_word_is_linear() -> None:
    """a09: 300,000 comment lines are skipped by index, not by copying the text each time: the word is
    found within ten times what a linear skip of the same lines takes in this run (the quadratic code
    took about 100 times as long at this length, 250 times at 600,000 lines)."""
    sql = "--\n" * 300_000 + "  (/* c */ select 1"
    before = _seconds(lambda: _skip_comment_lines(sql))
    started = time.perf_counter()
    word = _first_word(sql)
    seconds = time.perf_counter() - started
    after = _seconds(lambda: _skip_comment_lines(sql))
    assert word == "SELECT"
    # The slower reference of the two: a burst of load on either side is allowed for.
    reference = max(before, after)
    assert seconds <= 10 * reference, (seconds, before, after)
    assert _first_word("/* unterminated") == ""
    assert _first_word("-- only a comment") == ""


def test_a10_duckdb_result_past_the_row_cap_is_refused(duck: Path) -> None:
    """a10: past the guard's row cap DuckDB's rows stream through fetchone(), not next() on the connection."""
    with GuardedDatabase.open(duck, read_only=True, max_rows=20) as db:
        with pytest.raises(QueryRefused, match="more than this tool's limit of 20 rows"):
            db.query("SELECT * FROM range(1000001)")
        assert db.query("SELECT count(*) FROM customers").rows == ((50,),)  # the connection is still open


def test_a11_max_chars_counts_the_text_table(lite: Path) -> None:
    """a11: many wide-named columns of tiny values pass the JSON count but not the text the model reads."""
    name = "c" * 60
    columns = ", ".join(["r.i"] + ["a.*"] * 300)
    sql = (
        f'WITH a("{name}") AS (SELECT 0), r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r LIMIT 200) '
        f"SELECT {columns} FROM a, r"
    )
    with GuardedDatabase.open(lite, max_chars=200_000) as db:
        # Refused by the text table, or (the 301 names counted too, issue 36) already by the JSON count.
        with pytest.raises(QueryRefused, match=r"as a text table|characters as JSON"):
            db.query(sql)
        result = db.query("SELECT id FROM customers LIMIT 3")
        assert len(result.observation()) <= 200_000


def test_a14_cli_query_cannot_attach_or_vacuum_into(lite: Path, tmp_path: Path) -> None:
    """a14: `guarded-sqlite query` denies VACUUM INTO and ATTACH: no file is created."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for sql in (
        f"VACUUM INTO {sql_string(elsewhere / 'copy.db')}",
        f"ATTACH {sql_string(elsewhere / 'new.db')} AS x",
        f"ATTACH {sql_string('file:' + str(elsewhere / 'rwc.db') + '?mode=rwc')} AS y",
    ):
        done = subprocess.run(
            [sys.executable, "-m", "guarded_sqlite", "query", str(lite), sql], capture_output=True, text=True
        )
        assert done.returncode == 1, (sql, done.stderr)
    assert list(elsewhere.iterdir()) == []


def test_a15_fts3_tokenizer_is_denied(lite: Path) -> None:
    """a15: fts3_tokenizer() is denied by the authorizer (no address leak, no pointer replaced)."""
    with GuardedDatabase.open(lite, read_only=True) as db:
        assert refused_kind(db, "SELECT hex(fts3_tokenizer('simple'))") == "write"
        assert refused_kind(db, "SELECT fts3_tokenizer('simple', X'4141414141414141')") == "write"
        assert db.query("SELECT rowid FROM docs WHERE docs MATCH 'hello'").rows == ((1,),)


@pytest.mark.parametrize(
    ("action", "arg1", "arg2", "allow_writes", "allowed"),
    [
        (sqlite3.SQLITE_SELECT, None, None, False, True),
        (sqlite3.SQLITE_READ, "customers", "email", False, True),
        (sqlite3.SQLITE_FUNCTION, None, "instr", False, True),
        (sqlite3.SQLITE_FUNCTION, None, "load_extension", True, False),
        (sqlite3.SQLITE_ATTACH, "x.db", None, True, False),
        (sqlite3.SQLITE_INSERT, "customers", None, False, False),
        (sqlite3.SQLITE_INSERT, "customers", None, True, True),
        (sqlite3.SQLITE_PRAGMA, "table_xinfo", "customers", False, True),  # the guard's catalog reads
        (sqlite3.SQLITE_PRAGMA, "index_list", "customers", False, True),
        (sqlite3.SQLITE_PRAGMA, "query_only", None, False, True),
        (sqlite3.SQLITE_PRAGMA, "query_only", "0", False, False),
        (sqlite3.SQLITE_PRAGMA, "busy_timeout", "0", False, True),
        (sqlite3.SQLITE_PRAGMA, "journal_mode", "delete", False, False),
    ],
)
def test_sqlite_decision(action: int, arg1: str | None, arg2: str | None, allow_writes: bool, allowed: bool) -> None:
    expected = sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY
    assert sqlite_decision(action, arg1, arg2, allow_writes=allow_writes) == expected


def test_a_callers_duckdb_connection_that_is_not_locked_down_is_refused(duck: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    from guarded_sqlite import wrap
    from guarded_sqlite.agent.lockdown import DUCKDB_AGENT_CONFIG

    raw = duckdb.connect(str(duck), read_only=True)
    with pytest.raises(ValueError, match="enable_external_access=true"):
        GuardedDatabase(wrap(raw))
    raw.close()
    locked = wrap(duckdb.connect(str(duck), read_only=True, config=DUCKDB_AGENT_CONFIG))
    with GuardedDatabase(locked) as db:
        assert db.query("SELECT count(*) FROM customers").rows == ((50,),)


HOSTILE = [
    "DELETE FROM customers",
    "UPDATE customers SET email = 'x'",
    "INSERT INTO customers(email) VALUES ('x')",
    "DROP TABLE customers",
    "CREATE TABLE t(x)",
    "CREATE TEMP TABLE t(x)",
    "SELECT 1; DELETE FROM customers",
    "WITH d AS (DELETE FROM customers RETURNING *) SELECT * FROM d",
    "ATTACH '{out}/a.db' AS a",
    "VACUUM INTO '{out}/copy.db'",
    "VACUUM",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = WAL",
    "SELECT load_extension('/tmp/x')",
    "SELECT hex(fts3_tokenizer('simple'))",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('{out}/x.csv')",
    "COPY (SELECT 1) TO '{out}/x.csv'",
    "SELECT 1; COPY (SELECT 1) TO '{out}/y.csv'",
    "EXPORT DATABASE '{out}/export'",
    "INSTALL httpfs FROM 'http://127.0.0.1:9/'",
    "SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')",
    "SET enable_external_access = true",
    "SELECT nextval('ids')",
    "SELECT zeroblob(500000000)",
    "SELECT repeat('x', 50000000)",
    "--\n" * 100_000 + "SELECT 1",
    "SELECT " + "1 + " * 4000 + "1",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 2000000) SELECT i FROM n",
    "SELECT * FROM range(3000000)",
    "BEGIN",
    "SELECT 1; SELECT 2",
    "",
]


def run_corpus(db: GuardedDatabase, statements: list[str], out: Path) -> None:
    for template in statements:
        sql = template.replace("{out}", str(out))
        try:
            db.query(sql)
        except QueryRefused:
            pass
        assert db.query("SELECT count(*) FROM customers").rows == ((50,),), sql


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
@pytest.mark.parametrize("read_only", [False, True])
def test_hostile_corpus(
    engine: str, read_only: bool, lite: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every hostile statement is answered (rows or QueryRefused), the file's bytes stay the same, no file
    appears outside the database's folder (where only SQLite's own journal may come and go), and the tool
    keeps answering."""
    path: Path = lite if engine == "sqlite" else request.getfixturevalue("duck")
    out = tmp_path / "out"
    out.mkdir()
    before = path.read_bytes()
    with GuardedDatabase.open(path, read_only=read_only, timeout=5) as db:
        run_corpus(db, HOSTILE, out)
    assert path.read_bytes() == before
    assert list(out.iterdir()) == []
    assert {p.name for p in tmp_path.iterdir()} == {"db", "out"}


WORDS = st.sampled_from(
    [
        "SELECT", "1", ";", "DELETE", "FROM", "customers", "INSERT", "INTO", "VALUES", "(", ")", "ATTACH",
        "'{out}/g.db'", "AS", "g", "COPY", "TO", "'{out}/g.csv'", "PRAGMA", "query_only", "=", "OFF", "WITH",
        "x", "VACUUM", "UPDATE", "SET", "email", "'", "--", "/*", "*/", "zeroblob(99999999)",
        "fts3_tokenizer('simple')",
        "read_text('/etc/hostname')", "load_extension('x')", "CREATE", "TABLE", "TEMP", "DROP", ",", "*",
    ]
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(WORDS, min_size=1, max_size=12).map(" ".join), min_size=1, max_size=5))
def test_generated_hostile_statements(lite: Path, tmp_path: Path, statements: list[str]) -> None:
    """Generated token soups of writes, file access and oversized values on SQLite with writes off."""
    out = tmp_path / "gen"
    out.mkdir(exist_ok=True)
    before = lite.read_bytes()
    with GuardedDatabase.open(lite, timeout=5) as db:
        run_corpus(db, statements, out)
    assert lite.read_bytes() == before
    assert list(out.iterdir()) == []
