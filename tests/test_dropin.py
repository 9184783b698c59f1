"""Drop-in parity: everything ``sqlite3.Connection`` and ``sqlite3.Cursor`` do keeps working.

Wherever possible each test runs the same operations on a raw ``sqlite3`` connection and on a guarded
one holding the same data, and compares what comes back (values, exception class and message).
``guard="observe"`` must match sqlite3 exactly; ``guard="patch"`` must match on queries the probe does
not flag. The one intended difference (fetch once at execute) is pinned by tests whose names say so.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection, GuardedCursor, GuardPolicy

from .conftest import EXPLODING_SQL, fill_fanout

MODES = ("observe", "patch")
"""Modes that must give sqlite3's results on queries that are not flagged."""

NO_PARAMS: Any = object()
"""Sentinel: call execute() without a parameters argument."""

ITEMS_SCHEMA = """
CREATE TABLE items (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    qty INTEGER,
    price REAL,
    note TEXT,
    payload BLOB
);
"""
ITEM_COUNT = 30


def fill_items(con: sqlite3.Connection) -> None:
    """30 distinct rows with every storage class, some NULLs, nothing a probe would flag."""
    con.executescript(ITEMS_SCHEMA)
    con.executemany(
        "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)",
        [
            (i, f"name{i}", i % 7, i * 1.25, None if i % 3 else f"note {i}", bytes([i, i + 1]))
            for i in range(1, ITEM_COUNT + 1)
        ],
    )
    con.commit()


# Queries that are healthy (or empty) so patch mode must leave them exactly as sqlite3 returns them.
HEALTHY_QUERIES = [
    pytest.param("SELECT * FROM items ORDER BY id", NO_PARAMS, id="select-star"),
    pytest.param("SELECT id, name FROM items WHERE qty > ? ORDER BY name", (2,), id="qmark-params"),
    pytest.param("SELECT name, price FROM items WHERE id BETWEEN :lo AND :hi", {"lo": 3, "hi": 17}, id="named-params"),
    pytest.param("SELECT count(*), sum(qty), avg(price) FROM items", NO_PARAMS, id="aggregate"),
    pytest.param("SELECT id, note FROM items ORDER BY id DESC LIMIT 7", NO_PARAMS, id="limit"),
    pytest.param("SELECT id FROM items WHERE id < 0", NO_PARAMS, id="empty"),
    pytest.param("SELECT payload, id * 2 AS twice FROM items", (), id="blob-empty-tuple-params"),
]


def run(cursor: Any, sql: str, params: Any = NO_PARAMS) -> Any:
    return cursor.execute(sql) if params is NO_PARAMS else cursor.execute(sql, params)


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """What calling ``fn`` did: ("ok", value) or ("raised", exception class, message)."""
    try:
        return ("ok", fn())
    except Exception as error:
        return ("raised", type(error), str(error))


def guarded_connect(guard: Any = "observe", **kwargs: Any) -> GuardedConnection:
    con = guarded_sqlite.connect(":memory:", guard=guard, **kwargs)
    fill_items(con)
    return con


@pytest.fixture
def raw_items() -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(":memory:")
    fill_items(con)
    yield con
    con.close()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def guarded_items(mode: str) -> Iterator[GuardedConnection]:
    con = guarded_connect(mode)
    yield con
    con.close()


@pytest.fixture
def observe_items() -> Iterator[GuardedConnection]:
    con = guarded_connect("observe")
    yield con
    con.close()


# --------------------------------------------------------------------------------------------------
# Connection shortcuts, context manager, calling the connection, cursor.connection
# --------------------------------------------------------------------------------------------------


def test_proxies_pass_isinstance_checks(guarded_items: GuardedConnection) -> None:
    """Code that type-checks for sqlite3 objects accepts the proxies."""
    assert isinstance(guarded_items, sqlite3.Connection)
    assert isinstance(guarded_items, GuardedConnection)
    cur = guarded_items.cursor()
    assert isinstance(cur, sqlite3.Cursor)
    assert isinstance(cur, GuardedCursor)
    assert type(guarded_sqlite.unwrap(cur)) is sqlite3.Cursor


@pytest.mark.parametrize(("sql", "params"), HEALTHY_QUERIES)
def test_connection_execute_returns_guarded_cursor_with_sqlite3_rows(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, mode: str, sql: str, params: Any
) -> None:
    """``con.execute`` gives a guarded cursor that carries a report and serves sqlite3's rows."""
    cur = run(guarded_items, sql, params)
    assert isinstance(cur, GuardedCursor)
    report = cur.guard_report
    assert report is not None and report.sql == sql and report.mode == mode
    assert report.action == "none" and report.final_sql == sql
    assert cur.description == run(raw_items, sql, params).description
    assert cur.fetchall() == run(raw_items, sql, params).fetchall()


def test_cursor_execute_returns_the_cursor_itself(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection
) -> None:
    """``cur.execute(...)`` returns ``cur`` (chaining), and each ``con.execute`` makes a new cursor."""
    raw_cur, cur = raw_items.cursor(), guarded_items.cursor()
    assert raw_cur.execute("SELECT 1") is raw_cur
    assert cur.execute("SELECT 1") is cur
    assert guarded_items.execute("SELECT 1") is not guarded_items.execute("SELECT 1")


