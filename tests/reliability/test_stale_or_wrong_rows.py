"""Re-execution safety (issue 9), stale or wrong rows and errors: re-execution while streaming, writes
through the iterated cursor, descriptions, closed objects, bad input raising as sqlite3 does.

Each repro in ../shared/repros/reliability/ named here is a test; the design under test is in
tests/reliability/shared.py's docstring.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from typing import Any

import pytest

import guarded_sqlite
from guarded_sqlite import DupRatioSelector, GuardPolicy

# --- 7. stale or wrong rows -------------------------------------------------------------------------


@pytest.mark.parametrize("new_n", [5, 30])
def test_r10_reexecute_inside_the_loop_while_streaming_past_row_cap(new_n: int) -> None:
    """r10: re-executing the cursor inside ``for row in cur`` while the old result streams past
    row_cap: the loop continues with the new statement's rows, exactly as with sqlite3."""
    old = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20) SELECT 'old', i FROM n"
    new = f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < {new_n}) SELECT 'new', i FROM n"
    seen = {}
    for label, con in [
        ("raw", sqlite3.connect(":memory:")),
        ("guarded", guarded_sqlite.connect(":memory:", guard=GuardPolicy(row_cap=10))),
    ]:
        cur = con.cursor()
        cur.execute(old)
        rows = []
        for row in cur:
            rows.append(row)
            if row == ("old", 2):
                cur.execute(new)
        seen[label] = rows
    assert seen["guarded"] == seen["raw"]


@pytest.mark.parametrize("method", ["execute", "executemany", "executescript"])
def test_r26_write_through_the_iterated_cursor_ends_the_loop_as_sqlite3_does(method: str) -> None:
    """r26: execute/executemany/executescript on the cursor being iterated: the loop sees the same rows
    as with sqlite3 (executemany used to keep serving the old rows)."""
    seen = {}
    for label, connect in [("raw", sqlite3.connect), ("guarded", guarded_sqlite.connect)]:
        con = connect(":memory:")
        con.execute("CREATE TABLE src(x)")
        con.execute("CREATE TABLE dst(x)")
        con.executemany("INSERT INTO src VALUES (?)", [(i,) for i in range(5)])
        cur = con.cursor()
        cur.execute("SELECT x FROM src")
        rows = []
        for (x,) in cur:
            rows.append(x)
            if method == "execute":
                cur.execute("INSERT INTO dst VALUES (?)", (x,))
            elif method == "executemany":
                cur.executemany("INSERT INTO dst VALUES (?)", [(x,)])
            else:
                cur.executescript(f"INSERT INTO dst VALUES ({x});")
        seen[label] = (rows, con.execute("SELECT count(*) FROM dst").fetchone()[0])
    assert seen["guarded"] == seen["raw"]


class _Money:
    def __init__(self, v: Any) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Money) and other.v == self.v

    def __hash__(self) -> int:
        if self.v is None:
            raise ValueError("cannot hash an unknown amount")
        return hash(self.v)


def _money(value: bytes) -> _Money:
    """A converter whose objects cannot always be hashed (an unknown amount raises ValueError)."""
    return _Money(None if value == b"unknown" else int(value))


def test_r19_value_hash_raising_valueerror_serves_the_new_rows_unprobed() -> None:
    """r19: a value whose __hash__ raises ValueError (made by a converter: the probe hashes the values
    sqlite3 returns, not a row factory's objects): execute() does not raise (sqlite3 does not), the rows
    are served unprobed with a note, and fetchall() never serves the previous statement's rows."""
    sqlite3.register_converter("R19MONEY", _money)
    seen = {}
    for label, connect in [("raw", sqlite3.connect), ("guarded", guarded_sqlite.connect)]:
        con = connect(":memory:", detect_types=sqlite3.PARSE_COLNAMES)
        cur = con.cursor()
        cur.execute("SELECT 'previous statement', 1 AS \"m [R19MONEY]\"")
        cur.execute("SELECT 'new statement', 'unknown' AS \"m [R19MONEY]\"")
        seen[label] = ([(a, b.v) for a, b in cur.fetchall()], cur)
    assert seen["guarded"][0] == seen["raw"][0] == [("new statement", None)]
    report = seen["guarded"][1].guard_report
    assert not report.probed and report.note and report.action == "none"


