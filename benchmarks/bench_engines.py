"""Raw vs guarded on each engine: SQLite, DuckDB, PostgreSQL, MariaDB and ClickHouse (chDB), same process.

Workloads per engine, each ``execute(sql, params)`` then ``fetchall()``, raw and guarded runs
interleaved, reporting the median of per-pair ratios and the median overhead per query:

1. a 1-row point query by primary key;
2. 100 rows;
3. 100,000 rows (INTEGER, INTEGER, TEXT);
4. a join explosion of 100,000 rows with 10 distinct values (patch mode: flagged and patched).

PostgreSQL runs against a throwaway server started with ``tests/pg_server.py``, MariaDB against one
started with ``tests/mariadb_server.py`` (each skipped, with a message, when its server binaries are
missing). ClickHouse runs on chDB in a temporary folder (MergeTree tables ordered by their id; skipped
when chdb, the ``[clickhouse]`` extra, is not installed). Run from the repository root:
``.venv/bin/python benchmarks/bench_engines.py [--quick] [--engine NAME ...]``.
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import guarded_sqlite  # noqa: E402  (found through the sys.path entry above)

ROWS = 100_000


class Engine:
    """How to open, fill and query one engine, raw and guarded."""

    def __init__(
        self, name: str, raw: Any, placeholder: str, run: Callable[[Any, str, tuple[Any, ...]], list[Any]]
    ) -> None:
        self.name, self.raw, self.placeholder, self.run = name, raw, placeholder, run
        self.guarded = guarded_sqlite.wrap(raw)

    def sql(self, text: str) -> str:
        return text.replace("?", self.placeholder)


def _fill(
    execute: Callable[[str], Any], insert_many: Callable[[str, list[tuple[Any, ...]]], Any], placeholder: str
) -> None:
    execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b TEXT)")
    insert_many(
        f"INSERT INTO t VALUES ({placeholder}, {placeholder}, {placeholder})", [(i, i % 7, str(i)) for i in range(ROWS)]
    )
    execute("CREATE TABLE g (id INTEGER PRIMARY KEY, grp INTEGER)")
    insert_many(f"INSERT INTO g VALUES ({placeholder}, {placeholder})", [(i, i % 10) for i in range(1000)])
    execute("CREATE TABLE k (id INTEGER PRIMARY KEY)")
    insert_many(f"INSERT INTO k VALUES ({placeholder})", [(i,) for i in range(100)])


@contextmanager
def sqlite_engine() -> Iterator[Engine]:
    raw = sqlite3.connect(":memory:")
    _fill(raw.execute, raw.executemany, "?")
    raw.commit()

    def run(con: Any, sql: str, params: tuple[Any, ...]) -> list[Any]:
        cur = con.cursor()
        cur.execute(sql, params)
        return cur.fetchall()

    yield Engine("SQLite", raw, "?", run)


@contextmanager
def duckdb_engine() -> Iterator[Engine]:
    import duckdb

    raw = duckdb.connect()
    _fill(raw.execute, raw.executemany, "?")

    def run(con: Any, sql: str, params: tuple[Any, ...]) -> list[Any]:
        return con.execute(sql, params).fetchall()  # type: ignore[no-any-return]

    yield Engine("DuckDB", raw, "?", run)


@contextmanager
def postgres_engine() -> Iterator[Engine | None]:
    sys.path.insert(0, str(ROOT / "tests"))
    from pg_server import postgres_server, server_binaries

    if server_binaries() is None:
        print("PostgreSQL server binaries not found: skipping PostgreSQL", file=sys.stderr)
        yield None
        return
    import psycopg

    with postgres_server() as dsn:
        raw = psycopg.connect(dsn, autocommit=True)
        with raw.cursor() as cur:
            _fill(cur.execute, cur.executemany, "%s")
            cur.execute("ANALYZE")

        def run(con: Any, sql: str, params: tuple[Any, ...]) -> list[Any]:
            with con.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()  # type: ignore[no-any-return]

        yield Engine("PostgreSQL", raw, "%s", run)
        raw.close()


@contextmanager
def mariadb_engine() -> Iterator[Engine | None]:
    sys.path.insert(0, str(ROOT / "tests"))
    from mariadb_server import mariadb_server, server_binaries

    if server_binaries() is None:
        print("MariaDB server binary (mariadbd) not found: skipping MariaDB", file=sys.stderr)
        yield None
        return
    import pymysql

    with mariadb_server() as params:
        admin = pymysql.connect(**params, autocommit=True)
        admin.cursor().execute("CREATE DATABASE bench")
        admin.close()
        raw = pymysql.connect(**params, database="bench", autocommit=True)
        cur = raw.cursor()
        _fill(cur.execute, cur.executemany, "%s")
        cur.execute("ANALYZE TABLE t, g, k")

        def run(con: Any, sql: str, params: tuple[Any, ...]) -> list[Any]:
            with con.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()  # type: ignore[no-any-return]

        yield Engine("MariaDB", raw, "%s", run)
        raw.close()


@contextmanager
def clickhouse_engine() -> Iterator[Engine | None]:
    import tempfile

    try:
        from chdb import dbapi
    except ImportError:
        print("chdb is not installed (pip install 'guarded_sqlite[clickhouse]'): skipping ClickHouse", file=sys.stderr)
        yield None
        return
    with tempfile.TemporaryDirectory() as folder:
        raw = dbapi.connect(folder)
        cur = raw.cursor()
        for sql in (
            "CREATE TABLE t (id Int64, a Int64, b String) ENGINE = MergeTree ORDER BY id",
            f"INSERT INTO t SELECT number, number % 7, toString(number) FROM numbers({ROWS})",
            "CREATE TABLE g (id Int64, grp Int64) ENGINE = MergeTree ORDER BY id",
            "INSERT INTO g SELECT number, number % 10 FROM numbers(1000)",
            "CREATE TABLE k (id Int64) ENGINE = MergeTree ORDER BY id",
            "INSERT INTO k SELECT number FROM numbers(100)",
        ):
            cur.execute(sql)

        def run(con: Any, sql: str, params: tuple[Any, ...]) -> list[Any]:
            cur = con.cursor()
            cur.execute(sql, params)
            return list(cur.fetchall())

        yield Engine("ClickHouse (chDB)", raw, "%s", run)
        raw.close()


ENGINES = {
    "sqlite": sqlite_engine,
    "duckdb": duckdb_engine,
    "postgres": postgres_engine,
    "mariadb": mariadb_engine,
    "clickhouse": clickhouse_engine,
}

WORKLOADS = [
    ("1-row point query", "SELECT * FROM t WHERE id = ?", (5,), 2000),
    ("100 rows", "SELECT * FROM t WHERE id < ?", (100,), 300),
    ("100,000 rows", "SELECT * FROM t WHERE id < ?", (ROWS,), 8),
    ("100,000-row join explosion (patched)", "SELECT g.grp FROM g, k WHERE g.id >= ?", (0,), 8),
]


def measure(engine: Engine, sql: str, params: tuple[Any, ...], repeats: int) -> tuple[float, float, float]:
    """Median raw time, median guarded time (seconds) and median per-pair ratio."""
    raw_times, guarded_times, ratios = [], [], []
    for _ in range(repeats):
        pair = []
        for con in (engine.raw, engine.guarded):
            started = time.perf_counter()
            engine.run(con, sql, params)
            pair.append(time.perf_counter() - started)
        raw_times.append(pair[0])
        guarded_times.append(pair[1])
        ratios.append(pair[1] / pair[0])
    return statistics.median(raw_times), statistics.median(guarded_times), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, not for quoting)")
    parser.add_argument(
        "--engine", action="append", choices=sorted(ENGINES), help="only these engines (repeatable; default: all)"
    )
    args = parser.parse_args()
    print(
        f"Machine: {platform.machine()}, Python {platform.python_version()}; raw and guarded interleaved in one "
        "process; medians; shared, noisy machine: quote ratios.\n"
    )
    print("| engine | workload | raw | guarded | ratio (median of pairs) | overhead per query |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.engine or list(ENGINES):
        factory = ENGINES[name]
        with factory() as engine:
            if engine is None:
                continue
            for label, text, params, repeats in WORKLOADS:
                sql = engine.sql(text)
                if args.quick:
                    repeats = max(3, repeats // 10)
                for _ in range(3):  # warm-up: caches, first parse, first sqlglot import
                    engine.run(engine.raw, sql, params)
                    engine.run(engine.guarded, sql, params)
                raw_s, guarded_s, ratio = measure(engine, sql, params, repeats)
                overhead = (guarded_s - raw_s) * 1e6
                unit = (lambda s: f"{s * 1e6:.1f} µs") if raw_s < 1e-3 else (lambda s: f"{s * 1e3:.2f} ms")
                print(
                    f"| {engine.name} | {label} | {unit(raw_s)} | {unit(guarded_s)} "
                    f"| {ratio:.3f} | {overhead:,.1f} µs |"
                )


if __name__ == "__main__":
    main()