def test_executemany_shortcut(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """``con.executemany`` inserts like sqlite3, returns a guarded cursor, and reports it unprobed."""
    rows = [(100 + i, f"extra{i}") for i in range(5)]
    sql = "INSERT INTO items (id, name) VALUES (?, ?)"
    raw_cur = raw_items.executemany(sql, rows)
    cur = guarded_items.executemany(sql, iter(rows))  # any iterable works, as in sqlite3
    assert isinstance(cur, GuardedCursor)
    assert cur.rowcount == raw_cur.rowcount == 5
    assert cur.lastrowid == raw_cur.lastrowid
    assert cur.guard_report is not None
    assert cur.guard_report.probed is False and "executemany" in (cur.guard_report.note or "")
    check = "SELECT * FROM items ORDER BY id"
    assert guarded_items.execute(check).fetchall() == raw_items.execute(check).fetchall()


def test_executescript_shortcut(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """``con.executescript`` runs every statement like sqlite3 and returns a guarded cursor."""
    script = """
        CREATE TABLE extra (k TEXT PRIMARY KEY, v INTEGER);
        INSERT INTO extra VALUES ('a', 1), ('b', 2);
        UPDATE items SET qty = qty + 100 WHERE id <= 3;
    """
    raw_cur = raw_items.executescript(script)
    cur = guarded_items.executescript(script)
    assert isinstance(cur, GuardedCursor)
    assert cur.guard_report is not None and cur.guard_report.probed is False
    assert cur.description == raw_cur.description
    assert cur.fetchall() == raw_cur.fetchall()
    for check in ("SELECT * FROM extra ORDER BY k", "SELECT id, qty FROM items ORDER BY id"):
        assert guarded_items.execute(check).fetchall() == raw_items.execute(check).fetchall()


def test_cursor_connection_is_the_guarded_connection(guarded_items: GuardedConnection) -> None:
    """Every way of getting a cursor gives one whose ``.connection`` is the guarded connection."""

    class SubCursor(sqlite3.Cursor):
        pass

    cursors = [
        guarded_items.cursor(),
        guarded_items.cursor(SubCursor),
        guarded_items.cursor(factory=SubCursor),
        guarded_items.execute("SELECT 1"),
        guarded_items.executemany("INSERT INTO items (name) VALUES (?)", [("x",)]),
        guarded_items.executescript("SELECT 1;"),
    ]
    for cur in cursors:
        assert cur.connection is guarded_items


def test_with_connection_yields_it_and_commits(tmp_path: Any, mode: str) -> None:
    """``with con as c``: ``c is con``; a clean exit commits, visible to another connection."""
    outcomes = {}
    for side, opener in {"raw": sqlite3.connect, "guarded": lambda p: guarded_sqlite.connect(p, guard=mode)}.items():
        path = tmp_path / f"{side}.db"
        con = opener(str(path))
        con.execute("CREATE TABLE t (x INTEGER)")
        con.commit()
        with con as entered:
            assert entered is con
            entered.execute("INSERT INTO t VALUES (1)")
            assert con.in_transaction
        assert not con.in_transaction
        other = sqlite3.connect(str(path))
        outcomes[side] = other.execute("SELECT x FROM t").fetchall()
        other.close()
        con.close()
    assert outcomes["guarded"] == outcomes["raw"] == [(1,)]


def test_with_connection_rolls_back_on_error(tmp_path: Any, mode: str) -> None:
    """An exception inside ``with con`` rolls back and propagates, exactly as with sqlite3."""
    outcomes = {}
    for side, opener in {"raw": sqlite3.connect, "guarded": lambda p: guarded_sqlite.connect(p, guard=mode)}.items():
        con = opener(str(tmp_path / f"{side}.db"))
        con.execute("CREATE TABLE t (x INTEGER UNIQUE)")
        con.execute("INSERT INTO t VALUES (1)")
        con.commit()
        with pytest.raises(sqlite3.IntegrityError) as info:
            with con:
                con.execute("INSERT INTO t VALUES (2)")
                con.execute("INSERT INTO t VALUES (1)")  # violates UNIQUE
        outcomes[side] = (str(info.value), con.in_transaction, con.execute("SELECT x FROM t ORDER BY x").fetchall())
        con.close()
    assert outcomes["guarded"] == outcomes["raw"]
    assert outcomes["raw"][2] == [(1,)]


def test_exit_returns_what_sqlite3_returns(raw_items: sqlite3.Connection, observe_items: GuardedConnection) -> None:
    """``__exit__`` does not swallow exceptions: it returns sqlite3's (falsy) value."""
    error = ValueError("x")
    raw_items.__enter__()
    observe_items.__enter__()
    assert observe_items.__exit__(ValueError, error, None) == raw_items.__exit__(ValueError, error, None)
    assert not observe_items.__exit__(None, None, None)


@pytest.mark.parametrize(
    "sql",
    ["SELECT * FROM items", "SELEC 1", "SELECT * FROM nope", "SELECT 1; SELECT 2", 42],
    ids=["ok", "syntax", "no-table", "two-statements", "not-str"],
)
def test_calling_the_connection_behaves_like_sqlite3(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection, sql: Any
) -> None:
    """sqlite3 connections are callable (they compile a statement); the proxy forwards that call."""
    raw_out = outcome(lambda: type(raw_items(sql)))
    guarded_out = outcome(lambda: type(observe_items(sql)))
    assert guarded_out == raw_out


def test_connection_attributes_pass_through(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """Reading and setting connection attributes reaches the real connection."""
    for con in (raw_items, guarded_items):
        con.execute("UPDATE items SET qty = 0 WHERE id = 1")
    assert guarded_items.in_transaction is raw_items.in_transaction is True
    assert guarded_items.total_changes == raw_items.total_changes
    assert guarded_items.isolation_level == raw_items.isolation_level == ""
    guarded_items.rollback()
    guarded_items.isolation_level = None
    assert guarded_sqlite.unwrap(guarded_items).isolation_level is None
    guarded_items.execute("UPDATE items SET qty = 0 WHERE id = 1")
    assert not guarded_items.in_transaction  # autocommit now, like sqlite3 with isolation_level=None
    raw_items.commit()
    assert list(guarded_items.iterdump()) == list(raw_items.iterdump())


def test_trace_callback_sees_the_same_statements(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection
) -> None:
    """On healthy queries the guard runs nothing extra: a trace callback sees what sqlite3 runs."""
    traces: dict[str, list[str]] = {"raw": [], "guarded": []}
    raw_items.set_trace_callback(traces["raw"].append)
    guarded_items.set_trace_callback(traces["guarded"].append)
    for con in (raw_items, guarded_items):
        con.execute("SELECT name FROM items WHERE id = ?", (3,)).fetchall()
        con.execute("UPDATE items SET qty = ? WHERE id = ?", (9, 3))
        con.executemany("INSERT INTO items (name) VALUES (?)", [("p",), ("q",)])
        con.commit()
        cur = con.cursor()
        cur.execute("SELECT count(*) FROM items")
        cur.fetchone()
    assert traces["guarded"] == traces["raw"]
    assert len(traces["raw"]) >= 6


def test_connect_accepts_sqlite3_positional_and_keyword_arguments(tmp_path: Any) -> None:
    """``connect(database, timeout, detect_types, isolation_level, ...)`` and ``uri=True`` work."""
    path = tmp_path / "args.db"
    con = guarded_sqlite.connect(str(path), 2.5, sqlite3.PARSE_DECLTYPES, None, guard="observe")
    assert con.isolation_level is None
    con.execute("CREATE TABLE t (x)")
    assert not con.in_transaction
    con.close()
    ro = guarded_sqlite.connect(f"file:{path}?mode=ro", uri=True, cached_statements=10)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro.execute("INSERT INTO t VALUES (1)")
    ro.close()


# --------------------------------------------------------------------------------------------------
# Fetching: iteration, fetchone/fetchmany/fetchall, description, rowcount, lastrowid
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# row_factory and text_factory
# --------------------------------------------------------------------------------------------------


def dict_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row)}


def list_factory(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> list[Any]:
    return list(row)


def plain(rows: list[Any]) -> list[Any]:
    """Rows in a form comparable across connections (sqlite3.Row -> (keys, values))."""
    return [(tuple(r.keys()), tuple(r)) if isinstance(r, sqlite3.Row) else r for r in rows]


ROW_FACTORIES = [
    pytest.param(sqlite3.Row, id="Row"),
    pytest.param(dict_factory, id="dict"),
    pytest.param(list_factory, id="list"),
    pytest.param(lambda cursor, row: row[::-1], id="reversed-tuple"),
]


@pytest.mark.parametrize("factory", ROW_FACTORIES)
@pytest.mark.parametrize(("sql", "params"), HEALTHY_QUERIES)
def test_connection_row_factory(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, factory: Any, sql: str, params: Any
) -> None:
    """``con.row_factory`` shapes every row like sqlite3 does, including rows served from the buffer."""
    raw_items.row_factory = factory
    guarded_items.row_factory = factory
    assert guarded_items.row_factory is factory
    raw_cur, cur = run(raw_items, sql, params), run(guarded_items, sql, params)
    assert plain([cur.fetchone()]) == plain([raw_cur.fetchone()])
    assert plain(cur.fetchall()) == plain(raw_cur.fetchall())


@pytest.mark.parametrize("factory", ROW_FACTORIES)
def test_cursor_row_factory(raw_items: sqlite3.Connection, guarded_items: GuardedConnection, factory: Any) -> None:
    """A ``row_factory`` set on one cursor applies to it alone, as in sqlite3."""
    sql = "SELECT id, name, payload FROM items ORDER BY id"
    results = []
    for con in (raw_items, guarded_items):
        shaped, default = con.cursor(), con.cursor()
        shaped.row_factory = factory
        results.append(
            (plain(shaped.execute(sql).fetchall()), default.execute(sql).fetchall(), shaped.row_factory is factory)
        )
    assert results[1] == results[0]


def test_row_factory_rows_are_usable_like_sqlite3_rows(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection
) -> None:
    """sqlite3.Row rows from the guard support keys, index, name lookup, equality and hashing."""
    sql = "SELECT id, name FROM items WHERE id = 2"
    raw_items.row_factory = observe_items.row_factory = sqlite3.Row
    raw_row, row = raw_items.execute(sql).fetchone(), observe_items.execute(sql).fetchone()
    assert type(row) is sqlite3.Row
    assert (row.keys(), row[0], row["NAME"], len(row)) == (raw_row.keys(), raw_row[0], raw_row["NAME"], len(raw_row))
    assert row == raw_row and hash(row) == hash(raw_row)


@pytest.mark.parametrize("factory", [dict_factory, list_factory, sqlite3.Row], ids=["dict", "list", "Row"])
@pytest.mark.parametrize("where", ["connection", "cursor"])
def test_unhashable_rows_from_row_factory_are_still_probed(factory: Any, where: str) -> None:
    """Rows a probe cannot hash (dicts, lists) are still counted: a fan-out is flagged; observe serves
    sqlite3's rows, patch serves the same rows as ``SELECT DISTINCT`` would."""
    raw = sqlite3.connect(":memory:")
    fill_fanout(raw)
    raw.row_factory = factory
    expected_all = plain(raw.execute(EXPLODING_SQL).fetchall())
    expected_distinct = plain(raw.execute(EXPLODING_SQL.replace("SELECT", "SELECT DISTINCT", 1)).fetchall())
    assert len(expected_all) == 24 and len(expected_distinct) == 4
    for mode, expected, action in [
        ("observe", expected_all, "none"),
        ("patch", expected_distinct, "distinct_injected"),
    ]:
        con = guarded_sqlite.connect(":memory:", guard=mode)
        fill_fanout(con)
        if where == "connection":
            con.row_factory = factory
            cur = con.cursor()
        else:
            cur = con.cursor()
            cur.row_factory = factory
        rows = cur.execute(EXPLODING_SQL).fetchall()
        report = cur.guard_report
        assert report is not None
        assert (report.trigger, report.rows, report.unique_rows, report.action) == (
            "cartesian_explosion",
            24,
            4,
            action,
        )
        assert plain(rows) == expected
        assert all(type(r) is type(expected[0]) for r in plain(rows))
        con.close()
    raw.close()


@pytest.mark.parametrize("factory", [dict_factory, list_factory], ids=["dict", "list"])
def test_large_unhashable_result_is_served_intact(factory: Any, mode: str) -> None:
    """A large healthy result of unhashable rows (past the small-result fast path) is not flagged and
    comes back exactly as sqlite3 returns it."""
    sql = "WITH RECURSIVE s(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM s WHERE v < 5000) SELECT v, v % 3 AS m FROM s"
    raw = sqlite3.connect(":memory:")
    raw.row_factory = factory
    con = guarded_sqlite.connect(":memory:", guard=mode)
    con.row_factory = factory
    cur = con.execute(sql)
    assert cur.fetchall() == raw.execute(sql).fetchall()
    assert cur.guard_report is not None
    assert (cur.guard_report.trigger, cur.guard_report.rows, cur.guard_report.unique_rows) == (None, 5000, 5000)


@pytest.mark.parametrize(
    "text_factory", [str, bytes, bytearray, lambda b: b.decode().upper()], ids=["str", "bytes", "bytearray", "upper"]
)
def test_text_factory(raw_items: sqlite3.Connection, guarded_items: GuardedConnection, text_factory: Any) -> None:
    """``text_factory`` converts TEXT values like sqlite3, including unhashable bytearray."""
    raw_items.text_factory = guarded_items.text_factory = text_factory
    assert guarded_items.text_factory is text_factory
    sql = "SELECT id, name, note FROM items ORDER BY id"
    rows = guarded_items.execute(sql).fetchall()
    assert rows == raw_items.execute(sql).fetchall()
    assert type(rows[0][1]) is type(raw_items.execute(sql).fetchone()[1])


@pytest.mark.parametrize("text_factory", [bytes, bytearray])
def test_text_factory_fanout_is_flagged_and_patched(text_factory: Any) -> None:
    """With bytes or (unhashable) bytearray values a fan-out is still flagged, and patched in patch mode."""
    raw = sqlite3.connect(":memory:")
    fill_fanout(raw)
    raw.text_factory = text_factory
    expected = {
        "observe": raw.execute(EXPLODING_SQL).fetchall(),
        "patch": raw.execute(EXPLODING_SQL.replace("SELECT", "SELECT DISTINCT", 1)).fetchall(),
    }
    for mode, action in [("observe", "none"), ("patch", "distinct_injected")]:
        con = guarded_sqlite.connect(":memory:", guard=mode)
        fill_fanout(con)
        con.text_factory = text_factory
        cur = con.execute(EXPLODING_SQL)
        rows = cur.fetchall()
        assert rows == expected[mode]
        assert type(rows[0][0]) is text_factory
        assert cur.guard_report is not None
        assert (cur.guard_report.trigger, cur.guard_report.action) == ("cartesian_explosion", action)
        con.close()


# --------------------------------------------------------------------------------------------------
# backup()
# --------------------------------------------------------------------------------------------------


def test_backup_from_guarded_into_raw(guarded_items: GuardedConnection, raw_items: sqlite3.Connection) -> None:
    """A guarded connection backs up into a plain sqlite3 connection."""
    target = sqlite3.connect(":memory:")
    assert guarded_items.backup(target) is None
    assert list(target.iterdump()) == list(raw_items.iterdump())


def test_backup_from_guarded_into_guarded(guarded_items: GuardedConnection, raw_items: sqlite3.Connection) -> None:
    """The target may itself be guarded (``backup`` hands sqlite3 the real connection behind it)."""
    target = guarded_sqlite.connect(":memory:", guard="observe")
    guarded_items.backup(target)
    sql = "SELECT * FROM items ORDER BY id"
    assert target.execute(sql).fetchall() == raw_items.execute(sql).fetchall()


def test_backup_keyword_arguments_behave_like_sqlite3() -> None:
    """pages=, progress= and name= work as in sqlite3: same progress calls, same copy."""
    calls: dict[str, list[tuple[int, int, int]]] = {"raw": [], "guarded": []}
    copies = {}
    for side, opener in {"raw": sqlite3.connect, "guarded": guarded_sqlite.connect}.items():
        source = opener(":memory:")
        source.execute("CREATE TABLE big (x TEXT)")
        source.executemany("INSERT INTO big VALUES (?)", [("x" * 500,) for _ in range(200)])
        source.commit()
        target = opener(":memory:")
        source.backup(target, pages=5, progress=lambda *args, side=side: calls[side].append(args), name="main")
        copies[side] = list(guarded_sqlite.unwrap(target).iterdump())
    assert calls["guarded"] == calls["raw"] and len(calls["raw"]) > 1
    assert copies["guarded"] == copies["raw"]


def test_raw_backup_into_guarded_needs_unwrap(raw_items: sqlite3.Connection, observe_items: GuardedConnection) -> None:
    """Documented: sqlite3's own ``backup`` type-checks its target in C and refuses the proxy;
    ``guarded_sqlite.unwrap(target)`` is the way to back up from a raw connection into a guarded one."""
    target = guarded_sqlite.connect(":memory:")
    with pytest.raises(TypeError):
        raw_items.backup(target)
    raw_items.backup(guarded_sqlite.unwrap(target))
    sql = "SELECT * FROM items ORDER BY id"
    assert target.execute(sql).fetchall() == observe_items.execute(sql).fetchall()


# --------------------------------------------------------------------------------------------------
# User functions, threads, factory subclasses
# --------------------------------------------------------------------------------------------------


class Spread:
    """An aggregate: max - min."""

    def __init__(self) -> None:
        self.values: list[int] = []

    def step(self, value: int) -> None:
        self.values.append(value)

    def finalize(self) -> int:
        return max(self.values) - min(self.values)


class RunningSum:
    """A window function: sum over the frame."""

    def __init__(self) -> None:
        self.total = 0

    def step(self, value: int) -> None:
        self.total += value

    def inverse(self, value: int) -> None:
        self.total -= value

    def value(self) -> int:
        return self.total

    def finalize(self) -> int:
        return self.total


def register_user_functions(con: Any) -> None:
    con.create_function("double", 1, lambda x: None if x is None else x * 2, deterministic=True)
    con.create_function("shout", -1, lambda *args: "!".join(map(str, args)))
    con.create_aggregate("spread", 1, Spread)
    con.create_collation("reverse", lambda a, b: (a < b) - (a > b))
    if hasattr(con, "create_window_function"):
        con.create_window_function("running", 1, RunningSum)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, double(qty), shout(id, name, price) FROM items ORDER BY id",
        "SELECT qty, spread(id) FROM items GROUP BY qty ORDER BY qty",
        "SELECT name FROM items ORDER BY name COLLATE reverse",
        "SELECT id, running(id) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM items",
    ],
    ids=["scalar", "aggregate", "collation", "window"],
)
def test_user_functions(raw_items: sqlite3.Connection, guarded_items: GuardedConnection, sql: str) -> None:
    """create_function/create_aggregate/create_collation/create_window_function work through the proxy."""
    register_user_functions(raw_items)
    register_user_functions(guarded_items)
    if "OVER" in sql and not hasattr(sqlite3.Connection, "create_window_function"):
        pytest.skip("window functions need Python 3.11")
    cur = guarded_items.execute(sql)
    assert cur.fetchall() == raw_items.execute(sql).fetchall()
    assert cur.guard_report is not None and cur.guard_report.trigger is None


