"""connect()'s connections are sqlite3.Connection subclasses (the fast path): sqlite3's C type checks
pass, caller factories combine with the guard, wrap()/unwrap() treat them as already guarded, the
shared core decides exactly as for wrap()'s proxies, and importing the package stays light."""

from __future__ import annotations

import dataclasses
import gc
import sqlite3
import subprocess
import sys
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import guarded_sqlite
from guarded_sqlite import GuardedConnection, GuardedCursor, GuardPolicy, GuardReport, RuleDecision
from guarded_sqlite._io.sqlite_fast import GuardedSQLiteConnection, GuardedSQLiteCursor, connection_class, cursor_class
from guarded_sqlite.report import ReportState
from tests.helpers import EXPLODING_SQL, CountingConnection, fill_fanout

# About what connect() itself returns (and wrap() given one of those): tests/dropin/'s [wrap] runs, where
# guarded_sqlite.connect returns a proxy, do not apply.
pytestmark = pytest.mark.connect_only


def test_connection_and_cursors_are_sqlite3_objects() -> None:
    con = guarded_sqlite.connect(":memory:")
    assert type(con) is GuardedSQLiteConnection and isinstance(con, sqlite3.Connection)
    assert isinstance(con, GuardedConnection)
    for cur in (con.cursor(), con.execute("SELECT 1"), con.cursor(sqlite3.Cursor)):
        assert type(cur) is GuardedSQLiteCursor and isinstance(cur, GuardedCursor) and cur.connection is con
    assert guarded_sqlite.unwrap(con) is con  # already a sqlite3.Connection
    cur = con.cursor()
    assert guarded_sqlite.unwrap(cur) is cur
    con.close()


def test_sqlite3_cursor_on_a_guarded_connection_is_plain() -> None:
    """sqlite3.Cursor(con) type-checks con in C: it works, and gives an unguarded cursor."""
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    plain = sqlite3.Cursor(con)
    assert type(plain) is sqlite3.Cursor
    assert len(plain.execute(EXPLODING_SQL).fetchall()) > len(con.execute(EXPLODING_SQL).fetchall())
    # A guarded cursor class made directly on the guarded connection is guarded.
    direct = GuardedSQLiteCursor(con)
    direct.execute(EXPLODING_SQL).fetchall()
    assert direct.guard_report is not None and direct.guard_report.patched
    # ...and on a plain connection passes everything through.
    raw = sqlite3.connect(":memory:")
    fill_fanout(raw)
    loose = GuardedSQLiteCursor(raw)
    assert loose.execute(EXPLODING_SQL).fetchall() == raw.execute(EXPLODING_SQL).fetchall()
    assert loose.guard_report is None


def test_raw_backup_into_and_from_a_guarded_connection() -> None:
    raw = sqlite3.connect(":memory:")
    fill_fanout(raw)
    raw.commit()
    guarded = guarded_sqlite.connect(":memory:", guard="observe")
    raw.backup(target=guarded)
    assert (
        guarded.execute("SELECT count(*) FROM orders").fetchall()
        == raw.execute("SELECT count(*) FROM orders").fetchall()
    )
    copy = sqlite3.connect(":memory:")
    guarded.backup(copy)
    proxy = guarded_sqlite.wrap(sqlite3.connect(":memory:"))
    guarded.backup(proxy)  # a proxy target is unwrapped for sqlite3
    assert (
        proxy.execute("SELECT count(*) FROM orders").fetchall()
        == copy.execute("SELECT count(*) FROM orders").fetchall()
    )


def test_reinitialisation_keeps_the_policy() -> None:
    con = guarded_sqlite.connect(":memory:", guard="observe")
    fill_fanout(con)
    con.execute(EXPLODING_SQL).fetchall()
    con.__init__(":memory:")  # type: ignore[misc]
    assert con.guard_policy.mode == "observe"
    fill_fanout(con)
    cur = con.execute(EXPLODING_SQL)
    assert cur.fetchall() == sqlite3_rows(EXPLODING_SQL) and cur.guard_report.flagged
    assert con._self_guard.lock is None  # check_same_thread=True by default
    con.__init__(":memory:", check_same_thread=False)  # type: ignore[misc]
    assert con._self_guard.lock is not None


