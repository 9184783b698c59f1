"""Repros c19, c20, c21 and c23 (``../shared/repros/correctness/``, "Second round"): defects in round 4's
own mechanisms.

- c20: the pre-grouped check decides what the leaf may drop from the join's full column use.
- c21, c23: a kept confirmation is invalidated by every way data can change under the connection
  (incremental blob I/O, a dirty read of a shared cache), or not kept where that cannot be told.
- c19: an application function a generated column, view or trigger calls is one the check can call.
"""

from __future__ import annotations

import sqlite3
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import guarded_sqlite

# About what the checks read, write and keep, not their budget: a loaded machine must not stop one.
pytestmark = pytest.mark.usefixtures("generous_budget")

# --- c20 ---------------------------------------------------------------------------------------------

C20 = """
CREATE TABLE o(id INTEGER PRIMARY KEY, cust INTEGER NOT NULL, total INTEGER NOT NULL);
CREATE TABLE i(line INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, sku INTEGER NOT NULL);
CREATE TABLE x(id INTEGER PRIMARY KEY, sku INTEGER NOT NULL);
INSERT INTO o VALUES (1, 1, 100), (2, 1, 10), (3, 2, 7), (4, 2, 1000);
INSERT INTO i(order_id, sku) VALUES (1, 5), (1, 5), (1, 6), (2, 5), (3, 5), (3, 5), (4, 6), (4, 6);
INSERT INTO x VALUES (1, 5), (2, 5), (3, 5), (4, 5);
"""
C20_SQL = (
    "SELECT o.cust, SUM(o.total) FROM o JOIN i ON i.order_id = o.id NATURAL JOIN x GROUP BY o.cust ORDER BY o.cust"
)


def test_c20_a_natural_join_reading_the_leaf_keeps_its_condition() -> None:
    """c20: ``NATURAL JOIN x`` compares x.sku with i.sku, a column of i no Column node names: i is not
    pre-grouped (its derived table would keep order_id only), so the corrected sum is each order once
    that the join keeps (customer 2: order 3, 7; not order 4's 1000), and the default's warning quotes
    the values the statement returned."""
    con = guarded_sqlite.connect(":memory:", guard="text_to_sql")
    con.executescript(C20)
    cur = con.execute(C20_SQL)
    assert cur.fetchall() == [(1, 110), (2, 7)]
    assert cur.guard_report.action == "aggregate_defanned"
    default = guarded_sqlite.connect(":memory:")
    default.executescript(C20)
    cur = default.execute(C20_SQL)
    assert cur.fetchall() == [(1, 210), (2, 14)]
    (reason,) = [decision.reason for decision in cur.guard_report.decisions]
    assert "210 -> 110" in reason, reason
    con.close()
    default.close()


# --- c21 ---------------------------------------------------------------------------------------------

C21 = """
CREATE TABLE c(id INTEGER PRIMARY KEY, region TEXT, points INTEGER);
CREATE TABLE o(id INTEGER PRIMARY KEY, cid INTEGER NOT NULL);
INSERT INTO c VALUES (1, 'north', 10), (2, 'south', 20), (3, 'north', 5);
INSERT INTO o(cid) VALUES (1), (1), (2), (2), (2), (3);
"""
C21_SQL = "SELECT c.region, SUM(c.points) FROM c JOIN o ON o.cid = c.id GROUP BY c.region ORDER BY c.region"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="sqlite3 has blobopen() from Python 3.11")
def test_c21_a_blob_write_invalidates_the_kept_confirmation(tmp_path: Path) -> None:
    """c21: ``blobopen()`` + ``write`` turns customer 1's region into 'south' with no statement: the
    confirmation kept before is not reused (north 5 / south 30 is the truth, not north 15 / south 20)."""
    path = tmp_path / "c21.db"
    raw = sqlite3.connect(path)
    raw.executescript(C21)
    raw.close()
    con = guarded_sqlite.connect(path, guard="text_to_sql")
    assert con.execute(C21_SQL).fetchall() == [("north", 15), ("south", 20)]
    assert con.execute(C21_SQL).fetchall() == [("north", 15), ("south", 20)]  # kept, then reused
    with con.blobopen("c", "region", 1) as blob:
        blob.write(b"south")
    con.commit()
    cur = con.execute(C21_SQL)
    assert cur.fetchall() == [("north", 5), ("south", 30)]
    assert not any("reused" in decision.reason for decision in cur.guard_report.decisions)
    con.close()


# --- c23 ---------------------------------------------------------------------------------------------