def test_user_function_error_matches_sqlite3(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """A user function that raises gives sqlite3's OperationalError, and the report records it."""
    for con in (raw_items, guarded_items):
        con.create_function("boom", 1, lambda x: 1 / 0)
    sql = "SELECT boom(id) FROM items"
    cur = guarded_items.cursor()
    expected = outcome(lambda: raw_items.cursor().execute(sql).fetchall())
    assert outcome(lambda: cur.execute(sql).fetchall()) == expected
    assert expected[0] == "raised"
    assert cur.guard_report is not None and cur.guard_report.trigger == "exec_error"
    assert cur.guard_report.error == f"{expected[1].__name__}: {expected[2]}"


@pytest.mark.parametrize("guard", ["observe", "patch", "off"])
def test_threads_share_one_guarded_connection(raw_items: sqlite3.Connection, guard: str) -> None:
    """With ``check_same_thread=False`` threads query and write through one guarded connection at the
    same time; every result is right and no write trips over a patch's read-only window."""
    con = guarded_sqlite.connect(":memory:", check_same_thread=False, guard=guard)
    fill_items(con)
    fill_fanout(con)
    con.execute("CREATE TABLE log (thread INTEGER, i INTEGER)")
    con.commit()
    reference = sqlite3.connect(":memory:")
    fill_fanout(reference)
    expected_fanout = sorted(reference.execute(EXPLODING_SQL).fetchall())
    if guard == "patch":
        expected_fanout = sorted(set(expected_fanout))
    by_id = dict(raw_items.execute("SELECT id, name FROM items").fetchall())
    threads, rounds = 8, 25
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(rounds):
                key = (n * rounds + i) % ITEM_COUNT + 1
                cur = con.cursor()
                cur.execute("SELECT id, name FROM items WHERE id = ?", (key,))
                assert cur.fetchall() == [(key, by_id[key])]
                assert sorted(con.execute(EXPLODING_SQL).fetchall()) == expected_fanout
                con.execute("INSERT INTO log VALUES (?, ?)", (n, i))
        except BaseException as error:
            errors.append(error)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=60)
    assert not errors, errors
    assert con.execute("SELECT count(*) FROM log").fetchone() == (threads * rounds,)
    con.close()


