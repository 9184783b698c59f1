"""Drop-in parity, fetching: iteration, fetchone/fetchmany/fetchall (arraysize, odd sizes, before any
execute, after exhaustion), re-execution, description, rowcount, lastrowid, DML with RETURNING (and
the documented fetch-once difference in its rowcount), cursor attributes and blobopen.

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection
from tests.helpers import (
    HEALTHY_QUERIES,
    list_factory,
    outcome,
    run,
)


@pytest.mark.parametrize(("sql", "params"), HEALTHY_QUERIES)
def test_iteration_matches_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, sql: str, params: Any
) -> None:
    """``for row in cur`` yields sqlite3's rows in sqlite3's order."""
    assert [row for row in run(guarded_items.cursor(), sql, params)] == [
        row for row in run(raw_items.cursor(), sql, params)
    ]


def test_mixed_fetch_calls_share_one_position(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """next(), fetchone, fetchmany, iteration and fetchall continue where the previous call stopped."""
    sql = "SELECT id, name FROM items ORDER BY id"

    def script(cur: Any) -> list[Any]:
        cur.execute(sql)
        seen: list[Any] = [next(cur), cur.fetchone(), cur.fetchmany(3), cur.fetchmany(size=2)]
        for row in cur:
            seen.append(("loop", row))
            if row[0] >= 12:
                break
        seen += [cur.fetchone(), next(cur), cur.fetchall()]
        seen += [cur.fetchone(), cur.fetchall(), cur.fetchmany(), cur.fetchmany(5), list(cur)]
        seen.append(outcome(lambda: next(cur)))
        return seen

    assert script(guarded_items.cursor()) == script(raw_items.cursor())


def test_fetchmany_honours_arraysize(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """``fetchmany()`` without a size returns ``arraysize`` rows at a time, default 1."""

    def chunks(cur: Any) -> list[Any]:
        cur.execute("SELECT id FROM items ORDER BY id")
        seen = [cur.arraysize, cur.fetchmany()]
        cur.arraysize = 7
        while chunk := cur.fetchmany():
            seen.append(chunk)
        seen.append(cur.arraysize)
        return seen

    raw_chunks, guarded_chunks = chunks(raw_items.cursor()), chunks(guarded_items.cursor())
    assert guarded_chunks == raw_chunks
    assert [len(c) for c in raw_chunks[2:-1]] == [7, 7, 7, 7, 1]


@pytest.mark.parametrize("size", [0, -1, -5])
def test_fetchmany_zero_and_negative_sizes_match_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, size: int
) -> None:
    """sqlite3's fetchmany(n) stops only when it has counted n rows, so n <= 0 returns every remaining row."""
    sql = "SELECT id FROM items ORDER BY id"
    raw_cur, cur = raw_items.execute(sql), guarded_items.execute(sql)
    assert cur.fetchone() == raw_cur.fetchone()
    assert cur.fetchmany(size) == raw_cur.fetchmany(size)
    assert cur.fetchall() == raw_cur.fetchall()


@pytest.mark.parametrize("arraysize", [0, -1])
def test_fetchmany_with_zero_or_negative_arraysize_matches_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, arraysize: int
) -> None:
    """sqlite3 accepts ``arraysize = 0`` or negative; ``fetchmany()`` then returns every remaining row."""
    results = []
    for con in (raw_items, guarded_items):
        cur = con.cursor()
        cur.arraysize = arraysize
        cur.execute("SELECT id FROM items ORDER BY id")
        results.append((cur.fetchmany(), cur.fetchall()))
    assert results[1] == results[0]


@pytest.mark.parametrize("size", [None, "3", 2.5], ids=["None", "str", "float"])
def test_fetchmany_rejects_bad_sizes_like_sqlite3(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection, size: Any
) -> None:
    """A size that is not an int raises sqlite3's TypeError, and the rows stay unconsumed."""
    sql = "SELECT id FROM items ORDER BY id"
    raw_cur, cur = raw_items.execute(sql), observe_items.execute(sql)
    assert outcome(lambda: cur.fetchmany(size)) == outcome(lambda: raw_cur.fetchmany(size))
    assert cur.fetchall() == raw_cur.fetchall()