@pytest.mark.parametrize("selection", ["SELECT city FROM customers WHERE 0", "SELECT nme FROM customers"])
def test_r28_description_describes_the_served_candidate(selection: str) -> None:
    """r28: after a rescue serves a candidate's rows, cursor.description names the candidate's columns
    (it used to describe the failed or empty selection)."""
    con = guarded_sqlite.connect(":memory:", guard=GuardPolicy(rescue=DupRatioSelector()))
    con.execute("CREATE TABLE customers(id, name, city)")
    con.execute("INSERT INTO customers VALUES (1, 'Ana', 'Oslo'), (2, 'Ben', 'Rome')")
    cur = con.execute(selection, candidates=["SELECT id, name FROM customers"])
    assert cur.fetchall() == [(1, "Ana"), (2, "Ben")]
    assert cur.guard_report.action == "candidate_selected"
    assert cur.description is not None and [d[0] for d in cur.description] == ["id", "name"]


def _message(error: BaseException) -> str:
    """The message with thread ids blanked (each thread has its own)."""
    return re.sub(r"thread id \d+", "thread id N", str(error))


def _attempt(fn: Any) -> tuple[str, str]:
    try:
        return ("returned", repr(fn()))
    except Exception as error:
        return (type(error).__name__, _message(error))


@pytest.mark.parametrize("row_cap", [10, 1_000_000])
def test_r33_fetch_after_close_or_from_another_thread_raises_like_sqlite3(row_cap: int) -> None:
    """r33: past row_cap (and below it) fetchone() after close() or from another thread raises
    ProgrammingError with sqlite3's message instead of serving the buffered head."""
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20) SELECT i FROM n"
    seen = {}
    for label, make in [
        ("raw", lambda: sqlite3.connect(":memory:")),
        ("guarded", lambda: guarded_sqlite.connect(":memory:", guard=GuardPolicy(row_cap=row_cap))),
    ]:
        con = make()
        cur = con.execute(sql)
        con.close()
        closed = _attempt(cur.fetchone)
        con = make()
        cur = con.execute(sql)
        out: dict[str, Any] = {}
        thread = threading.Thread(target=lambda cur=cur, out=out: out.setdefault("r", _attempt(cur.fetchone)))
        thread.start()
        thread.join(10)
        seen[label] = (closed, out["r"])
    assert seen["guarded"] == seen["raw"]
    assert seen["raw"][0][0] == seen["raw"][1][0] == "ProgrammingError"


class _Unadaptable:
    pass


def _closed_con(c: Any) -> Any:
    c.close()
    return c.execute("SELECT 1")


def _closed_cur_exec(c: Any) -> Any:
    cur = c.cursor()
    cur.close()
    return cur.execute("SELECT 1")


def _closed_cur_fetch(c: Any) -> Any:
    cur = c.execute("SELECT 1")
    cur.close()
    return cur.fetchall()


def _closed_con_fetch(method: str) -> Any:
    def case(c: Any) -> Any:
        cur = c.execute("SELECT * FROM t")
        c.close()
        return list(cur) if method == "iter" else getattr(cur, method)()

    return case


def _wrong_thread(fetch: bool) -> Any:
    def case(c: Any) -> Any:
        cur = c.execute("SELECT * FROM t") if fetch else None
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                cur.fetchone() if cur is not None else c.execute("SELECT 1")
            except Exception as error:
                out["e"] = error

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(10)
        if "e" in out:
            raise out["e"]
        return "no error"

    return case


