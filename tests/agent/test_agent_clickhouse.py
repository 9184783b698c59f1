"""The agent tools on ClickHouse through chDB (issue 45 item 2): ``GuardedDatabase`` over a chDB session,
``GuardedDatabase.open("chdb:///folder")`` in a worker process, and the hostile corpus through the real
MCP server (``guarded-sqlite mcp chdb:///folder``), with ``test_agent_hostile``'s checks: answered within
the limit, nothing written (the table's files), no file created, no socket opened, memory bounded, the
next call served. ClickHouse's own corpus: writes and DDL, statements in one text, ``SET`` and
``SETTINGS`` (the tool's limits are settings), table functions that reach files, URLs, other servers
and programs, ``INTO OUTFILE``, the ``system`` tables, dictionaries, ``numbers()`` explosions.

Skipped without chdb (the ``[clickhouse]`` extra) unless ``GUARDED_SQLITE_REQUIRE_CLICKHOUSE=1``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite.agent import GuardedDatabase, QueryRefused
from tests.agent.test_agent_hostile import (
    COMMON,
    HEALTH,
    LIMITS,
    WORDS,
    Canary,
    Scene,
    Server,
    check_call,
    played,
)

SHOP = """
from chdb import dbapi
cur = dbapi.connect({folder!r}).cursor()
cur.execute("CREATE TABLE customers (id Int64, email String) ENGINE = MergeTree ORDER BY id")
cur.execute("INSERT INTO customers SELECT number + 1, concat('u', toString(number + 1), '@x.org') FROM numbers(50)")
cur.execute("CREATE TABLE orders (id Int64, customer_id Int64, amount Int64) ENGINE = MergeTree ORDER BY id")
cur.execute("INSERT INTO orders SELECT number, number % 50 + 1, number FROM numbers(500)")
"""


def make_folder(folder: Path) -> None:
    """The shop in a chDB folder, written by a process of its own (chDB serves one folder per process,
    and this one's may be the test session's)."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", SHOP.format(folder=str(folder))], check=True, timeout=120)