def test_fetch_before_any_execute(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """A fresh cursor has no rows, no description, rowcount -1, lastrowid None."""

    def fresh(cur: Any) -> list[Any]:
        return [
            cur.description,
            cur.rowcount,
            cur.lastrowid,
            cur.arraysize,
            cur.fetchone(),
            cur.fetchall(),
            cur.fetchmany(),
            cur.fetchmany(3),
            list(cur),
            outcome(lambda: next(cur)),
        ]

    guarded_fresh = fresh(guarded_items.cursor())
    assert guarded_fresh == fresh(raw_items.cursor())
    assert guarded_fresh[0] is None and guarded_fresh[1] == -1 and guarded_fresh[2] is None


def test_fetch_after_exhaustion(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """Once a result is used up every fetch returns nothing and next() raises StopIteration."""

    def drained(cur: Any, how: str) -> list[Any]:
        cur.execute("SELECT id FROM items WHERE id <= 3")
        first = cur.fetchall() if how == "fetchall" else list(cur) if how == "iterate" else cur.fetchmany(100)
        return [first, cur.fetchone(), cur.fetchall(), cur.fetchmany(2), list(cur), outcome(lambda: next(cur))]

    for how in ("fetchall", "iterate", "fetchmany"):
        assert drained(guarded_items.cursor(), how) == drained(raw_items.cursor(), how), how


def test_reexecute_discards_the_previous_result(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection
) -> None:
    """Executing again on a half-read cursor serves only the new statement's rows."""

    def twice(cur: Any) -> list[Any]:
        cur.execute("SELECT id FROM items ORDER BY id")
        first = cur.fetchmany(4)
        cur.execute("SELECT name FROM items WHERE id > ? ORDER BY id", (25,))
        return [first, cur.description, cur.fetchall()]

    assert twice(guarded_items.cursor()) == twice(raw_items.cursor())


def test_for_loop_follows_a_reexecute_like_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection
) -> None:
    """sqlite3's ``iter(cur)`` is the cursor itself, so a for-loop that re-executes its cursor goes on
    with the new statement's rows. The guarded iterator is the buffer's (documented: loops run at C
    speed), but execute() redirects it, so the loop sees the same rows."""

    def loop(cur: Any) -> list[Any]:
        seen = []
        cur.execute("SELECT id FROM items WHERE id <= 3 ORDER BY id")
        for row in cur:
            seen.append(row)
            if row == (1,):
                cur.execute("SELECT name FROM items WHERE id > 27 ORDER BY id")
        return seen

    assert loop(guarded_items.cursor()) == loop(raw_items.cursor())
    guarded = guarded_items.cursor().execute("SELECT 1")
    assert iter(guarded) is not guarded  # the documented difference


def test_row_factory_is_taken_when_the_cursor_is_made(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection
) -> None:
    """As in sqlite3, a cursor keeps the row_factory the connection had when the cursor was created."""
    results = []
    for con in (raw_items, guarded_items):
        before = con.cursor()
        con.row_factory = list_factory
        after = con.cursor()
        sql = "SELECT id FROM items WHERE id <= 2 ORDER BY id"
        results.append((before.execute(sql).fetchall(), after.execute(sql).fetchall(), con.execute(sql).fetchall()))
    assert results[1] == results[0]
    assert results[0][0] == [(1,), (2,)] and results[0][1] == [[1], [2]]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM items",
        "SELECT id AS \"the id\", name || '!' AS shout, 1 + 1, NULL FROM items",
        "SELECT * FROM items WHERE 0",
        "PRAGMA table_info(items)",
        "INSERT INTO items (name) VALUES ('d')",
        "CREATE TABLE d (x)",
    ],
)
def test_description_matches_sqlite3(raw_items: sqlite3.Connection, guarded_items: GuardedConnection, sql: str) -> None:
    """``description`` has sqlite3's 7-tuples for row-returning statements and is None otherwise."""
    assert guarded_items.execute(sql).description == raw_items.execute(sql).description