R16_CASES: dict[str, Any] = {
    "syntax error": lambda c: c.execute("SELEC 1"),
    "missing table": lambda c: c.execute("SELECT * FROM nope"),
    "missing column": lambda c: c.execute("SELECT zz FROM t"),
    "too few params": lambda c: c.execute("SELECT ?, ?", (1,)),
    "too many params": lambda c: c.execute("SELECT ?", (1, 2)),
    "missing named param": lambda c: c.execute("SELECT :a", {"b": 1}),
    "named params as seq": lambda c: c.execute("SELECT :a", (1,)),
    "params wrong type": lambda c: c.execute("SELECT ?", 5),
    "params None": lambda c: c.execute("SELECT 1", None),
    "unsupported param type": lambda c: c.execute("SELECT ?", (_Unadaptable(),)),
    "int overflow param": lambda c: c.execute("SELECT ?", (2**70,)),
    "two statements": lambda c: c.execute("SELECT 1; SELECT 2"),
    "sql not str": lambda c: c.execute(123),
    "sql bytes": lambda c: c.execute(b"SELECT 1"),
    "NUL in sql": lambda c: c.execute("SELECT 1\x00"),
    "lone surrogate": lambda c: c.execute("SELECT '\ud800'"),
    "unique violation": lambda c: c.execute("INSERT INTO t VALUES (1, 'y')"),
    "RETURNING unique violation": lambda c: c.execute("INSERT INTO t VALUES (1, 'y') RETURNING *"),
    "no args": lambda c: c.execute(),
    "3 positional args": lambda c: c.execute("SELECT 1", (), ()),
    "keyword parameters=": lambda c: c.cursor().execute("SELECT ?", parameters=(1,)),
    "unknown keyword": lambda c: c.cursor().execute("SELECT 1", foo=1),
    "executemany SELECT": lambda c: c.executemany("SELECT ?", [(1,)]),
    "executemany bad seq": lambda c: c.executemany("INSERT INTO t VALUES (?, ?)", [(5,)]),
    "executescript error": lambda c: c.executescript("CREATE TABLE q(a); SELEC 1;"),
    "fetchmany bad size": lambda c: c.execute("SELECT 1").fetchmany("x"),
    "fetchmany None": lambda c: c.execute("SELECT 1").fetchmany(None),
    "fetchmany kw size": lambda c: c.execute("SELECT 1").fetchmany(size=2),
    "closed connection": _closed_con,
    "closed cursor execute": _closed_cur_exec,
    "closed cursor fetch": _closed_cur_fetch,
    "fetchall after con.close": _closed_con_fetch("fetchall"),
    "fetchone after con.close": _closed_con_fetch("fetchone"),
    "iterate after con.close": _closed_con_fetch("iter"),
    "wrong thread execute": _wrong_thread(False),
    "wrong thread fetch": _wrong_thread(True),
    "division-by-zero udf": lambda c: (c.create_function("f", 1, lambda x: 1 / 0), c.execute("SELECT f(1)").fetchall())[
        1
    ],
    "too big blob": lambda c: (
        c.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100),
        c.execute("SELECT zeroblob(1000)").fetchall(),
    )[1],
    "integer overflow in sum": lambda c: c.execute(
        "SELECT sum(x) FROM (SELECT 9223372036854775807 AS x UNION ALL SELECT 1)"
    ).fetchall(),
    "query_only write": lambda c: c.execute("PRAGMA query_only=1") and c.execute("INSERT INTO t VALUES (9, 'z')"),
}


def _r16_outcome(connect: Any, case: Any) -> tuple[Any, ...]:
    con = connect(":memory:")
    con.execute("CREATE TABLE t(a INTEGER PRIMARY KEY, b)")
    con.execute("INSERT INTO t VALUES (1, 'x')")
    try:
        result = case(con)
        if hasattr(result, "fetchall"):
            try:
                result = result.fetchall()
            except Exception as error:
                return ("fetch", type(error).__module__, type(error).__qualname__, _message(error))
        return ("ok", repr(result)[:60])
    except Exception as error:
        return ("raise", type(error).__module__, type(error).__qualname__, _message(error))


# Malformed calls whose TypeError wording is Python's argument binding for the guarded method rather than
# sqlite3's C parser (README, "Where it differs from sqlite3"): the class is the same, the message is not.
R16_WORDING_DIFFERS = {"no args", "3 positional args", "keyword parameters=", "unknown keyword"}


@pytest.mark.parametrize("case", list(R16_CASES))
def test_r16_bad_input_raises_the_same_class_and_message_as_sqlite3(case: str) -> None:
    """r16: for each bad input of the repro, the guarded connection raises the same exception class
    with the same message as sqlite3; for the four documented malformed calls, the same class."""
    guarded = _r16_outcome(guarded_sqlite.connect, R16_CASES[case])
    raw = _r16_outcome(sqlite3.connect, R16_CASES[case])
    if case in R16_WORDING_DIFFERS:
        assert raw[0] == "raise" and guarded[:3] == raw[:3] == ("raise", "builtins", "TypeError")
    else:
        assert guarded == raw
