"""Re-execution safety (issue 9), P1 is served from the rows already fetched, with no re-execution;
and where SQL's DISTINCT would merge what Python keeps apart, P1 is refused.

Each repro in ../shared/repros/reliability/ named here is a test; the design under test is in
tests/reliability/shared.py's docstring.
"""

from __future__ import annotations

import re
import sqlite3
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite
from tests.reliability.shared import ALL_NAMES
from tests.reliability_helpers import (
    EXPLODE,
    first_occurrence,
    run_child,
    setup,
)

# --- 1. P1 is served from the fetched rows: no re-execution ---------------------------------------


def test_r01_p1_calls_user_function_as_often_as_sqlite3(tmp_path: Path) -> None:
    """r01: a side-effecting user function in a flagged SELECT runs exactly as often as with plain
    sqlite3: the default's join-copy check never re-runs a statement that calls one (rows left as
    they are; the paper preset's P1 serves the fetched rows, nothing runs again either)."""
    outcome = {}
    for label, connect in [("raw", sqlite3.connect), ("guarded", guarded_sqlite.connect)]:
        path = str(tmp_path / f"{label}.db")
        con = connect(path)
        con.execute("PRAGMA journal_mode=WAL")
        setup(con)
        con.commit()
        side = sqlite3.connect(path, isolation_level=None)
        calls: list[str] = []

        def log(x: str, calls: list[str] = calls, side: sqlite3.Connection = side) -> str:
            calls.append(x)
            side.execute("INSERT INTO audit VALUES (?)", (x,))
            return x

        con.create_function("log", 1, log)
        cur = con.execute(EXPLODE.replace("SELECT t.name", "SELECT log(t.name)"))
        rows = cur.fetchall()
        audit = side.execute("SELECT count(*) FROM audit").fetchone()[0]
        outcome[label] = (rows, len(calls), audit, getattr(cur, "guard_report", None))
        side.close()
        con.close()
    raw_rows, raw_calls, raw_audit, _ = outcome["raw"]
    rows, calls, audit, report = outcome["guarded"]
    # The join-copy check would call the function again: the statement is not re-run, its rows stay.
    assert report.action == "none" and report.provenance == "unknown" and "log()" in report.decisions[0].reason
    assert rows == raw_rows
    assert (calls, audit) == (raw_calls, raw_audit) == (200, 200)


@pytest.mark.parametrize(
    "sql",
    [
        EXPLODE,
        EXPLODE + " ORDER BY t.id DESC",
        "SELECT t.name, t.id % 3 FROM t JOIN u ON u.t_id = t.id ORDER BY u.id DESC",
    ],
)
def test_r01_p1_rows_are_the_originals_deduplicated_in_first_occurrence_order(sql: str) -> None:
    """r01: P1's rows are ``list(dict.fromkeys(original rows))`` (ORDER BY kept) and final_sql says DISTINCT."""
    raw = setup(sqlite3.connect(":memory:"))
    con = setup(guarded_sqlite.connect(":memory:"))
    expected = first_occurrence(raw.execute(sql).fetchall())
    cur = con.execute(sql)
    assert cur.fetchall() == expected
    report = cur.guard_report
    assert report.action == "distinct_injected"
    assert re.match(r"(?is)\s*select\s+distinct\b", report.final_sql)
    assert report.final_rows == len(expected) and report.rows == len(expected) * 10


def test_r09_p1_trace_callback_and_authorizer_see_only_the_callers_statement() -> None:
    """r09: with P1 served from the buffer (paper preset: no catalog read), the caller's trace callback
    and authorizer see exactly what plain sqlite3 shows them: the caller's statement, no PRAGMA."""
    seen = {}
    for label, connect in [("raw", sqlite3.connect), ("guarded", partial(guarded_sqlite.connect, guard="paper"))]:
        con = setup(connect(":memory:"))
        con.commit()
        traced: list[str] = []
        auth: list[tuple[Any, ...]] = []
        con.set_trace_callback(traced.append)
        con.set_authorizer(
            lambda action, a1, a2, db, trig, auth=auth: auth.append((action, a1, a2)) or sqlite3.SQLITE_OK
        )
        cur = con.execute(EXPLODE)
        cur.fetchall()
        con.set_trace_callback(None)
        con.set_authorizer(None)
        seen[label] = (traced, auth, getattr(cur, "guard_report", None))
    assert seen["guarded"][2].action == "distinct_injected"
    assert seen["guarded"][0] == seen["raw"][0] == [EXPLODE]
    assert seen["guarded"][1] == seen["raw"][1]
    assert not [a for a in seen["guarded"][1] if a[0] == sqlite3.SQLITE_PRAGMA]