def test_rowcount_matches_sqlite3(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """rowcount: -1 for SELECT, affected rows for INSERT/UPDATE/DELETE, summed for executemany."""

    def counts(con: Any) -> list[int]:
        cur = con.cursor()
        seen = []
        for sql, params in [
            ("SELECT * FROM items", ()),
            ("INSERT INTO items (name) VALUES (?)", ("new",)),
            ("UPDATE items SET qty = qty + 1 WHERE id <= ?", (10,)),
            ("UPDATE items SET qty = 0 WHERE id < 0", ()),
            ("DELETE FROM items WHERE id > ?", (25,)),
            ("SELECT * FROM items WHERE id = 1", ()),
            ("CREATE TABLE z (x)", ()),
        ]:
            cur.execute(sql, params)
            seen.append(cur.rowcount)
            cur.fetchall()
            seen.append(cur.rowcount)
        cur.executemany("UPDATE items SET note = ? WHERE id = ?", [("a", 1), ("b", 2), ("c", 999)])
        seen.append(cur.rowcount)
        cur.executemany("INSERT INTO z VALUES (?)", ((i,) for i in range(4)))
        seen.append(cur.rowcount)
        cur.executescript("INSERT INTO z VALUES (1); INSERT INTO z VALUES (2);")
        seen.append(cur.rowcount)
        return seen

    raw_counts = counts(raw_items)
    assert counts(guarded_items) == raw_counts
    assert raw_counts[:6] == [-1, -1, 1, 1, 10, 10]


def test_lastrowid_matches_sqlite3(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """lastrowid follows INSERTs (and REPLACE), is kept across a SELECT, and works after executemany."""

    def ids(con: Any) -> list[Any]:
        cur = con.cursor()
        seen = [cur.lastrowid]
        cur.execute("INSERT INTO items (name) VALUES ('a')")
        seen.append(cur.lastrowid)
        cur.execute("SELECT * FROM items")
        seen.append(cur.lastrowid)
        cur.execute("INSERT OR REPLACE INTO items (id, name) VALUES (5, 'five')")
        seen.append(cur.lastrowid)
        cur.executemany("INSERT INTO items (name) VALUES (?)", [("b",), ("c",)])
        seen.append(cur.lastrowid)
        seen.append(con.execute("INSERT INTO items (name) VALUES ('d')").lastrowid)
        return seen

    assert ids(guarded_items) == ids(raw_items)


def test_dml_returning_matches_sqlite3(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """``UPDATE ... RETURNING`` with many equal rows is flagged in patch mode, but DML is never rewritten
    or run twice: the rows, rowcount and the table's contents match sqlite3."""
    sql = "UPDATE items SET qty = 1 WHERE id <= 20 RETURNING qty"
    raw_cur, cur = raw_items.execute(sql), guarded_items.execute(sql)
    assert cur.fetchall() == raw_cur.fetchall() == [(1,)] * 20
    assert cur.rowcount == raw_cur.rowcount == 20
    assert cur.guard_report is not None and cur.guard_report.action == "none"
    check = "SELECT id, qty FROM items ORDER BY id"
    assert guarded_items.execute(check).fetchall() == raw_items.execute(check).fetchall()


def test_fetch_once_difference_dml_returning_rowcount_is_final_right_after_execute(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection
) -> None:
    """Fetch once, pinned: sqlite3 counts RETURNING rows as they are fetched; the guarded cursor has
    fetched them all during execute(), so rowcount is final at once. After fetching, both agree."""
    sql = "UPDATE items SET qty = 2 WHERE id <= 5 RETURNING id"
    raw_cur, cur = raw_items.execute(sql), observe_items.execute(sql)
    assert raw_cur.rowcount == 0  # sqlite3: nothing counted until the rows are stepped
    assert cur.rowcount == 5  # guarded: every row was stepped by execute()
    raw_cur.fetchall()
    cur.fetchall()
    assert cur.rowcount == raw_cur.rowcount == 5


def test_cursor_attributes_pass_through(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """setinputsizes/setoutputsize are accepted and arraysize is stored on the real cursor."""
    cur = guarded_items.cursor()
    cur.setinputsizes([1, 2])
    cur.setoutputsize(10, 0)
    cur.arraysize = 3
    assert guarded_sqlite.unwrap(cur).arraysize == 3
    assert cur.execute("SELECT id FROM items ORDER BY id").fetchmany() == [(1,), (2,), (3,)]


def test_blobopen_passes_through(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """Incremental blob I/O (``con.blobopen``) reads the same bytes."""
    if not hasattr(sqlite3.Connection, "blobopen"):
        pytest.skip("sqlite3.Connection.blobopen needs Python 3.11")
    with raw_items.blobopen("items", "payload", 4) as raw_blob, guarded_items.blobopen("items", "payload", 4) as blob:
        assert blob.read() == raw_blob.read() == bytes([4, 5])
