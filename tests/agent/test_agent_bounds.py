"""Bounds and reads the second review measured again (issue 36 item 5; no repro id of their own):
column names counted against ``max_chars``, disk during a read-only call (SQLite's temporary store in
the worker's capped heap, DuckDB's spill capped and in a folder the worker's parent removes),
``setseed`` not carried into later calls, reads that were refused as writes, and absolute paths that
catalog functions disclosed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from guarded_sqlite.agent import GuardedDatabase, QueryRefused
from guarded_sqlite.agent.isolation import IsolatedDatabase


@pytest.fixture
def duck(tmp_path: Path) -> Path:
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "shop.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers SELECT i, 'name ' || i FROM range(50) t(i)")
    con.close()
    return path


@pytest.fixture
def tmpdir_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """TMPDIR for this test (and the worker it starts) in a folder the test can list."""
    import tempfile

    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    yield folder
    tempfile.tempdir = None


def refusal(db: GuardedDatabase, sql: str) -> QueryRefused:
    with pytest.raises(QueryRefused) as refused:
        db.query(sql)
    return refused.value


def test_column_names_count_against_max_chars(duck: Path) -> None:
    """A 68-character statement built a 30 MB column name in DuckDB's query(): the names are counted
    before any row is fetched."""
    with GuardedDatabase.open(duck, max_chars=10_000) as db:
        refused = refusal(db, "SELECT * FROM query('SELECT 1 AS \"' || repeat('x', 3000000) || '\"')")
        assert refused.kind == "too_large" and "column names" in str(refused)
        many = ", ".join(f"1 AS {'n' * 60}{i}" for i in range(200))  # 12 KB of names, one row of ones
        assert refusal(db, f"SELECT {many}").kind == "too_large"
        assert db.query("SELECT id AS short FROM customers LIMIT 2").rows == ((0,), (1,))


def test_a_sqlite_sort_spills_into_the_worker_s_capped_heap_not_onto_disk(
    tmp_path: Path, tmpdir_of_its_own: Path
) -> None:
    """SQLite sorted 3,000,000 rows through TMPDIR (503 MiB in 5 s): the worker keeps temporary data in
    memory (temp_store) under a 64 MiB hard heap limit, so the sort is refused as too large and no file
    is written."""
    path = tmp_path / "shop.db"
    sqlite3.connect(path).close()
    big_sort = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 3000000) "
        "SELECT i, printf('%.*c', 50, 'x') FROM n ORDER BY random() LIMIT 201"
    )
    with GuardedDatabase.open(path, timeout=20) as db:
        refused = refusal(db, big_sort.replace("LIMIT 201", ""))
        assert refused.kind in ("too_large", "timeout"), str(refused)
        assert db.query("SELECT count(*) FROM pragma_temp_store WHERE temp_store = 2").rows == ((1,),)
        assert db.query("SELECT 1").rows == ((1,),)
        worker_tmp = [entry for entry in tmpdir_of_its_own.iterdir()]
        assert all(entry.name.startswith("guarded-sqlite-worker-") for entry in worker_tmp)
        assert all(not any(entry.iterdir()) for entry in worker_tmp), "a temporary file was written"
    assert list(tmpdir_of_its_own.iterdir()) == []


def test_duckdb_spill_is_capped_and_removed_when_its_worker_is_killed(duck: Path, tmpdir_of_its_own: Path) -> None:
    """DuckDB's spill went to <db>.duckdb.tmp/ without a cap and stayed there (542 MB) when the worker
    was killed: it is capped (max_temp_directory_size) and in the worker's own folder, which its parent
    removes however the worker ended."""
    with GuardedDatabase.open(duck, isolated=False) as local:
        settings = local.connection.__wrapped__.execute(
            "SELECT current_setting('max_temp_directory_size'), current_setting('temp_directory')"
        ).fetchone()
        assert settings[0] != "" and not settings[1].startswith(str(duck))
        assert Path(settings[1]).parent == tmpdir_of_its_own
    with GuardedDatabase.open(duck) as db:
        assert isinstance(db, IsolatedDatabase) and db._worker is not None
        scratch = Path(db._worker.scratch)
        assert scratch.parent == tmpdir_of_its_own
        (scratch / "guarded-sqlite-duckdb-1-spill").mkdir()
        (scratch / "guarded-sqlite-duckdb-1-spill" / "duckdb_temp_block").write_bytes(b"x" * 4096)
        os.kill(db._worker.process.pid, signal.SIGKILL)
        db._worker.process.wait(10)
        assert db.query("SELECT count(*) FROM customers").rows == ((50,),)  # a new worker, the old one's folder gone
        assert not scratch.exists()
    assert list(tmpdir_of_its_own.iterdir()) == []
    assert not Path(str(duck) + ".tmp").exists()


@pytest.mark.parametrize("isolated", [False, True])
def test_duckdb_setseed_does_not_carry_into_the_next_call(duck: Path, isolated: bool) -> None:
    duckdb = pytest.importorskip("duckdb")
    seeded = duckdb.connect()
    seeded.execute("SELECT setseed(0.3)")
    expected = seeded.execute("SELECT random()").fetchone()
    with GuardedDatabase.open(duck, isolated=isolated) as db:
        db.query("SELECT setseed(0.3)")
        assert db.query("SELECT random()").rows != (expected,)


READS = [
    "DESCRIBE customers",
    "SHOW TABLES",
    "SUMMARIZE customers",
    "FROM customers LIMIT 1",
    "SELECT 1 AS replace",
    "SELECT name AS replace FROM customers LIMIT 1",
    "SELECT replace(name, 'name', 'n') FROM customers LIMIT 1",
    "SELECT * REPLACE (id + 1 AS id) FROM customers LIMIT 1",
]


@pytest.mark.parametrize("sql", READS)
def test_duckdb_reads_are_answered(duck: Path, sql: str) -> None:
    with GuardedDatabase.open(duck, isolated=False) as db:
        assert db.query(sql).rows
        assert refusal(db, "DELETE FROM customers").kind == "write"
        assert refusal(db, "EXPLAIN SELECT 1").kind == "write"


def test_sqlite_replace_is_a_function_and_a_name(shop: Path) -> None:
    with GuardedDatabase.open(shop, isolated=False) as db:
        assert db.query("SELECT replace(name, 'Ana', 'A') AS replace FROM customers WHERE id = 1").rows == (
            ("A Lima",),
        )
        assert refusal(db, "REPLACE INTO customers(id, name) VALUES (1, 'x')").kind == "write"
        assert refusal(db, "WITH c AS (SELECT 1) REPLACE INTO customers(id) SELECT * FROM c").kind == "write"


def test_paths_are_not_disclosed(shop: Path, duck: Path) -> None:
    with GuardedDatabase.open(shop) as lite:
        assert lite.query("SELECT name, file FROM pragma_database_list").rows == (("main", None),)
    with GuardedDatabase.open(duck, read_only=True) as db:
        for sql in (
            "SELECT value FROM duckdb_settings() WHERE name = 'temp_directory'",
            "SELECT path FROM duckdb_databases()",
            "SELECT current_setting('home_directory')",
            'SELECT * FROM "duckdb_databases"()',
            "SELECT * FROM pragma_database_list",
        ):
            refused = refusal(db, sql)
            assert refused.kind == "denied" and str(duck) not in str(refused), sql
        assert db.query("SELECT 'duckdb_settings()' AS text").rows == (("duckdb_settings()",),)
