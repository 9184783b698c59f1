"""Property (hypothesis): a value aggregate over joins that the guard calls "not at risk" (from the
statement's words, ``keyed_joins``, or from the full analysis) reads each of its rows once: the
database's answer equals the same aggregate over the distinct rows of the aggregated table that the
joins keep (``SELECT DISTINCT a.rowid, a.v`` over the same FROM clause). And what the guard serves under
``"text_to_sql"`` is the database's answer or that truth, never a third value.

Joins on keys of every kind the reading weighs (INTEGER PRIMARY KEY, a nullable UNIQUE, a NOT NULL
UNIQUE, a text UNIQUE, no key), inner and LEFT, with conditions that add a filter, an OR, a string
holding ``--``, or hide an equality in a comment (``ON 1 -- AND b.id = a.bid``)."""

from __future__ import annotations

import sqlite3
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import guarded_sqlite

_SCHEMA = (
    "CREATE TABLE a (id INTEGER PRIMARY KEY, v INTEGER, bid INTEGER, cid INTEGER, code TEXT);"
    "CREATE TABLE b (id INTEGER PRIMARY KEY, k INTEGER UNIQUE, n INTEGER NOT NULL UNIQUE, t TEXT UNIQUE, "
    "cid INTEGER);"
    "CREATE TABLE c (id INTEGER PRIMARY KEY, grp INTEGER, w INTEGER);"
)
_ON_B = ["b.id = a.bid", "a.bid = b.id", "b.k = a.bid", "b.n = a.bid", "b.t = a.code", "b.cid = a.cid", "b.id = a.id"]
_ON_C = ["c.id = a.cid", "c.id = b.cid", "c.grp = a.cid", "c.w = b.id"]
_MORE = ["", " AND a.v > 2", " AND 1", " OR 1 = 1", " AND b.t <> 'a -- b'", " -- a comment\n"]
_HIDDEN = ["1 -- AND b.id = a.bid\n", "1 /* AND b.id = a.bid AND */", "b.id = a.bid /* OR 1 */"]


@st.composite
def _data(draw: Any) -> str:
    rows = [
        f"INSERT INTO a VALUES ({i}, {draw(st.integers(1, 9))}, {draw(st.sampled_from(['NULL', '1', '2', '3']))}, "
        f"{draw(st.integers(1, 3))}, '{draw(st.sampled_from(['x', 'y', '1']))}')"
        for i in range(1, 6)
    ]
    rows += [
        f"INSERT INTO b VALUES ({i}, {draw(st.sampled_from(['NULL', str(i), str(i + 10)]))}, {i}, "
        f"'{draw(st.sampled_from(['x', 'y', '1']))}{i}', {draw(st.integers(1, 3))})"
        for i in range(1, 4)
    ]
    rows += [f"INSERT INTO c VALUES ({i}, {draw(st.integers(1, 2))}, {draw(st.integers(1, 3))})" for i in range(1, 5)]
    return ";".join(rows)


@st.composite
def _from_clauses(draw: Any) -> str:
    on_b = draw(
        st.one_of(st.sampled_from(_HIDDEN), st.builds(str.__add__, st.sampled_from(_ON_B), st.sampled_from(_MORE)))
    )
    clause = f"FROM a {draw(st.sampled_from(['JOIN', 'LEFT JOIN', 'INNER JOIN']))} b ON {on_b}"
    if draw(st.booleans()):
        on_c = draw(st.sampled_from(_ON_C)) + draw(st.sampled_from(_MORE))
        clause += f" {draw(st.sampled_from(['JOIN', 'LEFT JOIN']))} c ON {on_c}"
    return clause


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_data(), from_clause=_from_clauses(), function=st.sampled_from(["SUM", "TOTAL", "AVG"]))
def test_not_at_risk_means_each_row_once(data: str, from_clause: str, function: str) -> None:
    sql = f"SELECT {function}(a.v) {from_clause}"
    truth_sql = f"SELECT {function}(v) FROM (SELECT DISTINCT a.rowid AS r, a.v AS v {from_clause})"
    raw = sqlite3.connect(":memory:")
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    for target in (raw, con):
        target.executescript(_SCHEMA + data)
    written, truth = raw.execute(sql).fetchall(), raw.execute(truth_sql).fetchall()
    cur = con.execute(sql)
    served = cur.fetchall()
    report = cur.guard_report
    assert report is not None
    reasons = [d.reason for d in report.decisions if d.rule == "aggregate"]
    if any(reason.startswith("not at risk") for reason in reasons):
        assert written == truth, (sql, written, truth, reasons)
    assert served in (written, truth), (sql, written, truth, served, reasons)