class CountingConnection(sqlite3.Connection):
    """A Connection subclass with its own helper, and a default cursor class of its own."""

    def count(self, table: str) -> int:
        return self.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[no-any-return]


class TaggedCursor(sqlite3.Cursor):
    """A Cursor subclass with its own methods."""

    def tag(self) -> str:
        return f"tagged:{self.arraysize}"

    def first_row(self) -> Any:
        return self.fetchone()


class CursorFactoryConnection(sqlite3.Connection):
    def cursor(self, factory: Any = TaggedCursor) -> Any:  # type: ignore[override]
        return super().cursor(factory)


def test_connection_factory_subclass(raw_items: sqlite3.Connection, mode: str) -> None:
    """``factory=`` a Connection subclass: isinstance holds, its methods work, queries are still guarded."""
    con = guarded_sqlite.connect(":memory:", factory=CountingConnection, guard=mode)
    fill_items(con)
    assert isinstance(con, CountingConnection) and isinstance(con, GuardedConnection)
    assert type(guarded_sqlite.unwrap(con)) is CountingConnection
    assert con.count("items") == ITEM_COUNT
    cur = con.execute("SELECT * FROM items ORDER BY id")
    assert isinstance(cur, GuardedCursor) and cur.guard_report is not None
    assert cur.fetchall() == raw_items.execute("SELECT * FROM items ORDER BY id").fetchall()


def test_connection_subclass_default_cursor_class(raw_items: sqlite3.Connection, mode: str) -> None:
    """A Connection subclass whose ``cursor()`` picks its own Cursor class still yields guarded cursors of it."""
    con = guarded_sqlite.connect(":memory:", factory=CursorFactoryConnection, guard=mode)
    fill_items(con)
    for cur in (con.cursor(), con.execute("SELECT 1")):
        assert isinstance(cur, TaggedCursor) and isinstance(cur, GuardedCursor)
        assert cur.connection is con
    assert (
        con.cursor().execute("SELECT id FROM items").fetchall() == raw_items.execute("SELECT id FROM items").fetchall()
    )


