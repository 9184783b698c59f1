"""Drop-in parity, ``row_factory`` and ``text_factory``: rows built by factories (sqlite3.Row, dicts,
lists) match sqlite3's, unhashable rows are still probed and large ones served intact, and text
factories keep a fan-out flagged and patched.

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
    EXPLODING_SQL,
    HEALTHY_QUERIES,
    dict_factory,
    fill_fanout,
    list_factory,
    run,
)


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
    report = cur.guard_report  # read before the rows are served: the distinct count is finished from them
    assert report is not None
    assert cur.fetchall() == raw.execute(sql).fetchall()
    assert cur.guard_report is report
    assert (report.trigger, report.rows, report.unique_rows) == (None, 5000, 5000)


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