def folder_state(folder: Path) -> dict[str, str]:
    """The bytes of every table's and database's files (``store``, ``metadata``, ``data``)."""
    state = {}
    for part in ("store", "metadata", "data"):
        for root, _, files in os.walk(folder / part):
            for name in files:
                path = Path(root) / name
                state[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


@pytest.fixture
def canary() -> Iterator[Canary]:
    listener = Canary()
    yield listener
    listener.close()


@pytest.fixture
def chdb_required(chdb_path: str) -> str:
    """Skips (or fails under GUARDED_SQLITE_REQUIRE_CLICKHOUSE=1) without chdb."""
    return chdb_path


# --- in process: GuardedDatabase over a chDB session -----------------------------------------------------


@pytest.fixture
def agent_db(chdb_database: Callable[[], Any]) -> GuardedDatabase:
    raw = chdb_database()
    cur = raw.cursor()
    for statement in SHOP.strip().splitlines()[2:]:
        cur.execute(statement.split('"')[1])
    return GuardedDatabase(guarded_sqlite.wrap(raw, guard="text_to_sql"), timeout=5)


def test_the_session_is_read_only_with_the_tools_limits(agent_db: GuardedDatabase) -> None:
    raw = agent_db._raw
    cur = raw.cursor()
    cur.execute("SELECT getSetting('readonly'), getSetting('max_execution_time'), getSetting('max_memory_usage')")
    assert cur.fetchall() == ((1, 5.0, 256 * 2**20),)
    with pytest.raises(Exception, match="READONLY"):
        cur.execute("SET readonly = 0")


def test_queries_are_served_and_repaired(agent_db: GuardedDatabase) -> None:
    result = agent_db.query("SELECT c.email FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id < 3")
    assert sorted(result.rows) == [("u1@x.org",), ("u2@x.org",)]
    assert result.report.action in ("distinct_injected", "join_copies_removed")
    total = agent_db.query("SELECT sum(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id")
    assert total.rows == ((sum(range(1, 51)),),) and total.report.action == "aggregate_defanned"
    assert agent_db.query("SELECT count() FROM customers WHERE id > %s", (40,)).rows == ((10,),)


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("INSERT INTO customers VALUES (99, 'x')", "write"),
        ("SELECT 1; INSERT INTO customers VALUES (99, 'x')", "write"),
        ("SELECT 1; SELECT 2", "multiple_statements"),
        ("SELECT * FROM file('/etc/passwd', 'LineAsString')", "denied"),
        ("SELECT * FROM customers INTO OUTFILE 'out.csv'", "denied"),
        ("SELECT * FROM system.disks", "denied"),
        ("SELECT 1 SETTINGS max_execution_time = 0", "denied"),
        ("SET readonly = 0", "denied"),
        ("SELECT dictGet('d', 'v', toUInt64(1))", "denied"),
        ("SELECT count() FROM numbers(100000000000)", "timeout"),
        ("SELECT * FROM numbers(100000)", "too_large"),
        ("SELECT groupArray(number) FROM numbers(100000000)", "too_large"),
        ("KILL QUERY WHERE 1", "write"),
    ],
)
def test_refusals(agent_db: GuardedDatabase, sql: str, kind: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        agent_db.query(sql)
    assert refused.value.kind == kind, str(refused.value)
    assert agent_db.query(HEALTH).rows == ((50,),)


def test_schema_shows_no_keys(agent_db: GuardedDatabase) -> None:
    """ClickHouse's ORDER BY keeps duplicates: the model is told no key identifies a row."""
    schema = agent_db.schema()
    customers = next(table for table in schema.tables if table.name == "customers")
    assert customers.columns == (("id", "Int64"), ("email", "String"))
    assert customers.keys == () and customers.row_count == 50


def test_a_read_only_session_is_refused(chdb_database: Callable[[], Any]) -> None:
    raw = chdb_database()
    raw.cursor().execute("SET readonly = 1")
    with pytest.raises(ValueError, match="read-only already"):
        GuardedDatabase(guarded_sqlite.wrap(raw))


# --- GuardedDatabase.open("chdb://...") and the MCP server, in other processes ----------------------------


def test_open_serves_a_chdb_folder_in_a_worker(chdb_required: str, tmp_path: Path) -> None:
    folder = tmp_path / "shop"
    make_folder(folder)
    with pytest.raises(ValueError, match="no such folder"):
        GuardedDatabase.open(f"chdb://{tmp_path / 'missing'}")
    with GuardedDatabase.open(f"chdb://{folder}", timeout=2) as db:
        assert db.dialect == "clickhouse"
        assert db.query(HEALTH).rows == ((50,),)
        with pytest.raises(QueryRefused) as refused:
            db.query("SELECT count() FROM numbers(100000000000)")
        assert refused.value.kind == "timeout"
        assert db.query(HEALTH).rows == ((50,),)


CLICKHOUSE_ONLY = [
    # Writes, DDL, the server.
    "INSERT INTO customers VALUES (99, 'x')",
    "ALTER TABLE customers DELETE WHERE 1",
    "ALTER TABLE customers UPDATE email = '' WHERE 1",
    "TRUNCATE TABLE customers",
    "DROP TABLE customers",
    "OPTIMIZE TABLE customers FINAL",
    "CREATE TABLE t2 (a Int32) ENGINE = Memory",
    "CREATE TEMPORARY TABLE tt (a Int32)",
    "RENAME TABLE customers TO c2",
    "DETACH TABLE customers",
    "CREATE DICTIONARY d (id UInt64, v String) PRIMARY KEY id SOURCE(FILE(path '/etc/passwd' format 'TSV')) "
    "LAYOUT(FLAT()) LIFETIME(0)",
    "BACKUP TABLE customers TO File('{outside}.zip')",
    "SYSTEM STOP MERGES",
    "SYSTEM SHUTDOWN",
    "KILL QUERY WHERE 1",
    "CREATE USER hostile",
    "GRANT ALL ON *.* TO default",
    # Statements in one text (chDB runs them all).
    "SELECT 1; INSERT INTO customers VALUES (99, 'x')",
    "SELECT 1; SET readonly = 0",
    "SELECT ';'; DROP TABLE customers",
    # Settings: the tool's limits.
    "SET readonly = 0",
    "SET max_execution_time = 0",
    "SELECT count() FROM numbers(100000000000) SETTINGS max_execution_time = 0",
    "SELECT 1 SETTINGS readonly = 0",
    "SELECT number FROM numbers(100000) SETTINGS max_result_rows = 0",
    # Files, the network, other servers, programs.
    "SELECT * FROM file('/etc/passwd', 'LineAsString')",
    "SELECT file('/etc/passwd')",
    "SELECT * FROM `FILE`('/etc/passwd', 'LineAsString')",
    "INSERT INTO FUNCTION file('{outside}.csv', 'CSV') SELECT * FROM customers",
    "SELECT * FROM customers INTO OUTFILE '{outside}.out'",
    "SELECT * FROM customers INTO OUTFILE 'relative.csv'",
    "SELECT * FROM customers FORMAT CSV",
    "SELECT * FROM url('http://127.0.0.1:{canary}/x', 'CSV', 'a String')",
    "SELECT * FROM s3('http://127.0.0.1:{canary}/bucket/x.csv', 'CSV', 'a String')",
    "SELECT * FROM remote('127.0.0.1:{canary}', system.one)",
    "SELECT * FROM remoteSecure('127.0.0.1:{canary}', default.customers)",
    "SELECT * FROM mysql('127.0.0.1:{canary}', 'db', 't', 'u', 'p')",
    "SELECT * FROM postgresql('127.0.0.1:{canary}', 'db', 't', 'u', 'p')",
    "SELECT * FROM executable('touch {outside}.exe', 'TSV', 'a String')",
    "SELECT * FROM hdfs('hdfs://127.0.0.1:{canary}/x', 'TSV', 'a String')",
    "SELECT * FROM iceberg('http://127.0.0.1:{canary}/x')",
    "SELECT * FROM merge('system', '.*')",
    # The system tables, dictionaries.
    "SELECT name, path FROM system.disks",
    "SELECT * FROM system.settings",
    "SELECT query FROM system.processes",
    "SELECT * FROM `system`.`databases`",
    "SELECT * FROM INFORMATION_SCHEMA.TABLES",
    "SELECT dictGet('d', 'v', toUInt64(1))",
    "SELECT dictGetString('d', 'v', toUInt64(1))",
    "SELECT * FROM dictionary('d')",
    # Time and size: numbers() explosions, big values, sorts.
    "SELECT count() FROM numbers(100000000000)",
    "SELECT count() FROM numbers_mt(100000000000)",
    "SELECT * FROM numbers(100000000)",
    "SELECT groupArray(number) FROM numbers(100000000)",
    "SELECT repeat('x', 100000000)",
    "SELECT arrayStringConcat(arrayMap(x -> repeat('x', 1000000), range(400)))",
    "SELECT repeat('x', 190000)",
    "SELECT sleepEachRow(1) FROM numbers(10)",
    "SELECT count() FROM customers a, customers b, customers c, customers d, customers e, customers f",
    "SELECT * FROM generateRandom('a String, b Array(String)') LIMIT 100000000",
    "SELECT uniqExact(number) FROM numbers(1000000000)",
    "SELECT number FROM numbers(30000000) ORDER BY cityHash64(number)",
    "SELECT throwIf(1)",
]


def hostile_scene(tmp_path: Path, canary: Canary) -> Scene:
    """test_agent_hostile's scene on a chDB folder of the shop."""
    folder = tmp_path / "db" / "shop"
    make_folder(folder)
    outside = f"/tmp/guarded-hostile-{os.urandom(8).hex()}"
    return Scene("clickhouse", f"chdb://{folder}", lambda: folder_state(folder), tmp_path / "server", canary, outside)


def test_hand_written_corpus_through_the_mcp_server(chdb_required: str, tmp_path: Path, canary: Canary) -> None:
    scene = hostile_scene(tmp_path, canary)
    server = Server(scene.target, scene.home)

    def corpus() -> None:
        for template in COMMON + CLICKHOUSE_ONLY:
            check_call(server, scene, scene.fill(template), LIMITS)

    played(server, scene, scene.listing(), corpus, scene.engine)


CLICKHOUSE_WORDS = [
    "SETTINGS", "readonly", "=", "0", "max_execution_time", "FORMAT", "CSV", "INTO", "OUTFILE", "'{outside}.gen'",
    "file('/etc/passwd', 'LineAsString')", "url('http://127.0.0.1:{canary}/g', 'CSV', 'a String')",
    "remote('127.0.0.1:{canary}', system.one)", "system.disks", "numbers(100000000000)", "dictGet('d', 'v', 1)",
    "SET", "KILL", "QUERY", "SYSTEM", "FINAL", "ARRAY", "JOIN", "`system`.`settings`",
    "executable('ls', 'TSV', 'a String')",
]  # fmt: skip
"""ClickHouse's own words, added to the generated statements' words."""


def test_generated_corpus_through_the_mcp_server(chdb_required: str, tmp_path: Path, canary: Canary) -> None:
    """Token soups of every engine's hostile words and ClickHouse's, with test_agent_hostile's checks."""
    scene = hostile_scene(tmp_path, canary)
    server = Server(scene.target, scene.home)
    listing = scene.listing()

    @settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(WORDS + CLICKHOUSE_WORDS), min_size=1, max_size=10).map(" ".join))
    def soup(template: str) -> None:
        check_call(server, scene, scene.fill(template), LIMITS)

    played(server, scene, listing, soup, scene.engine)