def test_cursor_factory_subclass(raw_items: sqlite3.Connection, guarded_items: GuardedConnection) -> None:
    """``cursor(factory=Sub)``: isinstance holds, the subclass's own methods work, rows match sqlite3."""
    cur = guarded_items.cursor(factory=TaggedCursor)
    assert isinstance(cur, TaggedCursor) and type(guarded_sqlite.unwrap(cur)) is TaggedCursor
    cur.arraysize = 4
    assert cur.tag() == "tagged:4"
    sql = "SELECT id, name FROM items ORDER BY id"
    assert cur.execute(sql).fetchall() == raw_items.cursor(TaggedCursor).execute(sql).fetchall()
    assert cur.guard_report is not None and cur.guard_report.sql == sql


def test_cursor_subclass_method_that_fetches_matches_sqlite3(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection
) -> None:
    """A Cursor subclass's own method that fetches through ``self`` sees the rows, as with sqlite3."""
    sql = "SELECT id FROM items ORDER BY id"
    raw_cur = raw_items.cursor(TaggedCursor).execute(sql)
    cur = observe_items.cursor(TaggedCursor).execute(sql)
    raw_first = raw_cur.first_row()
    assert raw_first == (1,)
    assert cur.first_row() == raw_first
    assert cur.fetchall() == raw_cur.fetchall()


# --------------------------------------------------------------------------------------------------
# Closed cursors and connections
# --------------------------------------------------------------------------------------------------

FETCHES: dict[str, Callable[[Any], Any]] = {
    "fetchone": lambda cur: cur.fetchone(),
    "fetchmany": lambda cur: cur.fetchmany(2),
    "fetchall": lambda cur: cur.fetchall(),
    "next": lambda cur: next(cur),
    "iterate": lambda cur: list(cur),
}


@pytest.mark.parametrize("fetch", FETCHES)
@pytest.mark.parametrize("partly_read", [False, True], ids=["unread", "partly-read"])
def test_fetch_from_closed_cursor_raises_like_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, fetch: str, partly_read: bool
) -> None:
    """Fetching from a closed cursor raises sqlite3's ProgrammingError, even with rows still buffered."""
    results = []
    for con in (raw_items, guarded_items):
        cur = con.execute("SELECT id FROM items ORDER BY id")
        if partly_read:
            cur.fetchone()
        cur.close()
        results.append(outcome(lambda: FETCHES[fetch](cur)))
    assert results[1] == results[0]
    assert results[0][:2] == ("raised", sqlite3.ProgrammingError)


@pytest.mark.parametrize("fetch", FETCHES)
@pytest.mark.parametrize("partly_read", [False, True], ids=["unread", "partly-read"])
def test_fetch_after_connection_closed_raises_like_sqlite3(fetch: str, partly_read: bool, mode: str) -> None:
    """Fetching after the connection was closed raises sqlite3's ProgrammingError."""
    results = []
    for con in (sqlite3.connect(":memory:"), guarded_sqlite.connect(":memory:", guard=mode)):
        fill_items(con)
        cur = con.execute("SELECT id FROM items ORDER BY id")
        if partly_read:
            cur.fetchone()
        con.close()
        results.append(outcome(lambda: FETCHES[fetch](cur)))
    assert results[1] == results[0]
    assert results[0][:2] == ("raised", sqlite3.ProgrammingError)


@pytest.mark.parametrize("closer", ["raw-connection", "other-proxy"])
def test_fetch_after_connection_closed_elsewhere_raises_like_sqlite3(closer: str) -> None:
    """The real connection may be closed by its owner (after ``wrap()``) or through another proxy
    (``wrap(con, guard=...)``); fetching afterwards must still raise as sqlite3 does."""
    raw = sqlite3.connect(":memory:")
    fill_items(raw)
    raw_cur = raw.execute("SELECT id FROM items")
    con = guarded_sqlite.wrap(raw, guard="patch")
    cur = guarded_sqlite.wrap(con, guard="observe").execute("SELECT id FROM items")
    if closer == "raw-connection":
        raw.close()
    else:
        con.close()
    expected = outcome(raw_cur.fetchall)
    assert expected[:2] == ("raised", sqlite3.ProgrammingError)
    assert outcome(cur.fetchall) == expected


def test_use_of_closed_cursor_and_connection_raises_like_sqlite3(mode: str) -> None:
    """execute on a closed cursor or connection, and cursor() on a closed connection, raise the same."""
    results = []
    for con in (sqlite3.connect(":memory:"), guarded_sqlite.connect(":memory:", guard=mode)):
        fill_items(con)
        cur = con.cursor()
        cur.close()
        seen = [outcome(lambda: cur.execute("SELECT 1")), outcome(lambda: cur.executemany("SELECT 1", []))]
        other = con.cursor()
        con.close()
        seen += [
            outcome(lambda: other.execute("SELECT 1")),
            outcome(lambda: con.execute("SELECT 1")),
            outcome(lambda: con.cursor()),
            outcome(con.commit),
            outcome(con.close),  # closing twice is fine
        ]
        results.append(seen)
    assert results[1] == results[0]


# --------------------------------------------------------------------------------------------------
# Execution errors
# --------------------------------------------------------------------------------------------------

ERROR_CASES = [
    pytest.param("SELECT * FROM nope", NO_PARAMS, id="no-such-table"),
    pytest.param("SELECT nope FROM items", NO_PARAMS, id="no-such-column"),
    pytest.param("SELEC 1", NO_PARAMS, id="syntax-error"),
    pytest.param("SELECT ?, ?", (1,), id="too-few-bindings"),
    pytest.param("SELECT ?", (1, 2), id="too-many-bindings"),
    pytest.param("SELECT ?", NO_PARAMS, id="missing-parameters"),
    pytest.param("SELECT :a", {"b": 1}, id="missing-named-binding"),
    pytest.param("SELECT ?", {"a": 1}, id="dict-for-qmark"),
    pytest.param("SELECT 1; SELECT 2", NO_PARAMS, id="two-statements"),
    pytest.param(123, NO_PARAMS, id="sql-not-str"),
    pytest.param(b"SELECT 1", NO_PARAMS, id="sql-bytes"),
    pytest.param("SELECT ?", 5, id="parameters-not-a-sequence"),
    pytest.param("SELECT 1", None, id="parameters-none"),
    pytest.param("SELECT ?", (object(),), id="unsupported-parameter-type"),
    pytest.param("INSERT INTO items (id, name) VALUES (1, 'dup')", NO_PARAMS, id="integrity-unique"),
    pytest.param("INSERT INTO items (id, name) VALUES (500, NULL)", NO_PARAMS, id="integrity-not-null"),
    pytest.param("SELECT 1 FROM items WHERE id = 1 AND", NO_PARAMS, id="incomplete"),
]