def test_r09_default_preset_reads_the_catalog_once_then_checks_it_by_lookups() -> None:
    """r09 (documented difference): the default preset reads the schema's keys on the caller's
    connection the first time a flagged result needs a verdict; those reads are catalog queries only,
    and the same statement again only re-reads the schema list and the declarations of its tables.
    Then the join-copy check: the statement with t's row id appended (under a zero busy timeout,
    restored after); the application's functions were listed once, by the first statement."""
    con = setup(guarded_sqlite.connect(":memory:"))
    con.commit()
    traced: list[str] = []
    con.set_trace_callback(traced.append)
    assert con.execute(EXPLODE).guard_report.action == "distinct_injected"
    first = list(traced)
    traced.clear()
    assert con.execute(EXPLODE).guard_report.action == "distinct_injected"
    con.set_trace_callback(None)
    assert first[0] == EXPLODE and len(first) > 1
    assert all(s.lstrip().upper().startswith(("PRAGMA", "SELECT")) for s in first[1:]), first
    assert traced[0] == EXPLODE and traced[1] == "PRAGMA database_list" and "WHERE rowid = " in traced[2], traced
    assert all("index_list" in s for s in traced[3:5]), traced
    check = EXPLODE.replace("t.name", 't.name, "t"."id" AS "__gs_id0"', 1)
    assert "PRAGMA function_list" in first  # read once per connection: not again below
    assert traced[5:] == [
        "PRAGMA busy_timeout",
        "PRAGMA busy_timeout = 0",
        check,
        "PRAGMA busy_timeout = 5000",
    ], traced
    assert len(traced) < len(first)


def test_r09_ignore_pragma_authorizer_does_not_stop_p1() -> None:
    """r09: an authorizer answering SQLITE_IGNORE to pragmas cannot break P1 (nothing is re-run), and a
    user function writing through the connection runs once per row, as with sqlite3 (200 writes). The
    paper's preset, because the default reads keys with PRAGMAs: for it the silenced catalog is
    unreadable, so its verdict is unknown and it changes no row (tests/repros/test_repros_provenance.py, p13)."""
    con = setup(guarded_sqlite.connect(":memory:", guard="paper"))
    con.commit()
    raw = guarded_sqlite.unwrap(con)

    def logw(x: str) -> str:
        sqlite3.Cursor(raw).execute("INSERT INTO audit VALUES (?)", (x,))
        return x

    con.create_function("logw", 1, logw)
    con.set_authorizer(
        lambda action, *a: sqlite3.SQLITE_IGNORE if action == sqlite3.SQLITE_PRAGMA else sqlite3.SQLITE_OK
    )
    cur = con.execute(EXPLODE.replace("SELECT t.name", "SELECT logw(t.name)"))
    rows = cur.fetchall()
    con.set_authorizer(None)
    assert cur.guard_report.action == "distinct_injected"
    assert set(rows) == ALL_NAMES and len(rows) == 20
    assert raw.execute("SELECT count(*) FROM audit").fetchone()[0] == 200


def test_r02_p1_needs_no_rerun_so_a_heap_limit_cannot_cost_the_transaction(tmp_path: Path) -> None:
    """r02: under a hard heap limit the DISTINCT rerun used to fail with SQLITE_NOMEM and SQLite rolled
    back the caller's transaction; P1 now runs nothing, so the patch applies and the write survives."""
    result = run_child(
        f"""
        path = {str(tmp_path / "r02.db")!r}
        s = sqlite3.connect(path)
        s.executescript('''
          CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE u (t_id INTEGER); CREATE TABLE audit (x);
          WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 6000)
          INSERT INTO t SELECT i, printf('%.1000d', i) FROM n;
          WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < 29999)
          INSERT INTO u SELECT i % 6000 + 1 FROM n;''')
        s.commit(); s.close()
        out = {{}}
        for label, connect in [("raw", sqlite3.connect), ("guarded", guarded_sqlite.connect)]:
            con = connect(path)
            con.execute("PRAGMA temp_store = MEMORY"); con.execute("PRAGMA cache_size = -1000")
            con.execute("INSERT INTO audit VALUES ('precious uncommitted row')")
            con.execute("PRAGMA hard_heap_limit = 5000000")
            try:
                cur = con.execute("SELECT t.name FROM t JOIN u ON u.t_id = t.id")
                rows = cur.fetchall()
                res = dict(rows=len(rows), action=getattr(cur, "guard_report", None) and cur.guard_report.action)
            except BaseException as e:
                res = dict(error=repr(e))
            res["in_tx"] = con.in_transaction
            con.execute("PRAGMA hard_heap_limit = 0")
            con.commit(); con.close()
            res["audit"] = sqlite3.connect(path).execute("SELECT count(*) FROM audit").fetchone()[0]
            sqlite3.connect(path, isolation_level=None).execute("DELETE FROM audit")
            # the limit is real: DISTINCT itself fails under it
            probe = sqlite3.connect(path); probe.execute("PRAGMA temp_store = MEMORY")
            probe.execute("PRAGMA hard_heap_limit = 5000000")
            try:
                probe.execute("SELECT DISTINCT t.name FROM t JOIN u ON u.t_id = t.id").fetchall()
                res["distinct_fits"] = True
            except MemoryError:
                res["distinct_fits"] = False
            probe.execute("PRAGMA hard_heap_limit = 0"); probe.close()
            out[label] = res
        report(**out)
        """,
        timeout=60,
    )
    raw, guarded = result["raw"], result["guarded"]
    assert raw == {"rows": 30000, "action": None, "in_tx": True, "audit": 1, "distinct_fits": False}
    assert guarded["distinct_fits"] is False
    assert guarded == {**raw, "rows": 6000, "action": "distinct_injected"}


