"""Re-execution safety (issue 9), P2 and rescue candidates run on a separate read-only connection, or under
``PRAGMA query_only`` on the caller's, which is restored.

Each repro in ../shared/repros/reliability/ named here is a test; the design under test is in
tests/reliability/shared.py's docstring.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

import guarded_sqlite
from guarded_sqlite import DupRatioSelector, GuardPolicy
from tests.pace import within
from tests.reliability.shared import P2_NAMES, P2_SQL, P2_TABLE, _p2, _p2_db, writable
from tests.reliability_helpers import (
    EXPLODE,
    make_db,
    raw_query_only,
)

# --- 2. P2 and rescue candidates: a separate read-only connection, or query_only on the caller's ---


def test_r09_p2_guard_statements_are_visible_read_only_and_leave_nothing_behind(tmp_path: Path) -> None:
    """r09 (documented difference): P2 re-executes on the caller's connection, so the caller's trace
    callback sees the guard's statements: the rewritten query and PRAGMAs that switch query_only and
    busy_timeout and back. The patch applies and both settings are as before afterwards."""
    path = _p2_db(tmp_path)
    con = guarded_sqlite.connect(path, timeout=2.5, guard="paper")
    traced: list[str] = []
    con.set_trace_callback(traced.append)
    cur = con.execute(P2_SQL)
    rows = cur.fetchall()
    con.set_trace_callback(None)
    assert cur.guard_report.action == "distinct_removed" and _p2(cur).applied
    assert sorted(rows) == sorted(sqlite3.connect(path).execute("SELECT name FROM p2").fetchall())
    assert traced[0] == P2_SQL
    extra = traced[1:]
    assert "PRAGMA query_only = ON" in extra and "PRAGMA query_only = 0" in extra
    assert all(s.startswith("PRAGMA") or "DISTINCT" not in s.upper() for s in extra), extra
    assert raw_query_only(con) == 0
    assert con.execute("PRAGMA busy_timeout").fetchone() == (2500,)


def test_r09_rescue_candidates_leave_the_connection_writable(tmp_path: Path) -> None:
    """r09: rescue candidates run read-only on the caller's connection (visible to its trace callback,
    documented) and leave query_only off."""
    path = _p2_db(tmp_path)
    con = guarded_sqlite.connect(path, guard=GuardPolicy(rescue=DupRatioSelector()))
    candidates = [EXPLODE, "SELECT name FROM t ORDER BY id"]
    cur = con.execute("SELECT name FROM t WHERE 0", candidates=candidates)
    rows = cur.fetchall()
    assert cur.guard_report.action == "candidate_selected" and cur.guard_report.rescue.chosen_index == 1
    assert rows == [(f"name{i}",) for i in range(1, 21)]
    assert raw_query_only(con) == 0
    con.execute("INSERT INTO t (name) VALUES ('writable')")


def test_p2_inside_a_transaction_sees_uncommitted_rows_and_restores_query_only(tmp_path: Path) -> None:
    """r24/r09: inside an open transaction P2 runs on the caller's connection (it sees uncommitted
    rows), under query_only, which is off again afterwards; the transaction stays open and rolls back."""
    path = _p2_db(tmp_path)
    con = guarded_sqlite.connect(path, guard="paper")
    con.execute("INSERT INTO p2 VALUES ('a2'), ('uncommitted')")
    cur = con.execute(P2_SQL)
    rows = cur.fetchall()
    assert cur.guard_report.action == "distinct_removed"
    assert sorted(rows) == sorted([*P2_NAMES, ("a1",), ("a2",), ("uncommitted",)])
    assert raw_query_only(con) == 0 and con.in_transaction
    con.rollback()
    assert sqlite3.connect(path).execute("SELECT count(*) FROM p2").fetchone()[0] == 21


def test_p2_on_a_memory_database_restores_query_only() -> None:
    """r09: a :memory: database has no second connection: P2 runs on the caller's, and leaves
    query_only off."""
    con = guarded_sqlite.connect(":memory:", guard="paper")
    con.executescript(P2_TABLE + "CREATE TABLE audit (x);")
    cur = con.execute(P2_SQL)
    assert len(cur.fetchall()) == 21 and cur.guard_report.action == "distinct_removed"
    assert raw_query_only(con) == 0
    writable(con)


def test_r25_candidates_on_a_locked_database_fail_fast(tmp_path: Path) -> None:
    """r25: the selection fails with "database is locked" after the caller's busy timeout; each
    candidate used to wait the busy timeout again (8 s here). The guard's own statements give up at
    once: the same error as sqlite3, in about the same time."""
    path = make_db(tmp_path / "locked.db")
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        raw = sqlite3.connect(path, timeout=1.0)
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError) as raw_error:
            raw.execute("SELECT name FROM t")
        raw_time = time.monotonic() - started
        con = guarded_sqlite.connect(path, timeout=1.0, guard=GuardPolicy(rescue=DupRatioSelector(), rerun_timeout=0.2))
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError) as guarded_error:
            con.execute("SELECT name FROM t", candidates=["SELECT name FROM t WHERE id < 5"] * 6)
        elapsed = time.monotonic() - started
    finally:
        locker.execute("ROLLBACK")
    assert type(guarded_error.value) is type(raw_error.value)
    assert str(guarded_error.value) == str(raw_error.value) == "database is locked"
    assert within(elapsed, raw_time, 0.7), f"guarded {elapsed:.2f}s vs sqlite3 {raw_time:.2f}s"


def test_r25_guard_statement_gives_up_at_once_the_callers_next_statement_still_waits(tmp_path: Path) -> None:
    """r25: another connection takes the write lock between the caller's DISTINCT query and P2's rerun:
    the rerun (separate read-only connection, busy timeout 0) gives up at once and the original rows
    are served; the caller's next statement still waits the caller's own busy timeout."""
    path = _p2_db(tmp_path)
    locker = sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False)
    probe = sqlite3.connect(path, timeout=0)
    locked = threading.Event()
    marks: dict[str, float] = {}
    calls = [0]

    def take_lock() -> None:
        locker.execute("BEGIN EXCLUSIVE")  # PENDING at once (blocks new readers), EXCLUSIVE when the caller is done

    def progress() -> int:
        calls[0] += 1
        if calls[0] == 30 and not locked.is_set():  # well into the statement: its SHARED lock is held
            locked.set()
            threading.Thread(target=take_lock, daemon=True).start()
            for _ in range(200):  # until the locker's PENDING lock keeps new readers out
                try:
                    probe.execute("SELECT count(*) FROM p2").fetchall()
                except sqlite3.OperationalError:
                    break
                time.sleep(0.005)
            marks["pending"] = time.monotonic()
        return 0

    # The paper preset: the default one reads the schema's keys first, which waits like any statement.
    con = guarded_sqlite.connect(path, timeout=1.0, guard="paper")
    con.execute("SELECT count(*) FROM p2").fetchall()  # schema loaded: the handler's calls are the statement's
    con.set_progress_handler(progress, 1)
    try:
        cur = con.execute(P2_SQL)
        rows = cur.fetchall()
        returned = time.monotonic() - marks["pending"]
        con.set_progress_handler(None, 0)
        assert sorted(rows) == sorted(P2_NAMES)  # the original rows
        assert cur.guard_report.action == "none"
        decision = _p2(cur)
        assert not decision.applied and "locked" in decision.reason
        assert returned < 0.5, f"P2 waited {returned:.2f}s on a locked database"
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            con.execute("SELECT count(*) FROM p2")
        assert time.monotonic() - started >= 0.8  # the caller's own busy timeout (1.0 s) still applies
    finally:
        if locker.in_transaction:
            locker.execute("ROLLBACK")