@pytest.mark.parametrize(("sql", "params"), ERROR_CASES)
def test_execution_errors_match_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, sql: Any, params: Any
) -> None:
    """A failing execute raises sqlite3's exception class and message (on the cursor and on the
    connection shortcut), and ``guard_report`` records ``exec_error`` with that error."""
    expected = outcome(lambda: run(raw_items.cursor(), sql, params))
    assert expected[0] == "raised"
    assert outcome(lambda: run(guarded_items, sql, params)) == expected
    cur = guarded_items.cursor()
    cur.execute("SELECT 1")
    assert outcome(lambda: run(cur, sql, params)) == expected
    report = cur.guard_report
    assert report is not None
    assert report.trigger == "exec_error" and report.flagged
    assert report.error == f"{expected[1].__name__}: {expected[2]}"
    assert report.sql == sql and report.probed is False and report.action == "none"
    assert cur.fetchall() == []  # like sqlite3: the failed statement leaves nothing to fetch


@pytest.mark.parametrize(
    ("method", "args"),
    [
        pytest.param("executemany", ("INSERT INTO nope VALUES (?)", [(1,)]), id="executemany-no-table"),
        pytest.param("executemany", ("SELECT ?", [(1,)]), id="executemany-select"),
        pytest.param(
            "executemany", ("INSERT INTO items (id, name) VALUES (?, ?)", [(1, "dup")]), id="executemany-integrity"
        ),
        pytest.param("executemany", ("INSERT INTO items (name) VALUES (?)", 5), id="executemany-not-iterable"),
        pytest.param("executescript", ("SELECT 1; SELEC 1;",), id="executescript-syntax"),
        pytest.param("executescript", (42,), id="executescript-not-str"),
    ],
)
def test_executemany_and_executescript_errors_match_sqlite3(
    raw_items: sqlite3.Connection, guarded_items: GuardedConnection, method: str, args: tuple[Any, ...]
) -> None:
    """executemany/executescript raise sqlite3's error and the report says exec_error."""
    expected = outcome(lambda: getattr(raw_items.cursor(), method)(*args))
    assert expected[0] == "raised"
    assert outcome(lambda: getattr(guarded_items, method)(*args)) == expected
    cur = guarded_items.cursor()
    assert outcome(lambda: getattr(cur, method)(*args)) == expected
    assert cur.guard_report is not None and cur.guard_report.trigger == "exec_error"
    assert cur.guard_report.error == f"{expected[1].__name__}: {expected[2]}"


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.execute(), id="execute-no-args"),
        pytest.param(lambda c: c.execute("SELECT 1", (), 3), id="execute-too-many-args"),
        pytest.param(lambda c: c.executemany("SELECT 1"), id="executemany-missing-params"),
        pytest.param(lambda c: c.cursor().execute(), id="cursor-execute-no-args"),
        pytest.param(lambda c: c.cursor().fetchone(1), id="fetchone-with-arg"),
        pytest.param(lambda c: c.cursor().fetchall(1), id="fetchall-with-arg"),
    ],
)
def test_wrong_number_of_arguments_matches_sqlite3(
    raw_items: sqlite3.Connection, observe_items: GuardedConnection, call: Callable[[Any], Any]
) -> None:
    """Calling a method with the wrong number of arguments raises sqlite3's TypeError.

    The message is Python's own for the proxy's method signature (it names the method and says what
    was missing or extra) rather than sqlite3's C wording; the exception class is the contract."""
    expected = outcome(lambda: call(raw_items))
    assert expected[:2] == ("raised", TypeError)
    got = outcome(lambda: call(observe_items))
    assert got[:2] == ("raised", TypeError)
    method = str(expected[2]).split("(")[0].split()[0].split(".")[-1]
    assert method in str(got[2]) and ("argument" in str(got[2]))


def test_off_mode_passes_rows_through_and_reports_each_statement(raw_items: sqlite3.Connection) -> None:
    """guard="off" serves sqlite3's rows unprobed; its report (and that after an error) describes the
    statement just executed."""
    con = guarded_connect("off")
    cur = con.cursor()
    cur.execute("SELECT * FROM items ORDER BY id")
    assert cur.fetchall() == raw_items.execute("SELECT * FROM items ORDER BY id").fetchall()
    assert cur.guard_report is not None and cur.guard_report.probed is False and cur.guard_report.mode == "off"
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        cur.execute("SELECT * FROM nope")
    assert cur.guard_report is not None
    assert cur.guard_report.sql == "SELECT * FROM nope"


# --------------------------------------------------------------------------------------------------
# Converters: the documented fetch-once difference
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def converters() -> Iterator[None]:
    """Register test converters in sqlite3's global registry and remove them afterwards."""

    def picky(value: bytes) -> int:
        if value == b"2":
            raise ValueError("converter refused row 2")
        return int(value) * 10

    sqlite3.register_converter("GS_PICKY", picky)
    sqlite3.register_converter("GS_TENFOLD", lambda value: int(value) * 10)
    yield
    for name in ("GS_PICKY", "GS_TENFOLD"):
        sqlite3.converters.pop(name, None)


def picky_table(con: Any) -> None:
    con.execute("CREATE TABLE p (v GS_PICKY, w GS_TENFOLD)")
    con.executemany("INSERT INTO p VALUES (?, ?)", [(1, 1), (2, 2), (3, 3)])


@pytest.mark.parametrize(
    ("detect_types", "sql"),
    [
        (sqlite3.PARSE_DECLTYPES, "SELECT w FROM p ORDER BY w"),
        (sqlite3.PARSE_COLNAMES, 'SELECT v AS "v [GS_TENFOLD]" FROM p ORDER BY v'),
    ],
    ids=["decltypes", "colnames"],
)
def test_converters_apply_like_sqlite3(converters: None, mode: str, detect_types: int, sql: str) -> None:
    """register_converter + detect_types convert values the same way through the guard."""
    raw = sqlite3.connect(":memory:", detect_types=detect_types)
    con = guarded_sqlite.connect(":memory:", detect_types=detect_types, guard=mode)
    picky_table(raw)
    picky_table(con)
    cur = con.execute(sql)
    assert cur.description == raw.execute(sql).description
    assert cur.fetchall() == raw.execute(sql).fetchall() == [(10,), (20,), (30,)]


def test_fetch_once_difference_sqlite3_raises_converter_error_at_fetch(converters: None) -> None:
    """sqlite3 side of the documented difference: execute() succeeds and the first row arrives; the
    converter's error for row 2 surfaces at the fetch that reaches it."""
    raw = sqlite3.connect(":memory:", detect_types=sqlite3.PARSE_DECLTYPES)
    picky_table(raw)
    cur = raw.execute("SELECT v FROM p ORDER BY v")
    assert cur.fetchone() == (10,)
    with pytest.raises(ValueError, match="converter refused row 2"):
        cur.fetchone()


@pytest.mark.parametrize("guard", MODES)
def test_fetch_once_difference_guarded_raises_converter_error_at_execute(converters: None, guard: str) -> None:
    """guarded_sqlite side of the documented difference: rows are fetched during execute(), so the
    same converter error surfaces there (same exception), and the report records it."""
    con = guarded_sqlite.connect(":memory:", detect_types=sqlite3.PARSE_DECLTYPES, guard=guard)
    picky_table(con)
    cur = con.cursor()
    with pytest.raises(ValueError, match="converter refused row 2"):
        cur.execute("SELECT v FROM p ORDER BY v")
    assert cur.guard_report is not None and cur.guard_report.trigger == "exec_error"
    assert cur.guard_report.error == "ValueError: converter refused row 2"