# --- 1b. where SQL's DISTINCT would merge what Python keeps apart, P1 is refused ------------------


def _collation_db(declaration: str, names: list[str]) -> tuple[sqlite3.Connection, Any]:
    script = f"""
        CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT {declaration});
        CREATE TABLE u (id INTEGER PRIMARY KEY, t_id INTEGER);
        CREATE TABLE audit (x);
    """
    pair = []
    for connect in (sqlite3.connect, guarded_sqlite.connect):
        con = connect(":memory:")
        con.executescript(script)
        con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(names, 1)))
        con.executemany("INSERT INTO u (t_id) VALUES (?)", [(i % len(names) + 1,) for i in range(10 * len(names))])
        con.commit()
        pair.append(con)
    return pair[0], pair[1]


def _assert_p1_refused(raw: sqlite3.Connection, con: Any, sql: str) -> None:
    expected = raw.execute(sql).fetchall()
    cur = con.execute(sql)
    assert cur.fetchall() == expected
    report = cur.guard_report
    assert report.trigger == "cartesian_explosion"
    assert report.action == "none" and report.final_sql == sql
    p1 = [d for d in report.decisions if d.rule == "P1"]
    assert p1 and not p1[0].applied and p1[0].reason


@pytest.mark.parametrize(
    ("declaration", "names"),
    [
        ("COLLATE NOCASE", ["Ann", "ANN", "ann", "Bob", "bob"]),
        ("COLLATE RTRIM", ["x", "x ", "x  ", "y", "y "]),
    ],
)
def test_p1_refused_where_a_declared_collation_merges_distinct_python_values(
    declaration: str, names: list[str]
) -> None:
    """r01 (P1 from the buffer): text values that differ only by case or trailing spaces in a column
    declared NOCASE/RTRIM would be merged by SQL's DISTINCT but not by Python: P1 is refused with a
    reason, and the original rows are served."""
    raw, con = _collation_db(declaration, names)
    _assert_p1_refused(raw, con, EXPLODE)


def test_p1_with_a_collate_in_the_query_is_checked_by_one_read_only_run() -> None:
    """r01 (P1 from the buffer): a COLLATE in the SQL could make DISTINCT merge rows Python keeps
    apart, so P1 runs the rewrite once, read-only, to check: values that do not collide are served
    de-duplicated; values the collation merges keep the original rows (next test)."""
    raw, con = _collation_db("", [f"name{i}" for i in range(1, 21)])
    sql = "SELECT t.name COLLATE NOCASE FROM t JOIN u ON u.t_id = t.id"
    cur = con.execute(sql)
    rows = cur.fetchall()
    assert rows == list(dict.fromkeys(raw.execute(sql).fetchall()))
    (p1,) = [d for d in cur.guard_report.decisions if d.rule == "P1"]
    assert p1.applied and "checked by one read-only run" in p1.reason and "COLLATE" in p1.reason


def test_p1_refused_when_a_collate_in_the_query_merges_values() -> None:
    """r01: the check run merges 'Ann'/'ANN'/'ann' under the query's COLLATE NOCASE: P1 is refused and
    the original rows are served."""
    raw, con = _collation_db("", ["Ann", "ANN", "ann", "Bob", "bob"])
    _assert_p1_refused(raw, con, "SELECT t.name COLLATE NOCASE FROM t JOIN u ON u.t_id = t.id")
