"""Repro r40 (``../shared/repros/reliability/r40_rows_retained_after_fetchall.py``): a guarded cursor lets
go of its buffered rows as soon as every one of them has been served, as sqlite3 keeps no row it handed
out, in every fetch style, on ``connect()``'s cursors and on ``wrap()``'s proxies over SQLite, DuckDB
and PostgreSQL.

How a test tells: the rows are fresh tuples made by the driver, so once the caller drops the list,
``sys.getrefcount`` of a row it kept counts only the caller's own name for it (and the calls'
arguments). A buffer list, or the probe's set of distinct rows, still holding the row adds one.

A large healthy result (2,048 rows or more) is counted only until the probe is sure it is no
explosion (``probe.PartialCount``); its exact count is finished while the rows are still buffered, so
a report read before the last row is served is exact, and one read after says so in ``note``.
"""

from __future__ import annotations

import gc
import re
import sqlite3
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import guarded_sqlite

LARGE = 5_000  # past the probe's small-result limit (2,048 rows): the distinct count stops early
SMALL = 100

SERIES = {
    "sqlite": "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) "
    "SELECT i, 'name-' || i FROM s",
    "duckdb": "SELECT i, 'name-' || i FROM range(1, {n} + 1) t(i)",
    "postgres": "SELECT i, 'name-' || i FROM generate_series(1, {n}) AS i",
}
CONNECTIONS = ["connect", "wrap-sqlite", "wrap-duckdb", "wrap-postgres"]


@pytest.fixture(params=CONNECTIONS)
def guarded(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """(engine, a guarded connection) for each way a connection is guarded."""
    kind = request.param
    if kind == "connect":
        con: Any = guarded_sqlite.connect(":memory:")
        engine = "sqlite"
    elif kind == "wrap-sqlite":
        con = guarded_sqlite.wrap(sqlite3.connect(":memory:"))
        engine = "sqlite"
    elif kind == "wrap-duckdb":
        duckdb = pytest.importorskip("duckdb")
        con = guarded_sqlite.wrap(duckdb.connect())
        engine = "duckdb"
    else:
        import psycopg

        con = guarded_sqlite.wrap(psycopg.connect(request.getfixturevalue("pg_dsn"), autocommit=True))
        engine = "postgres"
    try:
        yield engine, con
    finally:
        con.close()


def _cursor(con: Any, engine: str, rows: int) -> Any:
    cur = con.cursor()
    cur.execute(SERIES[engine].format(n=rows))
    return cur


def _fetchall(cur: Any, rows: int) -> list[Any]:
    served: list[Any] = cur.fetchall()
    return served


def _fetchmany_to_the_end(cur: Any, rows: int) -> list[Any]:
    served: list[Any] = []
    while len(served) < rows:  # exactly to the last row: no call that comes back empty
        served += cur.fetchmany(rows // 4)
    return served


def _fetchone_to_the_end(cur: Any, rows: int) -> list[Any]:
    return [cur.fetchone() for _ in range(rows)]  # the last call returns the last row, not None


def _iterate(cur: Any, rows: int) -> list[Any]:
    return [row for row in cur]


STYLES: dict[str, Callable[[Any, int], list[Any]]] = {
    "fetchall": _fetchall,
    "fetchmany": _fetchmany_to_the_end,
    "fetchone": _fetchone_to_the_end,
    "iterate": _iterate,
}


def _held_elsewhere(row: Any) -> int:
    """References to ``row`` besides the caller's name for it, this function's and getrefcount's argument."""
    return sys.getrefcount(row) - 3


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["small", "large"])
@pytest.mark.parametrize("style", list(STYLES))
def test_rows_are_released_once_every_one_was_served(guarded: tuple[str, Any], style: str, size: int) -> None:
    engine, con = guarded
    cur = _cursor(con, engine, size)
    served = STYLES[style](cur, size)
    assert len(served) == size and served[0][0] == 1 and served[-1][0] == size
    # The first row went into the probe's set; the last is the one the buffer held longest.
    first, last = served[0], served[-1]
    del served
    gc.collect()
    assert (_held_elsewhere(first), _held_elsewhere(last)) == (0, 0)
    assert cur.fetchone() is None  # and the cursor still behaves as exhausted
    report = cur.guard_report
    assert (report.trigger, report.rows, report.action) == (None, size, "none")


@pytest.mark.parametrize("style", list(STYLES))
def test_a_report_read_before_the_last_row_is_exact_and_one_read_after_says_why_not(
    guarded: tuple[str, Any], style: str
) -> None:
    engine, con = guarded
    early = _cursor(con, engine, LARGE)
    report = early.guard_report
    STYLES[style](early, LARGE)
    assert early.guard_report is report
    assert (report.unique_rows, report.dup_ratio, report.note) == (LARGE, 0.0, None)

    late = _cursor(con, engine, LARGE)
    STYLES[style](late, LARGE)
    report = late.guard_report
    assert (report.rows, report.unique_rows, report.dup_ratio, report.trigger) == (LARGE, None, None, None)
    bound = re.search(r"at least ([\d,]+) of 5,000 rows are distinct", report.note or "")
    assert bound is not None and 0.2 * LARGE < int(bound.group(1).replace(",", "")) <= LARGE


def test_a_loop_re_executing_on_its_last_row_still_continues_with_the_new_rows() -> None:
    """The handed-out iterator at its last row keeps the buffer (sqlite3's loop goes on with the next
    statement's rows); once the loop ends, the rows are released."""
    con = guarded_sqlite.connect(":memory:")
    raw = sqlite3.connect(":memory:")
    sql = SERIES["sqlite"]
    for connection in (con, raw):
        cur = connection.cursor()
        cur.execute(sql.format(n=LARGE))
        seen = []
        for row in cur:
            seen.append(row)
            if row[0] == LARGE:
                cur.execute(sql.format(n=3))
        assert [r[0] for r in seen] == [*range(1, LARGE + 1), 1, 2, 3]
        last = seen[-1]
        del seen, row
        gc.collect()
        assert _held_elsewhere(last) == 0


def test_closing_the_cursor_releases_a_pending_count() -> None:
    con = guarded_sqlite.connect(":memory:")
    cur = _cursor(con, "sqlite", LARGE)
    first = cur.fetchone()
    cur.close()
    gc.collect()
    assert _held_elsewhere(first) == 0
    assert cur.guard_report.unique_rows is None


@pytest.mark.parametrize("how", ["fetchall", "iterate"])
def test_r40_guard_holds_nothing_after_the_caller_drops_the_rows(how: str) -> None:
    """r40's scenario (at a quarter of its 200,000 rows): after ``rows = cur.fetchall(); del rows``,
    with the cursor still open, the guard holds under 10% of the result (sqlite3 holds nothing)."""
    con = guarded_sqlite.connect(":memory:")
    con.execute("CREATE TABLE a (id INTEGER PRIMARY KEY, name TEXT)")
    con.executemany("INSERT INTO a(name) VALUES (?)", [(f"name-{i}",) for i in range(50_000)])
    con.commit()
    cur = con.cursor()
    gc.collect()
    tracemalloc.start()
    try:
        cur.execute("SELECT id, name FROM a")
        rows = cur.fetchall() if how == "fetchall" else [r for r in cur]
        size = tracemalloc.get_traced_memory()[0]
        del rows
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert size > 5_000_000
    assert held < 0.1 * size, f"{held:,} of {size:,} bytes still held"
    assert cur.guard_report.rows == 50_000