# --------------------------------------------------------------------------------------------------
# A SELECT whose user function writes into the table it reads
# --------------------------------------------------------------------------------------------------


def self_feeding(con: Any, limit: int) -> list[int]:
    """Table t plus f(x): each call inserts a new row into t (up to ``limit`` calls) and returns x."""
    calls = [0]
    con.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(3)])

    def feed(x: int) -> int:
        calls[0] += 1
        if calls[0] <= limit:
            con.execute("INSERT INTO t (x) VALUES (NULL)")
        return x

    con.create_function("feed", 1, feed)
    return calls


@pytest.mark.parametrize(
    "policy",
    [
        GuardPolicy(mode="patch", row_cap=5),
        GuardPolicy(mode="observe", row_cap=5),
        GuardPolicy(mode="patch", row_cap=1000),
        GuardPolicy(mode="observe", row_cap=1000),
    ],
    ids=["patch-cap5", "observe-cap5", "patch-cap1000", "observe-cap1000"],
)
@pytest.mark.parametrize("fetch", ["iterate", "fetchall"])
def test_select_whose_function_inserts_into_the_table_it_reads(policy: GuardPolicy, fetch: str) -> None:
    """The scan sees rows its own function inserted. With a small row_cap the guard must stop buffering
    and stream, terminate, and return what sqlite3 returns (a counter bounds both sides)."""
    limit = 50
    results = []
    for con in (sqlite3.connect(":memory:"), guarded_sqlite.connect(":memory:", guard=policy)):
        calls = self_feeding(con, limit)
        cur = con.execute("SELECT feed(x) FROM t")
        rows = list(cur) if fetch == "iterate" else cur.fetchall()
        results.append((rows, calls[0], con.execute("SELECT count(*) FROM t").fetchone()))
    assert results[1] == results[0]
    assert len(results[0][0]) == 3 + limit


# --------------------------------------------------------------------------------------------------
# Row cap: past it rows stream through unprobed
# --------------------------------------------------------------------------------------------------

SERIES_SQL = "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ?) SELECT n, n % 2 FROM s"


@pytest.fixture(params=MODES)
def capped(request: pytest.FixtureRequest) -> Iterator[GuardedConnection]:
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(mode=request.param, row_cap=10))
    yield con
    con.close()


@pytest.mark.parametrize("fetch", ["iterate", "fetchall", "fetchmany", "mixed"])
def test_row_cap_streams_every_row_in_order(capped: GuardedConnection, fetch: str) -> None:
    """With row_cap=10 a 1000-row result comes back whole and in order, and the report says it was not probed."""
    expected = sqlite3.connect(":memory:").execute(SERIES_SQL, (1000,)).fetchall()
    cur = capped.execute(SERIES_SQL, (1000,))
    if fetch == "iterate":
        rows = [row for row in cur]
    elif fetch == "fetchall":
        rows = cur.fetchall()
    elif fetch == "fetchmany":
        rows = []
        while chunk := cur.fetchmany(7):
            rows += chunk
    else:
        rows = [cur.fetchone(), next(cur), *cur.fetchmany(9), *cur.fetchmany(3)]
        rows += [row for _, row in zip(range(100), cur)] + cur.fetchall()
    assert rows == expected and len(rows) == 1000
    assert cur.fetchone() is None and cur.fetchall() == []
    report = cur.guard_report
    assert report is not None
    assert report.probed is False and report.rows is None and report.trigger is None
    assert report.note is not None and "row_cap" in report.note


@pytest.mark.parametrize(("count", "probed"), [(10, True), (11, False)])
def test_row_cap_boundary(capped: GuardedConnection, count: int, probed: bool) -> None:
    """Exactly row_cap rows are probed; one more is not. Rows match sqlite3 either way."""
    cur = capped.execute(SERIES_SQL, (count,))
    assert cur.fetchall() == sqlite3.connect(":memory:").execute(SERIES_SQL, (count,)).fetchall()
    assert cur.guard_report is not None and cur.guard_report.probed is probed


def test_row_cap_exploding_result_streams_unpatched() -> None:
    """An explosion larger than row_cap is not probed, so even patch mode serves sqlite3's rows."""
    raw = sqlite3.connect(":memory:")
    fill_fanout(raw)
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(row_cap=10))
    fill_fanout(con)
    cur = con.execute(EXPLODING_SQL)
    assert cur.fetchall() == raw.execute(EXPLODING_SQL).fetchall()
    assert cur.guard_report is not None and cur.guard_report.action == "none" and not cur.guard_report.probed


# --------------------------------------------------------------------------------------------------
# install / uninstall / wrap / unwrap and guard= validation
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def real_connect() -> Iterator[Callable[..., sqlite3.Connection]]:
    """The real sqlite3.connect; whatever a test installs is uninstalled afterwards."""
    original = sqlite3.connect
    assert not getattr(original, "__guarded_sqlite__", False)
    yield original
    guarded_sqlite.uninstall()
    assert sqlite3.connect is original and sqlite3.dbapi2.connect is original


def test_install_makes_sqlite3_connect_guarded(real_connect: Any) -> None:
    """After install(), sqlite3.connect (and sqlite3.dbapi2.connect) return guarded connections."""
    guarded_sqlite.install(guard="observe")
    for connect in (sqlite3.connect, sqlite3.dbapi2.connect):
        con = connect(":memory:")
        assert isinstance(con, GuardedConnection)
        assert con.guard_policy.mode == "observe"
        assert type(guarded_sqlite.unwrap(con)) is sqlite3.Connection  # not guarded twice
        assert isinstance(con.execute("SELECT 1"), GuardedCursor)
    assert sqlite3.connect(":memory:", guard="off").guard_policy.mode == "off"
    assert isinstance(sqlite3.connect(":memory:", factory=CountingConnection), CountingConnection)


def test_uninstall_restores_the_real_connect(real_connect: Any) -> None:
    """uninstall() gives back the original function; sqlite3.connect returns plain connections again."""
    guarded_sqlite.install()
    guarded_sqlite.uninstall()
    assert sqlite3.connect is real_connect
    assert type(sqlite3.connect(":memory:")) is sqlite3.Connection


def test_install_twice_then_uninstall_restores_the_original(real_connect: Any) -> None:
    """A second install() replaces the policy; one uninstall() still restores the original."""
    guarded_sqlite.install("patch")
    guarded_sqlite.install("observe")
    assert sqlite3.connect(":memory:").guard_policy.mode == "observe"
    guarded_sqlite.uninstall()
    assert sqlite3.connect is real_connect and sqlite3.dbapi2.connect is real_connect
    guarded_sqlite.uninstall()  # safe when not installed
    assert sqlite3.connect is real_connect


def test_install_with_bad_guard_leaves_sqlite3_alone(real_connect: Any) -> None:
    """A bad policy is rejected before anything is replaced."""
    with pytest.raises(ValueError):
        guarded_sqlite.install("nope")  # type: ignore[arg-type]
    assert sqlite3.connect is real_connect