def sqlite3_rows(sql: str) -> list[Any]:
    raw = sqlite3.connect(":memory:")
    fill_fanout(raw)
    return raw.execute(sql).fetchall()


def test_opening_the_class_directly_uses_the_default_policy() -> None:
    con = GuardedSQLiteConnection(":memory:")
    assert con.guard_policy == GuardPolicy()
    fill_fanout(con)
    assert con.execute(EXPLODING_SQL).guard_report.patched


class _Cursor(sqlite3.Cursor):
    def tag(self) -> str:
        return "mine"


class _SlottedCursor(sqlite3.Cursor):
    __slots__ = ("extra",)


class _SlottedConnection(sqlite3.Connection):
    __slots__ = ("extra",)


@pytest.mark.parametrize("factory", [_Cursor, _SlottedCursor])
def test_cursor_factories_combine_once(factory: type) -> None:
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    cur = con.cursor(factory)
    assert isinstance(cur, factory) and isinstance(cur, GuardedCursor) and type(cur) is cursor_class(factory)
    assert type(con.cursor(factory=factory)) is type(cur)  # cached per factory
    assert type(cur).__name__ == factory.__name__
    cur.execute(EXPLODING_SQL)
    assert cur.guard_report.patched


def test_callable_cursor_factory_is_guarded_through_a_proxy() -> None:
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    cur = con.cursor(lambda c: sqlite3.Cursor(c))
    assert isinstance(cur, sqlite3.Cursor) and isinstance(cur, GuardedCursor)
    cur.execute(EXPLODING_SQL)
    assert cur.guard_report.patched and cur.connection is con
    with pytest.raises(TypeError):
        con.cursor(lambda c: None)
    with pytest.raises(TypeError):
        con.cursor(None)


@pytest.mark.parametrize("factory", [CountingConnection, _SlottedConnection])
def test_connection_factories_combine_once(factory: type) -> None:
    con = guarded_sqlite.connect(":memory:", factory=factory)
    assert isinstance(con, factory) and type(con) is connection_class(factory)
    assert type(guarded_sqlite.connect(":memory:", factory=factory)) is type(con)
    fill_fanout(con)
    assert con.execute(EXPLODING_SQL).guard_report.patched
    # positional factory (sqlite3.connect's sixth parameter)
    positional = guarded_sqlite.connect(":memory:", 5.0, 0, "", True, factory)
    assert type(positional) is type(con)


def test_callable_connection_factory_is_guarded_through_a_proxy() -> None:
    con = guarded_sqlite.connect(":memory:", factory=lambda *a, **k: sqlite3.Connection(*a, **k))
    assert isinstance(con, GuardedConnection) and isinstance(con, sqlite3.Connection)
    fill_fanout(con)
    assert con.execute(EXPLODING_SQL).guard_report.patched


def test_wrap_of_a_connected_connection() -> None:
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    assert guarded_sqlite.wrap(con) is con and guarded_sqlite.wrap(con, guard="patch") is con
    observed = guarded_sqlite.wrap(con, guard="observe")
    assert observed is not con and guarded_sqlite.unwrap(observed) is con
    cur = observed.execute(EXPLODING_SQL)
    # Only the proxy's policy applies (the connection's own does not guard the proxy's cursors again).
    assert cur.fetchall() == sqlite3_rows(EXPLODING_SQL)
    assert cur.guard_report.mode == "observe" and not cur.guard_report.patched
    assert type(guarded_sqlite.unwrap(cur)) is sqlite3.Cursor