def test_c23_a_dirty_read_of_a_shared_cache_is_never_served_from_a_kept_confirmation() -> None:
    """c23: under ``read_uncommitted`` the statement reads another connection's uncommitted UPDATE, which
    moves no number of the token: nothing is kept or reused there, so the served values are the truth
    on what the statement read (north 1005 / south 20)."""
    uri = f"file:c23_{uuid.uuid4().hex}?mode=memory&cache=shared"
    other = sqlite3.connect(uri, uri=True, isolation_level=None)
    other.executescript(C21)
    con = guarded_sqlite.connect(uri, uri=True, guard="text_to_sql", isolation_level=None)
    con.execute("PRAGMA read_uncommitted = 1")
    assert con.execute(C21_SQL).fetchall() == [("north", 15), ("south", 20)]
    assert con.execute(C21_SQL).fetchall() == [("north", 15), ("south", 20)]
    other.execute("BEGIN")
    other.execute("UPDATE c SET points = 1000 WHERE id = 1")
    cur = con.execute(C21_SQL)
    assert cur.fetchall() == [("north", 1005), ("south", 20)]
    assert not any("reused" in decision.reason for decision in cur.guard_report.decisions)
    other.execute("ROLLBACK")
    assert not con._self_guard.confirmations
    con.close()
    other.close()


# --- c19 ---------------------------------------------------------------------------------------------

C19 = """
CREATE TABLE audit_log(v);
CREATE TABLE c(id INTEGER PRIMARY KEY, city TEXT, points INTEGER,
               pts2 INTEGER GENERATED ALWAYS AS (audit(points)) VIRTUAL);
CREATE TABLE o(id INTEGER PRIMARY KEY, cid INTEGER NOT NULL, total INTEGER);
INSERT INTO c(id, city, points) VALUES (1, 'A', 10), (2, 'B', 20), (3, 'A', 30);
INSERT INTO o(cid, total) VALUES (1, 1), (1, 2), (2, 3), (2, 4), (2, 5), (3, 1);
CREATE VIEW v AS SELECT id, city, audit(points) AS p FROM c;
"""
C19_SQL = "SELECT c.city, SUM(c.pts2) FROM c JOIN o ON o.cid = c.id GROUP BY c.city ORDER BY c.city"


def _audited(guard: str | None) -> tuple[Any, list[int]]:
    """A connection (plain sqlite3 when ``guard`` is None) whose ``audit``, registered through it,
    writes a row per call through it."""
    if guard is None:
        con: Any = sqlite3.connect(":memory:", isolation_level=None)
    else:
        con = guarded_sqlite.connect(":memory:", guard=guard, isolation_level=None)  # type: ignore[arg-type]
    calls = [0]

    def audit(value: Any) -> Any:
        calls[0] += 1
        con.execute("INSERT INTO audit_log VALUES (?)", (value,))
        return value

    con.create_function("audit", 1, audit, deterministic=True)
    con.executescript(C19)
    return con, calls


def _written(con: Any, sql: str) -> tuple[int, Any]:
    """The audit rows ``sql`` writes, and its report (None on sqlite3)."""
    con.execute("DELETE FROM audit_log")
    cur = con.execute(sql)
    cur.fetchall()
    return int(con.execute("SELECT COUNT(*) FROM audit_log").fetchone()[0]), getattr(cur, "guard_report", None)


@pytest.mark.parametrize("guard", ["patch", "text_to_sql"])
@pytest.mark.parametrize(
    "sql",
    [
        pytest.param(C19_SQL, id="generated-column"),
        pytest.param(
            C19_SQL.replace("c.pts2", "c.points").replace(
                "GROUP BY", "WHERE c.id IN (SELECT id FROM v WHERE p > 0) GROUP BY"
            ),
            id="view",
        ),
    ],
)
def test_c19_a_function_a_generated_column_calls_is_not_run_writable_by_the_check(guard: str, sql: str) -> None:
    """c19: the statement names no function, but ``c.pts2`` (and the view's ``p``) calls ``audit``, which
    writes: the aggregate check is fenced as for a function named in the text, so it writes nothing
    (the statement's rows only, as with sqlite3), and no confirmation is kept."""
    plain, _ = _audited(None)
    expected, _ = _written(plain, sql)
    plain.close()
    con, _ = _audited(guard)
    for _ in range(2):
        written, report = _written(con, sql)
        assert written == expected
        # The check ran fenced: audit's INSERT met query_only, and the check failed rather than wrote.
        assert [d.reason for d in report.decisions] == [
            "corrected query failed: OperationalError: user-defined function raised exception"
        ]
    assert not con._self_guard.confirmations
    con.close()


def test_c19_the_join_copy_check_never_runs_a_generated_columns_function_again() -> None:
    """c19 under text_to_sql: P1's join-copy check re-ran the statement, calling ``audit`` 12 times for
    the statement's 6; it is not run now (the decision says why), as for a function named in the text."""
    con, calls = _audited("text_to_sql")
    con.execute("DELETE FROM audit_log")
    calls[0] = 0
    cur = con.execute("SELECT c.city, c.pts2 FROM c JOIN o ON o.cid = c.id")
    assert len(cur.fetchall()) == 6
    assert calls[0] == 6
    (decision,) = cur.guard_report.decisions
    assert "audit(), a function of the application's, without naming it" in decision.reason
    con.close()