def test_wrap_and_unwrap() -> None:
    """wrap is idempotent, re-wraps for a new policy, refuses non-connections; unwrap returns the raw objects."""
    raw = sqlite3.connect(":memory:")
    con = guarded_sqlite.wrap(raw)
    assert isinstance(con, GuardedConnection) and guarded_sqlite.unwrap(con) is raw
    assert guarded_sqlite.wrap(con) is con
    assert guarded_sqlite.wrap(guarded_sqlite.wrap(raw)) is not con  # each wrap of a raw connection is a new proxy
    assert guarded_sqlite.wrap(con, guard="patch") is con  # same policy as it has
    observed = guarded_sqlite.wrap(con, guard="observe")
    assert observed is not con and observed.guard_policy.mode == "observe" and con.guard_policy.mode == "patch"
    assert guarded_sqlite.unwrap(observed) is raw
    assert guarded_sqlite.wrap(observed) is observed
    cur = con.execute("SELECT 1")
    assert type(guarded_sqlite.unwrap(cur)) is sqlite3.Cursor
    for other in (raw, raw.cursor(), 42, None):
        assert guarded_sqlite.unwrap(other) is other
    for not_a_connection in (raw.cursor(), cur, "x.db", None, 42):
        with pytest.raises(TypeError):
            guarded_sqlite.wrap(not_a_connection)  # type: ignore[arg-type]


def test_wrap_idempotent_for_connect_result() -> None:
    """``wrap(wrap(c)) is wrap(c)`` for a connection from connect()."""
    con = guarded_sqlite.connect(":memory:")
    assert guarded_sqlite.wrap(guarded_sqlite.wrap(con)) is guarded_sqlite.wrap(con) is con


@pytest.mark.parametrize(
    ("guard", "error"),
    [
        ("nope", ValueError),
        ("PATCH", ValueError),
        ("", ValueError),
        (1, TypeError),
        (True, TypeError),
        (["patch"], TypeError),
    ],
)
def test_bad_guard_values_are_rejected(guard: Any, error: type[Exception]) -> None:
    """connect/wrap/install reject an unknown mode with ValueError and a wrong type with TypeError."""
    with pytest.raises(error):
        guarded_sqlite.connect(":memory:", guard=guard)
    with pytest.raises(error):
        guarded_sqlite.wrap(sqlite3.connect(":memory:"), guard=guard)


@pytest.mark.parametrize(
    "kwargs",
    [{"mode": "nope"}, {"row_cap": 0}, {"row_cap": 1.5}, {"row_cap": True}, {"tau_inject": 0}, {"tau_remove": 1.0}],
)
def test_bad_policies_are_rejected(kwargs: dict[str, Any]) -> None:
    """GuardPolicy validates its fields."""
    with pytest.raises(ValueError):
        GuardPolicy(**kwargs)


# --------------------------------------------------------------------------------------------------
# ``import guarded_sqlite as sqlite3``
# --------------------------------------------------------------------------------------------------

SAME_OBJECTS = [
    "apilevel",
    "paramstyle",
    "threadsafety",
    "sqlite_version",
    "sqlite_version_info",
    "PARSE_DECLTYPES",
    "PARSE_COLNAMES",
    "Row",
    "Connection",
    "Cursor",
    "PrepareProtocol",
    "Binary",
    "Date",
    "Time",
    "Timestamp",
    "DateFromTicks",
    "TimeFromTicks",
    "TimestampFromTicks",
    "register_adapter",
    "register_converter",
    "adapt",
    "adapters",
    "converters",
    "complete_statement",
    "enable_callback_tracebacks",
]
EXCEPTIONS = [
    "Warning",
    "Error",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
]


@pytest.mark.parametrize("name", SAME_OBJECTS + EXCEPTIONS)
def test_module_reexports_sqlite3_names(name: str) -> None:
    """The DB-API module attributes, classes and helpers are sqlite3's very own objects."""
    assert getattr(guarded_sqlite, name) is getattr(sqlite3, name)


def test_module_reexports_the_rest_of_sqlite3() -> None:
    """SQLITE_* constants (and Blob, where it exists) are there with sqlite3's values; connect is ours."""
    constants = [name for name in dir(sqlite3) if name.startswith("SQLITE_")]
    assert "SQLITE_DENY" in constants and "SQLITE_OK" in constants
    for name in constants:
        assert getattr(guarded_sqlite, name) == getattr(sqlite3, name), name
    if hasattr(sqlite3, "Blob"):
        assert guarded_sqlite.Blob is sqlite3.Blob
    assert guarded_sqlite.connect is not sqlite3.connect
    assert guarded_sqlite.apilevel == "2.0" and guarded_sqlite.paramstyle == "qmark"


def test_exception_hierarchy_is_sqlite3s() -> None:
    """Errors raised through the guard are caught by ``except guarded_sqlite.X`` and ``except sqlite3.X``."""
    assert issubclass(guarded_sqlite.IntegrityError, guarded_sqlite.DatabaseError)
    assert issubclass(guarded_sqlite.DatabaseError, guarded_sqlite.Error)
    assert issubclass(guarded_sqlite.Error, Exception) and issubclass(guarded_sqlite.Warning, Exception)
    con = guarded_sqlite.connect(":memory:")
    with pytest.raises(guarded_sqlite.OperationalError):
        con.execute("SELECT * FROM nope")
    with pytest.raises(sqlite3.ProgrammingError):
        con.execute("SELECT ?")


def ordinary_program(db: Any) -> list[Any]:
    """Typical code written against the sqlite3 module, run with ``db`` = sqlite3 or guarded_sqlite."""
    import datetime
    import decimal

    out: list[Any] = [db.apilevel, db.paramstyle, db.threadsafety, db.sqlite_version_info >= (3, 0, 0)]
    db.register_adapter(decimal.Decimal, str)
    con = db.connect(":memory:", detect_types=db.PARSE_DECLTYPES | db.PARSE_COLNAMES)
    con.row_factory = db.Row
    con.execute("CREATE TABLE money (id INTEGER PRIMARY KEY, amount TEXT, day TEXT, raw BLOB)")
    with con:
        con.execute(
            "INSERT INTO money VALUES (?, ?, ?, ?)",
            (1, decimal.Decimal("1.50"), db.Date(2024, 1, 2).isoformat(), db.Binary(b"\x00\x01")),
        )
    try:
        con.execute("INSERT INTO money (id) VALUES (1)")
    except db.IntegrityError as error:
        out.append(("integrity", str(error)))
    try:
        con.execute("SELECT nope FROM money")
    except db.Error as error:
        out.append(("error", type(error).__name__, str(error)))
    row = con.execute("SELECT * FROM money").fetchone()
    out.append((tuple(row.keys()), tuple(row)))
    out.append(db.complete_statement("SELECT 1;"))
    out.append(isinstance(con, db.Connection) and isinstance(con.cursor(), db.Cursor))
    out.append(db.Date is datetime.date and db.Timestamp is datetime.datetime)
    con.close()
    return out


def test_import_guarded_sqlite_as_sqlite3_runs_ordinary_code() -> None:
    """An ordinary sqlite3 program gives the same output when it imports guarded_sqlite instead."""
    try:
        assert ordinary_program(guarded_sqlite) == ordinary_program(sqlite3)
    finally:
        import decimal

        sqlite3.adapters.pop((decimal.Decimal, sqlite3.PrepareProtocol), None)