def test_del_cursor_streaming_past_row_cap_releases_the_table() -> None:
    """A cursor still streaming (past row_cap) frees its statement on ``del`` at once, as in sqlite3
    (CPython's test_table_lock_cursor_non_readonly_select)."""
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(row_cap=3))
    con.execute("CREATE TABLE t (x)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    con.commit()
    cur = con.execute("SELECT x FROM t")
    assert cur.fetchone() == (0,)
    del cur
    con.execute("DROP TABLE t")  # "database table is locked" if the cursor were still alive


def test_handed_out_iterator_keeps_streaming_after_del() -> None:
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(row_cap=3))
    con.execute("CREATE TABLE t (x)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    cur = con.execute("SELECT x FROM t")
    rows = iter(cur)
    del cur
    gc.collect()
    assert [r[0] for r in rows] == list(range(10))


def test_report_state_is_read_by_name() -> None:
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    cur = con.execute(EXPLODING_SQL)
    state = cur._self_state
    assert state.final_sql == cur.guard_report.final_sql and state.action == "distinct_injected"
    assert cur.guard_report is cur.guard_report  # built once per statement
    first = cur.guard_report
    cur.execute("SELECT 1")
    assert cur.guard_report is not first and cur.guard_report.sql == "SELECT 1"


def test_threads_with_check_same_thread_false() -> None:
    con = guarded_sqlite.connect(":memory:", check_same_thread=False)
    fill_fanout(con)
    assert con._self_guard.lock is not None
    out: list[Any] = []
    threads = [threading.Thread(target=lambda: out.append(con.execute(EXPLODING_SQL).fetchall())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 4 and all(rows == out[0] for rows in out)


def test_import_is_light() -> None:
    """``import guarded_sqlite`` loads neither wrapt nor the evaluation package nor sqlglot; wrap() and
    ``evaluate`` load them when first used."""
    code = (
        "import sys, guarded_sqlite, sqlite3\n"
        "heavy = ('wrapt', 'guarded_sqlite.evaluation', 'sqlglot', 'guarded_sqlite.rescue',\n"
        "         'guarded_sqlite._io.proxy')\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
        "con = guarded_sqlite.connect(':memory:'); con.execute('SELECT 1').fetchall()\n"
        "assert 'wrapt' not in sys.modules\n"
        "guarded_sqlite.wrap(sqlite3.connect(':memory:'))\n"
        "assert 'wrapt' in sys.modules\n"
        "assert callable(guarded_sqlite.evaluate) and 'guarded_sqlite.evaluation' in sys.modules\n"
        "assert guarded_sqlite.DupRatioSelector.__name__ == 'DupRatioSelector'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_attribute_of_the_package() -> None:
    with pytest.raises(AttributeError):
        guarded_sqlite.no_such_name  # noqa: B018


@pytest.mark.parametrize("driver", ["duckdb", "sqlite3"])
def test_wrap_works_as_the_first_use_of_the_package_in_a_fresh_process(driver: str) -> None:
    """Guarding a connection is the first thing a fresh process does with the package: the proxies'
    modules must import in whatever order wrap() reaches them (a circular import once broke DuckDB)."""
    pytest.importorskip(driver)
    opener = "duckdb.connect()" if driver == "duckdb" else "sqlite3.connect(':memory:')"
    code = (
        f"import {driver}, guarded_sqlite\n"
        f"con = guarded_sqlite.wrap({opener})\n"
        "print(con.execute('SELECT 1').fetchall())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(1,)]"


# --- guard_report: built once per new set of facts -------------------------------------------------------

_POINT_SQLS = ["SELECT k FROM t WHERE k = ?", "SELECT v FROM t WHERE k = ?", "SELECT v FROM t WHERE k <= ?"]


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(_POINT_SQLS), st.integers(0, 5), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_every_report_describes_its_own_statement(steps: list[tuple[str, str, int, bool]]) -> None:
    """Reports are reused for a statement repeated with the same facts: whatever the sequence of
    statements, cursors and reads, each report gives its own statement's SQL and counts."""
    con = guarded_sqlite.connect(":memory:", guard="observe")
    con.execute("CREATE TABLE t (k INTEGER, v INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(k, k % 2) for k in range(4)] + [(3, 1), (3, 1)])
    cursors = {"a": con.cursor(), "b": con.cursor()}
    for name, sql, key, read_twice in steps:
        cur = cursors[name]
        rows = cur.execute(sql, (key,)).fetchall()
        report = cur.guard_report
        assert (report.sql, report.rows, report.unique_rows) == (sql, len(rows), len(set(rows)))
        assert report.dup_ratio == ((len(rows) - len(set(rows))) / len(rows) if rows else None)
        if read_twice:
            assert cur.guard_report is report
    last = {name: (sql, key) for name, sql, key, _ in steps}
    for name, (sql, key) in last.items():  # each cursor's last report is still its own
        rows = con.execute(sql, (key,)).fetchall()
        assert (cursors[name].guard_report.sql, cursors[name].guard_report.rows) == (sql, len(rows))
    assert all(cursors[name].guard_report is None for name in cursors.keys() - last.keys())


@settings(max_examples=300, deadline=None)
@given(
    rows=st.one_of(st.none(), st.integers(0, 50)),
    duplicates=st.integers(0, 50),
    trigger=st.sampled_from([None, "exec_error", "empty_result", "cartesian_explosion"]),
    action=st.sampled_from(["none", "distinct_injected", "distinct_removed"]),
    note=st.one_of(st.none(), st.just("a note")),
    error=st.one_of(st.none(), st.just("OperationalError: x")),
    decided=st.booleans(),
    detect_ns=st.one_of(st.none(), st.integers(0, 10**6)),
    patch_ns=st.one_of(st.none(), st.integers(0, 10**9)),
)
def test_report_fields_follow_their_definitions(
    rows: int | None,
    duplicates: int,
    trigger: str | None,
    action: Any,
    note: str | None,
    error: str | None,
    decided: bool,
    detect_ns: int | None,
    patch_ns: int | None,
) -> None:
    """GuardReport.from_state against the field definitions, written out for any state."""
    unique = None if rows is None else max(rows - duplicates, 1 if rows else 0)
    final_rows = None if rows is None else unique if action == "distinct_injected" else rows
    decisions = (RuleDecision("P1", action != "none", "why"),) if decided else ()
    state = ReportState(
        "patch", "SELECT 1", "SELECT 2", trigger, action, rows, unique, final_rows, note, error, decisions,
        detect_ns, patch_ns,
    )  # fmt: skip
    expected = GuardReport(
        sql="SELECT 1",
        final_sql="SELECT 2",
        mode="patch",
        preset="patch",
        trigger=trigger,
        flagged=trigger is not None,
        action=action,
        probed=rows is not None,
        rows=rows,
        unique_rows=unique,
        dup_ratio=None if not rows or unique is None else (rows - unique) / rows,
        final_rows=final_rows,
        decisions=decisions,
        note=note,
        error=error,
        detect_us=None if detect_ns is None else detect_ns / 1000,
        patch_ms=None if patch_ns is None else patch_ns / 1e6,
    )
    built = GuardReport.from_state(state)
    assert built == expected and list(vars(built)) == [f.name for f in dataclasses.fields(GuardReport)]


def test_states_built_by_position_equal_the_same_states_built_by_name() -> None:
    # The fast path and unprobed() build ReportState by position; a field out of
    # place would put, say, the row count in unique_rows.
    con = guarded_sqlite.connect(":memory:")
    con.execute("CREATE TABLE t (a INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
    same = {"preset": "patch", "trigger": None, "action": "none", "error": None, "decisions": (), "patch_ns": None}
    for sql, rows in (("SELECT a FROM t WHERE a = 1", 1), ("SELECT a FROM t", 3)):
        cur = con.execute(sql)
        cur.fetchall()
        state = cur._self_state
        assert type(state.detect_ns) is int
        counts = {"rows": rows, "unique_rows": rows, "final_rows": rows}
        by_name = ReportState(sql=sql, final_sql=sql, note=None, detect_ns=state.detect_ns, **counts, **same)
        assert state._asdict() == by_name._asdict()
    write = con.execute("UPDATE t SET a = a + 1").guard_report
    unprobed = con.execute("UPDATE t SET a = a + 1")._self_state
    assert isinstance(unprobed.note, str) and unprobed.note == write.note
    by_name = ReportState(
        sql=unprobed.sql, final_sql=unprobed.sql, rows=None, unique_rows=None, final_rows=None, note=unprobed.note,
        detect_ns=None, **same,
    )  # fmt: skip
    assert unprobed._asdict() == by_name._asdict()


@pytest.mark.parametrize("opened", ["connect", "wrap"])
def test_a_repeated_single_row_shares_its_state_and_each_statement_reports_its_own(opened: str) -> None:
    # decide.after_fetch keeps the last healthy single row's state per connection (and per guard_scope
    # policy) and gives it again while the SQL repeats: what each cursor reports must not change.
    con: Any = (
        guarded_sqlite.connect(":memory:") if opened == "connect" else guarded_sqlite.wrap(sqlite3.connect(":memory:"))
    )
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2, "b")])
    sql = "SELECT name FROM t WHERE id = ?"
    con.execute(sql, (2,)).fetchall()  # the first time, the aggregate rule's pre-screen reads the SQL
    first, second = con.execute(sql, (1,)), con.execute(sql, (2,))
    assert (first.fetchall(), second.fetchall()) == ([("a",)], [("b",)])
    assert first._self_state is second._self_state  # one state for both: built once
    other = con.execute("SELECT name FROM t WHERE id = 2")
    assert other.guard_report.sql == "SELECT name FROM t WHERE id = 2" and first.guard_report.sql == sql
    assert con.guard_report.sql == other.guard_report.sql
    with con.guard_scope("observe"):
        scoped = con.execute(sql, (1,))
        assert scoped._self_state is not first._self_state
        assert (scoped.guard_report.mode, scoped.guard_report.preset) == ("observe", "observe")
    again = con.execute(sql, (1,))
    assert again.guard_report.preset == "patch" and again.guard_report.rows == again.guard_report.unique_rows == 1
    report = again.guard_report
    assert (report.trigger, report.action, report.final_sql, report.detect_us) == (None, "none", sql, 0)


def test_a_repeated_single_row_that_cannot_be_hashed_goes_the_general_way() -> None:
    # The fast path serves a repeated point query's kept state inline (sqlite_fast._statement); a row it
    # cannot hash (a text_factory's bytearray) must reach decide.after_fetch as before, not raise.
    con = guarded_sqlite.connect(":memory:")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO t VALUES (1, 'a')")
    sql = "SELECT name FROM t WHERE id = 1"
    con.execute(sql).fetchall()
    kept = con.execute(sql)._self_state
    con.text_factory = bytearray
    cur = con.execute(sql)
    assert cur.fetchall() == [(bytearray(b"a"),)]
    assert cur._self_state is not kept  # judged anew: the kept state was not served for it
    report = cur.guard_report
    assert (report.rows, report.unique_rows, report.trigger, report.action) == (1, 1, None, "none")


def test_a_repeated_single_row_of_an_aggregate_at_risk_is_still_checked() -> None:
    # The inline lane serves a kept state only where the aggregate pre-screen said no for the SQL.
    con = guarded_sqlite.connect(":memory:")
    fill_fanout(con)
    sql = "SELECT SUM(c.id) FROM customers c JOIN orders o ON o.customer_id = c.id"
    for _ in range(3):
        cur = con.execute(sql)
        assert len(cur.fetchall()) == 1
        assert cur.guard_report.trigger == "aggregate_fanout"
