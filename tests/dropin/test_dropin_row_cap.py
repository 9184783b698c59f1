"""Drop-in parity past ``row_cap``: results larger than the cap stream through unprobed, every row in
order, at the boundary too, and an exploding result past the cap is served unpatched.

Each test runs the same operations on a raw ``sqlite3`` connection and on a guarded one holding the
same data wherever it can, and compares what comes back (values, exception class and message):
``guard="observe"`` must match sqlite3 exactly, ``guard="patch"`` must match on queries the probe does
not flag. Fixtures (``mode``, ``raw_items``, ``guarded_items``, ``observe_items``) are in conftest.py,
the items table and helpers in helpers.py.
"""

from __future__ import annotations

import sqlite3
import sqlite3.dbapi2
from collections.abc import Iterator

import pytest

import guarded_sqlite
from guarded_sqlite import GuardedConnection, GuardPolicy
from guarded_sqlite._guard.decide import row_bytes
from tests.helpers import (
    EXPLODING_SQL,
    MODES,
    fill_fanout,
)

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


@pytest.mark.parametrize(
    ("row", "size"),
    [
        ((1, 2.5, None), 64 + 3 * 16),
        (("abc", b"\x00" * 10, bytearray(b"xy")), 64 + 3 * 16 + 3 + 10 + 2),
        ({"a": "hello", "b": 7}, 64 + 2 * 16 + 5),
        ([], 64),
        (object(), 64),  # a row factory's object that is not a sequence: the fixed cost only
    ],
)
def test_row_size_estimate_for_the_byte_budget(row: object, size: int) -> None:
    assert row_bytes(row) == size


def test_row_size_estimate_of_sqlite3_rows() -> None:
    con = sqlite3.connect(":memory:")
    con.row_factory = sqlite3.Row
    row = con.execute("SELECT 'abcd' AS a, x'0102' AS b, 3 AS c").fetchone()
    assert row_bytes(row) == 64 + 3 * 16 + 4 + 2
